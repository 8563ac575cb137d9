"""The convolution ops' plan (nbgrad/ops/conv_plan.py): the kernel family it picks for a
layer, that a training step picks it once, the im2col matrices a 'cols' forward keeps,
and the same bits from every form and slot count of the kernels it runs."""

import numpy as np
import pytest
from conftest import (
    PATHS,
    assert_same_bits,
    at_threads,
    conv_all_grads,
    kernel_form,
    kernel_path,
)

import nbgrad as nb
from nbgrad.kernels import conv_cols
from nbgrad.ops import conv as conv_ops
from nbgrad.ops import conv_plan


def _same_3x3(w_shape, out_hw):
    """The geometry of a stride-1 layer with a 3x3 kernel and padding 1."""
    return conv_plan.conv_geometry((1, 1), (1, 1, 1, 1), (1, 1), 1, w_shape[2:], out_hw)


def test_small_map_paths():
    """Stride 1 with 16 filters or more takes 'cols' on maps of up to 8x8 whatever its taps
    (ops/conv_plan.py: COLS_S1_MAX_MAP); the span kernels on a 10x10 map with few taps or
    with fewer filters."""
    for w_shape, out_hw, path in [((16, 1, 3, 3), (8, 8), "cols"),
                                  ((16, 1, 3, 3), (10, 10), "s1"),
                                  ((8, 3, 3, 3), (8, 8), "s1")]:
        assert conv_plan.shape_path(w_shape, _same_3x3(w_shape, out_hw)) == path


@pytest.mark.parametrize("op, xs, ws, kw", [
    ("conv2d", (4, 1, 8, 8), (16, 1, 3, 3), dict(padding=1)),  # cols
    ("conv2d", (2, 3, 12, 12), (8, 3, 3, 3), dict(padding=1)),  # s1, one-pass backward
    ("conv2d", (2, 16, 12, 12), (32, 16, 3, 3), dict(padding=1)),  # gemm, shifted planes
    ("conv2d", (2, 4, 9, 9), (4, 2, 2, 2), dict(stride=2, groups=2)),  # direct
    ("conv1d", (2, 3, 11), (4, 3, 3), dict(stride=2)),
    ("conv_transpose2d", (2, 8, 5, 5), (8, 4, 3, 3), dict(stride=2, padding=1)),
])
def test_a_training_step_chooses_its_kernels_once(monkeypatch, op, xs, ws, kw):
    """Forward and backward with input and weight gradients: the node's forward chooses
    its kernel families, once; its backward reads the plan."""
    calls = []
    choose = conv_plan.choose_paths

    def counted(*args):
        calls.append(args)
        return choose(*args)
    monkeypatch.setattr(conv_plan, "choose_paths", counted)
    rng = np.random.default_rng(1)
    x = nb.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=True)
    w = nb.tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
    y = getattr(nb, op)(x, w, **kw)
    assert len(calls) == 1
    y.backward(np.ones(y.shape, np.float32))
    assert len(calls) == 1
    assert x.grad.shape == x.shape and w.grad.shape == w.shape


def _plan(x, w_shape, out_hw, needs_w):
    """The plan of a stride-1 3x3 conv2d of x (padding 1) whose w needs a gradient or not."""
    return conv_plan.plan_conv(x.shape[0], x.shape[2:], w_shape, _same_3x3(w_shape, out_hw),
                               x.dtype, grads=(False, needs_w))


def test_conv2d_keeps_the_im2col_matrices_only_for_a_weight_gradient_it_can_feed():
    """cols_to_keep: a buffer on the 'cols' path for the taps-first and dots forms within
    COLS_KEEP_MAX_BYTES; none for filters-first, other paths or too many bytes; and the
    op keeps one only when w needs a gradient, whose value it then leaves unchanged."""
    x = np.zeros((64, 16, 8, 8), np.float32)
    kept = _plan(x, (32, 16, 3, 3), (8, 8), True).weight_grad.run.kept
    assert kept.shape == (16, 16 * 9 * 4 * 64) and kept.dtype == np.float32
    narrow = np.zeros((64, 32, 4, 4), np.float32)  # 4x4 maps: filters first
    assert conv_plan._weight_grad_form((64, 32, 3, 3), 1, narrow.dtype, 4) == \
        conv_cols.FILTERS_FIRST
    assert _plan(narrow, (64, 32, 3, 3), (4, 4), True).weight_grad.run.kept is None
    big = np.zeros((64, 16, 20, 20), np.float32)  # 400 positions: not 'cols'
    assert _plan(big, (32, 16, 3, 3), (20, 20), True).weight_grad.run.kept is None
    many = np.zeros((1024, 64, 8, 8), np.float32)  # 1024 * 576 * 64 * 4 bytes = 144 MiB
    assert _plan(many, (64, 64, 3, 3), (8, 8), True).weight_grad.run.kept is None
    rng = np.random.default_rng(25)
    x_np = rng.standard_normal((9, 16, 8, 8)).astype(np.float32)
    w_np = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    for needs_w in (True, False):
        w = nb.tensor(w_np, requires_grad=needs_w)
        y = nb.conv2d(nb.tensor(x_np, requires_grad=not needs_w), w, padding=1)
        assert (y.grad_fn.plan.forward.run.kept is not None) == needs_w
    y.sum().backward()
    w = nb.tensor(w_np, requires_grad=True)
    nb.conv2d(nb.tensor(x_np), w, padding=1).sum().backward()
    gathering = _plan(x_np, w_np.shape, (8, 8), False)
    assert gathering.weight_grad.family == "cols" and gathering.weight_grad.run.kept is None
    want = conv_ops.conv2d_weight_grad(x_np, np.ones((9, 32, 8, 8), np.float32), gathering)
    assert_same_bits(w.grad.numpy(), want)


# -- serial and parallel forms, small maps, empty batch -------------------------------------
# digits-like small maps: 1 -> 16 channels on 8x8, 16 -> 32 on 4x4 (padding 1), and a
# strided 16 -> 8 on 6x6; batches that leave a partial block of images
SMALL_MAPS = [((37, 1, 8, 8), (16, 1, 3, 3), dict(padding=1)),
              ((37, 16, 4, 4), (32, 16, 3, 3), dict(padding=1)),
              ((21, 16, 6, 6), (8, 8, 3, 3), dict(stride=2, padding=1, groups=2))]


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, kw", SMALL_MAPS)
def test_small_maps_serial_parallel_and_threads_bitwise(path, xs, ws, kw):
    """On small maps every kernel gives the same bits in its serial form and in its
    parallel form at 1 and 2 threads, and matches the direct loop nests."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)

    def fn(x, w, b):
        return nb.conv2d(x, w, b, **kw)
    g = rng.standard_normal(fn(x, w, b).shape).astype(np.float32)
    with kernel_path(path):
        with kernel_form("serial"):
            serial = conv_all_grads(fn, x, w, b, g)
        with kernel_form("parallel"):
            one = at_threads(1, conv_all_grads, fn, x, w, b, g)
            two = at_threads(2, conv_all_grads, fn, x, w, b, g)
    with kernel_path("direct"):
        reference = conv_all_grads(fn, x.astype(np.float64), w.astype(np.float64),
                                    b.astype(np.float64), g.astype(np.float64))
    for s, a, c, r in zip(serial, one, two, reference):
        assert_same_bits(s, a)
        assert_same_bits(s, c)
        np.testing.assert_allclose(s, r, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("form", ["serial", "parallel"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("xs, ws, kw", SMALL_MAPS[1:])
def test_empty_batch_gives_zero_gradients(form, path, xs, ws, kw):
    """N = 0: empty outputs and input gradients, zero weight and bias gradients (never
    uninitialised memory), on every path and form, for conv2d and conv_transpose2d."""
    rng = np.random.default_rng(21)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[0]).astype(np.float32)
    x = np.zeros((0,) + xs[1:], np.float32)
    with kernel_path(path), kernel_form(form):
        y = nb.conv2d(x, w, b, **kw)
        y_np, dx, dw, db = conv_all_grads(lambda x, w, b: nb.conv2d(x, w, b, **kw), x, w, b,
                                           np.zeros(y.shape, np.float32))
        assert y_np.shape[0] == 0 and dx.shape == x.shape
        assert_same_bits(dw, np.zeros_like(w))
        assert_same_bits(db, np.zeros_like(b))
        u = np.zeros((0,) + (ws[0],) + xs[2:], np.float32)
        bt = rng.standard_normal(ws[1] * kw.get("groups", 1)).astype(np.float32)

        def tconv(u, w, b):
            return nb.conv_transpose2d(u, w, b, stride=kw.get("stride", 1),
                                       padding=kw["padding"], groups=kw.get("groups", 1))
        z = tconv(u, w, bt)
        _, du, dwt, dbt = conv_all_grads(tconv, u, w, bt, np.zeros(z.shape, np.float32))
        assert du.shape == u.shape
        assert_same_bits(dwt, np.zeros_like(w))
        assert_same_bits(dbt, np.zeros_like(bt))
