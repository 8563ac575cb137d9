"""``torch.nn.utils``: gradient clipping (the functions live in ``nbgrad.optim.clip``, next
to the optimisers' kernels) and the conversion between parameters and one flat vector."""

from __future__ import annotations

from collections.abc import Iterable

from ..ops.shape import cat, reshape
from ..optim.clip import clip_grad_norm_, clip_grad_value_
from ..tensor import Tensor


def parameters_to_vector(parameters: Iterable[Tensor]) -> Tensor:
    """The parameters flattened in order and joined into one 1-D tensor
    (``torch.nn.utils.parameters_to_vector``: ``cat([p.view(-1) for p in parameters])``;
    differentiable, mixed dtypes promote)."""
    flat = []
    for i, param in enumerate(parameters):
        if not isinstance(param, Tensor):
            raise TypeError(f"parameters_to_vector: parameters[{i}] is a "
                            f"{type(param).__name__}, not a Tensor")
        flat.append(reshape(param, -1))
    if not flat:
        raise ValueError("parameters_to_vector: expected a non-empty iterable of Tensors")
    return cat(flat)


def vector_to_parameters(vec: Tensor, parameters: Iterable[Tensor]) -> None:
    """Copy consecutive slices of ``vec`` into the parameters' data, in order
    (``torch.nn.utils.vector_to_parameters``), outside autograd. Unlike PyTorch, which
    points each ``param.data`` at a view of ``vec`` (taking its dtype), nbgrad writes in
    place, so each parameter keeps its array (the one an optimiser updates) and its dtype;
    the write bumps the parameter's version counter like any in-place write."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected a Tensor for vec, got "
                        f"{type(vec).__name__}")
    source = vec._data
    pointer = 0
    for i, param in enumerate(parameters):
        if not isinstance(param, Tensor):
            raise TypeError(f"vector_to_parameters: parameters[{i}] is a "
                            f"{type(param).__name__}, not a Tensor")
        count = param._data.size
        chunk = source[pointer:pointer + count]
        if chunk.size != count:
            raise RuntimeError(f"vector_to_parameters: shape {list(param.shape)} of "
                               f"parameters[{i}] is invalid for input of size {chunk.size} "
                               f"(vec has shape {tuple(source.shape)}, offset {pointer})")
        param._data[...] = chunk.reshape(param._data.shape).astype(param.dtype, copy=False)
        param._version_counter().bump()
        pointer += count


__all__ = ["clip_grad_norm_", "clip_grad_value_", "parameters_to_vector",
           "vector_to_parameters"]
