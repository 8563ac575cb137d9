"""Optimisers, learning-rate schedulers and gradient clipping with PyTorch's names and
semantics (``torch.optim``); each optimiser step runs one kernel per parameter group."""

from . import lr_scheduler
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adam_variants import Adamax, NAdam, RAdam
from .clip import clip_grad_norm_, clip_grad_value_
from .lbfgs import LBFGS
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam", "Optimizer", "RAdam",
           "RMSprop", "clip_grad_norm_", "clip_grad_value_", "lr_scheduler"]
