"""nbgrad.optim.lr_scheduler against torch.optim.lr_scheduler: the learning-rate (and
momentum) sequences, chaining, resuming, state dicts, and errors."""

import copy
import math

import numpy as np
import pytest

import nbgrad as nb
import nbgrad.optim as optim
from nbgrad.optim import lr_scheduler

torch = pytest.importorskip("torch")

LRS = (0.1, 0.02)


def _optimizers(name="SGD", **kwargs):
    """The same two-group optimizer (lrs LRS) in nbgrad and in torch."""
    def groups(make):
        return [{"params": [make()], "lr": lr} for lr in LRS]

    ours = getattr(optim, name)(groups(lambda: nb.tensor(np.zeros(2), requires_grad=True)),
                                **kwargs)
    theirs = getattr(torch.optim, name)(
        groups(lambda: torch.zeros(2, dtype=torch.float64, requires_grad=True)), **kwargs)
    return ours, theirs


def _momenta(opt):
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def _trace(opt, scheduler, steps, metrics=None):
    """get_last_lr(), the groups' lrs and momenta after construction and each step."""
    rows = [(scheduler.get_last_lr(), [g["lr"] for g in opt.param_groups], _momenta(opt))]
    for i in range(steps):
        opt.step()
        if metrics is None:
            scheduler.step()
        else:
            scheduler.step(metrics[i])
        rows.append((scheduler.get_last_lr(), [g["lr"] for g in opt.param_groups],
                     _momenta(opt)))
    return rows


SCHEDULES = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}, {}),
    ("StepLR", {"step_size": 1, "gamma": 0.9}, {}),
    ("MultiStepLR", {"milestones": [2, 5, 5, 9], "gamma": 0.3}, {}),
    ("ExponentialLR", {"gamma": 0.95}, {}),
    ("CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}, {}),
    ("CosineAnnealingLR", {"T_max": 7}, {}),
    ("OneCycleLR", {"max_lr": [0.5, 0.2], "total_steps": 30}, {"momentum": 0.9}),
    ("OneCycleLR", {"max_lr": 0.3, "epochs": 3, "steps_per_epoch": 10, "pct_start": 0.25,
                    "anneal_strategy": "linear", "three_phase": True, "div_factor": 10.0},
     {"momentum": 0.9}),
    ("OneCycleLR", {"max_lr": 0.3, "total_steps": 30, "cycle_momentum": False}, {}),
]


@pytest.mark.parametrize("name, kwargs, opt_kwargs", SCHEDULES,
                         ids=[f"{n}-{k}" for n, k, _ in SCHEDULES])
def test_sequence_equals_torch(name, kwargs, opt_kwargs):
    ours, theirs = _optimizers(**opt_kwargs)
    steps = 30 if name == "OneCycleLR" else 35
    got = _trace(ours, getattr(lr_scheduler, name)(ours, **kwargs), steps)
    expected = _trace(theirs, getattr(torch.optim.lr_scheduler, name)(theirs, **kwargs), steps)
    assert got == expected


def test_one_cycle_cycles_adam_beta1_and_refuses_to_overrun():
    ours, theirs = _optimizers("Adam", betas=(0.9, 0.99))
    ours_s = lr_scheduler.OneCycleLR(ours, max_lr=0.01, total_steps=20)
    theirs_s = torch.optim.lr_scheduler.OneCycleLR(theirs, max_lr=0.01, total_steps=20)
    assert _trace(ours, ours_s, 19) == _trace(theirs, theirs_s, 19)
    assert ours.param_groups[0]["betas"][1] == 0.99
    ours_s.step()
    with pytest.raises(ValueError, match="tried to step 21 times"):
        ours_s.step()


def test_chained_schedulers_equal_torch():
    ours, theirs = _optimizers()
    rows = []
    for opt, module in ((ours, lr_scheduler), (theirs, torch.optim.lr_scheduler)):
        first = module.StepLR(opt, step_size=4, gamma=0.5)
        second = module.ExponentialLR(opt, gamma=0.9)
        trace = []
        for _ in range(12):
            opt.step()
            first.step()
            second.step()
            trace.append([g["lr"] for g in opt.param_groups])
        rows.append(trace)
    assert rows[0] == rows[1]


@pytest.mark.parametrize("mode, threshold_mode, kwargs", [
    ("min", "rel", {"patience": 2}),
    ("min", "abs", {"patience": 0, "threshold": 0.05, "cooldown": 2}),
    ("max", "rel", {"patience": 1, "factor": 0.5, "min_lr": [0.05, 0.001]}),
    ("max", "abs", {"patience": 1, "factor": 0.5, "min_lr": 0.019, "eps": 1e-3}),
])
def test_reduce_on_plateau_equals_torch(mode, threshold_mode, kwargs):
    metrics = list(np.random.default_rng(0).standard_normal(40).cumsum() * 0.1)
    metrics[5] = nb.tensor(np.array(metrics[5]))  # a one-element tensor is a metric
    ours, theirs = _optimizers()
    got = _trace(ours, lr_scheduler.ReduceLROnPlateau(
        ours, mode=mode, threshold_mode=threshold_mode, **kwargs), 40, metrics)
    metrics[5] = float(metrics[5])
    expected = _trace(theirs, torch.optim.lr_scheduler.ReduceLROnPlateau(
        theirs, mode=mode, threshold_mode=threshold_mode, **kwargs), 40, metrics)
    assert got == expected
    assert len({tuple(row[1]) for row in got}) > 1  # the lr was reduced


def _plain(value, where="state"):
    """Assert a state dict holds only checkpoint types (dict, list, tuple, int, float,
    bool, str, None, ndarray)."""
    if isinstance(value, dict):
        assert type(value) is dict, where
        for k, v in value.items():
            assert isinstance(k, int | str), where
            _plain(v, f"{where}[{k!r}]")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            _plain(v, f"{where}[{i}]")
    else:
        assert value is None or isinstance(value, bool | int | float | str | np.ndarray), where


def _through_checkpoint(obj, tmp_path):
    """``obj`` saved and loaded by nbgrad's checkpoint module (a deep copy without it)."""
    try:
        from nbgrad import serialization
    except ImportError:
        return copy.deepcopy(obj)
    serialization.save(obj, tmp_path / "ckpt.npz")
    return serialization.load(tmp_path / "ckpt.npz")


@pytest.mark.parametrize("name, kwargs, opt_kwargs", SCHEDULES + [
    ("ReduceLROnPlateau", {"patience": 1}, {})], ids=lambda x: str(x)[:30])
def test_state_dict_round_trip(name, kwargs, opt_kwargs, tmp_path):
    metrics = list(np.sin(np.arange(30.0)))
    args = (lambda i: (metrics[i],)) if name == "ReduceLROnPlateau" else (lambda i: ())

    def run(opt, sched, start, stop):
        out = []
        for i in range(start, stop):
            opt.step()
            sched.step(*args(i))
            out.append((sched.get_last_lr(), _momenta(opt)))
        return out

    ours, _ = _optimizers(**opt_kwargs)
    whole = run(ours, getattr(lr_scheduler, name)(ours, **kwargs), 0, 25)
    ours, _ = _optimizers(**opt_kwargs)
    sched = getattr(lr_scheduler, name)(ours, **kwargs)
    first = run(ours, sched, 0, 11)
    saved = {"optimizer": ours.state_dict(), "scheduler": sched.state_dict()}
    _plain(saved)
    saved = _through_checkpoint(saved, tmp_path)
    fresh, _ = _optimizers(**opt_kwargs)
    fresh_sched = getattr(lr_scheduler, name)(fresh, **kwargs)
    fresh.load_state_dict(saved["optimizer"])
    fresh_sched.load_state_dict(saved["scheduler"])
    assert first + run(fresh, fresh_sched, 11, 25) == whole


def test_resume_with_last_epoch_equals_torch():
    rows = []
    for opt, module in zip(_optimizers(), (lr_scheduler, torch.optim.lr_scheduler)):
        for group in opt.param_groups:
            group["initial_lr"] = group["lr"]
        sched = module.CosineAnnealingLR(opt, T_max=10, last_epoch=4)  # the closed form
        rows.append(_trace(opt, sched, 8))
    assert rows[0] == rows[1]
    with pytest.raises(KeyError, match="no 'initial_lr'"):
        lr_scheduler.StepLR(_optimizers()[0], step_size=2, last_epoch=3)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda o: lr_scheduler.StepLR(object(), 2), TypeError, "is not an Optimizer"),
    (lambda o: lr_scheduler.StepLR(o, 0), ValueError, "step_size must be a positive int"),
    (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=0), ValueError, "T_max"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1), ValueError, "total_steps, or epochs"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=-3), ValueError, "total_steps"),
    (lambda o: lr_scheduler.OneCycleLR(o, [0.1], total_steps=5), ValueError,
     "one value per param group"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=5, pct_start=1.5), ValueError,
     "pct_start"),
    (lambda o: lr_scheduler.OneCycleLR(o, 0.1, total_steps=5, anneal_strategy="exp"),
     ValueError, "anneal_strategy"),
    (lambda o: lr_scheduler.OneCycleLR(optim.Adagrad([nb.zeros(1, requires_grad=True)]),
                                       0.1, total_steps=5), ValueError, "momentum or betas"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, factor=1.0), ValueError, "factor"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, mode="up"), ValueError, "mode"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, threshold_mode="pct"), ValueError,
     "threshold_mode"),
    (lambda o: lr_scheduler.ReduceLROnPlateau(o, min_lr=[0.1]), ValueError, "min_lrs"),
])
def test_bad_arguments(make, error, pattern):
    with pytest.raises(error, match=pattern):
        make(_optimizers()[0])


def test_cosine_lr_is_the_closed_form_within_the_period():
    opt, _ = _optimizers()
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=8, eta_min=0.01)
    for t in range(1, 9):
        opt.step()
        sched.step()
        expected = [0.01 + (lr - 0.01) * (1 + math.cos(math.pi * t / 8)) / 2 for lr in LRS]
        np.testing.assert_allclose(sched.get_last_lr(), expected, rtol=1e-12)
