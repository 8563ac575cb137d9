"""nbgrad.optim.LBFGS against torch.optim.LBFGS: the same problems from the same start
(Rosenbrock, least squares, a tanh MLP, random quadratics) with and without the strong
Wolfe line search, compared after every step (parameters, returned loss, closure calls);
the state (names, state_dict round trips through nb.save/nb.load and from PyTorch), a
physics-informed fit (Adam, then L-BFGS), and errors.

L-BFGS's arithmetic is not bitwise PyTorch's (dot products and sums add in another order,
PyTorch's ``add_`` fuses a multiply-add, and both libraries' kernels round differently on
different CPUs), and where a history pair's y = g_new - g cancels, such rounding grows
from step to step: up to 4e-10 relative over the configurations compared, on an Intel
Xeon and an AMD EPYC host, so they are compared to 1e-9. A wrong update differs by far
more: one history pair fewer moves Rosenbrock's first step by 1e-2."""

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.optim import LBFGS
from nbgrad.optim.lbfgs import STATE_NAMES

torch = pytest.importorskip("torch")

RTOL = 1e-9


# -- running both ---------------------------------------------------------------------------
def rosenbrock(x):
    return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()


def least_squares(params, data):
    w, b = params
    a, y = data
    return ((a @ w + b - y) ** 2).mean()


def mlp_loss(params, data, lib):
    w1, b1, w2, b2, _unused = params  # _unused never gets a gradient: zeros for L-BFGS
    x, y = data
    return ((lib.tanh(x @ w1 + b1) @ w2 + b2 - y) ** 2).mean()


def run_both(loss_fn, arrays, data, steps, **options):
    """Step nbgrad's and PyTorch's LBFGS ``steps`` times on the same problem; per step
    (params nb, params torch, loss nb, loss torch, calls nb, calls torch)."""
    p_nb = [nb.tensor(a.copy(), requires_grad=True) for a in arrays]
    p_t = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
    d_nb = [nb.tensor(d) for d in data]
    d_t = [torch.tensor(d) for d in data]
    opt_nb, opt_t = LBFGS(p_nb, **options), torch.optim.LBFGS(p_t, **options)
    calls = [0, 0]

    def closure_nb():
        calls[0] += 1
        opt_nb.zero_grad()
        loss = loss_fn(p_nb, d_nb, nb)
        loss.backward()
        return loss

    def closure_t():
        calls[1] += 1
        opt_t.zero_grad()
        loss = loss_fn(p_t, d_t, torch)
        loss.backward()
        return loss

    history = []
    for _ in range(steps):
        loss_nb, loss_t = opt_nb.step(closure_nb), opt_t.step(closure_t)
        history.append(([p.detach().numpy().copy() for p in p_nb],
                         [p.detach().numpy().copy() for p in p_t],
                         float(loss_nb), float(loss_t.detach()), *calls))
    return history, opt_nb, opt_t


def assert_history_close(history, rtol=RTOL):
    for step, (ours, theirs, loss_nb, loss_t, calls_nb, calls_t) in enumerate(history):
        assert calls_nb == calls_t, f"step {step}: {calls_nb} closure calls, torch {calls_t}"
        assert loss_nb == pytest.approx(loss_t, rel=rtol, abs=1e-16)  # near 0: cancels
        scale = max(np.abs(np.concatenate([t.ravel() for t in theirs])).max(), 1.0)
        for a, b in zip(ours, theirs):
            np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale,
                                       err_msg=f"step {step}")


ROSENBROCK_START = np.array([-1.2, 1.0, -0.5, 0.8])
ROSENBROCK_CASES = [
    {"line_search_fn": "strong_wolfe"},
    {"line_search_fn": "strong_wolfe", "history_size": 3, "max_iter": 7},
    {"line_search_fn": "strong_wolfe", "lr": 0.5, "max_iter": 5},
    {"line_search_fn": "strong_wolfe", "max_iter": 30, "max_eval": 31},
    {"lr": 0.1},
    {"lr": 0.1, "history_size": 2, "max_iter": 5},
    {"lr": 0.05, "max_iter": 40, "tolerance_change": 1e-6},
]


@pytest.mark.parametrize("options", ROSENBROCK_CASES)
def test_rosenbrock_matches_torch(options):
    history, opt_nb, opt_t = run_both(lambda p, d, lib: rosenbrock(p[0]),
                                      [ROSENBROCK_START], [], 5, **options)
    assert_history_close(history)
    ours, theirs = opt_nb.state, opt_t.state
    (s_nb,), (s_t,) = ours.values(), theirs.values()
    assert set(s_nb) == set(s_t)
    assert (s_nb["n_iter"], s_nb["func_evals"]) == (s_t["n_iter"], s_t["func_evals"])
    assert len(s_nb["old_dirs"]) == len(s_t["old_dirs"])
    for name in ("d", "prev_flat_grad", "t", "H_diag", "prev_loss"):
        theirs = np.asarray(s_t[name].numpy() if torch.is_tensor(s_t[name]) else s_t[name])
        # near the optimum a gradient is a difference of terms of order 1 to 100 and
        # keeps their absolute rounding (a component of 3e-6 differed by 4e-12)
        np.testing.assert_allclose(s_nb[name], theirs, rtol=1e-6, atol=1e-10, err_msg=name)
    for ours, theirs in zip(s_nb["ro"], s_t["ro"]):
        assert float(ours) == pytest.approx(float(theirs), rel=1e-6)


@pytest.mark.parametrize("options", [
    {}, {"line_search_fn": "strong_wolfe"}, {"history_size": 2, "max_iter": 8},
    {"lr": 0.5, "max_iter": 12, "line_search_fn": "strong_wolfe", "history_size": 4},
])
def test_least_squares_matches_torch(options):
    rng = np.random.default_rng(1)
    a, y = rng.standard_normal((20, 5)), rng.standard_normal((20, 3))
    arrays = [rng.standard_normal((5, 3)) * 0.1, np.zeros(3)]
    history, _, _ = run_both(lambda p, d, lib: least_squares(p, d), arrays, [a, y], 3,
                             **options)
    assert_history_close(history)


@pytest.mark.parametrize(("options", "steps"), [
    ({"line_search_fn": "strong_wolfe"}, 3),
    ({"line_search_fn": "strong_wolfe", "history_size": 5, "max_iter": 10}, 4),
    ({"line_search_fn": "strong_wolfe", "max_iter": 5}, 4),
    ({"lr": 0.1, "max_iter": 10}, 4),
    ({"max_iter": 10}, 4),
    ({"lr": 0.3, "history_size": 3}, 2),
])
def test_mlp_matches_torch(options, steps):
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (16, 2))
    y = np.sin(2 * x[:, :1]) * x[:, 1:]
    arrays = [rng.standard_normal((2, 6)) * 0.7, np.zeros(6), rng.standard_normal((6, 1)) * 0.4,
              np.zeros(1), rng.standard_normal(3)]
    history, opt_nb, _ = run_both(mlp_loss, arrays, [x, y], steps, **options)
    assert_history_close(history)
    np.testing.assert_array_equal(history[-1][0][-1], arrays[-1])  # no gradient, no move
    assert history[-1][2] < history[0][2]


@settings(max_examples=15)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 12),
       history_size=st.integers(1, 6), max_iter=st.integers(1, 12),
       lr=st.sampled_from([1.0, 0.5, 0.2]),
       line_search_fn=st.sampled_from([None, "strong_wolfe"]))
def test_quadratics_match_torch(seed, n, history_size, max_iter, lr, line_search_fn):
    """0.5 x'Ax - b'x with A = I + a small symmetric part (well conditioned)."""
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n)) * 0.3 / np.sqrt(n)
    a = np.eye(n) + (m + m.T) / 2
    b = rng.standard_normal(n)

    def loss(p, d, lib):
        x = p[0]
        return 0.5 * (x * (d[0] @ x)).sum() - (d[1] * x).sum()

    history, _, _ = run_both(loss, [rng.standard_normal(n)], [a, b], 3,
                             history_size=history_size, max_iter=max_iter, lr=lr,
                             line_search_fn=line_search_fn)
    assert_history_close(history)


def test_float32_follows_torch():
    rng = np.random.default_rng(3)
    a, y = rng.standard_normal((20, 5)), rng.standard_normal((20, 3))
    arrays = [(rng.standard_normal((5, 3)) * 0.1).astype(np.float32),
              np.zeros(3, np.float32)]
    # far from the optimum: near it, float32 rounding decides the stopping rules
    for options in ({"max_iter": 5}, {"line_search_fn": "strong_wolfe", "max_iter": 3}):
        history, opt_nb, _ = run_both(lambda p, d, lib: least_squares(p, d), arrays,
                                      [a.astype(np.float32), y.astype(np.float32)], 3,
                                      **options)
        assert_history_close(history, rtol=1e-5)
        assert all(p.dtype == np.float32 for p in history[-1][0])
        assert opt_nb.state[next(iter(opt_nb.state))]["d"].dtype == np.float32


def test_stops_at_once_at_an_optimum_and_defaults():
    for lib, make in ((nb, LBFGS), (torch, torch.optim.LBFGS)):
        x = lib.tensor(np.ones(4), requires_grad=True)
        opt = make([x], max_iter=8)
        assert opt.param_groups[0]["max_eval"] == 10  # max_iter * 5 // 4
        calls = []

        def closure(opt=opt, x=x, lib=lib, calls=calls):
            calls.append(1)
            opt.zero_grad()
            loss = rosenbrock(x)
            loss.backward()
            return loss

        assert float(opt.step(closure).detach()) == 0.0
        assert len(calls) == 1
        (state,) = opt.state.values()
        assert (state["func_evals"], state["n_iter"]) == (1, 0)


def test_closure_runs_with_grad_enabled_and_the_step_leaves_no_graph():
    x = nb.tensor(ROSENBROCK_START.copy(), requires_grad=True)
    opt = LBFGS([x], max_iter=3)
    seen = []

    def closure():
        seen.append(nb.is_grad_enabled())
        opt.zero_grad()
        loss = rosenbrock(x)
        loss.backward()
        return loss

    with nb.no_grad():
        loss = opt.step(closure)
    assert seen == [True] * 3 and loss.requires_grad
    assert x.is_leaf and x.grad_fn is None


# -- state ----------------------------------------------------------------------------------
def _mlp_setup(seed=4, **options):
    rng = np.random.default_rng(seed)
    x = nb.tensor(rng.uniform(-1, 1, (16, 2)))
    y = nb.tensor(np.cos(2 * x.numpy()[:, :1]))
    arrays = [rng.standard_normal((2, 6)) * 0.7, np.zeros(6), rng.standard_normal((6, 1)) * 0.4,
              np.zeros(1), rng.standard_normal(3)]
    params = [nb.tensor(a, requires_grad=True) for a in arrays]
    opt = LBFGS(params, **options)

    def closure():
        opt.zero_grad()
        loss = mlp_loss(params, (x, y), nb)
        loss.backward()
        return loss

    return params, opt, closure


@pytest.mark.parametrize("options", [{"history_size": 3, "max_iter": 4},
                                     {"line_search_fn": "strong_wolfe", "max_iter": 6}])
def test_state_dict_round_trip_gives_the_same_next_step(options):
    params, opt, closure = _mlp_setup(**options)
    opt.step(closure)
    opt.step(closure)
    saved = opt.state_dict()
    at_save = [p.detach().numpy().copy() for p in params]
    assert list(saved["state"]) == [0] and saved["param_groups"][0]["params"] == [0, 1, 2, 3, 4]
    assert set(saved["state"][0]) == set(STATE_NAMES)
    buffer = io.BytesIO()
    nb.save(saved, buffer)
    buffer.seek(0)
    restored = nb.load(buffer)
    opt.step(closure)
    expected = [p.detach().numpy().copy() for p in params]
    for loaded in (saved, restored):
        params2, opt2, closure2 = _mlp_setup(**options)
        for p, value in zip(params2, at_save):
            p.data = value.copy()
        opt2.load_state_dict(loaded)
        opt2.step(closure2)
        for p, value in zip(params2, expected):
            np.testing.assert_array_equal(p.detach().numpy(), value)
        assert opt2.state[params2[0]]["func_evals"] == opt.state[params[0]]["func_evals"]


def test_state_dict_is_a_copy_and_state_is_live():
    params, opt, closure = _mlp_setup(max_iter=3)
    assert opt.state == {} and opt.state_dict()["state"] == {}
    opt.step(closure)
    saved = opt.state_dict()
    d = saved["state"][0]["d"].copy()
    n_iter = saved["state"][0]["n_iter"]
    opt.step(closure)
    np.testing.assert_array_equal(saved["state"][0]["d"], d)
    assert saved["state"][0]["n_iter"] == n_iter < opt.state[params[0]]["n_iter"]


def test_loads_torch_state_dict():
    rng = np.random.default_rng(5)
    a, y = rng.standard_normal((20, 5)), rng.standard_normal((20, 3))
    arrays = [rng.standard_normal((5, 3)) * 0.1, np.zeros(3)]
    options = {"history_size": 4, "max_iter": 5, "line_search_fn": "strong_wolfe"}
    history, opt_nb, opt_t = run_both(lambda p, d, lib: least_squares(p, d), arrays, [a, y],
                                      1, **options)
    ours = [nb.tensor(p.detach().numpy().copy(), requires_grad=True)
            for p in opt_t.param_groups[0]["params"]]
    fresh = LBFGS(ours, **options)
    fresh.load_state_dict(opt_t.state_dict())
    d_nb = [nb.tensor(a), nb.tensor(y)]

    def closure():
        fresh.zero_grad()
        loss = least_squares(ours, d_nb)
        loss.backward()
        return loss

    def closure_t():
        opt_t.zero_grad()
        loss = least_squares(opt_t.param_groups[0]["params"],
                             [torch.tensor(a), torch.tensor(y)])
        loss.backward()
        return loss

    fresh.step(closure)
    opt_t.step(closure_t)
    for p, q in zip(ours, opt_t.param_groups[0]["params"]):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=0, atol=1e-10)


def test_bad_state_dict_loads_nothing():
    params, opt, closure = _mlp_setup(max_iter=3)
    opt.step(closure)
    good = opt.state_dict()
    before = opt.state_dict()
    bad_shape = {**good, "state": {0: {**good["state"][0], "d": np.zeros(3)}}}
    with pytest.raises(ValueError, match=r"LBFGS.load_state_dict: state\['d'\].*shape \(3,\)"):
        opt.load_state_dict(bad_shape)
    unknown = {**good, "state": {0: {**good["state"][0], "momentum": 1.0}}}
    with pytest.raises(ValueError, match="LBFGS.load_state_dict: unknown state"):
        opt.load_state_dict(unknown)
    other = {**good, "state": {2: good["state"][0]}}
    with pytest.raises(ValueError, match="first parameter"):
        opt.load_state_dict(other)
    lr = {**good, "param_groups": [{**good["param_groups"][0], "lr": -1.0}]}
    with pytest.raises(ValueError, match="Invalid learning rate"):
        opt.load_state_dict(lr)
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    np.testing.assert_array_equal(after["state"][0]["d"], before["state"][0]["d"])


# -- a physics-informed fit -----------------------------------------------------------------
def test_physics_informed_ode_fit_converges():
    """u' + u = 0 on [0, 2], u(0) = 1 (u = exp(-x)) with a 1-16-1 tanh network: Adam
    for a start, then L-BFGS with the strong Wolfe line search."""
    rng = np.random.default_rng(0)
    params = [nb.tensor(rng.standard_normal((1, 16)), requires_grad=True),
              nb.tensor(np.zeros(16), requires_grad=True),
              nb.tensor(rng.standard_normal((16, 1)) / 4, requires_grad=True),
              nb.tensor(np.zeros(1), requires_grad=True)]
    x_np = np.linspace(0.0, 2.0, 32)[:, None]
    x = nb.tensor(x_np, requires_grad=True)
    x0 = nb.tensor(np.zeros((1, 1)))

    def net(points):
        return nb.tanh(points @ params[0] + params[1]) @ params[2] + params[3]

    def residual_loss():
        u = net(x)
        (u_x,) = nb.grad(u.sum(), x, create_graph=True)
        return ((u_x + u) ** 2).mean() + ((net(x0) - 1) ** 2).mean()

    adam = nb.optim.Adam(params, lr=1e-2)
    for _ in range(100):
        adam.zero_grad()
        residual_loss().backward()
        adam.step()
    after_adam = float(residual_loss())
    lbfgs = LBFGS(params, line_search_fn="strong_wolfe", max_iter=50)

    def closure():
        lbfgs.zero_grad()
        loss = residual_loss()
        loss.backward()
        return loss

    for _ in range(4):
        lbfgs.step(closure)
    final = float(residual_loss())
    assert final < 1e-4 < after_adam
    with nb.no_grad():
        u = net(nb.tensor(x_np)).numpy()
    np.testing.assert_allclose(u, np.exp(-x_np), atol=1e-2)


# -- errors ---------------------------------------------------------------------------------
def _params():
    return [nb.tensor(np.zeros(3), requires_grad=True)]


def test_errors_match_torch():
    t_params = [torch.zeros(3, requires_grad=True), torch.zeros(2, requires_grad=True)]
    n_params = [nb.tensor(np.zeros(3), requires_grad=True),
                nb.tensor(np.zeros(2), requires_grad=True)]
    two = "LBFGS doesn't support per-parameter options"
    with pytest.raises(ValueError, match=two):
        torch.optim.LBFGS([{"params": t_params[:1]}, {"params": t_params[1:]}])
    with pytest.raises(ValueError, match=two):
        LBFGS([{"params": n_params[:1]}, {"params": n_params[1:]}])
    opt = LBFGS(n_params[:1])
    with pytest.raises(ValueError, match=two):
        opt.add_param_group({"params": n_params[1:]})

    for make, params in ((torch.optim.LBFGS, t_params), (LBFGS, n_params)):
        with pytest.raises(ValueError, match="Invalid learning rate: -1"):
            make(params, lr=-1)
        with pytest.raises(TypeError, match="missing 1 required positional argument: "
                                            "'closure'"):
            make(params).step()
        with pytest.raises(TypeError):
            make(params).step(None)

    with pytest.raises(TypeError, match="LBFGS.step: closure must be a callable"):
        LBFGS(_params()).step(None)
    with pytest.raises(TypeError, match="LBFGS: lr must be a real number"):
        LBFGS(_params(), lr="1")
    with pytest.raises(ValueError, match="LBFGS: a Tensor lr must be 1-element"):
        LBFGS(_params(), lr=nb.tensor(np.ones(2)))


def test_unknown_line_search_raises_at_the_step_as_torch():
    for lib, make in ((torch, torch.optim.LBFGS), (nb, LBFGS)):
        x = lib.tensor(np.array([0.5, 2.0]), requires_grad=True)
        opt = make([x], line_search_fn="foo")  # accepted here, as in PyTorch

        def closure(x=x, opt=opt):
            opt.zero_grad()
            loss = rosenbrock(x)
            loss.backward()
            return loss

        with pytest.raises(RuntimeError, match="only 'strong_wolfe' is supported"):
            opt.step(closure)


def test_zero_and_tensor_lr_as_torch():
    for lr in (0, 0.5):
        for tensor_lr in (False, True):
            x_nb = nb.tensor(ROSENBROCK_START.copy(), requires_grad=True)
            x_t = torch.tensor(ROSENBROCK_START.copy(), requires_grad=True)
            opt_nb = LBFGS([x_nb], lr=nb.tensor([float(lr)]) if tensor_lr else lr, max_iter=4)
            opt_t = torch.optim.LBFGS([x_t], lr=torch.tensor([float(lr)]) if tensor_lr else lr,
                                      max_iter=4)
            for x, opt in ((x_nb, opt_nb), (x_t, opt_t)):
                def closure(x=x, opt=opt):
                    opt.zero_grad()
                    loss = rosenbrock(x)
                    loss.backward()
                    return loss

                opt.step(closure)
            np.testing.assert_allclose(x_nb.detach().numpy(), x_t.detach().numpy(),
                                       rtol=0, atol=1e-12)
