"""The losses, with PyTorch's semantics and ``reduction='mean'|'sum'|'none'``, by family:

* ops/loss_regression.py: mse_loss, l1_loss, smooth_l1_loss, huber_loss;
* ops/loss_classification.py: binary_cross_entropy_with_logits, nll_loss, cross_entropy;
* ops/_loss_reduction.py: the reduction and the argument checks they share.

The math of every backward is in docs/derivations.md#losses and in the docstring of
``nbgrad/kernels/loss.py``.
"""

from .loss_classification import binary_cross_entropy_with_logits, cross_entropy, nll_loss
from .loss_regression import huber_loss, l1_loss, mse_loss, smooth_l1_loss

__all__ = ["binary_cross_entropy_with_logits", "cross_entropy", "huber_loss", "l1_loss",
           "mse_loss", "nll_loss", "smooth_l1_loss"]
