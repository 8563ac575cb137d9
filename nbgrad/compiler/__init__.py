"""``nb.compile``: a traced function run as a program, its point-wise chains fused into
generated Numba loop nests (docs/compile.md). ``trace.py`` records, ``patterns.py``
folds runs of ops into one op of the table (``h @ W.T + b`` into ``linear``),
``fusion.py`` finds and generates the fused regions from the per-element rules of
``rules.py``, ``api.py`` keeps the variants and runs them."""

from .api import Compiled, compile

__all__ = ["Compiled", "compile"]
