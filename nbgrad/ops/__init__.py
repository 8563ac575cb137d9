"""Function subclasses that wire kernels into autodiff, and the public op functions.

One module per kernel family; each lists its public names in ``__all__``, which
``nbgrad/__init__.py`` re-exports.
"""
