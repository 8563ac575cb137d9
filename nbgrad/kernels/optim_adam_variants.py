"""The updates of NAdam, RAdam and Adamax: one kernel call per step for all the parameters
of a group (of one dtype), in the multi-tensor layout of ``nbgrad.kernels.optim`` (flat
views of the parameters, gathered gradients, one flat buffer per kind of state, chunks of
at most CHUNK elements of one parameter, per-parameter scalars in float64 arrays).

As there, each element is updated by one prange iteration with the same operations in
the serial and the parallel form (no fastmath flags), so the bits do not depend on the
thread count, and the formulas are those of PyTorch's single-tensor optimisers
(torch/optim/nadam.py, radam.py, adamax.py) operation by operation: every scalar is
rounded to the parameter dtype once, as PyTorch rounds a Python scalar, and
``addcdiv(x, t1, t2, value=s)`` is ``x + s * t1 / t2`` left to right.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..runtime.jit import PARALLEL_IEEE_DIV, SERIAL_IEEE_DIV, njit_with_serial
from .optim import _lerp, _maximum, _moment_weights, _step_direction, _update_moments


# -- NAdam ----------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _nadam_chunk(p, g, exp_avg, exp_avg_sq, grad_coef, avg_coef, bias_correction2, lr, beta1,
                 beta2, eps, weight_decay, maximize, decoupled):
    """d = g (+ wd p unless decoupled); p = (1 - lr wd) p when decoupled;
    m = lerp(m, d, 1 - beta1); v = beta2 v + (1 - beta2) d^2;
    r = sqrt(v / (1 - beta2^t)) + eps; p = p + grad_coef d / r; p = p + avg_coef m / r,
    with grad_coef = -lr (1 - mu_t) / (1 - prod mu_1..t) and
    avg_coef = -lr mu_{t+1} / (1 - prod mu_1..t+1)."""
    t = p.dtype.type
    w1, one_minus_w1, b2, w2 = _moment_weights(p, beta1, beta2)
    epsilon = t(eps)
    bc2 = t(bias_correction2)
    c_grad = t(grad_coef)
    c_avg = t(avg_coef)
    l2 = t(0) if decoupled else t(weight_decay)
    shrink = t(1.0 - lr * weight_decay) if decoupled else t(1)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, l2)
        m, v = _update_moments(exp_avg, exp_avg_sq, j, d, w1, one_minus_w1, b2, w2)
        root = np.sqrt(v / bc2) + epsilon
        x = p[j] * shrink
        x = x + c_grad * d / root
        p[j] = x + c_avg * m / root


@njit_with_serial(**PARALLEL_IEEE_DIV)
def nadam_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
               exp_avg, exp_avg_sq, grad_coef, avg_coef, bias_correction2, lr, beta1, beta2,
               eps, weight_decay, maximize, decoupled):
    """NAdam on every chunk; ``grad_coef[i]``, ``avg_coef[i]`` and
    ``bias_correction2[i]`` from parameter i's step count and momentum product."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _nadam_chunk(params[i][a:a + n], grads[g:g + n], exp_avg[s:s + n],
                     exp_avg_sq[s:s + n], grad_coef[i], avg_coef[i], bias_correction2[i], lr,
                     beta1, beta2, eps, weight_decay, maximize, decoupled)


# -- RAdam ----------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _radam_chunk(p, g, exp_avg, exp_avg_sq, bias_correction1, bias_correction2_sqrt, rect,
                 lr, beta1, beta2, eps, weight_decay, maximize, decoupled):
    """d, m, v as in Adam; b = m / (1 - beta1^t); with the rectification (rect > 0,
    rho_t > 5): p = p - b lr (sqrt(1 - beta2^t) / (sqrt(v) + eps)) rect, else
    p = p - b lr."""
    t = p.dtype.type
    w1, one_minus_w1, b2, w2 = _moment_weights(p, beta1, beta2)
    epsilon = t(eps)
    bc1 = t(bias_correction1)
    bc2 = t(bias_correction2_sqrt)
    r = t(rect)
    rate = t(lr)
    rectified = rect > 0
    l2 = t(0) if decoupled else t(weight_decay)
    shrink = t(1.0 - lr * weight_decay) if decoupled else t(1)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, l2)
        m, v = _update_moments(exp_avg, exp_avg_sq, j, d, w1, one_minus_w1, b2, w2)
        x = p[j] * shrink
        if rectified:
            p[j] = x - m / bc1 * rate * (bc2 / (np.sqrt(v) + epsilon)) * r
        else:
            p[j] = x - m / bc1 * rate


@njit_with_serial(**PARALLEL_IEEE_DIV)
def radam_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
               exp_avg, exp_avg_sq, bias_correction1, bias_correction2_sqrt, rect, lr, beta1,
               beta2, eps, weight_decay, maximize, decoupled):
    """RAdam on every chunk; ``rect[i]``: parameter i's rectification term, 0 where
    rho_t <= 5 (the un-adapted step)."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _radam_chunk(params[i][a:a + n], grads[g:g + n], exp_avg[s:s + n],
                     exp_avg_sq[s:s + n], bias_correction1[i], bias_correction2_sqrt[i],
                     rect[i], lr, beta1, beta2, eps, weight_decay, maximize, decoupled)


# -- Adamax ---------------------------------------------------------------------------------
@njit(**SERIAL_IEEE_DIV, inline="always")
def _adamax_chunk(p, g, exp_avg, exp_inf, clr, beta1, beta2, eps, weight_decay, maximize):
    """d = g (+ wd p); m = lerp(m, d, 1 - beta1); u = max(beta2 u, |d| + eps) (NaN if
    either is); p = p - clr m / u, with clr = lr / (1 - beta1^t)."""
    t = p.dtype.type
    w1 = t(1.0 - beta1)
    one_minus_w1 = t(1) - w1
    b2 = t(beta2)
    epsilon = t(eps)
    neg_clr = t(-clr)
    wd = t(weight_decay)
    for j in range(p.size):
        d = _step_direction(g[j], p[j], maximize, wd)
        m = _lerp(exp_avg[j], d, w1, one_minus_w1)
        u = _maximum(exp_inf[j] * b2, abs(d) + epsilon)
        exp_avg[j] = m
        exp_inf[j] = u
        p[j] = p[j] + neg_clr * m / u


@njit_with_serial(**PARALLEL_IEEE_DIV)
def adamax_step(params, grads, grad_start, chunk_param, chunk_begin, chunk_end, state_start,
                exp_avg, exp_inf, clr, beta1, beta2, eps, weight_decay, maximize):
    """Adamax on every chunk; ``clr[i]``: parameter i's bias-corrected learning rate."""
    for c in prange(chunk_param.size):
        i = chunk_param[c]
        a, n = chunk_begin[c], chunk_end[c] - chunk_begin[c]
        g, s = grad_start[i] + a, state_start[i] + a
        _adamax_chunk(params[i][a:a + n], grads[g:g + n], exp_avg[s:s + n],
                      exp_inf[s:s + n], clr[i], beta1, beta2, eps, weight_decay, maximize)
