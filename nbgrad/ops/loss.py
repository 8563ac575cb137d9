"""The losses, with PyTorch's semantics and ``reduction='mean'|'sum'|'none'``, by family:

* ops/loss_regression.py: mse_loss, l1_loss, smooth_l1_loss, huber_loss;
* ops/loss_classification.py: binary_cross_entropy_with_logits, nll_loss, cross_entropy;
* ops/loss_extra.py: binary_cross_entropy, kl_div, poisson_nll_loss, gaussian_nll_loss and
  the margin losses (margin_ranking, hinge_embedding, soft_margin, multilabel_soft_margin,
  cosine_embedding, triplet_margin);
* ops/_loss_reduction.py: the reduction and the argument checks they share.

The math of every backward is in docs/derivations.md#losses and in the docstring of
``nbgrad/kernels/loss.py``.
"""

from .loss_classification import binary_cross_entropy_with_logits, cross_entropy, nll_loss
from .loss_extra import (
    binary_cross_entropy,
    cosine_embedding_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    kl_div,
    margin_ranking_loss,
    multilabel_soft_margin_loss,
    poisson_nll_loss,
    soft_margin_loss,
    triplet_margin_loss,
)
from .loss_regression import huber_loss, l1_loss, mse_loss, smooth_l1_loss

__all__ = ["binary_cross_entropy", "binary_cross_entropy_with_logits", "cosine_embedding_loss",
           "cross_entropy", "gaussian_nll_loss", "hinge_embedding_loss", "huber_loss", "kl_div",
           "l1_loss", "margin_ranking_loss", "mse_loss", "multilabel_soft_margin_loss",
           "nll_loss", "poisson_nll_loss", "smooth_l1_loss", "soft_margin_loss",
           "triplet_margin_loss"]
