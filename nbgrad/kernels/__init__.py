"""Numba loop nests: ndarrays in, ndarrays out. A kernel module imports other kernels and
``nbgrad.runtime.jit`` (the compile presets) only (docs/architecture.md)."""
