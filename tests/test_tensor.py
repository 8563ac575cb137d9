"""Tensor construction, dtype rules, factories and conversions."""

import numpy as np
import pytest

import nbgrad as nb


def test_python_floats_become_float32_and_float_arrays_keep_their_dtype():
    assert nb.tensor([[1.0, 2.0]]).dtype == np.float32
    assert nb.tensor(np.zeros(3, np.float64)).dtype == np.float64
    assert nb.tensor(np.zeros(3, np.float32)).dtype == np.float32
    assert nb.tensor(np.zeros(3, np.float16)).dtype == np.float32
    assert nb.tensor([1, 2]).dtype == np.int64
    assert nb.tensor([True, False]).dtype == np.bool_
    assert nb.tensor([1, 2], dtype=np.float64).dtype == np.float64


def test_tensor_copies_its_input():
    a = np.ones(3)
    t = nb.tensor(a)
    t.numpy()[0] = 5.0
    assert a[0] == 1.0


def test_integer_and_bool_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="only float32/float64.*int64"):
        nb.tensor([1, 2], requires_grad=True)
    t = nb.tensor([True])
    with pytest.raises(TypeError, match="bool"):
        t.requires_grad = True


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="complex128 is not supported"):
        nb.tensor([1.0], dtype=np.complex128)
    with pytest.raises(TypeError, match="cannot make a tensor"):
        nb.tensor(np.array(["a"]))


def test_factories():
    assert nb.zeros(2, 3).shape == (2, 3) and nb.zeros(2, 3).dtype == np.float32
    assert nb.ones((4,), dtype=np.float64).dtype == np.float64
    np.testing.assert_array_equal(nb.full((2,), 7.0).numpy(), [7.0, 7.0])
    x = nb.randn(3, 4, seed=1, dtype=np.float64)
    np.testing.assert_array_equal(x.numpy(), nb.randn(3, 4, seed=1, dtype=np.float64).numpy())
    assert np.all((nb.rand(100, seed=2).numpy() >= 0) & (nb.rand(100, seed=2).numpy() < 1))
    z = nb.zeros_like(x, requires_grad=True)
    assert z.shape == (3, 4) and z.dtype == np.float64 and z.requires_grad
    assert nb.ones_like(x).numpy().sum() == 12
    with pytest.raises(ValueError, match="non-negative"):
        nb.zeros(-1)


def test_attributes_and_conversions():
    t = nb.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    assert (t.shape, t.ndim, t.numel(), len(t)) == ((2, 2), 2, 4, 2)
    assert (t.size(), t.size(0), t.size(-1)) == ((2, 2), 2, 2)  # PyTorch's Tensor.size
    with pytest.raises(IndexError, match="size"):
        t.size(2)
    with pytest.raises(IndexError, match="0-d"):
        nb.tensor(1.0).size(0)
    assert t.is_leaf and t.grad_fn is None and t.grad is None
    assert np.shares_memory(np.asarray(t), t.numpy())
    assert not np.asarray(t).flags.writeable  # it requires grad: see Tensor.numpy
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert nb.tensor([3.5]).item() == 3.5
    with pytest.raises(ValueError, match=r"one-element.*\(2, 2\)"):
        t.item()
    assert "requires_grad=True" in repr(t)
    assert (t > 2.0).numpy().tolist() == [[False, False], [True, True]]


def test_thread_count_can_be_lowered_and_restored():
    n = nb.get_num_threads()
    nb.set_num_threads(1)
    assert nb.get_num_threads() == 1
    nb.set_num_threads(n)
    assert nb.get_num_threads() == n


def _environment_after_import(extra_env):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    env.update(extra_env)
    code = "import os, nbgrad; print(os.environ.get('GOMP_SPINCOUNT'))"
    return subprocess.run([sys.executable, "-c", code], env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_starting_the_kernel_pool_leaves_the_environment_as_it_was():
    assert _environment_after_import({}) == "None"
    assert _environment_after_import({"GOMP_SPINCOUNT": "7"}) == "7"


def _threads_after_import(extra_env):
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}
    env.update(extra_env)
    code = "import nbgrad; print(nbgrad.get_num_threads())"
    return int(subprocess.run([sys.executable, "-c", code], env=env, check=True,
                              capture_output=True, text=True).stdout)


def test_omp_num_threads_caps_the_kernels_unless_numba_num_threads_is_set():
    import numba
    assert _threads_after_import({"OMP_NUM_THREADS": "1"}) == 1
    assert _threads_after_import({"OMP_NUM_THREADS": "1,1"}) == 1
    pool = numba.config.NUMBA_NUM_THREADS
    assert _threads_after_import({"OMP_NUM_THREADS": "64"}) == pool
    assert _threads_after_import({"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "2"}) == 2


_POOL_THREADS_CODE = """
import os, threading
import numba, numpy as np
import nbgrad as nb
from nbgrad.runtime import threads
from numba.core import entrypoints
entrypoints.init_all()  # Numba's set-up, which the first kernel runs: scipy.fft starts a thread
pool = numba.config.NUMBA_NUM_THREADS
ran = []
threads._on_pool_threads(lambda: ran.append(threading.get_native_id()), pool)
before = set(os.listdir("/proc/self/task"))
nb.set_num_threads(pool)
(nb.tensor(np.ones(1 << 18, np.float32)) * 2).numpy()  # a parallel kernel
after = set(os.listdir("/proc/self/task"))
print(len(ran), len(set(ran)), pool, {str(t) for t in ran} <= before, after == before)
"""


def test_the_arena_region_runs_once_on_each_kernel_pool_thread():
    import subprocess
    import sys

    import numba

    if numba.threading_layer() != "omp" or not sys.platform.startswith("linux"):
        pytest.skip("the region is libgomp's; the pool's threads are listed in /proc")
    out = subprocess.run([sys.executable, "-c", _POOL_THREADS_CODE], check=True,
                         capture_output=True, text=True).stdout.split()
    calls, threads, pool, among_pool, no_new_threads = out
    assert int(calls) == int(threads) == int(pool)
    # the threads it ran on exist, and a kernel afterwards needed no others
    assert among_pool == "True" and no_new_threads == "True"


def test_thread_count_out_of_range_is_an_error():
    for bad in (0, 10**6, 1.5):
        with pytest.raises(ValueError, match=r"set_num_threads: n must be an int from 1 to"):
            nb.set_num_threads(bad)


@pytest.mark.parametrize("dtype, want", [(">f8", np.float64), (">f4", np.float32),
                                         (">i4", np.int64), (">i8", np.int64),
                                         ("<f8", np.float64)])
def test_non_native_byte_order_keeps_the_values_and_the_dtype(dtype, want):
    data = np.array([1 / 3, 1e-300, 1e300] if "f8" in dtype else [1.5, -2.0, 7.0]
                    if "f" in dtype else [1, -2, 2**31 - 1], dtype=dtype)
    t = nb.tensor(data)
    assert t.dtype == want and t.dtype.isnative
    np.testing.assert_array_equal(t.numpy(), data.astype(want))


def test_integers_that_do_not_fit_int64_are_an_error_not_wrapped():
    with pytest.raises(OverflowError, match=r"uint64 value 9223372036854775813 does not "
                                            r"fit int64"):
        nb.tensor(np.array([1, 2**63 + 5], dtype=np.uint64))
    with pytest.raises(OverflowError, match="does not fit int64"):
        nb.tensor([2**63 + 5])
    with pytest.raises(OverflowError, match="int64 value 4294967296 does not fit int32"):
        nb.tensor(np.array([2**32]), dtype=np.int32)
    t = nb.tensor(np.array([0, 2**63 - 1], dtype=np.uint64))
    assert t.dtype == np.int64 and t.tolist() == [0, 2**63 - 1]
