"""Non-finite, extreme and empty inputs through conv1d, conv2d, conv_transpose2d (each
kernel path forced in turn), max_pool2d and avg_pool2d, against PyTorch.

Drawn inputs are standard normal with a few elements replaced by NaN, +-inf, -0.0, a
subnormal or a huge value (1e38 in float32, 1e300 in float64). The output and every input
gradient must have PyTorch's NaN positions, its inf positions and signs, and finite values
within rtol times the sum of the magnitudes of the terms of each result (the same op on
|inputs| and |g| in float64), plus a few smallest normals for flushed subnormals.

Two restrictions keep the comparison meaningful:
* PyTorch's convolutions multiply their zero padding (and zero-stuffed gradients) by the
  other operand, so an inf that meets the padding is NaN in PyTorch, while in nbgrad the
  padding contributes nothing. Where that can happen (padding > 0 and an inf or NaN in
  conv2d's w, or in either operand of conv_transpose2d) nbgrad's NaNs need only be a
  subset of PyTorch's (a NaN only where PyTorch has one).
* At most one huge value per example: two in one sum can overflow to inf or not
  depending on the summation order, which legitimately differs between the libraries.
"""

from contextlib import ExitStack

import numpy as np
import pytest
from conftest import PATHS, kernel_form, kernel_path
from hypothesis import given, settings
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.testing.strategies_conv import (
    conv1d_configs,
    conv2d_configs,
    conv_transpose2d_configs,
    pool2d_configs,
)

EXAMPLES = settings(max_examples=30, deadline=None)
DTYPES = st.sampled_from([np.float32, np.float64])
SEEDS = st.integers(0, 2**16)
NON_FINITE = ("nan", "inf", "-inf")
POSITION = st.floats(0, 1, exclude_max=True)


# -- drawing inputs -----------------------------------------------------------------------
@st.composite
def replacements(draw, operands: tuple[str, ...]) -> list:
    """(operand, position in [0, 1), kind) triples: up to four NaN, +-inf, -0.0 or
    +-subnormal, and at most one +-huge value (see the module doc)."""
    kinds = st.sampled_from(NON_FINITE + ("-0", "sub", "-sub"))
    picks = draw(st.lists(st.tuples(st.sampled_from(operands), POSITION, kinds),
                          max_size=4))
    huge = draw(st.none() | st.tuples(st.sampled_from(operands), POSITION,
                                      st.sampled_from(["huge", "-huge"])))
    return picks + ([huge] if huge else [])


def _value(kind: str, dtype) -> float:
    huge, sub = (1e38, 1e-40) if dtype == np.float32 else (1e300, 5e-320)
    return {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "-0": -0.0, "sub": sub,
            "-sub": -sub, "huge": huge, "-huge": -huge}[kind]


def _arrays(shapes: dict, seed: int, picks: list, dtype) -> dict:
    """Standard normal arrays of ``shapes`` (name -> shape) with the picks written in
    (picks for operands not in ``shapes`` are dropped)."""
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(s).astype(dtype) for k, s in shapes.items()}
    for name, where, kind in picks:
        if name in arrays:
            flat = arrays[name].reshape(-1)
            flat[int(where * flat.size)] = _value(kind, dtype)
    return arrays


def _has_non_finite(picks: list, operands: tuple[str, ...]) -> bool:
    return any(name in operands and kind in NON_FINITE for name, _, kind in picks)


# -- running both libraries and comparing ---------------------------------------------------
def _nb_results(fn, inputs: list, g: np.ndarray) -> list:
    """[y, gradients of the inputs that are not None] from nbgrad."""
    ts = [None if a is None else nb.tensor(a, requires_grad=True) for a in inputs]
    y = fn(*ts)
    y.backward(g)
    return [y.numpy()] + [t.grad.numpy() for t in ts if t is not None]


def _torch_results(fn, inputs: list, g: np.ndarray) -> list:
    """[y, gradients of the inputs that are not None] from PyTorch."""
    import torch
    ts = [None if a is None else torch.tensor(a, requires_grad=True) for a in inputs]
    y = fn(*ts)
    y.backward(torch.tensor(g))
    return [y.detach().numpy()] + [t.grad.numpy() for t in ts if t is not None]


def _magnitudes(fn, inputs: list, g: np.ndarray, abs_inputs: bool = True) -> list:
    """Per result, the sum of the magnitudes of its terms: PyTorch's results (float64) on
    |inputs| (the inputs themselves if not ``abs_inputs``: max_pool2d's choice must not
    change) and |g|."""
    def lift(a):
        return None if a is None else (np.abs(a) if abs_inputs else a).astype(np.float64)
    results = _torch_results(fn, [lift(a) for a in inputs], np.abs(g).astype(np.float64))
    return [np.abs(r) for r in results]


def assert_like_torch(ours: list, theirs: list, magnitudes: list, dtype,
                      exact: bool) -> None:
    """Same NaN positions (with ``exact``; else NaN only where PyTorch has NaN), same inf
    positions and signs where PyTorch has no NaN, finite values within rtol * magnitude."""
    rtol = 2e-5 if dtype == np.float32 else 1e-12
    atol = 16 * np.finfo(dtype).tiny
    for i, (a, t, m) in enumerate(zip(ours, theirs, magnitudes)):
        what = "output" if i == 0 else f"gradient of input {i - 1}"
        assert a.shape == t.shape and a.dtype == t.dtype, what
        if exact:
            np.testing.assert_array_equal(np.isnan(a), np.isnan(t), err_msg=f"{what}: NaN")
        else:
            assert not np.any(np.isnan(a) & ~np.isnan(t)), f"{what}: NaN PyTorch lacks"
        keep = ~np.isnan(t)
        for inf in (np.isposinf, np.isneginf):
            np.testing.assert_array_equal(inf(a)[keep], inf(t)[keep], err_msg=f"{what}: inf")
        finite = np.isfinite(t)
        bound = np.where(np.isfinite(m), rtol * m + atol, np.inf)[finite]
        err = np.abs(a[finite].astype(np.float64) - t[finite])
        assert np.all(err <= bound), f"{what}: worst excess {np.max(err - bound)}"


def _check_conv(ours, theirs, cfg: dict, kwargs: dict, dtype, seed: int, picks: list,
                path: str, risky: tuple[str, ...]) -> None:
    """ours/theirs(x, w, b, **kwargs) on the drawn inputs, on the forced kernel path;
    ``risky``: the operands whose inf, with padding, meets PyTorch's zero padding."""
    transposed = "output_padding" in cfg
    filters = cfg["w_shape"][1] * cfg["groups"] if transposed else cfg["w_shape"][0]
    shapes = {"x": cfg["x_shape"], "w": cfg["w_shape"]}
    if cfg["bias"]:
        shapes["b"] = (filters,)
    a = _arrays(shapes, seed, picks, dtype)
    inputs = [a["x"], a["w"], a.get("b")]
    with kernel_path(path):
        y_shape = ours(*inputs, **kwargs).shape
        g = np.random.default_rng(seed + 1).standard_normal(y_shape).astype(dtype)
        got = _nb_results(lambda x, w, b: ours(x, w, b, **kwargs), inputs, g)

    def torch_fn(x, w, b):
        return theirs(x, w, b, **kwargs)
    exact = np.max(cfg["padding"]) == 0 or not _has_non_finite(picks, risky)
    assert_like_torch(got, _torch_results(torch_fn, inputs, g),
                      _magnitudes(torch_fn, inputs, g), dtype, exact)


# -- convolutions ---------------------------------------------------------------------------
def _conv_kwargs(cfg: dict, *keys: str) -> dict:
    return {k: cfg[k] for k in ("stride", "padding", "dilation", "groups") + keys}


@pytest.mark.parametrize("path", PATHS)
@EXAMPLES
@given(cfg=conv2d_configs(), dtype=DTYPES, seed=SEEDS, picks=replacements(("x", "w", "b")))
def test_conv2d_non_finite_matches_torch(path, cfg, dtype, seed, picks):
    torch = pytest.importorskip("torch")
    _check_conv(nb.conv2d, torch.nn.functional.conv2d, cfg, _conv_kwargs(cfg), dtype, seed,
                picks, path, risky=("w",))


@pytest.mark.parametrize("path", PATHS)
@EXAMPLES
@given(cfg=conv1d_configs(), dtype=DTYPES, seed=SEEDS, picks=replacements(("x", "w", "b")))
def test_conv1d_non_finite_matches_torch(path, cfg, dtype, seed, picks):
    torch = pytest.importorskip("torch")
    _check_conv(nb.conv1d, torch.nn.functional.conv1d, cfg, _conv_kwargs(cfg), dtype, seed,
                picks, path, risky=("w",))


@pytest.mark.parametrize("path", PATHS)
@EXAMPLES
@given(cfg=conv_transpose2d_configs(), dtype=DTYPES, seed=SEEDS,
       picks=replacements(("x", "w", "b")))
def test_conv_transpose2d_non_finite_matches_torch(path, cfg, dtype, seed, picks):
    torch = pytest.importorskip("torch")
    _check_conv(nb.conv_transpose2d, torch.nn.functional.conv_transpose2d, cfg,
                _conv_kwargs(cfg, "output_padding"), dtype, seed, picks, path,
                risky=("x", "w"))


# -- pooling --------------------------------------------------------------------------------
def _check_pool(ours, theirs, cfg: dict, kwargs: dict, dtype, seed: int, picks: list,
                abs_inputs: bool) -> None:
    x = _arrays({"x": cfg["x_shape"]}, seed, picks, dtype)["x"]
    g = np.random.default_rng(seed + 1).standard_normal(ours(x, **kwargs).shape)
    g = g.astype(dtype)

    def torch_fn(x):
        return theirs(x, **kwargs)
    assert_like_torch(_nb_results(lambda x: ours(x, **kwargs), [x], g),
                      _torch_results(torch_fn, [x], g),
                      _magnitudes(torch_fn, [x], g, abs_inputs), dtype, exact=True)


@EXAMPLES
@given(cfg=pool2d_configs(), dtype=DTYPES, seed=SEEDS, picks=replacements(("x",)))
def test_max_pool2d_non_finite_matches_torch(cfg, dtype, seed, picks):
    """NaN windows output NaN and send the gradient to their last NaN; inf wins."""
    torch = pytest.importorskip("torch")
    kwargs = {k: cfg[k] for k in ("kernel_size", "stride", "padding", "dilation")}
    _check_pool(nb.max_pool2d, torch.nn.functional.max_pool2d, cfg, kwargs, dtype, seed,
                picks, abs_inputs=False)


@EXAMPLES
@given(cfg=pool2d_configs(dilation=False), include=st.booleans(), dtype=DTYPES, seed=SEEDS,
       picks=replacements(("x",)))
def test_avg_pool2d_non_finite_matches_torch(cfg, include, dtype, seed, picks):
    torch = pytest.importorskip("torch")
    kwargs = {k: cfg[k] for k in ("kernel_size", "stride", "padding")}
    kwargs["count_include_pad"] = include
    _check_pool(nb.avg_pool2d, torch.nn.functional.avg_pool2d, cfg, kwargs, dtype, seed,
                picks, abs_inputs=True)


# -- empty tensors: a zero in each axis in turn ----------------------------------------------
# op -> (shapes of x, w, b; keyword arguments; axis name -> the (array, axis) pairs it zeroes)
EMPTY_CASES = {
    "conv2d": (dict(x=(2, 16, 8, 8), w=(32, 16, 3, 3), b=(32,)), dict(padding=1),
               {"batch": [("x", 0)], "channels": [("x", 1), ("w", 1)], "height": [("x", 2)],
                "width": [("x", 3)], "filters": [("w", 0), ("b", 0)],
                "kernel height": [("w", 2)], "kernel width": [("w", 3)]}),
    "conv1d": (dict(x=(2, 16, 8), w=(32, 16, 3), b=(32,)), dict(padding=1),
               {"batch": [("x", 0)], "channels": [("x", 1), ("w", 1)], "length": [("x", 2)],
                "filters": [("w", 0), ("b", 0)], "kernel": [("w", 2)]}),
    "conv_transpose2d": (dict(x=(2, 16, 8, 8), w=(16, 8, 3, 3), b=(8,)),
                         dict(padding=1, stride=2, output_padding=1),
                         {"batch": [("x", 0)], "channels": [("x", 1), ("w", 0)],
                          "height": [("x", 2)], "width": [("x", 3)],
                          "filters": [("w", 1), ("b", 0)], "kernel height": [("w", 2)],
                          "kernel width": [("w", 3)]}),
    "max_pool2d": (dict(x=(2, 3, 6, 6)), dict(kernel_size=3, stride=2, padding=1),
                   {"batch": [("x", 0)], "channels": [("x", 1)], "height": [("x", 2)],
                    "width": [("x", 3)]}),
    "avg_pool2d": (dict(x=(2, 3, 6, 6)), dict(kernel_size=3, stride=2, padding=1),
                   {"batch": [("x", 0)], "channels": [("x", 1)], "height": [("x", 2)],
                    "width": [("x", 3)]}),
}
CONV_OPS = ("conv2d", "conv1d", "conv_transpose2d")


def _empty_cases():
    """(op, axis, path, form): the convolutions on every kernel path in its serial and
    parallel forms (tests/ops/test_pool.py covers the pooling forms on an empty batch)."""
    for op, (_, _, axes) in EMPTY_CASES.items():
        for axis in axes:
            if op not in CONV_OPS:
                yield op, axis, None, None
                continue
            for path in PATHS:
                for form in ("serial", "parallel"):
                    yield op, axis, path, form


def _with_empty_axis(op: str, axis: str) -> tuple[list, dict]:
    """The op's inputs (x, w, b or x alone) with ``axis`` zeroed, and its kwargs."""
    shapes, kwargs, axes = EMPTY_CASES[op]
    shapes = {k: list(s) for k, s in shapes.items()}
    for name, i in axes[axis]:
        shapes[name][i] = 0
    rng = np.random.default_rng(24)
    return [rng.standard_normal(shapes[k]) for k in ("x", "w", "b") if k in shapes], kwargs


@pytest.mark.parametrize("op, axis, path, form", list(_empty_cases()))
def test_empty_axis_errors_or_zeros_as_torch(op, axis, path, form):
    """An error where PyTorch raises (naming the op), else PyTorch's shapes and values:
    empty outputs and input gradients, zero weight and bias gradients (never
    uninitialised memory). conv2d/conv1d with no input channels are the exception (see
    tests/ops/test_conv.py: test_no_input_channels_gives_the_bias): PyTorch returns an empty
    [N, 0, ...] output, nbgrad the bias in the shape of the definition."""
    torch = pytest.importorskip("torch")
    inputs, kwargs = _with_empty_axis(op, axis)
    ours, theirs = getattr(nb, op), getattr(torch.nn.functional, op)

    def run_ours():
        g = np.ones(ours(*inputs, **kwargs).shape)
        return _nb_results(lambda *t: ours(*t, **kwargs), inputs, g)
    with ExitStack() as stack:
        if path is not None:
            stack.enter_context(kernel_path(path))
            stack.enter_context(kernel_form(form))
        try:
            g = np.ones(theirs(*(torch.tensor(a) for a in inputs), **kwargs).shape)
        except RuntimeError:
            with pytest.raises(ValueError, match=f"^{op}: "):
                run_ours()
            return
        got = run_ours()
    if op in ("conv2d", "conv1d") and axis == "channels":
        b = inputs[2]
        np.testing.assert_array_equal(got[0], np.broadcast_to(
            b.reshape((-1,) + (1,) * (got[0].ndim - 2)), got[0].shape))
        return
    expected = _torch_results(lambda *t: theirs(*t, **kwargs), inputs, g)
    for a, e in zip(got, expected):
        assert a.shape == e.shape
        np.testing.assert_array_equal(a, e)
