"""Factories with PyTorch's names: tensors made from ranges, shapes, fill values and NumPy
arrays (arange, linspace, eye, full_like, from_numpy, meshgrid, ...), and the new_*
methods."""

from __future__ import annotations

__all__: list[str] = []
