"""LambdaLR, MultiplicativeLR, LinearLR, SequentialLR, ChainedScheduler,
CosineAnnealingWarmRestarts and CyclicLR against torch.optim.lr_scheduler (the oracle): the
same two-group optimiser and step sequence in both, comparing get_last_lr(), the groups'
lrs and momenta after every step; state-dict round trips; errors."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
import nbgrad.optim as optim
from nbgrad.optim import lr_scheduler

torch = pytest.importorskip("torch")
TL = torch.optim.lr_scheduler

lrs_st = st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=2)
steps_st = st.integers(0, 40)


def _optimizers(lrs, name="SGD", **kwargs):
    """The same two-group optimizer in nbgrad and in torch."""
    ours = getattr(optim, name)(
        [{"params": [nb.tensor(np.zeros(2), requires_grad=True)], "lr": lr} for lr in lrs],
        **kwargs)
    theirs = getattr(torch.optim, name)(
        [{"params": [torch.zeros(2, dtype=torch.float64, requires_grad=True)], "lr": lr}
         for lr in lrs], **kwargs)
    return ours, theirs


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _trace(opt, scheduler, steps, epochs=None):
    rows = [(list(scheduler.get_last_lr()), [g["lr"] for g in opt.param_groups],
             _momenta(opt))]
    for i in range(steps):
        opt.step()
        if epochs is None:
            scheduler.step()
        else:
            scheduler.step(epochs[i])
        rows.append((list(scheduler.get_last_lr()), [g["lr"] for g in opt.param_groups],
                     _momenta(opt)))
    return rows


def _both(lrs, make, steps, name="SGD", epochs=None, **opt_kwargs):
    """The traces of ``make(module, optimizer)`` in nbgrad and in torch."""
    out = []
    for opt, module in zip(_optimizers(lrs, name, **opt_kwargs), (lr_scheduler, TL)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out.append(_trace(opt, make(module, opt), steps, epochs))
    return out


@settings(max_examples=25, deadline=None)
@given(lrs_st, steps_st, st.floats(0.5, 1.0), st.booleans())
def test_lambda_and_multiplicative_equal_torch(lrs, steps, rate, per_group):
    fn = (lambda e: rate ** e) if not per_group else [lambda e: rate ** e,
                                                       lambda e: 1.0 / (1 + e)]
    got, expected = _both(lrs, lambda m, o: m.LambdaLR(o, fn), steps)
    assert got == expected
    mult = (lambda e: rate) if not per_group else [lambda e: rate, lambda e: 0.99]
    got, expected = _both(lrs, lambda m, o: m.MultiplicativeLR(o, mult), steps)
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(lrs_st, steps_st, st.floats(0.05, 1.0), st.floats(0.0, 1.0), st.integers(1, 12))
def test_linear_equals_torch(lrs, steps, start, end, total):
    got, expected = _both(lrs, lambda m, o: m.LinearLR(o, start, end, total), steps)
    assert got == expected


@settings(max_examples=20, deadline=None)
@given(lrs_st, steps_st, st.integers(1, 6), st.integers(1, 10))
def test_sequential_equals_torch(lrs, steps, warm, second):
    def make(m, o):
        parts = [m.LinearLR(o, start_factor=0.1, total_iters=warm),
                 m.ExponentialLR(o, gamma=0.9),
                 m.CosineAnnealingLR(o, T_max=7, eta_min=0.001)]
        return m.SequentialLR(o, parts, milestones=[warm, warm + second])
    got, expected = _both(lrs, make, steps)
    assert got == expected
    got, expected = _both(lrs, lambda m, o: m.SequentialLR(
        o, [m.StepLR(o, 2, 0.5), m.MultiStepLR(o, [1, 3], 0.5)], [warm]), steps)
    assert got == expected


@settings(max_examples=20, deadline=None)
@given(lrs_st, steps_st, st.integers(1, 5))
def test_chained_equals_torch(lrs, steps, step_size):
    got, expected = _both(lrs, lambda m, o: m.ChainedScheduler(
        [m.LinearLR(o, 0.5, total_iters=4), m.StepLR(o, step_size, 0.7),
         m.ExponentialLR(o, 0.95)]), steps)
    assert got == expected
    got, expected = _both(lrs, lambda m, o: m.ChainedScheduler(
        [m.MultiplicativeLR(o, lambda e: 0.9)], optimizer=o), steps)
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(lrs_st, steps_st, st.integers(1, 6), st.integers(1, 3), st.floats(0.0, 1e-3))
def test_warm_restarts_equal_torch(lrs, steps, t0, mult, eta_min):
    got, expected = _both(lrs, lambda m, o: m.CosineAnnealingWarmRestarts(
        o, T_0=t0, T_mult=mult, eta_min=eta_min), steps)
    assert got == expected


@settings(max_examples=25, deadline=None)
@given(lrs_st, st.lists(st.floats(0.0, 50.0), max_size=30), st.integers(1, 6),
       st.integers(1, 3))
def test_warm_restarts_float_epochs_equal_torch(lrs, epochs, t0, mult):
    got, expected = _both(lrs, lambda m, o: m.CosineAnnealingWarmRestarts(
        o, T_0=t0, T_mult=mult), len(epochs), epochs=epochs)
    assert got == expected


def _scale(x):
    return 1.0 / (1.0 + 0.1 * x)


@settings(max_examples=30, deadline=None)
@given(lrs_st, steps_st, st.integers(1, 8), st.one_of(st.none(), st.integers(1, 8)),
       st.sampled_from(["triangular", "triangular2", "exp_range", "custom-cycle",
                        "custom-iterations"]),
       st.sampled_from([("SGD", {"momentum": 0.9}), ("Adam", {"betas": (0.9, 0.99)}),
                        ("SGD", {})]))
def test_cyclic_equals_torch(lrs, steps, up, down, mode, optimizer):
    name, opt_kwargs = optimizer
    kwargs = {"step_size_up": up, "step_size_down": down, "gamma": 0.97,
              "cycle_momentum": bool(opt_kwargs)}
    if mode.startswith("custom"):
        kwargs.update(scale_fn=_scale, scale_mode=mode.split("-")[1])
    else:
        kwargs["mode"] = mode
    got, expected = _both(lrs, lambda m, o: m.CyclicLR(o, [0.01, 0.002], [0.5, 0.1], **kwargs),
                          steps, name, **opt_kwargs)
    assert got == expected


class _Halve:
    """A callable object: its __dict__ is saved in the state dict (PyTorch)."""

    def __init__(self):
        self.factor = 0.5

    def __call__(self, epoch):
        return self.factor ** epoch


MAKERS = {
    "LambdaLR": lambda m, o: m.LambdaLR(o, [lambda e: 0.9 ** e, _Halve()]),
    "MultiplicativeLR": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95),
    "LinearLR": lambda m, o: m.LinearLR(o, 0.2, 0.9, total_iters=15),
    "SequentialLR": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, 0.2, total_iters=5), m.StepLR(o, 3, 0.5)], [8]),
    "ChainedScheduler": lambda m, o: m.ChainedScheduler(
        [m.StepLR(o, 3, 0.5), m.ExponentialLR(o, 0.9)]),
    "CosineAnnealingWarmRestarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, 3, 2, 1e-3),
    "CyclicLR": lambda m, o: m.CyclicLR(o, 0.01, 0.1, 4, 3, mode="triangular2"),
}


@pytest.mark.parametrize("name", list(MAKERS))
def test_state_dict_round_trip(name):
    make = MAKERS[name]

    def run(opt, sched, count):
        out = []
        for _ in range(count):
            opt.step()
            sched.step()
            out.append((sched.get_last_lr(), _momenta(opt)))
        return out

    opt, _ = _optimizers(LRS, momentum=0.9)
    whole = run(opt, make(lr_scheduler, opt), 25)
    opt, _ = _optimizers(LRS, momentum=0.9)
    sched = make(lr_scheduler, opt)
    first = run(opt, sched, 11)
    saved = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}
    if name == "LambdaLR":
        assert saved["scheduler"]["lr_lambdas"] == [None, {"factor": 0.5}]
    fresh, _ = _optimizers(LRS, momentum=0.9)
    fresh_sched = make(lr_scheduler, fresh)
    fresh.load_state_dict(saved["optimizer"])
    fresh_sched.load_state_dict(saved["scheduler"])
    assert first + run(fresh, fresh_sched, 14) == whole
    # the same keys as PyTorch's state dict (ours may hold a few private extras)
    _, theirs = _optimizers(LRS, momentum=0.9)
    assert set(make(TL, theirs).state_dict()) <= set(sched.state_dict()) | {
        "_get_lr_called_within_step", "_scale_fn_ref"}


LRS = (0.1, 0.02)


def test_closed_form_step_epoch_equals_torch():
    for make in (lambda m, o: m.StepLR(o, 3, 0.5), lambda m, o: m.MultiStepLR(o, [2, 2, 6]),
                 lambda m, o: m.ExponentialLR(o, 0.9), lambda m, o: m.CosineAnnealingLR(o, 9),
                 lambda m, o: m.LinearLR(o, 0.25, total_iters=6)):
        epochs = [3, 7, 1, 12, 5]
        got, expected = _both(LRS, make, len(epochs), epochs=epochs)
        assert got == expected


@pytest.mark.parametrize("make, error, pattern", [
    (lambda o: lr_scheduler.LambdaLR(o, [lambda e: 1.0]), ValueError, "expected 2 lr_lambdas"),
    (lambda o: lr_scheduler.MultiplicativeLR(o, 0.5), TypeError, "should be a function"),
    (lambda o: lr_scheduler.LambdaLR(object(), lambda e: 1.0), TypeError, "not an Optimizer"),
    (lambda o: lr_scheduler.LinearLR(o, start_factor=0), ValueError, "start_factor"),
    (lambda o: lr_scheduler.LinearLR(o, end_factor=1.5), ValueError, "end_factor"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.StepLR(o, 2)], [3]), ValueError,
     "one milestone fewer"),
    (lambda o: lr_scheduler.SequentialLR(o, [], []), ValueError, "at least one scheduler"),
    (lambda o: lr_scheduler.SequentialLR(o, [lr_scheduler.ReduceLROnPlateau(o)], []),
     ValueError, "ReduceLROnPlateau"),
    (lambda o: lr_scheduler.SequentialLR(o, [object()], []), TypeError, "no optimizer"),
    (lambda o: lr_scheduler.ChainedScheduler([]), ValueError, "at least one scheduler"),
    (lambda o: lr_scheduler.ChainedScheduler(
        [lr_scheduler.StepLR(o, 2), lr_scheduler.StepLR(_optimizers(LRS)[0], 2)]),
     ValueError, "another optimizer"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=0), ValueError, "T_0"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2.0), ValueError, "T_0"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, 2, T_mult=0), ValueError,
     "T_mult"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, 2, eta_min="0"), ValueError,
     "eta_min"),
    (lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, 2).step(-1), ValueError,
     "non-negative"),
    (lambda o: lr_scheduler.CyclicLR(o, 0.1, 1.0, mode="sine"), ValueError, "mode"),
    (lambda o: lr_scheduler.CyclicLR(o, [0.1], 1.0), ValueError, "one value per param group"),
    (lambda o: lr_scheduler.CyclicLR(optim.Adagrad([nb.zeros(1, requires_grad=True)]),
                                     0.1, 1.0), ValueError, "momentum or betas"),
])
def test_bad_arguments(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make(_optimizers(LRS)[0])


def test_torch_raises_for_the_same_bad_arguments():
    opt = _optimizers(LRS)[1]
    with pytest.raises(ValueError):
        TL.SequentialLR(opt, [TL.StepLR(opt, 2)], [3])
    with pytest.raises(ValueError):
        TL.CosineAnnealingWarmRestarts(opt, T_0=0)
    with pytest.raises(ValueError, match="momentum or beta1"):
        TL.CyclicLR(torch.optim.Adagrad([torch.zeros(1, requires_grad=True)]), 0.1, 1.0)


@settings(max_examples=15, deadline=None)
@given(lrs_st, steps_st, st.integers(1, 8))
def test_sequential_restarts_lambda_warm_restarts_and_cyclic_like_torch(lrs, steps, milestone):
    got, expected = _both(lrs, lambda m, o: m.SequentialLR(
        o, [m.LambdaLR(o, lambda e: (e + 1) / 10), m.CosineAnnealingWarmRestarts(o, 3, 2),
            m.MultiplicativeLR(o, lambda e: 0.9)], [milestone, milestone + 7]), steps)
    assert got == expected
    got, expected = _both(lrs, lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, 0.5, total_iters=3),
            m.CyclicLR(o, 0.01, 0.1, 3, cycle_momentum=False)], [milestone]), steps)
    assert got == expected
