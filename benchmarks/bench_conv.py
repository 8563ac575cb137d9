"""Convolution and pooling workloads W5a-W5e: forward + backward (every input's gradient),
float32, nbgrad vs PyTorch CPU. W5e is a 1x1 convolution (an FNO's lifting, projection
and skip layers), one matrix product per image (kernels/conv_pointwise.py)."""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

# name, x shape, w shape (None for pooling), op keyword arguments, target
WORKLOADS = [
    ("W5a conv2d 8x16x64x64->32 k3 s2 d2 p1", (8, 16, 64, 64), (32, 16, 3, 3),
     dict(stride=2, padding=1, dilation=2), "<=1.5x"),
    ("W5b conv2d 16x32x32x32->64 k3 p1", (16, 32, 32, 32), (64, 32, 3, 3),
     dict(stride=1, padding=1), "<=1.5x"),
    ("W5c depthwise conv2d 8x64x56x56 k3 p1", (8, 64, 56, 56), (64, 1, 3, 3),
     dict(padding=1, groups=64), "<=1.0x"),
    ("W5d max_pool2d k2 s2 16x64x64x64", (16, 64, 64, 64), None,
     dict(kernel_size=2, stride=2), "<=1.0x"),
    ("W5e conv2d 1x1 32x32x64x64->128", (32, 32, 64, 64), (128, 32, 1, 1), {}, "<=1.0x"),
]


def _arrays(x_shape, w_shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    if w_shape is None:
        return x, None, None
    w = rng.standard_normal(w_shape, dtype=np.float32) / np.float32(np.sqrt(np.prod(w_shape[1:])))
    return x, w, rng.standard_normal(w_shape[0], dtype=np.float32)


def _nbgrad_step(x, w, b, kwargs):
    leaves = [nb.tensor(a, requires_grad=True) for a in (x, w, b) if a is not None]
    op = nb.max_pool2d if w is None else nb.conv2d
    g = np.random.default_rng(1).standard_normal(op(*leaves, **kwargs).shape,
                                                 dtype=np.float32)

    def step():
        for t in leaves:
            t.grad = None
        op(*leaves, **kwargs).backward(g)
    return step


def _torch_step(torch, x, w, b, kwargs):
    leaves = [torch.tensor(a, requires_grad=True) for a in (x, w, b) if a is not None]
    F = torch.nn.functional
    op = F.max_pool2d if w is None else F.conv2d
    g = torch.tensor(np.random.default_rng(1).standard_normal(
        tuple(op(*leaves, **kwargs).shape), dtype=np.float32))

    def step():
        for t in leaves:
            t.grad = None
        op(*leaves, **kwargs).backward(g)
    return step


def run(torch) -> list[Row]:
    rows = []
    for name, x_shape, w_shape, kwargs, target in WORKLOADS:
        x, w, b = _arrays(x_shape, w_shape)
        nb_s, torch_s = paired_times(
            _nbgrad_step(x, w, b, kwargs),
            None if torch is None else _torch_step(torch, x, w, b, kwargs))
        rows.append(Row(name, nb_s, torch_s, target, "fwd+bwd float32"))
    return rows
