"""Parameter: a leaf tensor that a Module registers as one of its weights."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..tensor import Tensor


class Parameter(Tensor):
    """A Tensor that requires grad and that ``Module.__setattr__`` registers.

    Made from a Tensor it shares that tensor's array (as in PyTorch); made from an array
    or a list it copies, as ``nb.tensor`` does.
    """

    __slots__ = ()

    def __init__(self, data: Any = None, requires_grad: bool = True):
        if data is None:
            data = np.zeros(0, np.float32)
        if isinstance(data, Tensor):
            super().__init__(np.zeros(0, data.dtype))
            self._data = data._data
        else:
            super().__init__(data)
        self.requires_grad = requires_grad

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()
