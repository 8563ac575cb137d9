"""``torch.linalg``'s names: ``nb.linalg.norm``, ``nb.linalg.vector_norm``,
``nb.linalg.matrix_norm``."""

from .ops.linalg import *  # noqa: F403
from .ops.linalg import __all__  # noqa: F401
