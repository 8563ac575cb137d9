"""nbgrad: reverse-mode autodiff on NumPy arrays, every kernel a readable Numba loop nest."""

import sys

from .runtime import startup

startup.keep_freed_memory()
startup.prefer_full_vectors()
startup.ready_numba_at_first_kernel()
with startup.collector_paused():
    from . import (
        autograd,
        compiling,
        cuda,
        data,
        functional,
        linalg,
        nn,
        optim,
        return_types,
        testing,
        utils,
    )
    from .autograd import (
        detect_anomaly,
        enable_grad,
        grad,
        is_anomaly_enabled,
        is_grad_enabled,
        no_grad,
        set_detect_anomaly,
        set_grad_enabled,
    )
    from .compiler import compile  # noqa: A004  (PyTorch's name: nb.compile)
    from .compiling import warmup
    from .device import (
        channels_last,
        contiguous_format,
        device,
        preserve_format,
        strided,
    )
    from .dtypes import DType as dtype  # noqa: N813  (PyTorch's name for the class)
    from .dtypes import (  # noqa: A004  (PyTorch's names: nb.float, nb.int, nb.bool)
        bool,
        double,
        float,
        float16,
        float32,
        float64,
        get_default_dtype,
        half,
        int,
        int8,
        int16,
        int32,
        int64,
        long,
        set_default_dtype,
        short,
        uint8,
    )
    from .function import REGISTRY, Context, Function, Sample, register
    from .ops.activation import *  # noqa: F403
    from .ops.activation_extra import *  # noqa: F403
    from .ops.attention import *  # noqa: F403
    from .ops.compare import *  # noqa: F403
    from .ops.conv import *  # noqa: F403
    from .ops.einsum import *  # noqa: F403
    from .ops.elementwise import *  # noqa: F403
    from .ops.factories import *  # noqa: F403
    from .ops.gno import *  # noqa: F403
    from .ops.gram_schmidt import *  # noqa: F403
    from .ops.group_norm import *  # noqa: F403
    from .ops.indexing import *  # noqa: F403
    from .ops.inplace import *  # noqa: F403
    from .ops.laplace import *  # noqa: F403
    from .ops.layout import *  # noqa: F403
    from .ops.linalg import cosine_similarity, pairwise_distance
    from .ops.loss import *  # noqa: F403
    from .ops.matmul import *  # noqa: F403
    from .ops.norm import *  # noqa: F403
    from .ops.pad import *  # noqa: F403
    from .ops.pointwise_math import *  # noqa: F403
    from .ops.pool import *  # noqa: F403
    from .ops.random import *  # noqa: F403
    from .ops.reduce import *  # noqa: F403
    from .ops.resample import *  # noqa: F403
    from .ops.scan import *  # noqa: F403
    from .ops.select import *  # noqa: F403
    from .ops.shape import *  # noqa: F403
    from .ops.sort import *  # noqa: F403
    from .ops.spectral import *  # noqa: F403
    from .rng import (
        Generator,
        default_generator,
        get_rng_state,
        initial_seed,
        manual_seed,
        seed,
        set_rng_state,
    )
    from .runtime import notices  # noqa: F401  (registers the notice of a long compile)
    from .runtime.threads import get_num_threads, set_num_threads
    from .serialization import CheckpointError, CheckpointVersionError, load, save
    from .tensor import (
        Tensor,
        full,
        ones,
        ones_like,
        rand,
        randn,
        tensor,
        zeros,
        zeros_like,
    )

    # the functional API under PyTorch's path, torch.autograd.functional
    autograd.functional = functional
    sys.modules["nbgrad.autograd.functional"] = functional

__version__ = "0.1.0"
