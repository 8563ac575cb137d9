"""dtype and device objects (nbgrad/dtypes.py, nbgrad/device.py, nbgrad/ops/convert.py):
nb.float32 ... nb.bool equal to NumPy's dtypes and usable wherever NumPy or Numba takes
one, the storage dtypes, conversions against PyTorch's ``.to`` (the oracle), the default
dtype, the CPU device and the errors for any other, and Module.to."""

import copy
import pickle

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
from nbgrad import nn
from nbgrad.device import channels_last_3d, check_layout

NAMES = ["float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"]
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16"}
METHODS = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16", "char": "int8", "byte": "uint8", "bool": "bool"}
FACTORIES = {
    "zeros": lambda **kw: nb.zeros(2, 3, **kw),
    "ones": lambda **kw: nb.ones(2, 3, **kw),
    "full": lambda **kw: nb.full((2, 3), 1, **kw),
    "zeros_like": lambda **kw: nb.zeros_like(nb.ones(2), **kw),
    "ones_like": lambda **kw: nb.ones_like(nb.ones(2), **kw),
    "tensor": lambda **kw: nb.tensor([1.0, 2.0], **kw),
    "randn": lambda **kw: nb.randn(2, 3, **kw),
    "rand": lambda **kw: nb.rand(2, 3, **kw),
}
OTHER_DEVICES = ["cuda", "cuda:0", "mps", 0]


@pytest.fixture
def default_dtype():
    """Restores the default dtype after a test that changes it."""
    yield
    nb.set_default_dtype(nb.float32)


def _torch():
    return pytest.importorskip("torch")


# -- the dtype objects ---------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_dtype_equals_and_hashes_as_numpys(name):
    d = getattr(nb, name)
    np_dtype = np.dtype(np.bool_ if name == "bool" else name)
    assert d == np_dtype and np_dtype == d and d == np_dtype.type and np_dtype.type == d
    assert hash(d) == hash(np_dtype)
    assert {np_dtype: "found"}[d] == "found" and {d: "found"}[np_dtype] == "found"
    assert np.dtype(d) == np_dtype and np.zeros(2, d).dtype == np_dtype
    assert np.arange(3).astype(d).dtype == np_dtype
    assert d.kind == np_dtype.kind and d.itemsize == np_dtype.itemsize
    assert d.byteorder == np_dtype.byteorder  # any other attribute is NumPy's
    others = [getattr(nb, n) for n in NAMES if n != name]
    assert all(d != o and not d == o for o in others)
    assert d != None and d != "cuda"  # noqa: E711 (the comparison itself is tested)


@pytest.mark.parametrize("name", NAMES)
def test_dtype_prints_and_behaves_as_torchs(name):
    torch = _torch()
    d, t = getattr(nb, name), getattr(torch, name)
    assert repr(d) == str(d) == str(t).replace("torch.", "nbgrad.")
    assert d.is_floating_point == t.is_floating_point
    assert d.is_signed == t.is_signed
    assert d.itemsize == t.itemsize


@pytest.mark.parametrize("alias", list(ALIASES))
def test_aliases_are_pytorchs(alias):
    torch = _torch()
    assert getattr(nb, alias) is getattr(nb, ALIASES[alias])
    assert str(getattr(torch, alias)) == f"torch.{ALIASES[alias]}"


@pytest.mark.parametrize("name", NAMES)
def test_dtype_pickles_and_copies_as_itself(name):
    d = getattr(nb, name)
    assert pickle.loads(pickle.dumps(d)) is d
    assert copy.deepcopy(d) is d and copy.copy(d) is d


def test_tensor_dtype_is_the_nbgrad_object_and_works_where_numpy_takes_a_dtype():
    x = nb.tensor([[1.5, 2.5]])
    assert x.dtype is nb.float32 and str(x.dtype) == "nbgrad.float32"
    assert x.dtype == np.float32 and x.dtype == np.dtype("float32")
    assert x.dtype in (np.dtype(np.float32), np.dtype(np.float64))
    assert np.zeros(x.shape, x.dtype).dtype == np.float32
    assert x.numpy().astype(x.dtype).dtype == np.float32
    assert np.finfo(x.dtype).eps == np.finfo(np.float32).eps
    assert x.dtype.type(0.1) == np.float32(0.1) and x.dtype.char == "f"
    assert np.result_type(x.dtype, np.float64) == np.float64


def test_tensor_dtype_goes_into_a_numba_kernel():
    @numba.njit
    def make(n, dtype):
        return np.zeros(n, dtype)

    assert make(3, nb.tensor([1.0]).dtype).dtype == np.float32
    assert make(3, nb.int16).dtype == np.int16


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("factory", ["zeros", "ones", "full", "zeros_like", "ones_like",
                                     "tensor"])
def test_factories_take_every_dtype_as_torch(factory, name):
    torch = _torch()
    made = FACTORIES[factory](dtype=getattr(nb, name))
    theirs = {"zeros": lambda d: torch.zeros(2, 3, dtype=d),
              "ones": lambda d: torch.ones(2, 3, dtype=d),
              "full": lambda d: torch.full((2, 3), 1, dtype=d),
              "zeros_like": lambda d: torch.zeros_like(torch.ones(2), dtype=d),
              "ones_like": lambda d: torch.ones_like(torch.ones(2), dtype=d),
              "tensor": lambda d: torch.tensor([1.0, 2.0], dtype=d)}[factory](
                  getattr(torch, name))
    assert str(made.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
    np.testing.assert_array_equal(made.numpy(), theirs.numpy())


@pytest.mark.parametrize("spelling", [np.int16, "int16", np.dtype("int16"), nb.int16])
def test_numpy_spellings_of_a_dtype_work_too(spelling):
    assert nb.zeros(2, dtype=spelling).dtype is nb.int16
    assert nb.tensor([1.0]).to(spelling).dtype is nb.int16


@pytest.mark.parametrize("name", ["int32", "int64", "bool", "float64", "int8"])
def test_repr_prints_dtypes_as_torch(name):
    torch = _torch()
    ours = repr(nb.tensor([1, 0], dtype=getattr(nb, name)))
    theirs = repr(torch.tensor([1, 0], dtype=getattr(torch, name)))
    assert ours.replace(" ", "") == theirs.replace("torch.", "nbgrad.").replace(" ", "")


# -- conversions against torch's .to -------------------------------------------------------
def _values(data, source: str, target: str, shape):
    """Values that convert the same in NumPy and PyTorch: float to integer only within
    the target's range (out of range is undefined in C, so in both), float32-exact
    floats (a float64 -> float16 conversion then rounds once in both)."""
    if source == "bool":
        return data.draw(hnp.arrays(np.bool_, shape))
    if source.startswith("float"):
        high = 255.0 if target == "uint8" else 127.0
        low = 0.0 if target == "uint8" else -127.0
        floats = st.floats(low, high, width=32 if source != "float16" else 16)
        return data.draw(hnp.arrays(np.dtype(source), shape, elements=floats))
    info = np.iinfo(source)
    ints = st.integers(max(info.min, -300), min(info.max, 300))
    return data.draw(hnp.arrays(np.dtype(source), shape, elements=ints))


@pytest.mark.parametrize("target", NAMES)
@pytest.mark.parametrize("source", NAMES)
@settings(max_examples=10)  # per pair of dtypes: 81 pairs
@given(data=st.data(), shape=hnp.array_shapes(min_dims=0, max_dims=3, max_side=4))
def test_to_equals_torchs_to(source, target, data, shape):
    torch = _torch()
    values = _values(data, source, target, shape)
    ours = nb.tensor(values, dtype=getattr(nb, source)).to(getattr(nb, target))
    theirs = torch.from_numpy(values.copy()).to(getattr(torch, target))
    assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@given(source=st.sampled_from(NAMES), method=st.sampled_from(sorted(METHODS)), data=st.data(),
       shape=hnp.array_shapes(min_dims=1, max_dims=2, max_side=4))
def test_conversion_methods_equal_torchs(source, method, data, shape):
    torch = _torch()
    values = _values(data, source, METHODS[method], shape)
    ours = getattr(nb.tensor(values, dtype=getattr(nb, source)), method)()
    theirs = getattr(torch.from_numpy(values.copy()), method)()
    assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_float_to_int_truncates_and_to_bool_tests_nonzero_as_torch():
    torch = _torch()
    values = [-2.9, -0.5, -0.0, 0.0, 0.5, 2.9, 100.99]
    for name in ["int8", "int16", "int32", "int64", "bool"]:
        ours = nb.tensor(values).to(getattr(nb, name)).numpy()
        theirs = torch.tensor(values).to(getattr(torch, name)).numpy()
        np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(nb.tensor(values).long().numpy(), [-2, 0, 0, 0, 0, 2, 100])


@pytest.mark.parametrize("name", NAMES)
def test_type_names_and_type_conversion_as_torch(name):
    torch = _torch()
    x, t = nb.zeros(2, dtype=getattr(nb, name)), torch.zeros(2, dtype=getattr(torch, name))
    assert x.type() == t.type().replace("torch.", "nbgrad.")
    assert x.type(nb.float64).dtype is nb.float64
    assert x.type(t.type()).dtype is getattr(nb, name)  # 'torch.LongTensor' is understood


def test_to_forms_as_torch():
    x = nb.tensor([1.5, 2.5])
    other = nb.tensor([1], dtype=nb.int32)
    assert x.to("cpu") is x and x.to(nb.device("cpu")) is x and x.cpu() is x
    assert x.to(nb.float32) is x and x.to(x) is x
    assert x.to("cpu", nb.float64).dtype is nb.float64
    assert x.to(device="cpu:0", dtype=nb.float64).dtype is nb.float64
    assert x.to(dtype=nb.int64).dtype is nb.int64
    assert x.to(other).dtype is nb.int32
    assert x.to(nb.float64, non_blocking=True).dtype is nb.float64
    copied = x.to("cpu", copy=True)
    assert copied is not x and np.array_equal(copied.numpy(), x.numpy())
    assert not np.shares_memory(copied.numpy(), x.numpy())


# -- gradients -----------------------------------------------------------------------------
@pytest.mark.parametrize("start, method", [("float32", "double"), ("float64", "float")])
def test_gradient_through_double_and_float_as_torch(start, method):
    torch = _torch()
    values = np.array([[0.5, -1.25, 2.0], [3.0, 0.125, -0.75]], dtype=start)
    x = nb.tensor(values, requires_grad=True)
    t = torch.tensor(values, requires_grad=True)
    y = getattr(x, method)()
    assert y.grad_fn is not None and y.dtype != x.dtype
    (getattr(x, method)() ** 3).sum().backward()
    (getattr(t, method)() ** 3).sum().backward()
    assert x.grad.dtype == x.dtype
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-6)


@pytest.mark.parametrize("method", ["long", "int", "bool", "byte"])
def test_conversion_to_integers_is_cut_from_the_graph_as_torch(method):
    torch = _torch()
    x = nb.tensor([1.5, -2.0], requires_grad=True)
    t = torch.tensor([1.5, -2.0], requires_grad=True)
    ours, theirs = getattr(x, method)(), getattr(t, method)()
    assert ours.requires_grad == theirs.requires_grad and ours.grad_fn is None


def test_half_of_a_tensor_that_requires_grad_raises_and_works_detached():
    x = nb.tensor([1.5, -2.0], requires_grad=True)
    with pytest.raises(TypeError, match="half: x .* requires grad.*float16"):
        x.half()
    with pytest.raises(TypeError, match="to: x .* requires grad.*float16"):
        x.to(nb.float16)
    assert x.detach().half().dtype is nb.float16
    with nb.no_grad():
        assert x.half().dtype is nb.float16


# -- storage dtypes ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["float16", "int8", "int16", "uint8"])
def test_storage_dtypes_index_and_compare_as_torch(name):
    torch = _torch()
    values = np.array([[1, 2, 3], [4, 5, 6]])
    x = nb.tensor(values, dtype=getattr(nb, name))
    t = torch.tensor(values, dtype=getattr(torch, name))
    for index in [(0,), (slice(None), 1), (slice(None), [2, 0, 2])]:
        np.testing.assert_array_equal(x[index].numpy(), t[index].numpy())
        assert str(x[index].dtype) == str(t[index].dtype).replace("torch.", "nbgrad.")
    np.testing.assert_array_equal(x[x > 2].numpy(), t[t > 2].numpy())
    np.testing.assert_array_equal((x <= 3).numpy(), (t <= 3).numpy())
    np.testing.assert_array_equal(x.T.reshape(3, 2).numpy(), t.T.reshape(3, 2).numpy())


@pytest.mark.parametrize("name", ["int8", "int16", "uint8"])
def test_small_integers_compute_as_torch(name):
    torch = _torch()
    x = nb.tensor([[1, 2, 3]], dtype=getattr(nb, name))
    t = torch.tensor([[1, 2, 3]], dtype=getattr(torch, name))
    for f in [lambda a: a + 1, lambda a: a * a, lambda a: a.sum(), lambda a: a.float() / 2]:
        ours, theirs = f(x), f(t)
        assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


@pytest.mark.parametrize("op, call", [("add", lambda x: x + x), ("mul", lambda x: x * 2),
                                      ("sum", lambda x: x.sum()), ("exp", lambda x: x.exp()),
                                      ("matmul", lambda x: x @ x.T)])
def test_float16_arithmetic_raises_naming_the_op(op, call):
    x = nb.tensor([[1.0, 2.0]], dtype=nb.float16)
    with pytest.raises(TypeError, match=f"^{op}: .*float16.*\\.float\\(\\)"):
        call(x)
    np.testing.assert_array_equal(call(x.float()).numpy(), call(nb.tensor([[1.0, 2.0]])).numpy())


def test_storage_dtypes_cannot_require_grad():
    for name in ["float16", "int8", "uint8"]:
        with pytest.raises(TypeError, match="requires_grad"):
            nb.zeros(2, dtype=getattr(nb, name), requires_grad=True)


@pytest.mark.parametrize("name", NAMES)
def test_save_and_load_keep_every_dtype(tmp_path, name):
    x = nb.tensor([[1, 0, 3]], dtype=getattr(nb, name))
    nb.save({"x": x}, tmp_path / "t.nbg")
    back = nb.load(tmp_path / "t.nbg")["x"]
    assert back.dtype is x.dtype and np.array_equal(back.numpy(), x.numpy())


# -- the default dtype ---------------------------------------------------------------------------
def test_default_dtype_follows_set_default_dtype_as_torch(default_dtype):
    torch = _torch()
    previous = torch.get_default_dtype()
    assert nb.get_default_dtype() is nb.float32
    try:
        for name in ["float64", "float32"]:
            nb.set_default_dtype(getattr(nb, name))
            torch.set_default_dtype(getattr(torch, name))
            assert str(nb.get_default_dtype()) == str(torch.get_default_dtype()).replace(
                "torch.", "nbgrad.")
            pairs = [(nb.tensor([1.5]), torch.tensor([1.5])),
                     (nb.zeros(2), torch.zeros(2)), (nb.ones(2), torch.ones(2)),
                     (nb.randn(2), torch.randn(2)), (nb.rand(2), torch.rand(2)),
                     (nb.tensor([1, 2]) / 2, torch.tensor([1, 2]) / 2),
                     (nb.tensor([1, 2]).exp(), torch.tensor([1, 2]).exp()),
                     (nb.tensor([1, 2]) * 0.5, torch.tensor([1, 2]) * 0.5),
                     (nn.Linear(2, 3).weight, torch.nn.Linear(2, 3).weight)]
            for ours, theirs in pairs:
                assert str(ours.dtype) == str(theirs.dtype).replace("torch.", "nbgrad.")
    finally:
        torch.set_default_dtype(previous)


@pytest.mark.parametrize("bad", [nb.int64, nb.float16, nb.bool, "foo"])
def test_set_default_dtype_takes_only_float32_and_float64(bad, default_dtype):
    with pytest.raises(TypeError, match="set_default_dtype"):
        nb.set_default_dtype(bad)
    assert nb.get_default_dtype() is nb.float32


# -- bad dtypes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["foo", np.complex64, "float128", np.uint16])
@pytest.mark.parametrize("op, call", [
    ("zeros", lambda d: nb.zeros(2, dtype=d)), ("full", lambda d: nb.full(2, 1, dtype=d)),
    ("tensor", lambda d: nb.tensor([1.0], dtype=d)), ("to", lambda d: nb.ones(2).to(d)),
    ("type", lambda d: nb.ones(2).type(d)), ("Module.to", lambda d: nn.Linear(2, 2).to(d))])
def test_unknown_dtype_raises_naming_op_and_argument(op, call, bad):
    with pytest.raises(TypeError, match=f"^{op}: .*dtype"):
        call(bad)


def test_module_to_refuses_non_float_dtypes():
    with pytest.raises(TypeError, match="Module.to: dtype must be float32 or float64"):
        nn.Linear(2, 2).to(nb.int64)


# -- the device ---------------------------------------------------------------------------------
@pytest.mark.parametrize("args", [("cpu",), ("cpu", 0), ("cpu:0",), ("cpu:1",)])
def test_device_objects_as_torch(args):
    torch = _torch()
    ours, theirs = nb.device(*args), torch.device(*args)
    assert (ours.type, ours.index) == (theirs.type, theirs.index)
    assert str(ours) == str(theirs) and repr(ours) == repr(theirs)
    assert (ours == nb.device("cpu")) == (theirs == torch.device("cpu"))
    assert pickle.loads(pickle.dumps(ours)) == ours and nb.device(ours) == ours


def test_tensor_device_attributes_as_torch():
    torch = _torch()
    x, t = nb.zeros(2), torch.zeros(2)
    assert repr(x.device) == repr(t.device) and x.device == nb.device("cpu")
    assert hash(x.device) == hash(nb.device("cpu"))
    assert x.is_cpu is t.is_cpu is True and x.is_cuda is t.is_cuda is False
    assert nb.cuda.is_available() is False and nb.cuda.device_count() == 0


@pytest.mark.parametrize("factory", list(FACTORIES))
def test_factories_accept_the_cpu(factory):
    for place in ["cpu", "cpu:0", nb.device("cpu"), nb.device("cpu", 0), None]:
        assert FACTORIES[factory](device=place).device == nb.device("cpu")


@pytest.mark.parametrize("place", OTHER_DEVICES)
@pytest.mark.parametrize("op", list(FACTORIES))
def test_factories_refuse_other_devices_naming_the_op(op, place):
    with pytest.raises(RuntimeError, match=f"^{op}: nbgrad runs on the CPU; got"):
        FACTORIES[op](device=place)


@pytest.mark.parametrize("place", ["cuda", "cuda:1", "mps", "xpu"])
def test_other_devices_raise_the_clear_error(place):
    kind = place.partition(":")[0]
    with pytest.raises(RuntimeError, match=f"nbgrad runs on the CPU; got '{kind}"):
        nb.device(place)
    with pytest.raises(RuntimeError, match=f"^to: nbgrad runs on the CPU; got '{kind}"):
        nb.ones(2).to(place)
    with pytest.raises(RuntimeError, match=f"^to: nbgrad runs on the CPU; got '{kind}"):
        nb.ones(2).to(place, nb.float64)
    with pytest.raises(RuntimeError, match=f"^Module.to: nbgrad runs on the CPU; got '{kind}"):
        nn.Linear(2, 2).to(place)
    with pytest.raises(RuntimeError, match="cuda: nbgrad runs on the CPU"):
        nb.ones(2).cuda()


@pytest.mark.parametrize("bad, error", [("foo", RuntimeError), ("cpu:x", RuntimeError),
                                        (3.5, TypeError), ("cpu:-1", RuntimeError)])
def test_malformed_devices_raise(bad, error):
    with pytest.raises(error, match="^device: "):
        nb.device(bad)
    with pytest.raises(error, match="^zeros: "):
        nb.zeros(2, device=bad)


def test_to_refuses_what_is_neither_a_device_nor_a_dtype():
    with pytest.raises(TypeError, match="^to: 'foo' is neither a device .* nor a dtype"):
        nb.ones(2).to("foo")
    with pytest.raises(TypeError, match="^to: unexpected keyword argument 'layout'"):
        nb.ones(2).to(nb.float64, layout=None)
    with pytest.raises(TypeError, match="^to: the dtype is given twice"):
        nb.ones(2).to(nb.ones(1), dtype=nb.float64)


def test_cuda_if_available_idiom_picks_the_cpu():
    place = "cuda" if nb.cuda.is_available() else "cpu"
    model = nn.Linear(2, 2).to(place)
    assert nb.ones(1, 2, device=place).to(place).device == nb.device("cpu")
    assert model(nb.ones(1, 2, device=place)).shape == (1, 2)


# -- numpy(force=) -----------------------------------------------------------------------------
def test_numpy_force_returns_a_writable_detached_copy():
    x = nb.tensor([1.0, 2.0], requires_grad=True)
    shared, forced = x.numpy(), x.numpy(force=True)
    assert np.shares_memory(shared, x.data) and not shared.flags.writeable
    assert not np.shares_memory(forced, x.data) and forced.flags.writeable
    forced[0] = 7.0
    assert x.numpy()[0] == 1.0


# -- Module.to ---------------------------------------------------------------------------------
def _net():
    nb.manual_seed(0)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def test_module_double_float_round_trip_is_exact():
    net = _net()
    before = {k: v.numpy().copy() for k, v in net.state_dict().items()}
    assert net.double() is net
    assert all(p.dtype is nb.float64 for p in net.parameters())
    assert net.to(nb.float32) is net and net.cpu() is net and net.to("cpu") is net
    for k, v in net.state_dict().items():
        assert v.dtype is nb.float32 and np.array_equal(v.numpy(), before[k])


@pytest.mark.parametrize("form", [
    lambda m: m.to(nb.float64), lambda m: m.to("cpu", nb.float64),
    lambda m: m.to(device="cpu", dtype=nb.float64), lambda m: m.to(nb.zeros(1).double()),
    lambda m: m.double()])
def test_module_to_double_gives_torchs_outputs_and_gradients(form):
    torch = _torch()
    net = _net()
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    with torch.no_grad():
        for p, q in zip(net.parameters(), theirs.parameters()):
            q.copy_(torch.from_numpy(p.numpy().copy()))
    form(net)
    theirs.double()
    x = np.linspace(-1, 1, 15).reshape(5, 3)
    ours_out, theirs_out = net(nb.tensor(x)), theirs(torch.tensor(x))
    assert ours_out.dtype is nb.float64
    np.testing.assert_allclose(ours_out.numpy(), theirs_out.detach().numpy(), rtol=1e-12)
    ours_out.sum().backward()
    theirs_out.sum().backward()
    for p, q in zip(net.parameters(), theirs.parameters()):
        assert p.grad.dtype is nb.float64
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-12)


# -- memory formats and layouts: PyTorch's names, accepted without effect --------------------
FORMATS = ["preserve_format", "contiguous_format", "channels_last"]
CONVERSIONS = ["float", "double", "half", "int", "long", "short", "bool", "byte", "char"]


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", CONVERSIONS)
def test_conversions_take_memory_format_as_torch(name, fmt):
    torch = _torch()
    x0 = np.random.default_rng(0).standard_normal((2, 3, 2, 3)).astype(np.float32) * 4
    y = getattr(nb.tensor(x0), name)(memory_format=getattr(nb, fmt))
    ty = getattr(torch.tensor(x0), name)(memory_format=getattr(torch, fmt))
    assert str(y.dtype).removeprefix("nbgrad.") == str(ty.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert y.numpy().flags.c_contiguous


@pytest.mark.parametrize("fmt", FORMATS)
def test_to_clone_cpu_and_contiguous_take_memory_format(fmt):
    torch = _torch()
    x0 = np.arange(120.0).reshape(2, 3, 4, 5)
    x, tx = nb.tensor(x0), torch.tensor(x0)
    mf, tmf = getattr(nb, fmt), getattr(torch, fmt)
    for y, ty in [(x.to(memory_format=mf), tx.to(memory_format=tmf)),
                  (x.to(nb.float32, memory_format=mf), tx.to(torch.float32, memory_format=tmf)),
                  (x.to("cpu", nb.float32, False, True, memory_format=mf),
                   tx.to("cpu", torch.float32, False, True, memory_format=tmf)),
                  (x.clone(memory_format=mf), tx.clone(memory_format=tmf)),
                  (nb.clone(x, memory_format=mf), torch.clone(tx, memory_format=tmf)),
                  (x.cpu(memory_format=mf), tx.cpu(memory_format=tmf)),
                  (x.contiguous(memory_format=mf), tx.contiguous(memory_format=tmf))]:
        assert y.shape == tuple(ty.shape) and y.dtype.itemsize == ty.element_size()
        np.testing.assert_array_equal(y.numpy(), ty.numpy())
    assert x.to(memory_format=mf) is x  # nothing to change, as torch's values
    w = nb.tensor(x0, requires_grad=True)
    w.clone(memory_format=mf).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.ones_like(x0))


def test_channels_last_rank_refused_as_torch():
    torch = _torch()
    x, tx = nb.zeros(2, 3), torch.zeros(2, 3)
    for call, tcall in [(lambda: x.to(memory_format=nb.channels_last),
                         lambda: tx.to(memory_format=torch.channels_last)),
                        (lambda: x.float(memory_format=nb.channels_last),
                         lambda: tx.float(memory_format=torch.channels_last)),
                        (lambda: x.clone(memory_format=nb.channels_last),
                         lambda: tx.clone(memory_format=torch.channels_last))]:
        with pytest.raises(RuntimeError, match="required rank 4 tensor"):
            tcall()
        with pytest.raises(RuntimeError, match="required rank 4 tensor to use channels_last "
                                               r"format, got a 2-D tensor"):
            call()
    five = nb.zeros(1, 2, 1, 2, 1)
    assert five.double(memory_format=channels_last_3d).shape == five.shape
    with pytest.raises(RuntimeError, match="required rank 5 tensor to use channels_last_3d"):
        x.half(memory_format=channels_last_3d)
    with pytest.raises(TypeError, match="float: memory_format must be nbgrad.preserve_format"):
        x.float(memory_format="channels_last")
    with pytest.raises(TypeError, match="to: memory_format must be"):
        x.to(nb.float64, memory_format=1)


def test_memory_format_and_layout_objects():
    assert repr(nb.channels_last) == "nbgrad.channels_last"
    assert repr(nb.strided) == "nbgrad.strided"
    for obj in (nb.preserve_format, nb.contiguous_format, nb.channels_last, nb.strided):
        assert pickle.loads(pickle.dumps(obj)) is obj and copy.deepcopy(obj) is obj
    check_layout(None, "zeros")
    check_layout(nb.strided, "zeros")
    with pytest.raises(TypeError, match="zeros: layout must be nbgrad.strided"):
        check_layout("sparse_coo", "zeros")


def test_byte_and_char_methods():
    x = nb.tensor([-1.5, 2.7, 300.0])
    assert x.byte().dtype == nb.uint8 and x.char().dtype == nb.int8
    np.testing.assert_array_equal(x.char().numpy()[:2], [-1, 2])
