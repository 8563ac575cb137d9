"""Resampling: interpolation, adaptive pooling, pixel shuffle."""

__all__: list[str] = []
