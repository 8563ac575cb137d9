"""Numba loop nests: ndarrays in, ndarrays out. Nothing here imports from outside kernels/."""
