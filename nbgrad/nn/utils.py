"""``torch.nn.utils``'s gradient clipping, where PyTorch code looks for it (the functions
live in ``nbgrad.optim.clip``, next to the optimisers' kernels)."""

from ..optim.clip import clip_grad_norm_, clip_grad_value_

__all__ = ["clip_grad_norm_", "clip_grad_value_"]
