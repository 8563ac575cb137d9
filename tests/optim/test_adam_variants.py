"""nbgrad.optim.NAdam, RAdam and Adamax against torch.optim: trajectories with the same
initial parameters and gradients (hypothesis over shapes, options and two param groups),
state dicts (PyTorch's layout, round trips, loading PyTorch's), bits at 1 and 2 threads,
and bad input."""

import numpy as np
import pytest
from conftest import assert_optimizer_steps_same_bits_at_threads, assert_same_bits
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
import nbgrad.optim as optim
from nbgrad.runtime.jit import PARALLEL_MIN

torch = pytest.importorskip("torch")

NAMES = ["NAdam", "RAdam", "Adamax"]
SKIPPED = 1  # this parameter has no gradient on every third step (its own step count)
STEPS = 10
# float64: 1e-12; float32: a few ulps (PyTorch's vectorised lerp may fuse a multiply-add)
TOL = {np.float64: (1e-12, 1e-12), np.float32: (4 * 2.0 ** -23, 4 * 2.0 ** -23)}


def _options(name):
    """Hypothesis strategy of one optimiser's keyword arguments."""
    common = {"lr": st.floats(0, 0.1), "betas": st.tuples(st.floats(0, 0.99),
                                                           st.floats(0, 0.999)),
              "eps": st.floats(1e-10, 1e-2), "weight_decay": st.sampled_from([0, 0.05]),
              "maximize": st.booleans()}
    if name != "Adamax":
        common["decoupled_weight_decay"] = st.booleans()
    if name == "NAdam":
        common["momentum_decay"] = st.sampled_from([0, 4e-3, 0.1])
    return st.fixed_dictionaries(common)


def _pair(name, groups, arrays):
    """(nbgrad params, optimizer), (torch params, optimizer) on copies of ``arrays``;
    ``groups``: (parameter indices, options) per param group."""
    p_nb = [nb.tensor(a.copy(), requires_grad=True) for a in arrays]
    p_t = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]

    def spec(params):
        return [{"params": [params[i] for i in idx], **extra} for idx, extra in groups]

    return ((p_nb, getattr(optim, name)(spec(p_nb))),
            (p_t, getattr(torch.optim, name)(spec(p_t))))


def _grads(rng, arrays, step):
    return [None if i == SKIPPED and step % 3 == 1 else
            rng.standard_normal(a.shape).astype(a.dtype) for i, a in enumerate(arrays)]


def _set_grads(p_nb, p_t, grads):
    for a, b, g in zip(p_nb, p_t, grads):
        a.grad = None if g is None else nb.tensor(g)
        b.grad = None if g is None else torch.tensor(g)


def _close(p_nb, p_t, dtype, what):
    rtol, atol = TOL[dtype]
    for a, b in zip(p_nb, p_t):
        np.testing.assert_allclose(a._data, b.detach().numpy(), rtol=rtol, atol=atol,
                                   err_msg=what)


def _run(name, groups, arrays, steps=STEPS, seed=1):
    """Step both optimisers with the same gradients, comparing after every step."""
    (p_nb, opt_nb), (p_t, opt_t) = _pair(name, groups, arrays)
    rng = np.random.default_rng(seed)
    for step in range(steps):
        _set_grads(p_nb, p_t, _grads(rng, arrays, step))
        opt_nb.step()
        opt_t.step()
        _close(p_nb, p_t, arrays[0].dtype.type, f"{name} {groups} step {step}")
    return (p_nb, opt_nb), (p_t, opt_t)


def _arrays(dtype, shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def _torch_state(opt_t):
    """A torch state dict with ndarrays and floats (the layout nbgrad saves)."""
    sd = opt_t.state_dict()
    state = {k: {n: (float(v) if v.ndim == 0 else v.detach().numpy().copy())
                 for n, v in entry.items()} for k, entry in sd["state"].items()}
    return {"state": state, "param_groups": sd["param_groups"]}


def _all_groups(groups):
    return [(list(range(len(groups))), {})] if groups is None else groups


# -- trajectories ----------------------------------------------------------------------------
CASES = [(name, kw) for name in NAMES for kw in (
    {}, {"weight_decay": 0.1}, {"lr": 0.05, "maximize": True},
    {"lr": 0.01, "betas": (0.3, 0.6), "eps": 1e-4})] + [
    (name, {"weight_decay": 0.1, "decoupled_weight_decay": True}) for name in NAMES[:2]] + [
    ("NAdam", {"momentum_decay": 0.1, "lr": 0.02})]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name, kwargs", CASES, ids=[f"{n}-{c}" for n, c in CASES])
def test_trajectory_and_state_match_torch(name, kwargs, dtype):
    arrays = _arrays(dtype, [(3, 4), (5,), (), (2, 3, 2), (0,)])
    groups = [(list(range(len(arrays))), kwargs)]
    (_, opt_nb), (_, opt_t) = _run(name, groups, arrays)
    ours, theirs = opt_nb.state_dict(), _torch_state(opt_t)
    assert ours["state"].keys() == theirs["state"].keys()
    rtol, atol = TOL[dtype]
    for k, entry in theirs["state"].items():
        assert list(ours["state"][k]) == list(entry)  # PyTorch's names, in its order
        for n, v in entry.items():
            np.testing.assert_allclose(ours["state"][k][n], v, rtol=rtol, atol=atol)
    assert ours["state"][SKIPPED]["step"] < ours["state"][0]["step"] == STEPS
    keys = {k for k in theirs["param_groups"][0]
            if k not in ("foreach", "capturable", "differentiable", "fused")}
    assert set(ours["param_groups"][0]) == keys
    for key in keys - {"params"}:
        assert ours["param_groups"][0][key] == theirs["param_groups"][0][key], key


@pytest.mark.parametrize("name", NAMES)
def test_defaults_match_torch(name):
    ours = getattr(optim, name)([nb.zeros(2, requires_grad=True)]).defaults
    theirs = getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)]).defaults
    assert ours == {k: v for k, v in theirs.items()
                    if k not in ("foreach", "capturable", "differentiable", "fused")}


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(NAMES), data=st.data(),
       dtype=st.sampled_from([np.float64, np.float32]),
       shapes=st.lists(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
                       min_size=2, max_size=4))
def test_random_shapes_options_and_two_groups_match_torch(name, data, dtype, shapes):
    first, second = data.draw(_options(name)), data.draw(_options(name))
    split = data.draw(st.integers(1, len(shapes) - 1))
    groups = [(list(range(split)), first), (list(range(split, len(shapes))), second)]
    _run(name, groups, _arrays(dtype, shapes))


def test_radam_switches_to_the_rectified_step_as_torch():
    """With beta2 = 0.999, rho_t <= 5 for the first 5 steps and > 5 after: both forms."""
    arrays = _arrays(np.float64, [(4, 3)])
    groups = [([0], {"lr": 0.05})]
    (p_nb, opt_nb), (p_t, opt_t) = _pair("RAdam", groups, arrays)
    rng = np.random.default_rng(2)
    for step in range(1, 9):
        before = p_nb[0]._data.copy()
        _set_grads(p_nb, p_t, [rng.standard_normal(a.shape) for a in arrays])
        opt_nb.step()
        opt_t.step()
        _close(p_nb, p_t, np.float64, f"step {step}")
        m = opt_nb.state[p_nb[0]]["exp_avg"]
        unrectified = before - m / (1 - 0.9 ** step) * 0.05
        assert np.array_equal(p_nb[0]._data, unrectified) == (step <= 5), step


def test_mixed_dtypes_in_a_group_match_torch():
    arrays = _arrays(np.float64, [(3, 2), (4,), (2, 2)])
    arrays[1] = arrays[1].astype(np.float32)
    for name in NAMES:
        (_, opt), _ = _run(name, [([0, 1, 2], {"lr": 0.01, "weight_decay": 0.05})], arrays,
                           steps=4)
        assert [len(flats) for flats in opt._flat] == [2]


# -- state dicts ----------------------------------------------------------------------------
ROUND_TRIP = [("NAdam", {"lr": 0.01, "weight_decay": 0.05}),
              ("NAdam", {"lr": 0.01, "decoupled_weight_decay": True, "weight_decay": 0.1}),
              ("RAdam", {"lr": 0.01, "weight_decay": 0.05}),
              ("Adamax", {"lr": 0.01, "maximize": True})]


def _trained(name, kwargs, arrays, steps, seed, state=None, skip=0):
    """Parameters and optimizer after ``steps`` steps (the gradients of steps ``skip`` on
    of the seed's sequence) from ``arrays`` and ``state``."""
    params = [nb.tensor(a.copy(), requires_grad=True) for a in arrays]
    opt = getattr(optim, name)(params, **kwargs)
    if state is not None:
        opt.load_state_dict(state)
    rng = np.random.default_rng(seed)
    for step in range(skip + steps):
        grads = _grads(rng, arrays, step)
        if step < skip:
            continue
        for p, g in zip(params, grads):
            p.grad = None if g is None else nb.tensor(g)
        opt.step()
    return params, opt


@pytest.mark.parametrize("name, kwargs", ROUND_TRIP)
def test_state_dict_round_trip_continues_bitwise(name, kwargs):
    arrays = _arrays(np.float32, [(3, 4), (5,), ()])
    whole, _ = _trained(name, kwargs, arrays, 10, seed=5)
    first, opt = _trained(name, kwargs, arrays, 4, seed=5)
    saved = opt.state_dict()
    resumed, opt2 = _trained(name, kwargs, [p._data for p in first], 6, seed=5,
                             state=saved, skip=4)
    for a, b in zip(whole, resumed):
        assert_same_bits(a._data, b._data)
    assert opt2.state_dict()["state"].keys() == saved["state"].keys()


@pytest.mark.parametrize("name, kwargs", ROUND_TRIP)
def test_loading_torchs_state_dict_continues_as_torch(name, kwargs):
    arrays = _arrays(np.float64, [(3, 4), (5,), ()])
    groups = [([0, 1, 2], kwargs)]
    (p_nb, opt_nb), (p_t, opt_t) = _pair(name, groups, arrays)
    rng = np.random.default_rng(6)
    for step in range(4):  # torch alone
        _set_grads(p_nb, p_t, _grads(rng, arrays, step))
        opt_t.step()
    for a, b in zip(p_nb, p_t):
        a._data[...] = b.detach().numpy()
    opt_nb.load_state_dict(_torch_state(opt_t))
    for step in range(4, 10):
        _set_grads(p_nb, p_t, _grads(rng, arrays, step))
        opt_nb.step()
        opt_t.step()
        _close(p_nb, p_t, np.float64, f"{name} step {step}")


def test_nadam_state_holds_mu_product_and_rejects_a_bad_one():
    p = nb.tensor(np.ones(3), requires_grad=True)
    opt = optim.NAdam([p], lr=0.1)
    p.grad = nb.tensor(np.ones(3))
    opt.step()
    state = opt.state[p]
    assert list(state) == ["step", "mu_product", "exp_avg", "exp_avg_sq"]
    mu = 0.9 * (1.0 - 0.5 * 0.96 ** 0.004)
    assert state["mu_product"] == float(np.float32(mu))  # kept in the default dtype
    sd = opt.state_dict()
    sd["state"][0]["mu_product"] = np.ones(3)
    with pytest.raises(ValueError, match="mu_product"):
        optim.NAdam([p]).load_state_dict(sd)
    del sd["state"][0]["mu_product"]
    with pytest.raises(ValueError, match="mu_product"):
        optim.NAdam([p]).load_state_dict(sd)
    with pytest.raises(ValueError, match="exp_inf"):
        optim.Adamax([p]).load_state_dict(opt.state_dict())


# -- determinism -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, kwargs", ROUND_TRIP)
def test_same_bits_at_one_and_two_threads(name, kwargs):
    assert_optimizer_steps_same_bits_at_threads(getattr(optim, name), kwargs,
                                                [(PARALLEL_MIN + 5,), (7, 5), ()])


# -- bad input ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kwargs, match", [
    ({"lr": -1.0}, "invalid learning rate"), ({"eps": -1e-8}, "invalid epsilon value"),
    ({"betas": (1.0, 0.999)}, "invalid beta parameter at index 0"),
    ({"betas": (0.9, -0.1)}, "invalid beta parameter at index 1"),
    ({"weight_decay": -0.1}, "invalid weight_decay value"),
])
def test_invalid_hyperparameters_raise_like_torch(name, kwargs, match):
    with pytest.raises(ValueError, match=f"{name}: {match}"):
        getattr(optim, name)([nb.zeros(2, requires_grad=True)], **kwargs)
    with pytest.raises(ValueError):
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kwargs)


def test_other_bad_input():
    p = nb.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="NAdam: invalid momentum_decay value"):
        optim.NAdam([p], momentum_decay=-1e-3)
    with pytest.raises(TypeError, match="RAdam: betas must be a pair"):
        optim.RAdam([p], betas=0.9)
    with pytest.raises(TypeError, match="Adamax: learning rate must be a real number"):
        optim.Adamax([p], lr="0.1")
    with pytest.raises(ValueError, match="Adamax: .*requires_grad|does not require grad"):
        optim.Adamax([nb.zeros(2)])
    opt = optim.RAdam([p], foreach=None)  # accepted, as PyTorch's
    opt.param_groups[0]["eps"] = -1.0
    state = opt.state_dict()
    with pytest.raises(ValueError, match="invalid epsilon value"):
        optim.RAdam([p]).load_state_dict(state)
    with pytest.raises(TypeError):
        optim.Adamax([p], decoupled_weight_decay=True)  # PyTorch's Adamax has no such option
