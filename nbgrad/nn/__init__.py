"""Layers and models: Module, Parameter, containers, layers, activations and losses as
modules, ``nbgrad.nn.init`` and ``nbgrad.nn.functional`` (``torch.nn``'s names and semantics)."""

from . import functional, init, utils
from .activation import (
    ELU,
    GELU,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    L1Loss,
    LeakyReLU,
    LogSoftmax,
    MSELoss,
    NLLLoss,
    ReLU,
    Sigmoid,
    SiLU,
    SmoothL1Loss,
    Softmax,
    Softplus,
    Tanh,
)
from .activation_extra import CELU, GLU, SELU, Hardsigmoid, Hardswish, Mish, Softsign, Tanhshrink
from .containers import ModuleDict, ModuleList, Sequential
from .embeddings import GridEmbedding2D, GridEmbeddingND, SinusoidalEmbedding
from .fno import FNO, TFNO, FNOBlocks, SoftGating, skip_connection
from .gino import FNOGNO, GINO, CachedGNOBlock
from .gno_block import GNOBlock, IntegralTransform, LinearChannelMLP
from .layers import (
    AvgPool1d,
    AvgPool2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    Flatten,
    Identity,
    Linear,
    MaxPool1d,
    MaxPool2d,
)
from .losses import (
    BCELoss,
    CosineEmbeddingLoss,
    GaussianNLLLoss,
    HingeEmbeddingLoss,
    KLDivLoss,
    MarginRankingLoss,
    MultiLabelSoftMarginLoss,
    PoissonNLLLoss,
    SoftMarginLoss,
    TripletMarginLoss,
)
from .module import Module
from .normalization import (
    BatchNorm1d,
    BatchNorm2d,
    Dropout,
    GroupNorm,
    InstanceNorm1d,
    InstanceNorm2d,
    LayerNorm,
)
from .operator_blocks import AdaIN, ChannelMLP, DomainPadding
from .operator_losses import H1Loss, LpLoss
from .operators import GNO, LNO, ONO
from .parameter import Parameter
from .resampling import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveMaxPool2d,
    PixelShuffle,
    PixelUnshuffle,
    Unflatten,
    Upsample,
    UpsamplingBilinear2d,
    UpsamplingNearest2d,
)
from .sparse import Embedding
from .spectral import SpectralConv, SpectralConv1d, SpectralConv2d
from .transformer import MultiheadAttention, TransformerEncoder, TransformerEncoderLayer
from .uno import UNO, ScaledSpectralConv

__all__ = ["functional", "init", "utils", "Module", "Parameter", "Sequential", "ModuleList",
           "ModuleDict", "Identity", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool1d",
           "MaxPool2d", "AvgPool1d", "AvgPool2d", "Flatten", "ReLU", "Tanh", "Sigmoid", "SiLU",
           "LeakyReLU", "ELU", "GELU", "Softplus", "Softmax", "LogSoftmax", "MSELoss",
           "CrossEntropyLoss", "L1Loss", "SmoothL1Loss", "HuberLoss", "BCEWithLogitsLoss",
           "NLLLoss", "BatchNorm1d", "BatchNorm2d", "Dropout", "LayerNorm", "Embedding", "GNO",
           "ONO", "LNO", "SpectralConv1d", "SpectralConv2d", "FNO", "CELU", "GLU", "SELU",
           "Hardsigmoid", "Hardswish", "Mish", "Softsign", "Tanhshrink", "BCELoss",
           "CosineEmbeddingLoss", "GaussianNLLLoss", "HingeEmbeddingLoss", "KLDivLoss",
           "MarginRankingLoss", "MultiLabelSoftMarginLoss", "PoissonNLLLoss", "SoftMarginLoss",
           "TripletMarginLoss", "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "AdaptiveMaxPool2d",
           "PixelShuffle", "PixelUnshuffle", "Unflatten", "Upsample", "UpsamplingBilinear2d",
           "UpsamplingNearest2d", "GroupNorm", "InstanceNorm1d", "InstanceNorm2d",
           "MultiheadAttention", "TransformerEncoder", "TransformerEncoderLayer", "AdaIN",
           "ChannelMLP",
           "DomainPadding", "GridEmbeddingND", "GridEmbedding2D", "SinusoidalEmbedding",
           "LpLoss", "H1Loss", "SpectralConv", "GNOBlock", "IntegralTransform",
           "LinearChannelMLP", "TFNO", "FNOBlocks", "SoftGating", "skip_connection",
           "GINO", "FNOGNO", "CachedGNOBlock", "UNO", "ScaledSpectralConv"]
