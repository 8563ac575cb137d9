"""Layer normalisation, batch normalisation and dropout kernels, forward and backward.

Layer norm works on the rows of a C-contiguous ``[R, D]`` array (the normalised dims
flattened), batch norm on the channels of a C-contiguous ``[N, C, S]`` array (the
spatial dims flattened; S = 1 for ``[N, C]`` input). With xhat = (x - mean) * rstd,
rstd = 1 / sqrt(var + eps), var the biased variance, M the count of one statistic:

    forward     y = xhat * w + b
    backward    dw = sum g * xhat,  db = sum g      (over the statistic's other axes)
                dx = rstd * (g w - sum(g w) / M - xhat * sum(g w xhat) / M)

the mean terms only where the statistics came from the batch (layer norm, batch norm
in training); with fixed statistics (batch norm in evaluation) dx = rstd * g * w.
Derivations: docs/derivations.md#normalisation-and-dropout.

Each ``prange`` iteration owns whole rows (layer norm forward), a block of rows with a
private partial of dw and db (layer norm backward; the partials are then added in block
order) or a block of whole channels (batch norm). Batch norm of [N, C] input (S = 1)
takes its channel sums in one serial pass over the rows instead, then gives each
iteration whole rows. The block counts depend on the shape alone, so every result is
bitwise the same at any thread count.

Row sums are taken in the array's dtype by the reassociated helpers of ``kernels/basics.py``
(vectorised, in an order fixed by the vector width). Batch norm accumulates a channel in
float64 (the per-image sums, or the values themselves when S = 1), because a channel may
hold millions of values.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..runtime.jit import (
    PARALLEL_IEEE_DIV_FMA,
    SERIAL,
    SERIAL_FMA,
    SERIAL_FUSED,
    SERIAL_IEEE_DIV,
    njit_with_serial,
)
from .basics import vector_sum

# Most row blocks (hence partial dw, db rows) of the layer norm backward: enough tasks for
# the threads, few enough that adding the partials costs little next to the rows.
MAX_PARTIALS = 64
# Most channel blocks (tasks) of the batch norm kernels on [N, C, S]: a block is
# contiguous in every image, so a task reads runs of (C / CHANNEL_BLOCKS) * S elements.
CHANNEL_BLOCKS = 64


# -- row helpers (serial; row sums reassociated, in the array's dtype) ---------------------


@njit(**SERIAL_FUSED)
def _centered_square_sum(a, mu):
    """sum_j (a[j] - mu)^2 (the two-pass variance: no cancellation of large means)."""
    acc = a.dtype.type(0)
    for j in range(a.size):
        d = a[j] - mu
        acc += d * d
    return acc


@njit(**SERIAL_FUSED)
def _weighted_grad_sums(g, x, w, mu, rs):
    """(sum_j g_j w_j, sum_j g_j w_j xhat_j) with xhat_j = (x_j - mu) rs: the two row
    sums of the normalisation backward."""
    s = x.dtype.type(0)
    sx = x.dtype.type(0)
    for j in range(x.size):
        gw = g[j] * w[j]
        s += gw
        sx += gw * ((x[j] - mu) * rs)
    return s, sx


@njit(**SERIAL_FUSED)
def _grad_sums(g, x, mu, rs):
    """(sum_j g_j, sum_j g_j xhat_j), xhat_j = (x_j - mu) rs."""
    s = x.dtype.type(0)
    sx = x.dtype.type(0)
    for j in range(x.size):
        s += g[j]
        sx += g[j] * ((x[j] - mu) * rs)
    return s, sx


@njit(**SERIAL_FMA)
def _input_grad_row(g, x, w, mu, rs, s, sx, dx):
    """dx_j = rs (g_j w_j - s - xhat_j sx): one row, given the row means s of g w and
    sx of g w xhat."""
    for j in range(x.size):
        dx[j] = rs * (g[j] * w[j] - s - (x[j] - mu) * rs * sx)


@njit(**SERIAL_FMA)
def _input_and_param_grad_row(g, x, w, mu, rs, s, sx, dx, dw, db):
    """``_input_grad_row``, and dw += g * xhat, db += g into a block's partials."""
    for j in range(x.size):
        xh = (x[j] - mu) * rs
        dx[j] = rs * (g[j] * w[j] - s - xh * sx)
        dw[j] += g[j] * xh
        db[j] += g[j]


@njit(**SERIAL)
def _add_partials(parts, out):
    """out[j] = sum_p parts[p, j], p in increasing order."""
    out[:] = 0
    for p in range(parts.shape[0]):
        row = parts[p]
        for j in range(out.size):
            out[j] += row[j]


# -- layer norm ------------------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def layer_norm_forward(x, w, b, eps, y, mean, rstd):
    """Row r of x [R, D]: mean[r], rstd[r] = 1 / sqrt(biased var + eps) and
    y[r] = (x[r] - mean[r]) rstd[r] w + b (w, b of size D; ones and zeros without them)."""
    t = x.dtype.type
    inv_d = t(1) / t(x.shape[1])
    e = t(eps)
    for r in prange(x.shape[0]):
        xr = x[r]
        yr = y[r]
        mu = vector_sum(xr) * inv_d
        rs = t(1) / np.sqrt(_centered_square_sum(xr, mu) * inv_d + e)
        mean[r] = mu
        rstd[r] = rs
        for j in range(xr.size):
            yr[j] = (xr[j] - mu) * rs * w[j] + b[j]
    return y


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def layer_norm_backward(g, x, w, mean, rstd, param_grads, dx, dw, db):
    """dx [R, D] from upstream g [R, D] (the row formula of the module docstring, M = D),
    and, when ``param_grads``, dw and db [D]: column sums of g * xhat and g, as partials
    of blocks of rows added in block order."""
    rows = x.shape[0]
    cols = x.shape[1]
    t = x.dtype.type
    inv_d = t(1) / t(cols)
    per_block = max(1, (rows + MAX_PARTIALS - 1) // MAX_PARTIALS)
    blocks = (rows + per_block - 1) // per_block
    dw_parts = np.empty((blocks, cols), x.dtype)   # written only when param_grads
    db_parts = np.empty((blocks, cols), x.dtype)
    for blk in prange(blocks):
        dwp = dw_parts[blk]
        dbp = db_parts[blk]
        if param_grads:
            for j in range(cols):
                dwp[j] = t(0)
                dbp[j] = t(0)
        for r in range(blk * per_block, min(rows, (blk + 1) * per_block)):
            gr = g[r]
            xr = x[r]
            dxr = dx[r]
            mu = mean[r]
            rs = rstd[r]
            s, sx = _weighted_grad_sums(gr, xr, w, mu, rs)
            if param_grads:
                _input_and_param_grad_row(gr, xr, w, mu, rs, s * inv_d, sx * inv_d, dxr,
                                          dwp, dbp)
            else:
                _input_grad_row(gr, xr, w, mu, rs, s * inv_d, sx * inv_d, dxr)
    if param_grads:
        _add_partials(dw_parts, dw)
        _add_partials(db_parts, db)
    return dx


# -- batch norm ----------------------------------------------------------------------------------


@njit(**SERIAL_IEEE_DIV)
def _block_mean_var(x, c0, c1, mean, var):
    """mean[c] and the biased var[c] of channels c0 <= c < c1 of x [N, C, S], two-pass,
    the per-image sums of a channel added in float64 (in image order)."""
    t = x.dtype.type
    count = x.shape[0] * x.shape[2]
    acc = np.zeros(c1 - c0)
    for n in range(x.shape[0]):
        for c in range(c0, c1):
            acc[c - c0] += vector_sum(x[n, c])
    for c in range(c0, c1):
        mean[c] = t(acc[c - c0] / count)
        acc[c - c0] = 0.0
    for n in range(x.shape[0]):
        for c in range(c0, c1):
            acc[c - c0] += _centered_square_sum(x[n, c], mean[c])
    for c in range(c0, c1):
        var[c] = t(acc[c - c0] / count)


@njit(**SERIAL_FMA)
def _block_normalize(x, w, b, mean, rstd, c0, c1, y):
    """y[n, c, s] = (x[n, c, s] - mean[c]) rstd[c] w[c] + b[c] for c0 <= c < c1."""
    for n in range(x.shape[0]):
        for c in range(c0, c1):
            xs = x[n, c]
            ys = y[n, c]
            mu = mean[c]
            k = rstd[c] * w[c]
            bc = b[c]
            for j in range(xs.size):
                ys[j] = (xs[j] - mu) * k + bc


@njit(**SERIAL_FMA)
def _channel_input_grad(g, x, mu, rs, k, ms, msx, dx):
    """dx_j = k (g_j - ms - xhat_j msx), k = rstd w of the channel, ms and msx the means
    of g and g xhat (0 with fixed statistics)."""
    for j in range(x.size):
        dx[j] = k * (g[j] - ms - (x[j] - mu) * rs * msx)


@njit(**SERIAL_IEEE_DIV)
def _block_backward(g, x, w, mean, rstd, batch_stats, c0, c1, dx, dw, db):
    """dw, db and dx of channels c0 <= c < c1 (``batch_norm_backward``): the sums of a
    channel are float64 sums of per-image sums, in image order."""
    t = x.dtype.type
    count = x.shape[0] * x.shape[2]
    s = np.zeros(c1 - c0)
    sx = np.zeros(c1 - c0)
    for n in range(x.shape[0]):
        for c in range(c0, c1):
            a, ax = _grad_sums(g[n, c], x[n, c], mean[c], rstd[c])
            s[c - c0] += a
            sx[c - c0] += ax
    for c in range(c0, c1):
        db[c] = t(s[c - c0])
        dw[c] = t(sx[c - c0])
        # the mean terms of dx, zero with fixed statistics
        s[c - c0] = s[c - c0] / count if batch_stats else 0.0
        sx[c - c0] = sx[c - c0] / count if batch_stats else 0.0
    for n in range(x.shape[0]):
        for c in range(c0, c1):
            _channel_input_grad(g[n, c], x[n, c], mean[c], rstd[c], rstd[c] * w[c],
                                t(s[c - c0]), t(sx[c - c0]), dx[n, c])


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def batch_norm_forward(x, w, b, batch_stats, eps, mean, var, rstd, y):
    """y[n, c, s] = (x[n, c, s] - mean[c]) rstd[c] w[c] + b[c] for x, y [N, C, S].
    With ``batch_stats`` the kernel writes each channel's mean and biased variance into
    mean and var; otherwise it reads them (running estimates). rstd[c] = 1 / sqrt(var[c]
    + eps) is written either way. Each task takes a block of channels."""
    t = x.dtype.type
    e = t(eps)
    channels = x.shape[1]
    per_block = max(1, (channels + CHANNEL_BLOCKS - 1) // CHANNEL_BLOCKS)
    for blk in prange((channels + per_block - 1) // per_block):
        c0 = blk * per_block
        c1 = min(channels, c0 + per_block)
        if batch_stats:
            _block_mean_var(x, c0, c1, mean, var)
        for c in range(c0, c1):
            rstd[c] = t(1) / np.sqrt(var[c] + e)
        _block_normalize(x, w, b, mean, rstd, c0, c1, y)
    return y


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def batch_norm_backward(g, x, w, mean, rstd, batch_stats, dx, dw, db):
    """dw[c] = sum g xhat and db[c] = sum g over (n, s), and dx = rstd w (g - db / M -
    xhat dw / M) with batch statistics (M = N S), or dx = rstd w g with fixed ones; in
    blocks of channels as the forward."""
    channels = x.shape[1]
    per_block = max(1, (channels + CHANNEL_BLOCKS - 1) // CHANNEL_BLOCKS)
    for blk in prange((channels + per_block - 1) // per_block):
        c0 = blk * per_block
        _block_backward(g, x, w, mean, rstd, batch_stats, c0, min(channels, c0 + per_block),
                        dx, dw, db)
    return dx


@njit(**SERIAL_IEEE_DIV)
def _column_mean_var(x, mean, var):
    """mean[c] and the biased var[c] of the columns of x [N, C] in one pass over the rows
    in memory order: Welford's update in float64, m <- m + (x - m) / n,
    M2 <- M2 + (x - m_old)(x - m_new), var = M2 / N (stable without a second pass)."""
    t = x.dtype.type
    m = np.zeros(x.shape[1])
    m2 = np.zeros(x.shape[1])
    for n in range(x.shape[0]):
        xr = x[n]
        inv = 1.0 / (n + 1)
        for c in range(xr.size):
            v = np.float64(xr[c])
            d = v - m[c]
            m[c] += d * inv
            m2[c] += d * (v - m[c])
    for c in range(m.size):
        mean[c] = t(m[c])
        var[c] = t(m2[c] / x.shape[0])


@njit(**SERIAL_IEEE_DIV)
def _column_grad_sums(g, x, mean, rstd):
    """(s, sx): s[c] = sum_n g[n, c] and sx[c] = sum_n g[n, c] xhat[n, c] over the rows of
    [N, C] in memory order, float64 sums."""
    s = np.zeros(x.shape[1])
    sx = np.zeros(x.shape[1])
    for n in range(x.shape[0]):
        gr = g[n]
        xr = x[n]
        for c in range(xr.size):
            gc = np.float64(gr[c])
            s[c] += gc
            sx[c] += gc * np.float64((xr[c] - mean[c]) * rstd[c])
    return s, sx


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def batch_norm_forward_columns(x, w, b, batch_stats, eps, mean, var, rstd, y):
    """``batch_norm_forward`` for x, y [N, C] (S = 1), where a block of channels would
    stride through memory one element per row: the statistics in one serial pass over the
    rows (``_column_mean_var``), then the rows in parallel."""
    t = x.dtype.type
    e = t(eps)
    if batch_stats:
        _column_mean_var(x, mean, var)
    scale = np.empty(x.shape[1], x.dtype)
    for c in range(scale.size):
        rstd[c] = t(1) / np.sqrt(var[c] + e)
        scale[c] = rstd[c] * w[c]
    for n in prange(x.shape[0]):
        xr = x[n]
        yr = y[n]
        for c in range(xr.size):
            yr[c] = (xr[c] - mean[c]) * scale[c] + b[c]
    return y


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def batch_norm_backward_columns(g, x, w, mean, rstd, batch_stats, dx, dw, db):
    """``batch_norm_backward`` for g, x, dx [N, C] (S = 1): the channel sums in one serial
    pass over the rows, then dx row by row in parallel."""
    t = x.dtype.type
    rows = x.shape[0]
    s, sx = _column_grad_sums(g, x, mean, rstd)
    scale = np.empty(x.shape[1], x.dtype)
    ms = np.empty(x.shape[1], x.dtype)
    msx = np.empty(x.shape[1], x.dtype)
    for c in range(scale.size):
        db[c] = t(s[c])
        dw[c] = t(sx[c])
        scale[c] = rstd[c] * w[c]
        # the mean terms of dx, zero with fixed statistics
        ms[c] = t(s[c] / rows) if batch_stats else t(0)
        msx[c] = t(sx[c] / rows) if batch_stats else t(0)
    for n in prange(rows):
        gr = g[n]
        xr = x[n]
        dxr = dx[n]
        for c in range(xr.size):
            dxr[c] = scale[c] * (gr[c] - ms[c] - (xr[c] - mean[c]) * rstd[c] * msx[c])
    return dx


# -- dropout ---------------------------------------------------------------------------------


@njit_with_serial(**PARALLEL_IEEE_DIV_FMA)
def masked_scale(v, keep, scale, out):
    """out[i] = v[i] * (scale if keep[i] else 0) over flat arrays: dropout's forward
    (v = x) and backward (v = g). A dropped inf or NaN gives NaN (v * 0), as PyTorch."""
    t = v.dtype.type
    s = t(scale)
    zero = t(0)
    for i in prange(v.size):
        out[i] = v[i] * (s if keep[i] else zero)
    return out
