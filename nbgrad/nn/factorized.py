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
            acc, w = "", None
            for k in range(n):
                u = f[f"factor{k}"]
                w = u if w is None else ceinsum(f"{acc}R,{letters[k]}R->{acc}{letters[k]}R",
                                                w, u)
                acc += letters[k]
            return ceinsum(f"{acc}R,R->{acc}", w, f["weights"])
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
        W: y[b, o, m] = sum_i x[b, i, m] W[i, o, m] (separable: x[b, i, m] W[i, m]).

        CP: t = sum_i x U_in[i, r]; t *= prod_d U_d[m_d, r]; y = sum_r lam_r U_out[o, r] t.
        Tucker: t[b, a, m] = sum_i x U_in; t <- sum_a t G (the core's in-rank); then the
        out factor and each mode factor contract their rank index, mode by mode.
        TT: the cores in sequence, the rank index carried along: in, out, modes."""
        f = self.factors(index)
        d = self.order - (1 if separable else 2)
        m = "xyz"[:d]
        if self.factorization == "cp":
            t = ceinsum(f"bi{m},iR->{'biR' if separable else 'bR'}{m}", x, f["factor0"])
            lead = "biR" if separable else "bR"
            first = 1 if separable else 2
            for j in range(d):
                t = ceinsum(f"{lead}{m},{m[j]}R->{lead}{m}", t, f[f"factor{first + j}"])
            if separable:
                return ceinsum(f"biR{m},R->bi{m}", t, f["weights"])
            t = ceinsum(f"bR{m},R->bR{m}", t, f["weights"])
            return ceinsum(f"bR{m},oR->bo{m}", t, f["factor1"])
        if self.factorization == "tucker":
            ranks = _RANK_LETTERS[:self.order]
            a = ranks[0]
            if separable:  # keep i: y[b, i, m] needs U_in[i, a] per channel
                t = ceinsum(f"bi{m},i{a}->bi{a}{m}", x, f["factor0"])
                lead, rest, first = "bi", ranks[1:], 1
            else:
                t = ceinsum(f"bi{m},i{a}->b{a}{m}", x, f["factor0"])
                lead, rest, first = "b", ranks[1:], 1
            t = ceinsum(f"{lead}{a}{m},{ranks}->{lead}{rest}{m}", t, f["core"])
            cur = rest
            if not separable:  # the out factor: its rank letter becomes o
                t = ceinsum(f"{lead}{cur}{m},o{cur[0]}->{lead}o{cur[1:]}{m}", t,
                            f["factor1"])
                lead, cur, first = "bo", cur[1:], 2
            for j in range(d):
                r = cur[0]
                cur = cur[1:]
                t = ceinsum(f"{lead}{r}{cur}{m},{m[j]}{r}->{lead}{cur}{m}", t,
                            f[f"factor{first + j}"])
            return t
        # TT: cores [r_k, s_k, r_{k+1}], r_0 = r_n = 1
        if separable:
            t = ceinsum(f"bi{m},XiB->biB{m}", x, f["factor0"])
            lead, first = "bi", 1
        else:
            t = ceinsum(f"bi{m},XiA->bA{m}", x, f["factor0"])
            t = ceinsum(f"bA{m},AoB->boB{m}", t, f["factor1"])
            lead, first = "bo", 2
        for j in range(d):
            t = ceinsum(f"{lead}A{m},A{m[j]}B->{lead}B{m}", t, f[f"factor{first + j}"])
        re, im = t
        return re.squeeze(2), im.squeeze(2)

    def extra_repr(self) -> str:
        return f"{self.factorization}, shape={self.shape}, rank={self.rank}"


__all__ = ["FactorizedTensor", "canonical_factorization", "cp_rank", "tucker_rank", "tt_rank"]
