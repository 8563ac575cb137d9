"""The optical-recognition digits: 1,797 handwritten digits as 8x8 images of counts
0..16 (E. Alpaydin and C. Kaynak, UCI Machine Learning Repository, CC BY 4.0; the copy
scikit-learn bundles). Shipped in ``data/digits.npz`` (45 kB), so no download."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._checks import float_dtype

_FILE = Path(__file__).parent / "data" / "digits.npz"
N_TRAIN = 1437  # of 1797: the remaining 360 are the test set


def load_digits(dtype: type = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """(images [1797, 1, 8, 8] scaled to [0, 1], labels [1797] int64 in 0..9); ``dtype``,
    the images', must be floating-point (an integer one would truncate them to 0 and 1:
    a TypeError)."""
    dtype = float_dtype("load_digits", dtype)
    with np.load(_FILE, allow_pickle=False) as archive:
        images, labels = archive["images"], archive["labels"]
    return (images[:, None] / 16.0).astype(dtype), labels.astype(np.int64)


def split_digits(seed: int = 0, dtype: type = np.float32
                 ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((train images, train labels), (test images, test labels)): 1,437 / 360 images,
    split by a permutation drawn from ``numpy.random.default_rng(seed)``; ``dtype`` as in
    ``load_digits``."""
    images, labels = load_digits(float_dtype("split_digits", dtype))
    order = np.random.default_rng(seed).permutation(len(labels))
    train, test = order[:N_TRAIN], order[N_TRAIN:]
    return (images[train], labels[train]), (images[test], labels[test])
