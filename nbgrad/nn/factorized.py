"""Factorised complex tensors for spectral weights (tensorly / tltorch's CP, Tucker and
tensor-train forms, as neuraloperator's ``SpectralConv(factorization=...)`` uses them).

A complex tensor W of ``shape`` (s_0, .., s_{n-1}) (for SpectralConv [in, out, *modes] or,
separable, [in, *modes]) is held as factors, each a complex parameter stored as a
``*_real``/``*_imag`` pair:

    CP      W[j_0..] = sum_r lam_r prod_k U_k[j_k, r]              lam [R], U_k [s_k, R]
    Tucker  W[j_0..] = sum_{a} G[a_0..] prod_k U_k[j_k, a_k]        G [r_0..], U_k [s_k, r_k]
    TT      W[j_0..] = G_0[0, j_0, :] G_1[:, j_1, :] .. G_{n-1}[:, j_{n-1}, 0]
                                                                    G_k [r_k, s_k, r_{k+1}]

Ranks from ``rank`` as tensorly computes them: a float in (0, 1] is the fraction of the
dense parameter count prod(shape) to keep (CP: R = round(f prod(s) / sum(s)); Tucker:
r_k = max(1, round(s_k x)) with x the root of prod(s) x^n' + sum'(s_k^2) x + sum_fixed(s^2)
= f prod(s), n' and sum' over the modes not in ``fixed_rank_modes``, whose ranks stay
s_k; TT: r_k = max(1, round(x (s_{k-1} + s_k) / 2)) from the quadratic in x that the
core sizes make); an int is the rank of every mode (CP: R; TT: the inner ranks).

Initialisation (``normal_(std)``) as tltorch's, so that each entry of W is ~ CN(0, std^2)
in distribution at start: factors CN(0, sigma^2) (real and imaginary parts each
N(0, sigma^2 / 2)) with sigma = (std / sqrt(R))^(1/n) and lam = 1 (CP),
sigma = (std / prod_k sqrt(r_k))^(1/(n+1)) (Tucker), sigma = (std / sqrt(prod_k r_k))^(1/n)
(TT; tltorch divides by prod r_k, not its square root, which leaves W's std below std).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ops._args import is_int
from ..ops.einsum import einsum
from ..ops.elementwise import mul
from ..ops.matmul import matmul
from ..ops.shape import concat, permute, reshape, unsqueeze
from ..ops.spectral_parts import ComplexBlock
from ..tensor import Tensor
from . import init
from .module import Module
from .parameter import Parameter

FACTORIZATIONS = ("cp", "tucker", "tt")
Complex = tuple[Tensor, Tensor]
_RANK_LETTERS = "ABCDEFGHIJKLMNOP"


def canonical_factorization(owner: str, factorization: Any) -> str | None:
    """None (dense) or 'cp' / 'tucker' / 'tt' from the reference's spellings (any case,
    an optional 'Complex' prefix, 'Dense' = None); ValueError naming ``owner`` else."""
    if factorization is None:
        return None
    if isinstance(factorization, str):
        name = factorization.lower()
        name = name[len("complex"):] if name.startswith("complex") else name
        if name == "dense":
            return None
        if name in FACTORIZATIONS:
            return name
    raise ValueError(f"{owner}: factorization must be None, 'Dense', 'CP', 'Tucker' or 'TT' "
                     f"(any case), got {factorization!r}")


def _round(v: float) -> int:
    return int(np.round(v))  # numpy's round half to even, as tensorly's rounding='round'


def cp_rank(shape: Sequence[int], rank: float | int) -> int:
    """tensorly's validate_cp_rank: R = round(f prod(s) / sum(s)) for a fraction f."""
    if is_int(rank):
        return int(rank)
    return _round(float(np.prod(shape)) * float(rank) / float(np.sum(shape)))


def tucker_rank(shape: Sequence[int], rank: float | int,
                fixed_modes: Sequence[int] | None = None) -> list[int]:
    """tensorly's validate_tucker_rank (the root by bisection instead of brentq)."""
    if is_int(rank):
        return [int(rank)] * len(shape)
    f = float(rank)
    n_param = float(np.prod(shape))
    fixed = sorted(set(int(m) % len(shape) for m in (fixed_modes or ())))
    free = [s for k, s in enumerate(shape) if k not in fixed]
    n_fixed = float(sum(shape[k] ** 2 for k in fixed))
    sq = float(sum(s * s for s in free))

    def fun(x: float) -> float:
        return n_param * x ** len(free) + sq * x + n_fixed - f * n_param

    lo, hi = 0.0, max(f, 1.0)
    if fun(lo) > 0:
        raise ValueError(f"rank={rank!r} is too small for the fixed modes {fixed} of a "
                         f"tensor of shape {tuple(shape)}")
    for _ in range(200):  # increasing in x >= 0: bisection to machine precision
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if fun(mid) < 0 else (lo, mid)
    x = 0.5 * (lo + hi)
    return [shape[k] if k in fixed else max(_round(shape[k] * x), 1)
            for k in range(len(shape))]


def tt_rank(shape: Sequence[int], rank: float | int) -> list[int]:
    """tensorly's validate_tt_rank (constant_rank=False): [1, r_1, .., r_{n-1}, 1]."""
    n = len(shape)
    if is_int(rank):
        return [1] + [int(rank)] * (n - 1) + [1]
    avg = [(shape[k] + shape[k + 1]) / 2 for k in range(n - 1)]
    if len(avg) > 1:
        a = sum(avg[k - 1] * shape[k] * avg[k] for k in range(1, n - 1))
    else:
        a = avg[0] ** 2 * shape[0]
    b = shape[0] * avg[0] + shape[-1] * avg[-1]
    c = -float(np.prod(shape)) * float(rank)
    x = (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)
    return [1] + [max(_round(d * x), 1) for d in avg] + [1]


# -- complex arithmetic on (re, im) pairs through real einsums ------------------------------
def ceinsum(eq: str, a: Complex, b: Complex) -> Complex:
    """einsum of two complex operands given as (re, im): (ar + i ai)(br + i bi)."""
    ar, ai = a
    br, bi = b
    return (einsum(eq, ar, br) - einsum(eq, ai, bi), einsum(eq, ar, bi) + einsum(eq, ai, br))


def cmatmul(a: Complex, b: Complex) -> Complex:
    """matmul of two complex operands given as (re, im) (batch dims broadcast), as one
    real GEMM: the smaller operand as a real 2 x 2 block, the other stacked,

        [[ar, -ai], [ai, ar]] @ [br; bi] = [re; im]   (rows), or
        [ar | ai] @ [[br, bi], [-bi, br]] = [re | im]   (columns),

    the four real products of the definition in one larger (faster) product."""
    ar, ai = a
    br, bi = b
    if ar.numel() <= br.numel():
        m = int(ar.shape[-2])
        left = ComplexBlock.apply(ar, -ai)  # [[ar, -ai], [ai, ar]]
        out = matmul(left, concat([br, bi], -2))
        return out[..., :m, :], out[..., m:, :]
    n = int(br.shape[-1])
    out = matmul(concat([ar, ai], -1), _block(b))
    return out[..., :n], out[..., n:]


def cmul(a: Complex, b: Complex) -> Complex:
    """Broadcast elementwise product of two complex operands given as (re, im)."""
    ar, ai = a
    br, bi = b
    return (mul(ar, br) - mul(ai, bi), mul(ar, bi) + mul(ai, br))


def _cmap(fn: Any, a: Complex) -> Complex:
    return fn(a[0]), fn(a[1])


def _t2(a: Tensor) -> Tensor:
    return permute(a, (1, 0))


def _block(w: Complex) -> Tensor:
    """[.., c, c'] complex -> the real [.., 2c, 2c'] block [[re, im], [-im, re]], so that
    [xr | xi] @ block = [xr re - xi im | xr im + xi re] (a complex product)."""
    return ComplexBlock.apply(*w)


def _cshape(a: Complex, shape: tuple) -> Complex:
    return reshape(a[0], shape), reshape(a[1], shape)


def _tucker_modes(core: Complex, mode_factors: list[Complex], n_lead: int) -> Complex:
    """K[M, P] = sum_c G[p, c_1 .. c_d] prod_j U_j[m_j, c_j] (P = the n_lead channel
    ranks flattened): G permuted to [c_1 .. c_d, P], then for j = d .. 1 the GEMM
    U_j [m_j, c_j] @ t [c_<j, c_j, m_>j P] -> [c_<j, m_j, m_>j P] (no permutes after the
    core's)."""
    order = core[0].ndim
    cs = [int(s) for s in core[0].shape[n_lead:]]
    p = math.prod(int(s) for s in core[0].shape[:n_lead])
    perm = tuple(range(n_lead, order)) + tuple(range(n_lead))
    t = _cmap(lambda a: permute(a, perm), core)
    right = p
    for j in reversed(range(len(cs))):
        left = math.prod(cs[:j])
        shape = (cs[j], right) if left == 1 else (left, cs[j], right)
        t = cmatmul(mode_factors[j], _cshape(t, shape))
        right *= int(mode_factors[j][0].shape[0])
    return _cmap(lambda a: reshape(a, (right // p, p)), t)


def _cp_modes(weights: Complex | None, mode_factors: list[Complex]) -> Complex:
    """K[M, R] = lam_R prod_j U_j[m_j, R] (lam = 1 when ``weights`` is None: the
    Khatri-Rao product), built factor by factor as broadcast products."""
    if weights is None:
        n, r = (int(s) for s in mode_factors[0][0].shape)
        t, mode_factors = _cshape(mode_factors[0], (n, 1, r)), mode_factors[1:]
    else:
        r, n = int(weights[0].shape[0]), 1
        t = _cshape(weights, (1, 1, r))
    for u in mode_factors:
        m = int(u[0].shape[0])
        t = cmul(t, _cshape(u, (1, m, r)))
        n *= m
        t = _cshape(t, (n, 1, r))
    return _cshape(t, (n, r))


def _tt_modes(mode_cores: list[Complex]) -> Complex:
    """Km[r, M] = G_1[r, m_1, :] G_2[:, m_2, :] .. G_d[:, m_d, 0], the last core first:
    t [r_j+1, m_>j] <- G_j [r_j m_j, r_j+1] @ t, then [r_j, m_j m_>j] (a view)."""
    last = mode_cores[-1]
    r, m = (int(s) for s in last[0].shape[:2])
    t = _cmap(lambda a: reshape(a, (r, m)), last)
    n = m
    for g in reversed(mode_cores[:-1]):
        r, m, r2 = (int(s) for s in g[0].shape)
        t = cmatmul(_cshape(g, (r * m, r2)), t)
        n *= m
        t = _cshape(t, (r, n))
    return t


class FactorizedTensor(Module):
    """A complex tensor of ``shape`` in CP, Tucker or TT form (see the module docstring);
    parameters ``weights_{real,imag}`` (CP), ``core_{real,imag}`` (Tucker) and
    ``factor{k}_{real,imag}``. ``owner`` names the layer in errors."""

    def __init__(self, shape: Sequence[int], factorization: str, rank: float | int = 1.0,
                 fixed_rank_modes: Sequence[int] | None = None, dtype: Any = np.float64,
                 owner: str = "FactorizedTensor") -> None:
        super().__init__()
        self.shape = tuple(int(s) for s in shape)
        self.factorization = canonical_factorization(owner, factorization)
        if self.factorization is None:
            raise ValueError(f"{owner}: a FactorizedTensor needs 'CP', 'Tucker' or 'TT', got "
                             f"{factorization!r}")
        n = self.order = len(self.shape)
        dt = np.dtype(dtype)
        if self.factorization == "cp":
            r = cp_rank(self.shape, rank)
            if r < 1:
                raise ValueError(f"{owner}: rank={rank!r} gives CP rank {r} for weights of "
                                 f"shape {self.shape}; raise it")
            self.rank = r
            self._pair("weights", (r,), dt)
            shapes = [(s, r) for s in self.shape]
        elif self.factorization == "tucker":
            self.rank = tucker_rank(self.shape, rank, fixed_rank_modes)
            self._pair("core", tuple(self.rank), dt)
            shapes = [(s, r) for s, r in zip(self.shape, self.rank)]
        else:
            self.rank = tt_rank(self.shape, rank)
            shapes = [(self.rank[k], self.shape[k], self.rank[k + 1]) for k in range(n)]
        for k, fs in enumerate(shapes):
            self._pair(f"factor{k}", fs, dt)

    def _pair(self, name: str, shape: tuple, dt: np.dtype) -> None:
        setattr(self, f"{name}_real", Parameter(np.zeros(shape, dt)))
        setattr(self, f"{name}_imag", Parameter(np.zeros(shape, dt)))

    def get(self, name: str) -> Complex:
        return getattr(self, f"{name}_real"), getattr(self, f"{name}_imag")

    def normal_(self, std: float, generator: Any = None) -> FactorizedTensor:
        """Factors ~ CN(0, sigma^2) so that W's entries have variance std^2 (module doc)."""
        n = self.order
        if self.factorization == "cp":
            sigma = (std / math.sqrt(self.rank)) ** (1.0 / n)
            init.ones_(self.weights_real)
            init.zeros_(self.weights_imag)
            names = [f"factor{k}" for k in range(n)]
        elif self.factorization == "tucker":
            sigma = (std / math.prod(math.sqrt(r) for r in self.rank)) ** (1.0 / (n + 1))
            names = ["core"] + [f"factor{k}" for k in range(n)]
        else:
            sigma = (std / math.sqrt(math.prod(self.rank))) ** (1.0 / n)
            names = [f"factor{k}" for k in range(n)]
        for name in names:
            for part in self.get(name):
                init.normal_(part, 0.0, sigma / math.sqrt(2.0), generator=generator)
        return self

    def factors(self, index: Sequence[slice] | None = None) -> dict[str, Complex]:
        """The factors, those of mode k restricted to ``index[k]`` (the reference's
        slicing of a factorised tensor: W[index] in the same form)."""
        out = {}
        if self.factorization == "cp":
            out["weights"] = self.get("weights")
        elif self.factorization == "tucker":
            out["core"] = self.get("core")
        for k in range(self.order):
            re, im = self.get(f"factor{k}")
            if index is not None:
                key = (index[k],) if self.factorization != "tt" else (slice(None), index[k])
                re, im = re[key], im[key]
            out[f"factor{k}"] = (re, im)
        return out

    def to_tensor(self, index: Sequence[slice] | None = None) -> Complex:
        """The dense W[index] as (re, im), built with ops (gradients reach every factor)."""
        f = self.factors(index)
        n = self.order
        letters = "abcdefgh"[:n]
        if self.factorization == "cp":
            # W = A B^T with A, B the Khatri-Rao products of the first h and the last n - h
            # factors (lam in A), h balancing their rows: never the [*shape, R] product
            us = [f[f"factor{k}"] for k in range(n)]
            dims = tuple(int(u[0].shape[0]) for u in us)
            h = min(range(1, n), key=lambda j: max(math.prod(dims[:j]), math.prod(dims[j:])))
            a = _cp_modes(f["weights"], us[:h])
            b = _cp_modes(None, us[h:])
            return _cshape(cmatmul(a, _cmap(_t2, b)), dims)
        if self.factorization == "tucker":
            ranks = _RANK_LETTERS[:n]
            w, cur = f["core"], list(ranks)
            for k in range(n):
                new = cur.copy()
                new[k] = letters[k]
                w = ceinsum(f"{''.join(cur)},{letters[k]}{ranks[k]}->{''.join(new)}", w,
                            f[f"factor{k}"])
                cur = new
            return w
        w = f["factor0"]  # [1, s_0, r_1]
        acc = letters[0]
        for k in range(1, n):
            w = ceinsum(f"X{acc}A,A{letters[k]}B->X{acc}{letters[k]}B", w, f[f"factor{k}"])
            acc += letters[k]
        re, im = w
        return re.reshape(re.shape[1:-1]), im.reshape(im.shape[1:-1])

    def contract(self, x: Complex, separable: bool, index: Sequence[slice] | None = None
                 ) -> Complex:
        """y = W[index] applied to the spectrum x [B, in, *modes] (re, im) without forming
        W: y[b, o, m] = sum_i x[b, i, m] W[i, o, m] (separable: y = x[b, i, m] W[i, m]).

        Every step is a (batched) GEMM, in the layout [M, B, channel] (M = prod(modes))
        so that the modes are the GEMM batch; a complex product is one real GEMM,
        [re | im] against a real 2 x 2 block (``_block``, ``cmatmul``):

        1. the mode kernel K[M, P], from the factors that carry the modes alone (batch
           free, <= P M entries): Tucker K = G x_d U_d (mode by mode), P = r_in r_out;
           CP K[m, R] = lam_R prod_d U_d[m_d, R], P = R; TT K[m, A, o] =
           sum_B G_1[A, o, B] (G_2 .. G_n)[B, m] (the mode cores chained first);
        2. the batch side, each step [M, B, c] -> [M, B, c'] (no intermediate holds two
           channel dims and the batch): Tucker x U_in, (x) K[m], (x) U_out^T, with U_in or
           U_out folded into K instead when that costs fewer multiplies (never both: that
           would be the dense W); CP (x U_in) * K[m] then U_out^T; TT (x G_0) K[m].

        Separable: W[i, m] = U_in K[m]^T (Tucker, CP; TT: G_0 chained with K), the size of
        one sample of x, then y = x * W.

        Bound: with C the largest channel dim or channel rank, no intermediate exceeds
        max(B, C) C M complex entries (Tucker, TT) or max(B, 1) C M (CP; C includes R);
        the work is linear in B (tests/nn/test_factorized_speed_shapes.py)."""
        modes = tuple(int(s) for s in x[0].shape[2:])
        n_b, n_i, n_m = int(x[0].shape[0]), int(x[0].shape[1]), math.prod(modes)
        if separable:
            f = self.factors(index)
            mode_factors = [f[f"factor{1 + j}"] for j in range(self.order - 1)]
            w = self._separable_weight(f, mode_factors)  # [i, M]
            xs = _cmap(lambda t: reshape(t, (n_b, n_i, n_m)), x)
            y = cmul(xs, _cmap(lambda t: unsqueeze(t, 0), w))
            return _cmap(lambda t: reshape(t, (n_b, n_i) + modes), y)
        # x [B, i, *modes] -> [M, B, 2i] = [re | im]: every batch-side step is then one
        # real GEMM with a block weight (see _block), not four and two adds
        t = concat([permute(reshape(a, (n_b, n_i, n_m)), (2, 0, 1)) for a in x], -1)
        t = self.contract_rows(t, index)
        # [M, B, 2o] -> [B, o, *modes] twice
        n_o = int(t.shape[2]) // 2
        return tuple(reshape(permute(h, (1, 2, 0)), (n_b, n_o) + modes)
                     for h in (t[..., :n_o], t[..., n_o:]))

    def contract_rows(self, t: Tensor, index: Sequence[slice] | None = None) -> Tensor:
        """``contract`` (not separable) on the modes as rows: t [M, B, 2i] = [re | im] of
        each mode (``ops.spectral_parts.rfftn_rows``' layout) -> [M, B, 2o]."""
        f = self.factors(index)
        d = self.order - 2
        mode_factors = [f[f"factor{2 + j}"] for j in range(d)]
        n_m, n_b, n_i = int(t.shape[0]), int(t.shape[1]), int(t.shape[2]) // 2
        if self.factorization == "tucker":
            u_in, u_out = f["factor0"], f["factor1"]
            r_in, r_out = self.rank[0], self.rank[1]
            k = _cshape(_tucker_modes(f["core"], mode_factors, 2), (n_m, r_in, r_out))
            n_o = int(u_out[0].shape[0])
            u_out_t = _cmap(_t2, u_out)  # [r_out, o]
            # multiplies of the three orders (the mode kernel is common to all)
            cost_none = n_m * n_b * (n_i * r_in + r_in * r_out + r_out * n_o)
            cost_in = n_m * (n_i * r_in * r_out + n_b * (n_i * r_out + r_out * n_o))
            cost_out = n_m * (r_in * r_out * n_o + n_b * (n_i * r_in + r_in * n_o))
            best = min(cost_none, cost_in, cost_out)
            if best == cost_none:
                steps = [u_in, k, u_out_t]
            elif best == cost_in:  # K'[m] = U_in K[m]: [M, i, r_out]
                steps = [cmatmul(u_in, k), u_out_t]
            else:  # K'[m] = K[m] U_out^T: [M, r_in, o]
                steps = [u_in, cmatmul(k, u_out_t)]
            for w in steps:
                t = matmul(t, _block(w))
        elif self.factorization == "cp":
            k = _cp_modes(f["weights"], mode_factors)  # [M, R]
            t = matmul(t, _block(f["factor0"]))  # [M, B, 2R]
            r = int(k[0].shape[1])
            t = cmul((t[..., :r], t[..., r:]), _cmap(lambda a: unsqueeze(a, 1), k))
            t = matmul(concat(list(t), -1), _block(_cmap(_t2, f["factor1"])))  # [M, B, 2o]
        else:
            g0 = _cmap(lambda a: a[0], f["factor0"])  # [i, A]
            g1 = f["factor1"]  # [A, o, B]
            r_a, n_o, r_b = (int(s) for s in g1[0].shape)
            km = _tt_modes(mode_factors)  # [B, M]
            # K[m, A, o] = sum_B Km[B, m] G_1[A, o, B]: [M, B] @ [B, A o]
            g1b = _cmap(lambda a: reshape(permute(a, (2, 0, 1)), (r_b, r_a * n_o)), g1)
            k = _cshape(cmatmul(_cmap(_t2, km), g1b), (n_m, r_a, n_o))
            t = matmul(matmul(t, _block(g0)), _block(k))
        return t

    def _separable_weight(self, f: dict[str, Complex], mode_factors: list[Complex]
                          ) -> Complex:
        """The separable weight W[i, M] = U_in K^T (Tucker, CP) or G_0 Km (TT)."""
        if self.factorization == "tucker":
            k = _tucker_modes(f["core"], mode_factors, 1)  # [M, r]
            return cmatmul(f["factor0"], _cmap(_t2, k))
        if self.factorization == "cp":
            k = _cp_modes(f["weights"], mode_factors)  # [M, R]
            return cmatmul(f["factor0"], _cmap(_t2, k))
        g0 = _cmap(lambda a: a[0], f["factor0"])  # [i, A]
        return cmatmul(g0, _tt_modes(mode_factors))

    def extra_repr(self) -> str:
        return f"{self.factorization}, shape={self.shape}, rank={self.rank}"


__all__ = ["FactorizedTensor", "canonical_factorization", "cmatmul", "cmul", "cp_rank",
           "tucker_rank", "tt_rank"]
