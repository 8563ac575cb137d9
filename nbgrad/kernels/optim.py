"""Optimiser updates, one kernel call per step for all the parameters of a group (of one
dtype), and the per-chunk sums behind ``clip_grad_norm_``.

The multi-tensor layout (built by ``nbgrad.optim``):

* ``params``: a typed List of the parameters' flat views (``p._data.reshape(-1)``), so
  each update lands in the parameter's own array;
* ``grads``: the gradients of the parameters being updated, concatenated; element j of
  parameter i's gradient is ``grads[grad_start[i] + j]``;
* the optimiser state: one flat buffer per kind of state (exp_avg, exp_avg_sq, ...)
  holding every parameter of the group; element j of parameter i is
  ``buffer[state_start[i] + j]``. A state the options do not use is an empty array;
* per-parameter scalars (Adam's bias-corrected step size, Adagrad's decayed lr) in
  float64 arrays indexed by parameter;
* the work, in chunks of at most CHUNK elements of one parameter: chunk c covers elements
  ``chunk_begin[c]:chunk_end[c]`` of parameter ``chunk_param[c]`` (``chunk_work``). A
  parameter without a gradient has no chunk, so it and its state are not touched.

Each element is updated by one prange iteration, with the same operations in the serial
and the parallel form (no fastmath flags), so the bits do not depend on the thread
count. The formulas are those of PyTorch's single-tensor optimisers (torch/optim/sgd.py,
adam.py, rmsprop.py, adagrad.py), operation by operation in its order of evaluation:
every hyperparameter is rounded to the parameter dtype once, as PyTorch rounds a Python
scalar, and ``addcdiv(x, t1, t2, value=s)`` is ``x + s * t1 / t2`` left to right.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, typed

from ..runtime.jit import (
    CHUNK,
    PARALLEL_IEEE_DIV,
    PARALLEL_REASSOC,
    SERIAL,
    SERIAL_IEEE_DIV,
    njit_with_serial,
)

# What ``chunk_norm_partials`` reduces: sum |g|^p, max |g|, min |g|, count of g != 0.
NORM_POWER, NORM_MAX, NORM_MIN, NORM_COUNT = range(4)


# -- the work list --------------------------------------------------------------------------
@njit(**SERIAL)
def array_list(first):
    """A typed List holding ``first``. Built in a cached function: a typed List made from
    Python compiles its methods anew in every process (about a second)."""
    arrays = typed.List()
    arrays.append(first)
    return arrays


@njit(**SERIAL)
def append_array(arrays, a):
    arrays.append(a)


@njit(**SERIAL)
def chunk_work(sizes):
    """(chunk_param, chunk_begin, chunk_end): the elements of every parameter, of
    ``sizes[i]`` elements (0 for one not being updated), in chunks of at most CHUNK."""
    count = 0
    for i in range(sizes.size):
        count += (sizes[i] + CHUNK - 1) // CHUNK
    chunk_param = np.empty(count, np.int64)
    chunk_begin = np.empty(count, np.int64)
    chunk_end = np.empty(count, np.int64)
    c = 0
    for i in range(sizes.size):
        for begin in range(0, sizes[i], CHUNK):
            chunk_param[c] = i
            chunk_begin[c] = begin
            chunk_end[c] = min(begin + CHUNK, sizes[i])
            c += 1
    return chunk_param, chunk_begin, chunk_end


# -- element-wise pieces shared by the updates ----------------------------------------------
@njit(**SERIAL, inline="always")
def _lerp(start, end, weight, one_minus_weight):
    """torch.lerp: start + weight (end - start) for |weight| < 0.5, else
    end - (end - start)(1 - weight), so that it is exact at both ends."""
    if abs(weight) < 0.5:
        return start + weight * (end - start)
    return end - (end - start) * one_minus_weight


@njit(**SERIAL, inline="always")
def _maximum(a, b):
    """max(a, b), NaN where either is NaN (torch.maximum)."""
    return b if (b > a or b != b) else a


@njit(**SERIAL, inline="always")
def _step_direction(g, p, maximize, weight_decay):
    """The gradient the optimisers step along: -g when maximising, plus weight_decay * p
    (the L2 penalty) when weight_decay != 0."""
    d = -g if maximize else g
    if weight_decay != 0:
        d = d + weight_decay * p
    return d


# -- SGD ------------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _sgd_chunk(p, g, buf, fresh, lr, momentum, dampening, weight_decay, nesterov, maximize):
    """d = g (+ wd p); with momentum: buf = d on the first step, else
    buf = momentum buf + (1 - dampening) d; d = d + momentum buf (nesterov) or buf;
    p = p - lr d."""
    t = p.dtype.type
    neg_lr = t(-lr)
    mom = t(momentum)
    keep = t(1.0 - dampening)
    wd = t(weight_decay)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, wd)
        if momentum != 0:
            b = d if fresh else buf[j] * mom + keep * d
            buf[j] = b
            d = d + mom * b if nesterov else b
        p[j] = p[j] + neg_lr * d


@njit_with_serial(**PARALLEL_IEEE_DIV)
def sgd_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
             momentum_buffer, fresh, lr, momentum, dampening, weight_decay, nesterov,
             maximize):
    """SGD on every chunk; ``fresh[i]``: parameter i has no momentum buffer yet."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _sgd_chunk(params[i][a:a + n], grads[g:g + n], momentum_buffer[s:s + n], fresh[i],
                   lr, momentum, dampening, weight_decay, nesterov, maximize)


# -- Adam's moments, shared by Adam, AdamW, NAdam and RAdam ---------------------------------
@njit(**SERIAL, inline="always")
def _moment_weights(p, beta1, beta2):
    """(1 - beta1, beta1 as 1 - (1 - beta1), beta2, 1 - beta2) in p's dtype."""
    t = p.dtype.type
    w1 = t(1.0 - beta1)
    return w1, t(1) - w1, t(beta2), t(1.0 - beta2)


@njit(**SERIAL, inline="always")
def _update_moments(exp_avg, exp_avg_sq, j, d, w1, one_minus_w1, b2, w2):
    """m = lerp(m, d, 1 - beta1) and v = beta2 v + (1 - beta2) d^2 at element j, stored;
    returns (m, v)."""
    m = _lerp(exp_avg[j], d, w1, one_minus_w1)
    v = exp_avg_sq[j] * b2 + w2 * d * d
    exp_avg[j] = m
    exp_avg_sq[j] = v
    return m, v


# -- Adam, AdamW ----------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _adam_chunk(p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, bias_correction2_sqrt,
                lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled):
    """d = g (+ wd p unless decoupled); p = (1 - lr wd) p when decoupled (AdamW);
    m = lerp(m, d, 1 - beta1); v = beta2 v + (1 - beta2) d^2; vmax = max(vmax, v);
    p = p - step_size m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps), with
    step_size = lr / (1 - beta1^t)."""
    t = p.dtype.type
    w1, one_minus_w1, b2, w2 = _moment_weights(p, beta1, beta2)
    epsilon = t(eps)
    neg_step = t(-step_size)
    bc2 = t(bias_correction2_sqrt)
    l2 = t(0) if decoupled else t(weight_decay)
    shrink = t(1.0 - lr * weight_decay) if decoupled else t(1)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, l2)
        m, v = _update_moments(exp_avg, exp_avg_sq, j, d, w1, one_minus_w1, b2, w2)
        if amsgrad:
            v = _maximum(max_exp_avg_sq[j], v)
            max_exp_avg_sq[j] = v
        p[j] = p[j] * shrink + neg_step * m / (np.sqrt(v) / bc2 + epsilon)


@njit_with_serial(**PARALLEL_IEEE_DIV)
def adam_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
              exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, bias_correction2_sqrt, lr,
              beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled):
    """Adam (AdamW when ``decoupled``) on every chunk; ``step_size[i]`` and
    ``bias_correction2_sqrt[i]`` from parameter i's step count."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _adam_chunk(params[i][a:a + n], grads[g:g + n], exp_avg[s:s + n],
                    exp_avg_sq[s:s + n], max_exp_avg_sq[s:s + n], step_size[i],
                    bias_correction2_sqrt[i], lr, beta1, beta2, eps, weight_decay, amsgrad,
                    maximize, decoupled)


# -- RMSprop --------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _rmsprop_chunk(p, g, square_avg, momentum_buffer, grad_avg, lr, alpha, eps, weight_decay,
                   momentum, centered, maximize):
    """d = g (+ wd p); s = alpha s + (1 - alpha) d^2; centered: a = lerp(a, d, 1 - alpha),
    r = sqrt(s - a^2) + eps, else r = sqrt(s) + eps; with momentum:
    buf = momentum buf + d / r, p = p - lr buf; else p = p - lr d / r."""
    t = p.dtype.type
    a_ = t(alpha)
    w = t(1.0 - alpha)
    one_minus_w = t(1) - w
    epsilon = t(eps)
    mom = t(momentum)
    neg_lr = t(-lr)
    wd = t(weight_decay)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, wd)
        s = square_avg[j] * a_ + w * d * d
        square_avg[j] = s
        if centered:
            mean = _lerp(grad_avg[j], d, w, one_minus_w)
            grad_avg[j] = mean
            root = np.sqrt(s + -mean * mean) + epsilon
        else:
            root = np.sqrt(s) + epsilon
        if momentum > 0:
            buf = momentum_buffer[j] * mom + d / root
            momentum_buffer[j] = buf
            p[j] = p[j] + neg_lr * buf
        else:
            p[j] = p[j] + neg_lr * d / root


@njit_with_serial(**PARALLEL_IEEE_DIV)
def rmsprop_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
                 square_avg, momentum_buffer, grad_avg, lr, alpha, eps, weight_decay,
                 momentum, centered, maximize):
    """RMSprop on every chunk."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _rmsprop_chunk(params[i][a:a + n], grads[g:g + n], square_avg[s:s + n],
                       momentum_buffer[s:s + n], grad_avg[s:s + n], lr, alpha, eps,
                       weight_decay, momentum, centered, maximize)


# -- Adagrad --------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _adagrad_chunk(p, g, state_sum, clr, eps, weight_decay, maximize):
    """d = g (+ wd p); sum = sum + d^2; p = p - clr d / (sqrt(sum) + eps), with
    clr = lr / (1 + (t - 1) lr_decay)."""
    t = p.dtype.type
    neg_clr = t(-clr)
    epsilon = t(eps)
    wd = t(weight_decay)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, wd)
        s = state_sum[j] + d * d
        state_sum[j] = s
        p[j] = p[j] + neg_clr * d / (np.sqrt(s) + epsilon)


@njit_with_serial(**PARALLEL_IEEE_DIV)
def adagrad_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
                 state_sum, clr, eps, weight_decay, maximize):
    """Adagrad on every chunk; ``clr[i]``: parameter i's decayed learning rate."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _adagrad_chunk(params[i][a:a + n], grads[g:g + n], state_sum[s:s + n], clr[i], eps,
                       weight_decay, maximize)


# -- gradient norms -------------------------------------------------------------------------
@njit(**SERIAL, inline="always")
def _chunk_norm(g, kind, p):
    """One chunk's sum |g|^p (NORM_POWER; p = 1 and 2 without a pow call), max |g|, min |g|
    (NaN if the chunk holds a NaN) or number of non-zeros, in float64."""
    if kind == NORM_POWER and p == 2.0:
        acc = 0.0
        for j in range(g.size):
            x = np.float64(g[j])
            acc += x * x
    elif kind == NORM_POWER and p == 1.0:
        acc = 0.0
        for j in range(g.size):
            acc += abs(np.float64(g[j]))
    elif kind == NORM_POWER:
        acc = 0.0
        for j in range(g.size):
            acc += abs(np.float64(g[j])) ** p
    elif kind == NORM_COUNT:
        acc = 0.0
        for j in range(g.size):
            if g[j] != 0:
                acc += 1.0
    else:
        acc = 0.0 if kind == NORM_MAX else np.inf
        for j in range(g.size):
            x = abs(np.float64(g[j]))
            if x != x:
                return x
            if (x > acc) if kind == NORM_MAX else (x < acc):
                acc = x
    return acc


@njit_with_serial(**PARALLEL_REASSOC)
def chunk_norm_partials(grads, chunk_begin, chunk_end, kind, p):
    """For every chunk of the flat ``grads`` (ranges ``chunk_begin[c]:chunk_end[c]``,
    fixed by the shapes), its sum |g|^p, max, min or non-zero count in float64 (the
    chunks of one gradient are then combined in order, so the bits do not depend on the
    thread count; sums are vectorised in an order fixed by the vector width)."""
    out = np.empty(chunk_begin.size, np.float64)
    for c in prange(chunk_begin.size):
        out[c] = _chunk_norm(grads[chunk_begin[c]:chunk_end[c]], kind, p)
    return out
