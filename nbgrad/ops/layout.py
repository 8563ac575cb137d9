"""Ops that rearrange or repeat elements, or pick them by position: expand, repeat, tile,
flip, roll, diag, diagonal, tril, triu, masked_select, nonzero, and the products outer,
bmm, addmm."""

from __future__ import annotations

__all__: list[str] = []
