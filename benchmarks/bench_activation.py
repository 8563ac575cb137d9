"""Activation, softmax and loss workloads (W2, W3, W2b, W2c, W2d): forward + backward,
float32, nbgrad vs PyTorch at the same thread count.

Each timing is one forward and one ``y.backward(g)`` with a precomputed upstream gradient
``g`` (a scalar loss for cross_entropy). Achieved bandwidth counts the bytes the two
passes must move at least (inputs read, outputs written; e.g. gelu: x and y forward,
g, x and dx backward) and is printed next to the bandwidth of a parallel copy/triad whose
arrays together hold the row's working set (the distinct arrays it touches, e.g. x, y, g
and dx: ``limits.bandwidth_at``), measured in the same run, which is also the row's
bound (``Row.working_set``): 64 MiB may run from a large last-level cache, faster
than the main-memory bandwidth the limits block prints. The main-memory copy bandwidth
follows in the note.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

import nbgrad as nb

from .harness import THREADS, Row, median_time, paired_times
from .limits import bandwidth_at

N_ELEMENTWISE = 4_000_000
SOFTMAX_SHAPE = (4096, 1024)
CE_SHAPE = (4096, 1000)


@njit(cache=True, parallel=True)
def _parallel_copy(src, dst):
    for i in prange(src.size):
        dst[i] = src[i]


def stream_copy_bandwidth(n_bytes: int = 256 * 2**20) -> float:
    """Bytes per second moved (read + written) by the better of two large copies."""
    src = np.ones(n_bytes // 4, np.float32)
    dst = np.empty_like(src)
    t_np = median_time(lambda: np.copyto(dst, src), repeats=5)
    t_nb = median_time(lambda: _parallel_copy(src, dst), repeats=5)
    return 2 * src.nbytes / min(t_np, t_nb)


def _elementwise(name, nb_fn, torch_fn, torch, n_bytes, copy_bw, target, rng):
    x = rng.standard_normal(N_ELEMENTWISE).astype(np.float32) * 3
    g = rng.standard_normal(N_ELEMENTWISE).astype(np.float32)
    # working set: x, y, g and dx
    return _row(name, nb_fn, torch_fn, torch, x, g, n_bytes, copy_bw, target,
                working_set=4 * x.nbytes)


def _row(name, nb_fn, torch_fn, torch, x, g, n_bytes, copy_bw, target, extra=(), *,
         working_set):
    xt = nb.tensor(x, requires_grad=True)

    def run_nb():
        xt.grad = None
        nb_fn(xt, *extra).backward(g)

    run_torch = None
    if torch is not None:
        xq = torch.tensor(x, requires_grad=True)
        gq = None if g is None else torch.tensor(g)
        extra_q = tuple(torch.tensor(e) if isinstance(e, np.ndarray) else e for e in extra)

        def run_torch():
            xq.grad = None
            torch_fn(xq, *extra_q).backward(gq)

    at_size = bandwidth_at(working_set, THREADS) * 1e9
    t_nb, t_torch = paired_times(run_nb, run_torch)
    bw = n_bytes / t_nb
    note = (f"{bw / 1e9:.1f} GB/s; {at_size / 1e9:.1f} GB/s at {working_set / 2**20:.0f} MiB, "
            f"copy {copy_bw / 1e9:.1f} GB/s at 256 MiB")
    return Row(name, t_nb, t_torch, target, note, bytes=n_bytes, working_set=working_set)


def run(torch) -> list[Row]:
    rng = np.random.default_rng(0)
    copy_bw = stream_copy_bandwidth()
    f = None if torch is None else torch.nn.functional
    n4 = N_ELEMENTWISE * 4
    # Each row's bytes (its "of bound" too) are the minimal bytes of forward + backward.
    rows = [
        # gelu: forward reads x, writes y (2 x 4n); backward reads g and x, writes dx
        # (3 x 4n): 5 x 4n
        _elementwise("W2 gelu (erf) fwd+bwd, 4M f32", nb.gelu,
                     None if f is None else f.gelu, torch, 5 * n4, copy_bw, "<=1.0x", rng),
        # tanh: forward reads x, writes y (2 x 4n); backward reads g and y, writes dx
        # (3 x 4n): 5 x 4n
        _elementwise("W3 tanh fwd+bwd, 4M f32", nb.tanh,
                     None if torch is None else torch.tanh, torch, 5 * n4, copy_bw,
                     "<=0.5x", rng),
        # silu: forward reads x, writes y (2 x 4n); backward reads g and x, writes dx
        # (3 x 4n): 5 x 4n
        _elementwise("W2b silu fwd+bwd, 4M f32", nb.silu,
                     None if f is None else f.silu, torch, 5 * n4, copy_bw, "<=1.0x", rng),
    ]
    x = rng.standard_normal(SOFTMAX_SHAPE).astype(np.float32) * 3
    g = rng.standard_normal(SOFTMAX_SHAPE).astype(np.float32)
    # softmax: forward reads x, writes y (2 x 16 MiB); backward reads g and y, writes dx
    # (3 x 16 MiB): 5 x x.nbytes (the row sums stay in registers); working set x, y, g, dx
    rows.append(_row("W2c softmax rows fwd+bwd, [4096,1024] f32", nb.softmax,
                     None if f is None else (lambda t: f.softmax(t, dim=-1)), torch, x, g,
                     5 * x.nbytes, copy_bw, "<=1.0x", working_set=4 * x.nbytes))
    logits = rng.standard_normal(CE_SHAPE).astype(np.float32) * 3
    target = rng.integers(0, CE_SHAPE[1], CE_SHAPE[0])
    # cross_entropy: forward reads the logits and the int64 targets (writes a scalar);
    # backward reads both again and writes dlogits: 3 x logits + 2 x targets bytes;
    # working set the logits, the targets and dlogits
    rows.append(_row("W2d cross_entropy fwd+bwd, [4096,1000] f32", nb.cross_entropy,
                     None if f is None else f.cross_entropy, torch, logits, None,
                     3 * logits.nbytes + 2 * target.nbytes, copy_bw, "<=1.0x",
                     extra=(target,), working_set=2 * logits.nbytes + target.nbytes))
    return rows
