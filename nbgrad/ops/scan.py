"""Scans along a dim: cumsum, cumprod and diff, whose backwards are the reverse scans."""

from __future__ import annotations

__all__: list[str] = []
