"""kernels/buffers.py: large arrays come back from the pool only when nothing references
them (no array, view or tensor), small ones never enter it, the unused bytes stay within
the budget, two threads never get one buffer, and the ops that take their outputs from it
give the same values as without it."""

import threading

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.kernels import buffers

BIG = buffers.POOL_MIN_BYTES // 4  # float32 elements of the smallest pooled array


@pytest.fixture
def pool(monkeypatch):
    """An empty pool with a budget of eight of the smallest pooled arrays."""
    monkeypatch.setattr(buffers, "_pool", [])
    monkeypatch.setenv("NBGRAD_POOL_BYTES", str(8 * buffers.POOL_MIN_BYTES))
    return buffers


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def test_a_freed_array_is_handed_out_again(pool):
    a = pool.empty((BIG,), np.float32)
    where = _address(a)
    del a
    b = pool.empty((2, BIG // 2), np.float32)  # same bytes, another shape
    assert _address(b) == where and b.shape == (2, BIG // 2) and b.dtype == np.float32
    assert b.flags.c_contiguous and b.flags.writeable


@pytest.mark.parametrize("keep", ["array", "view", "tensor"])
def test_an_array_still_referenced_is_not_handed_out(pool, keep):
    a = pool.empty((BIG,), np.float32)
    held = {"array": a, "view": a[::2], "tensor": nb.from_numpy(a)}[keep]
    where = _address(a)
    del a
    b = pool.empty((BIG,), np.float32)
    assert _address(b) != where
    assert held is not None


def test_small_arrays_and_a_zero_budget_bypass_the_pool(pool, monkeypatch):
    small = pool.empty((1000,), np.float64)
    assert small.base is None and pool._pool == []
    monkeypatch.setenv("NBGRAD_POOL_BYTES", "0")
    big = pool.empty((BIG,), np.float32)
    assert big.base is None and pool._pool == []


def test_unused_arrays_stay_within_the_budget(pool):
    for n in range(12):  # twelve sizes, each freed at once
        pool.empty((BIG + 1024 * n,), np.float32)
    used, unused = pool.pooled_bytes()
    assert used == 0 and unused <= 8 * buffers.POOL_MIN_BYTES + 12 * 4096


def test_two_threads_never_share_a_buffer(pool):
    seen, lock = [], threading.Lock()

    def grab():
        for _ in range(20):
            a = pool.empty((BIG,), np.float32)
            a[:] = threading.get_ident()
            with lock:
                seen.append(_address(a))
            assert np.all(a == threading.get_ident())  # nobody else wrote into it

    threads = [threading.Thread(target=grab) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 40


def test_ops_on_pooled_outputs_give_the_bits_of_fresh_ones(pool, monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BIG // 256, 64)).astype(np.float32)
    w = rng.standard_normal((256, 64)).astype(np.float32)

    def run():
        xt = nb.tensor(x, requires_grad=True)
        y = nb.gelu(nb.matmul(xt, nb.tensor(w).T))
        (y * y).sum().backward()
        return y, xt.grad.numpy()

    monkeypatch.setenv("NBGRAD_POOL_BYTES", "0")
    y_fresh, g_fresh = run()
    assert y_fresh._data.base is None
    monkeypatch.setenv("NBGRAD_POOL_BYTES", str(8 * buffers.POOL_MIN_BYTES))
    for _ in range(3):  # the later rounds write into the earlier rounds' buffers
        y, g = run()
        assert y._data.base is not None
        np.testing.assert_array_equal(y.numpy(), y_fresh.numpy())
        np.testing.assert_array_equal(g, g_fresh)


def test_a_pooled_gradient_is_kept_by_its_leaf_and_not_handed_out_again(pool):
    x = nb.tensor(np.linspace(-2, 2, BIG, dtype=np.float32), requires_grad=True)
    g = nb.tensor(np.ones(BIG, np.float32))
    for _ in range(2):
        x.grad = None
        nb.tanh(x).backward(g)
    assert x.grad._data.base is not None  # the pool's array itself, no copy
    y = nb.tanh(x)
    assert not np.shares_memory(y.numpy(), x.grad.numpy())
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(x.numpy()) ** 2, atol=1e-6)
