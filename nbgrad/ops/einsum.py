"""einsum: Einstein summation over labelled dims (``torch.einsum``).

A composition of registered ops, so gradients and second derivatives come from them:

1. each operand alone: ``diagonal`` for a letter repeated within it (``'ii->i'``), then
   ``sum`` over the letters no other operand and not the output uses;
2. the operands contracted pairwise, left to right. A pair with a contracted letter (in
   both, needed by neither the rest nor the output) is a product routed to the GEMM:
   ``permute`` to [batch..., left..., contracted...] and [batch..., contracted...,
   right...], ``reshape`` to [batch..., M, K] @ [batch..., K, N] (``matmul`` broadcasts
   the batch letters), ``reshape`` back. A pair without one (an outer product, a
   Hadamard product) is a broadcast ``mul``; so is any pair of integer operands, since
   ``matmul`` takes floats only;
3. ``permute`` to the output's order.

PyTorch's equation rules: letters ``[a-zA-Z]``, spaces ignored, ``...`` for the dims no
letter names (right-aligned and broadcast across operands), an implicit output (no
``->``) made of the ellipsis dims then the letters seen once, in sorted (ASCII) order; a
letter's sizes across operands must agree or be 1 (broadcast); the ellipsis dims an
explicit output leaves out are summed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..tensor import Tensor, lift
from ._args import promoted_dtype
from .elementwise import mul
from .layout import diagonal
from .matmul import matmul
from .reduce import sum as _sum
from .shape import permute, reshape, unsqueeze

__all__ = ["einsum"]

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def _fail(equation: str, operands: Sequence[Tensor], message: str) -> ValueError:
    shapes = ", ".join(str(tuple(t.shape)) for t in operands)
    return ValueError(f"einsum: {message} (equation {equation!r}, operand shapes [{shapes}])")


def _term(equation: str, operands: Sequence[Tensor], term: str, what: str) -> list[str]:
    """The labels of one term: its letters, and ``'...'`` once for an ellipsis."""
    labels: list[str] = []
    i = 0
    while i < len(term):
        c = term[i]
        if c == ".":
            if term[i:i + 3] != "..." or "..." in labels:
                raise _fail(equation, operands, f"found '.' in {what} that is not part of "
                            "a single ellipsis '...'")
            labels.append("...")
            i += 3
            continue
        if c not in _LETTERS:
            raise _fail(equation, operands, f"invalid subscript {c!r} in {what}: "
                        "subscripts must be in [a-zA-Z]")
        labels.append(c)
        i += 1
    return labels


def _parse(equation: str, operands: Sequence[Tensor]
           ) -> tuple[list[list[str]], list[str], int]:
    """Each operand's labels (its ellipsis dims named by ints 0..E-1, right-aligned over
    the widest ellipsis E), the output's labels, and E."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    if "-" in rhs or ">" in rhs or "-" in lhs or ">" in lhs:
        raise _fail(equation, operands, "'->' must appear at most once and '-' / '>' only "
                    "as part of it")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise _fail(equation, operands, f"the equation has {len(terms)} input term(s) but "
                    f"{len(operands)} operand(s) were given")
    parsed = [_term(equation, operands, t, f"operand {k}") for k, t in enumerate(terms)]
    widths = []
    for k, (labels, t) in enumerate(zip(parsed, operands)):
        letters = len(labels) - ("..." in labels)
        if letters > t.ndim or ("..." not in labels and letters != t.ndim):
            raise _fail(equation, operands, f"operand {k} has {t.ndim} dims but its term "
                        f"{terms[k]!r} names {letters}"
                        + (" and no ellipsis" if "..." not in labels else " (plus ellipsis)"))
        widths.append(t.ndim - letters if "..." in labels else 0)
    width = max(widths, default=0)
    expanded = []
    for labels, w in zip(parsed, widths):
        out: list = []
        for label in labels:
            out.extend(range(width - w, width) if label == "..." else [label])
        expanded.append(out)
    if arrow:
        out_labels = _term(equation, operands, rhs, "the output")
        for c in out_labels:
            if c != "..." and out_labels.count(c) > 1:
                raise _fail(equation, operands, f"output subscript {c} appears more than once")
            if c != "..." and not any(c in labels for labels in parsed):
                raise _fail(equation, operands, f"output subscript {c} does not appear in "
                            "any input term")
        output: list = []
        for c in out_labels:
            output.extend(range(width) if c == "..." else [c])
    else:
        seen = [c for labels in parsed for c in labels if c != "..."]
        output = list(range(width)) + sorted(c for c in set(seen) if seen.count(c) == 1)
    return expanded, output, width


def _sizes(equation: str, operands: Sequence[Tensor], xs: list[Tensor], labels: list[list]
           ) -> None:
    """Every label's sizes agree or are 1 (they broadcast)."""
    sizes: dict = {}
    for k, (ls, t) in enumerate(zip(labels, xs)):
        for label, n in zip(ls, t.shape):
            seen = sizes.setdefault(label, n)
            if n != seen and 1 not in (n, seen):
                name = (f"subscript {label}" if isinstance(label, str)
                        else f"ellipsis dim {label}")
                raise _fail(equation, operands, f"{name} has size {n} in operand {k}, which "
                            f"does not broadcast with size {seen} seen before")
            if seen == 1:
                sizes[label] = n


def _distinct(equation: str, operands: Sequence[Tensor], k: int, x: Tensor, labels: list
              ) -> tuple[Tensor, list]:
    """``x`` with each repeated label taken along its diagonal (one dim per label)."""
    labels = list(labels)
    while True:
        repeated = next((c for c in labels if labels.count(c) > 1), None)
        if repeated is None:
            return x, labels
        d1 = labels.index(repeated)
        d2 = labels.index(repeated, d1 + 1)
        if x.shape[d1] != x.shape[d2]:
            raise _fail(equation, operands, f"subscript {repeated} is repeated for operand "
                        f"{k} but the sizes don't match, {x.shape[d1]} != {x.shape[d2]}")
        x = diagonal(x, 0, d1, d2)  # the diagonal becomes the last dim
        labels = [c for i, c in enumerate(labels) if i not in (d1, d2)] + [repeated]


def _sum_labels(x: Tensor, labels: list, drop: set, keepdim: bool = False
                ) -> tuple[Tensor, list]:
    dims = tuple(i for i, c in enumerate(labels) if c in drop)
    if not dims:
        return x, labels
    x = _sum(x, dim=dims, keepdim=keepdim)
    return x, labels if keepdim else [c for c in labels if c not in drop]


def _arrange(x: Tensor, labels: list, order: list) -> Tensor:
    """``x`` permuted so its labels read ``order`` (no copy when already so)."""
    perm = tuple(labels.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else permute(x, perm)


def _pair(a: Tensor, la: list, b: Tensor, lb: list, keep: set) -> tuple[Tensor, list]:
    """The contraction of ``a`` and ``b`` (labels distinct within each) over their shared
    labels not in ``keep``; the result's labels are batch, a's own, b's own."""
    a, la = _sum_labels(a, la, {c for c in la if c not in keep and c not in lb})
    b, lb = _sum_labels(b, lb, {c for c in lb if c not in keep and c not in la})
    batch = [c for c in la if c in lb and c in keep]
    inner = [c for c in la if c in lb and c not in keep]
    left = [c for c in la if c not in lb]
    right = [c for c in lb if c not in la]
    # a contracted label of size 1 on one side only: sum the other side over it first
    wide = {c for c in inner if a.shape[la.index(c)] != b.shape[lb.index(c)]}
    a, la = _sum_labels(a, la, {c for c in wide if a.shape[la.index(c)] != 1}, keepdim=True)
    b, lb = _sum_labels(b, lb, {c for c in wide if b.shape[lb.index(c)] != 1}, keepdim=True)
    floats = a.dtype.is_floating_point and b.dtype.is_floating_point
    if inner and floats:
        a = _arrange(a, la, batch + left + inner)
        b = _arrange(b, lb, batch + inner + right)
        nbat = len(batch)
        a_batch, b_batch = a.shape[:nbat], b.shape[:nbat]
        m = math.prod(a.shape[nbat:nbat + len(left)])
        n = math.prod(b.shape[nbat + len(inner):])
        k = math.prod(a.shape[nbat + len(left):])
        out = matmul(reshape(a, a_batch + (m, k)), reshape(b, b_batch + (k, n)))
        shape = (out.shape[:nbat] + a.shape[nbat:nbat + len(left)]
                 + b.shape[nbat + len(inner):])
        return reshape(out, shape), batch + left + right
    # no contracted label (or integers): a broadcast product, then the sum over inner
    order = batch + left + right + inner
    a = _arrange(a, la, [c for c in order if c in la])
    b = _arrange(b, lb, [c for c in order if c in lb])
    for i, c in enumerate(order):
        if c not in la:
            a = unsqueeze(a, i)
        if c not in lb:
            b = unsqueeze(b, i)
    out = mul(a, b)
    if inner:
        out = _sum(out, dim=tuple(range(len(order) - len(inner), len(order))))
    return out, order[:len(order) - len(inner)]


def einsum(equation: str, *operands: Any) -> Tensor:
    """Einstein summation (``torch.einsum``): the product of the operands' entries over
    all label values, summed over the labels the output leaves out.

    ``einsum('ij,jk->ik', a, b)`` is ``a @ b``; ``'ii'`` the trace, ``'ii->i'`` the
    diagonal, ``'...ij->...ji'`` a batched transpose, ``'bn,anm,bm->ba'`` a bilinear
    map. The operands may also be given as one list. Without ``->`` the output is the
    ellipsis dims then the letters seen once, sorted. Contractions run pairwise left to
    right, each a ``matmul`` where it is a product; gradients flow through those ops.
    """
    if not isinstance(equation, str):
        raise TypeError(f"einsum: equation must be a str, got {type(equation).__name__}")
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = tuple(operands[0])
    if not operands:
        raise ValueError(f"einsum: must provide at least one operand (equation {equation!r})")
    ts = [lift(t) for t in operands]
    labels, output, _ = _parse(equation, ts)
    xs = [_distinct(equation, ts, k, t, ls) for k, (t, ls) in enumerate(zip(ts, labels))]
    _sizes(equation, ts, [x for x, _ in xs], [ls for _, ls in xs])
    # labels each operand alone can sum out: in no other operand and not in the output
    for k, (x, ls) in enumerate(xs):
        elsewhere = set(output).union(*(set(o) for j, (_, o) in enumerate(xs) if j != k))
        xs[k] = _sum_labels(x, ls, {c for c in ls if c not in elsewhere})
    x, ls = xs[0]
    for k in range(1, len(xs)):
        keep = set(output).union(*(set(o) for _, o in xs[k + 1:]))
        x, ls = _pair(x, ls, *xs[k], keep)
    x, ls = _sum_labels(x, ls, {c for c in ls if c not in output})
    x = _arrange(x, ls, output)
    dtype = promoted_dtype(*(t._data.dtype for t in ts))
    if x._data.dtype != dtype:  # an integer sum widens to int64; einsum keeps the dtype
        x = x.to(dtype)
    return x
