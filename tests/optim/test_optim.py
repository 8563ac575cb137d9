"""nbgrad.optim: every optimiser and option against torch.optim (trajectories of 100 steps
with the same gradients), state dicts (round trips, PyTorch's layout, validation),
parameter handling, errors, clipping, and bits at 1 and 2 threads."""

import copy
import itertools
import math

import numpy as np
import pytest
from conftest import assert_optimizer_steps_same_bits_at_threads, assert_same_bits, at_threads
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
import nbgrad.optim as optim
from nbgrad import nn

torch = pytest.importorskip("torch")

SHAPES = [(3, 4), (5,), (), (2, 3, 2), (0,)]
SKIPPED = 1  # this parameter has no gradient on every third step


def _combos(**options):
    """Every combination of the options' values, as kwargs dicts."""
    keys = list(options)
    return [dict(zip(keys, values)) for values in itertools.product(*options.values())]


SGD_CASES = [c for c in _combos(lr=[0.05], momentum=[0, 0.9], dampening=[0, 0.3],
                                nesterov=[False, True], weight_decay=[0, 0.05],
                                maximize=[False, True])
             if not c["nesterov"] or (c["momentum"] > 0 and c["dampening"] == 0)]
ADAM_CASES = _combos(lr=[0.01], amsgrad=[False, True], weight_decay=[0, 0.05],
                     maximize=[False, True]) + [
    {"lr": 0.02, "betas": (0.8, 0.99), "eps": 1e-6},
    {"lr": 0.01, "betas": (0.3, 0.6), "amsgrad": True},  # 1 - beta1 > 0.5: lerp's other form
]
RMSPROP_CASES = _combos(lr=[0.01], centered=[False, True], momentum=[0, 0.5],
                        weight_decay=[0, 0.05], maximize=[False, True]) + [
    {"lr": 0.01, "alpha": 0.3, "centered": True, "eps": 1e-4},
]
ADAGRAD_CASES = _combos(lr=[0.1], lr_decay=[0, 0.01], weight_decay=[0, 0.05],
                        initial_accumulator_value=[0, 0.1], maximize=[False, True]) + [
    {"lr": 0.1, "eps": 1e-3},
]
CASES = ([("SGD", c) for c in SGD_CASES] + [("Adam", c) for c in ADAM_CASES]
         + [("AdamW", c) for c in ADAM_CASES] + [("RMSprop", c) for c in RMSPROP_CASES]
         + [("Adagrad", c) for c in ADAGRAD_CASES]
         + [("Adam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True})])


def _pair(name, kwargs, arrays, groups=None):
    """(nbgrad params, optimizer), (torch params, optimizer) on copies of ``arrays``;
    ``groups``: lists of parameter indices with per-group options."""
    p_nb = [nb.tensor(a.copy(), requires_grad=True) for a in arrays]
    p_t = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]

    def spec(params):
        if groups is None:
            return params
        return [{"params": [params[i] for i in idx], **extra} for idx, extra in groups]

    return ((p_nb, getattr(optim, name)(spec(p_nb), **kwargs)),
            (p_t, getattr(torch.optim, name)(spec(p_t), **kwargs)))


def _set_grads(p_nb, p_t, grads):
    for a, b, g in zip(p_nb, p_t, grads):
        a.grad = None if g is None else nb.tensor(g)
        b.grad = None if g is None else torch.tensor(g)


def _grads(rng, arrays, step):
    return [None if i == SKIPPED and step % 3 == 1 else
            rng.standard_normal(a.shape).astype(a.dtype) for i, a in enumerate(arrays)]


def _run_against_torch(name, kwargs, arrays, steps, rtol, atol, groups=None, seed=1):
    (p_nb, opt_nb), (p_t, opt_t) = _pair(name, kwargs, arrays, groups)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        _set_grads(p_nb, p_t, _grads(rng, arrays, step))
        opt_nb.step()
        opt_t.step()
        for a, b in zip(p_nb, p_t):
            np.testing.assert_allclose(a._data, b.detach().numpy(), rtol=rtol, atol=atol,
                                       err_msg=f"{name} {kwargs} step {step}")
    return opt_nb, opt_t


def _arrays(dtype, seed=0, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _torch_state(opt_t):
    """A torch state dict with ndarrays and floats (the layout nbgrad saves)."""
    sd = opt_t.state_dict()
    state = {k: {n: (float(v) if n == "step" else v.detach().numpy().copy())
                 for n, v in entry.items()} for k, entry in sd["state"].items()}
    return {"state": state, "param_groups": sd["param_groups"]}


# -- trajectories ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_trajectory_matches_torch_float64(name, kwargs):
    opt_nb, opt_t = _run_against_torch(name, kwargs, _arrays(np.float64), 100, 1e-10, 1e-12)
    ours, theirs = opt_nb.state_dict(), _torch_state(opt_t)
    assert ours["state"].keys() == theirs["state"].keys()
    for k, entry in theirs["state"].items():
        assert list(ours["state"][k]) == list(entry)
        for n, v in entry.items():
            np.testing.assert_allclose(ours["state"][k][n], v, rtol=1e-10, atol=1e-12)
    keys = {k for k in theirs["param_groups"][0]
            if k not in ("foreach", "capturable", "differentiable", "fused")}
    assert set(ours["param_groups"][0]) == keys


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.05}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.05}),
    ("AdamW", {"lr": 0.01, "maximize": True}),
    ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "initial_accumulator_value": 0.1}),
])
def test_trajectory_close_to_torch_float32(name, kwargs):
    _run_against_torch(name, kwargs, _arrays(np.float32), 100, 2e-5, 1e-6)


@pytest.mark.parametrize("name, kwargs", [
    ("SGD", {"lr": 0.05, "momentum": 0.9}), ("Adam", {"lr": 0.01, "amsgrad": True}),
    ("RMSprop", {"lr": 0.01, "centered": True}), ("Adagrad", {"lr": 0.1}),
])
def test_mixed_dtypes_and_groups_match_torch(name, kwargs):
    arrays = _arrays(np.float64)
    arrays[1] = arrays[1].astype(np.float32)
    arrays[3] = arrays[3].astype(np.float32)
    groups = [([0, 1, 2], {}), ([3, 4], {"lr": kwargs["lr"] / 3, "weight_decay": 0.1})]
    (p_nb, opt), _ = _pair(name, kwargs, arrays, groups)
    assert [len(flats) for flats in opt._flat] == [2, 2]  # split by dtype
    _run_against_torch(name, kwargs, arrays, 30, 2e-5, 1e-6, groups)


def test_add_param_group_and_momentum_switched_on_match_torch():
    arrays = _arrays(np.float64)
    (p_nb, opt_nb), (p_t, opt_t) = _pair("SGD", {"lr": 0.1}, arrays[:2])
    extra_nb = nb.tensor(arrays[2], requires_grad=True)
    extra_t = torch.tensor(arrays[2], requires_grad=True)
    rng = np.random.default_rng(3)
    for step in range(12):
        if step == 4:
            opt_nb.add_param_group({"params": extra_nb, "lr": 0.05})
            opt_t.add_param_group({"params": extra_t, "lr": 0.05})
            p_nb, p_t = p_nb + [extra_nb], p_t + [extra_t]
        if step == 7:
            for opt in (opt_nb, opt_t):
                opt.param_groups[0]["momentum"] = 0.9
        _set_grads(p_nb, p_t, [rng.standard_normal(p.shape) for p in p_nb])
        opt_nb.step()
        opt_t.step()
    for a, b in zip(p_nb, p_t):
        np.testing.assert_allclose(a._data, b.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_modules_and_backward():
    """Parameters of nn layers with gradients from backward, against torch.nn."""
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((8, 3)), rng.standard_normal((8, 2))
    ours, theirs = nn.Linear(3, 2), torch.nn.Linear(3, 2).double()
    ours.weight.data = ours.weight._data.astype(np.float64)
    ours.bias.data = ours.bias._data.astype(np.float64)
    with torch.no_grad():
        theirs.weight.copy_(torch.tensor(ours.weight._data))
        theirs.bias.copy_(torch.tensor(ours.bias._data))
    weight = ours.weight._data
    opt_nb = optim.Adam(ours.parameters(), lr=0.05)
    opt_t = torch.optim.Adam(theirs.parameters(), lr=0.05)
    for _ in range(20):
        opt_nb.zero_grad()
        ((ours(nb.tensor(x)) - nb.tensor(y)) ** 2).mean().backward()
        opt_nb.step()
        opt_t.zero_grad()
        ((theirs(torch.tensor(x)) - torch.tensor(y)) ** 2).mean().backward()
        opt_t.step()
    assert ours.weight._data is weight  # updated in place
    np.testing.assert_allclose(ours.weight._data, theirs.weight.detach().numpy(), rtol=1e-10)
    np.testing.assert_allclose(ours.bias._data, theirs.bias.detach().numpy(), rtol=1e-10)


# -- hypothesis: shapes and hyperparameters ---------------------------------------------------
OPTIONS = {
    "SGD": st.fixed_dictionaries({
        "lr": st.floats(0, 0.5), "momentum": st.sampled_from([0, 0.5, 0.9]),
        "dampening": st.sampled_from([0, 0.5]), "weight_decay": st.floats(0, 0.2),
        "maximize": st.booleans()}),
    "Adam": st.fixed_dictionaries({
        "lr": st.floats(0, 0.5), "betas": st.tuples(st.floats(0, 0.99), st.floats(0, 0.999)),
        "eps": st.floats(1e-10, 1e-2), "weight_decay": st.floats(0, 0.2),
        "amsgrad": st.booleans(), "maximize": st.booleans()}),
    "RMSprop": st.fixed_dictionaries({
        "lr": st.floats(0, 0.1), "alpha": st.floats(0.1, 0.999),
        "eps": st.floats(1e-10, 1e-2), "weight_decay": st.floats(0, 0.2),
        "momentum": st.sampled_from([0, 0.5]), "centered": st.booleans(),
        "maximize": st.booleans()}),
    "Adagrad": st.fixed_dictionaries({
        "lr": st.floats(0, 0.5), "lr_decay": st.floats(0, 0.1),
        "weight_decay": st.floats(0, 0.2), "initial_accumulator_value": st.floats(0, 1),
        "eps": st.floats(1e-10, 1e-2), "maximize": st.booleans()}),
}


@settings(max_examples=30)
@given(name=st.sampled_from(list(OPTIONS)), data=st.data(),
       shapes=st.lists(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6),
                       min_size=1, max_size=4))
def test_random_shapes_and_hyperparameters_match_torch(name, data, shapes):
    kwargs = data.draw(OPTIONS[name])
    _run_against_torch(name, kwargs, _arrays(np.float64, shapes=shapes), 5, 1e-10, 1e-12)


# -- state dicts ----------------------------------------------------------------------------
ROUND_TRIP = [("SGD", {"lr": 0.05, "momentum": 0.9, "dampening": 0.1}),
              ("Adam", {"lr": 0.01, "amsgrad": True}),
              ("AdamW", {"lr": 0.01, "weight_decay": 0.1}),
              ("RMSprop", {"lr": 0.01, "centered": True, "momentum": 0.5}),
              ("Adagrad", {"lr": 0.1, "lr_decay": 0.01})]


def _trained(name, kwargs, arrays, steps, seed, state=None):
    """Parameters and optimizer after ``steps`` steps from ``arrays`` (and ``state``)."""
    params = [nb.tensor(a.copy(), requires_grad=True) for a in arrays]
    opt = getattr(optim, name)(params, **kwargs)
    if state is not None:
        opt.load_state_dict(state)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        for p, g in zip(params, _grads(rng, arrays, step)):
            p.grad = None if g is None else nb.tensor(g)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name, kwargs", ROUND_TRIP)
def test_state_dict_round_trip_continues_bitwise(name, kwargs, tmp_path):
    arrays = _arrays(np.float32)
    whole, _ = _trained(name, kwargs, arrays, 12, seed=5)
    first, opt = _trained(name, kwargs, arrays, 7, seed=5)
    saved = opt.state_dict()
    rng = np.random.default_rng(5)
    for step in range(7):
        _grads(rng, arrays, step)  # the gradients of the first 7 steps
    resumed = [nb.tensor(p._data.copy(), requires_grad=True) for p in first]
    fresh = getattr(optim, name)(resumed, lr=123.0)
    fresh.load_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == kwargs["lr"]
    for step in range(7, 12):
        for p, g in zip(resumed, _grads(rng, arrays, step)):
            p.grad = None if g is None else nb.tensor(g)
        fresh.step()
    for a, b in zip(whole, resumed):
        assert_same_bits(a._data, b._data)
    loaded = _through_checkpoint(saved, tmp_path)
    assert list(loaded["state"]) == list(saved["state"])  # integer keys stay integers
    again = getattr(optim, name)([nb.tensor(p._data.copy(), requires_grad=True)
                                  for p in first])
    again.load_state_dict(loaded)
    for a, b in zip(again.state_dict()["state"].values(), saved["state"].values()):
        for n in b:
            assert_same_bits(np.asarray(a[n]), np.asarray(b[n]))


def _through_checkpoint(obj, tmp_path):
    """``obj`` saved and loaded by nbgrad's checkpoint module (a deep copy without it)."""
    try:
        from nbgrad import serialization
    except ImportError:
        return copy.deepcopy(obj)
    serialization.save(obj, tmp_path / "opt.npz")
    return serialization.load(tmp_path / "opt.npz")


def test_state_dict_layout_and_loading_torch_state():
    arrays = _arrays(np.float64)
    groups = [([0, 1], {}), ([2, 3, 4], {"lr": 0.003})]
    opt_nb, opt_t = _run_against_torch("Adam", {"lr": 0.01, "amsgrad": True}, arrays, 6,
                                       1e-10, 1e-12, groups)
    sd = opt_nb.state_dict()
    assert [g["params"] for g in sd["param_groups"]] == [[0, 1], [2, 3, 4]]
    assert list(sd["state"]) == [0, 1, 2, 3, 4]
    assert list(sd["state"][0]) == ["step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"]
    assert isinstance(sd["state"][0]["step"], float) and sd["state"][0]["step"] == 6.0
    assert sd["state"][SKIPPED]["step"] == 4.0  # skipped steps do not count
    assert sd["param_groups"][0]["betas"] == (0.9, 0.999)
    # a torch state dict (ndarrays, string keys as a checkpoint may give) continues as torch
    theirs = _torch_state(opt_t)
    theirs["state"] = {str(k): v for k, v in theirs["state"].items()}
    for g in theirs["param_groups"]:
        g["betas"] = list(g["betas"])
    p_nb = [nb.tensor(p.detach().numpy().copy(), requires_grad=True)
            for g in opt_t.param_groups for p in g["params"]]
    p_t = [p for g in opt_t.param_groups for p in g["params"]]
    opt = optim.Adam([{"params": p_nb[:2]}, {"params": p_nb[2:]}])
    opt.load_state_dict(theirs)
    assert opt.param_groups[1]["lr"] == 0.003 and opt.param_groups[0]["betas"] == (0.9, 0.999)
    rng = np.random.default_rng(9)
    for step in range(5):
        _set_grads(p_nb, p_t, _grads(rng, arrays, step))
        opt.step()
        opt_t.step()
    for a, b in zip(p_nb, p_t):
        np.testing.assert_allclose(a._data, b.detach().numpy(), rtol=1e-10, atol=1e-12)


def test_state_property_is_a_live_view():
    p = nb.tensor(np.ones(3), requires_grad=True)
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    assert opt.state == {}
    p.grad = nb.tensor(np.ones(3))
    opt.step()
    buf = opt.state[p]["momentum_buffer"]
    np.testing.assert_array_equal(buf, np.ones(3))
    opt.step()
    np.testing.assert_array_equal(buf, np.full(3, 1.9))


def _bad_state_dicts(sd):
    """(description, broken copy of ``sd``, error type, message pattern)."""
    cases = []

    def case(label, edit, error, pattern):
        broken = copy.deepcopy(sd)
        edit(broken)
        cases.append((label, broken, error, pattern))

    case("groups", lambda d: d["param_groups"].append(dict(d["param_groups"][0])),
         ValueError, "2 parameter groups, the optimizer 1")
    case("params", lambda d: d["param_groups"][0]["params"].pop(), ValueError,
         "param group 0 has 4 parameters in the state dict, 5 in the optimizer")
    case("shape", lambda d: d["state"][0].update(exp_avg=np.zeros(7)), ValueError,
         r"state\[0\]\['exp_avg'\] is an array of shape \(7,\)")
    case("unknown", lambda d: d["state"][0].update(momentum=np.zeros((3, 4))), ValueError,
         "keeps")
    case("missing", lambda d: d["state"][0].pop("exp_avg_sq"), ValueError, "keeps")
    case("index", lambda d: d["state"].update({9: d["state"][0]}), ValueError,
         "names no parameter")
    case("step", lambda d: d["state"][0].update(step=-1.0), ValueError, "step")
    case("hyper", lambda d: d["param_groups"][0].update(lr=-1.0), ValueError,
         "invalid learning rate")
    case("layout", lambda d: d.pop("state"), ValueError, "'state' and 'param_groups'")
    return cases


def test_load_state_dict_errors_load_nothing():
    params, opt = _trained("Adam", {"lr": 0.01}, _arrays(np.float64), 3, seed=6)
    before = opt.state_dict()
    for label, broken, error, pattern in _bad_state_dicts(before):
        with pytest.raises(error, match=pattern):
            opt.load_state_dict(broken)
        after = opt.state_dict()
        assert after["param_groups"] == before["param_groups"], label
        for k, entry in before["state"].items():
            for n, v in entry.items():
                np.testing.assert_array_equal(after["state"][k][n], v, err_msg=label)


# -- parameters and steps --------------------------------------------------------------------
def test_zero_grad_and_closure():
    p = nb.tensor(np.array([1.0, 2.0]), requires_grad=True)
    opt = optim.SGD([p], lr=0.5)

    def closure():
        assert nb.is_grad_enabled()
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    with nb.no_grad():
        loss = opt.step(closure)
    assert loss.item() == 5.0
    np.testing.assert_array_equal(p._data, [0.0, 0.0])  # p - 0.5 * 2p
    p.grad = nb.tensor(np.array([3.0, 4.0]))
    grad = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is grad and np.all(grad._data == 0)
    opt.zero_grad()
    assert p.grad is None
    opt.step()  # no gradients: nothing happens
    np.testing.assert_array_equal(p._data, [0.0, 0.0])


def test_parameter_arrays_in_place_rebound_and_non_contiguous():
    base = np.arange(12.0).reshape(3, 4)
    p = nb.tensor(base, requires_grad=True)
    q = nb.tensor(np.ones(2), requires_grad=True)
    p.data = base.T  # a strided array
    opt = optim.SGD([p, q], lr=1.0)
    assert p._data.flags.c_contiguous
    np.testing.assert_array_equal(p._data, base.T)
    held = p._data
    p.grad, q.grad = nb.tensor(np.ones((4, 3))), nb.tensor(np.ones(2))
    opt.step()
    assert p._data is held
    np.testing.assert_array_equal(held, base.T - 1)
    new = np.zeros((4, 3))
    p.data = new  # code may assign a new array of the same shape
    opt.step()
    assert p._data is new
    np.testing.assert_array_equal(new, -np.ones((4, 3)))
    p.data = np.zeros(5)
    with pytest.raises(ValueError, match=r"changed from shape \(4, 3\)"):
        opt.step()


def _leaf(*shape, dtype=np.float64):
    return nb.tensor(np.zeros(shape, dtype), requires_grad=True)


def _same_leaf_twice():
    t = _leaf(2)
    return [t, t]


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: optim.SGD(_leaf(2)), TypeError, "single Tensor"),
    (lambda: optim.SGD([]), ValueError, "empty parameter list"),
    (lambda: optim.SGD({_leaf(2)}), TypeError, "not a set"),
    (lambda: optim.SGD([np.zeros(2)]), TypeError, r"params\[0\] is a ndarray"),
    (lambda: optim.SGD([_leaf(2) * 2]), ValueError, "non-leaf"),
    (lambda: optim.SGD([nb.tensor(np.zeros(2))]), ValueError, "does not require grad"),
    (lambda: optim.SGD([nb.tensor(np.zeros(2, np.int64))]), TypeError, "dtype nbgrad.int64"),
    (lambda: optim.SGD(_same_leaf_twice()), ValueError, "twice"),
    (lambda: optim.SGD([{"params": p} for p in _same_leaf_twice()]), ValueError,
     "more than one parameter group"),
    (lambda: optim.SGD([_leaf(2)], lr=-1), ValueError, "SGD: invalid learning rate -1"),
    (lambda: optim.SGD([_leaf(2)], momentum=-0.1), ValueError, "momentum"),
    (lambda: optim.SGD([_leaf(2)], nesterov=True), ValueError, "Nesterov momentum"),
    (lambda: optim.SGD([_leaf(2)], momentum=0.9, dampening=0.1, nesterov=True), ValueError,
     "Nesterov momentum"),
    (lambda: optim.SGD([{"params": [_leaf(2)], "lr": -2}]), ValueError, "learning rate -2"),
    (lambda: optim.SGD([{"lr": 1.0}]), ValueError, "no 'params'"),
    (lambda: optim.Adam([_leaf(2)], betas=(1.0, 0.9)), ValueError,
     r"beta parameter at index 0 1.0: it must be in \[0.0, 1.0\)"),
    (lambda: optim.Adam([_leaf(2)], betas=(0.9, -0.1)), ValueError, "index 1"),
    (lambda: optim.Adam([_leaf(2)], betas=0.9), TypeError, "pair"),
    (lambda: optim.AdamW([_leaf(2)], eps=-1e-8), ValueError, "AdamW: invalid epsilon"),
    (lambda: optim.Adam([_leaf(2)], lr="0.1"), TypeError, "real number"),
    (lambda: optim.Adam([_leaf(2)], weight_decay=float("nan")), ValueError, "weight_decay"),
    (lambda: optim.RMSprop([_leaf(2)], alpha=-1), ValueError, "alpha"),
    (lambda: optim.Adagrad([_leaf(2)], lr_decay=-1), ValueError, "lr_decay"),
    (lambda: optim.Adagrad([_leaf(2)], initial_accumulator_value=-1), ValueError,
     "initial_accumulator_value"),
])
def test_bad_arguments(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make()


def test_named_parameters_and_repr():
    net = nn.Linear(2, 3)
    opt = optim.Adam(net.named_parameters(), lr=0.1)
    assert opt.param_groups[0]["param_names"] == ["weight", "bias"]
    assert opt.state_dict()["param_groups"][0]["param_names"] == ["weight", "bias"]
    text = repr(opt)
    assert text.startswith("Adam (") and "lr: 0.1" in text and "params" not in text
    with pytest.raises(ValueError, match="with a name"):
        optim.SGD([("w", _leaf(2)), _leaf(2)])


# -- determinism -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kwargs", ROUND_TRIP)
def test_same_bits_at_one_and_two_threads(name, kwargs):
    assert_optimizer_steps_same_bits_at_threads(getattr(optim, name), kwargs,
                                                [(300_001,), (7, 5), ()])


# -- clipping --------------------------------------------------------------------------------
def _grad_pairs(arrays):
    p_nb = [nb.tensor(np.zeros_like(a), requires_grad=True) for a in arrays]
    p_t = [torch.zeros(a.shape, dtype=torch.from_numpy(a).dtype, requires_grad=True)
           for a in arrays]
    _set_grads(p_nb, p_t, arrays)
    return p_nb, p_t


def test_clipping_is_also_at_pytorchs_nn_utils():
    from nbgrad.nn import utils
    assert utils.clip_grad_norm_ is optim.clip_grad_norm_
    assert utils.clip_grad_value_ is optim.clip_grad_value_


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_clip_grad_norm_matches_torch(norm_type, max_norm, dtype):
    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal(s).astype(dtype) for s in [(70_000,), (3, 4), (), (5,)]]
    arrays[3][2] = 0.0
    p_nb, p_t = _grad_pairs(arrays)
    total = optim.clip_grad_norm_(p_nb, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(p_t, max_norm, norm_type)
    assert total.dtype == np.dtype(dtype) and total.shape == ()
    rtol = 1e-12 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(total.item(), expected.item(), rtol=rtol)
    for a, b in zip(p_nb, p_t):
        np.testing.assert_allclose(a.grad._data, b.grad.numpy(), rtol=rtol, atol=1e-30)


def test_clip_grad_norm_edge_cases():
    assert optim.clip_grad_norm_([_leaf(2)], 1.0).dtype == np.float32  # no gradients: 0
    mixed = [np.array([3.0], np.float32), np.array([4.0])]
    p_nb, p_t = _grad_pairs(mixed)
    total = optim.clip_grad_norm_(p_nb, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(p_t, 1.0)
    assert total.dtype == np.float64 and total.item() == pytest.approx(expected.item())
    assert p_nb[0].grad.dtype == np.float32
    np.testing.assert_allclose(p_nb[1].grad._data, p_t[1].grad.numpy(), rtol=1e-6)
    bad = [np.array([1.0, np.inf])]
    p_nb, p_t = _grad_pairs(bad)
    with pytest.raises(RuntimeError, match="non-finite"):
        optim.clip_grad_norm_(p_nb, 1.0, error_if_nonfinite=True)
    optim.clip_grad_norm_(p_nb, 1.0)
    torch.nn.utils.clip_grad_norm_(p_t, 1.0)
    np.testing.assert_array_equal(p_nb[0].grad._data, p_t[0].grad.numpy())  # scaled by 1/inf
    p_nb, _ = _grad_pairs([np.array([1.0, np.nan])])
    assert math.isnan(optim.clip_grad_norm_(p_nb[0], 1.0, math.inf).item())
    with pytest.raises(TypeError, match=r"parameters\[1\] is a ndarray"):
        optim.clip_grad_norm_([_leaf(1), np.zeros(1)], 1.0)


def test_clip_grad_norm_same_bits_at_one_and_two_threads():
    rng = np.random.default_rng(10)
    arrays = [rng.standard_normal(400_000).astype(np.float32), rng.standard_normal(9)]

    def run():
        p_nb, _ = _grad_pairs(arrays)
        return optim.clip_grad_norm_(p_nb, 1.0)._data, p_nb[0].grad._data

    for a, b in zip(at_threads(1, run), at_threads(2, run)):
        assert_same_bits(a, b)


@pytest.mark.parametrize("clip_value", [0.5, -0.5])
def test_clip_grad_value_matches_torch(clip_value):
    arrays = [np.array([-2.0, -0.2, 0.0, 0.3, 5.0, np.nan]),
              np.array([[1.0, -1.0]], np.float32)]
    p_nb, p_t = _grad_pairs(arrays)
    assert optim.clip_grad_value_(p_nb, clip_value) is None
    torch.nn.utils.clip_grad_value_(p_t, clip_value)
    for a, b in zip(p_nb, p_t):
        np.testing.assert_array_equal(a.grad._data, b.grad.numpy())
