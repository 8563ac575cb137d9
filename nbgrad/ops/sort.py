"""Sorting along a dim: sort, argsort, topk (stable, with the scatter of the gradient back
to the chosen places) and unique."""

from __future__ import annotations

__all__: list[str] = []
