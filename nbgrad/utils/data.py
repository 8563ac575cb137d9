"""``nbgrad.data`` under PyTorch's path ``torch.utils.data``: the same objects."""

from ..data import *  # noqa: F403
from ..data import __all__  # noqa: F401
