"""The bundled digits: the dtype argument takes floating-point dtypes only (the images
are real values in [0, 1])."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.datasets import load_digits, split_digits


@pytest.mark.parametrize("dtype", [np.float32, np.float64, "float16", nb.float64])
def test_float_dtypes_keep_the_values(dtype):
    images, labels = load_digits(dtype=dtype)
    assert images.dtype == np.dtype(dtype) and labels.dtype == np.int64
    assert images.min() == 0 and images.max() == 1 and 0 < images.mean() < 1
    (train, _), _ = split_digits(0, dtype=dtype)
    assert train.dtype == np.dtype(dtype)


@pytest.mark.parametrize("fn", [load_digits, lambda dtype: split_digits(0, dtype)])
@pytest.mark.parametrize("dtype, shown", [
    (np.int64, "int64"), (np.uint8, "uint8"), (bool, "bool"), (np.complex64, "complex64"),
    (nb.int32, "int32"), ("not a dtype", "'not a dtype'"), (None, "None")])
def test_dtypes_that_cannot_hold_the_images_are_type_errors(fn, dtype, shown):
    name = "load_digits" if fn is load_digits else "split_digits"
    with pytest.raises(TypeError, match=f"{name}: dtype must be a floating-point dtype .* "
                                        f"dtype {shown} cannot hold"):
        fn(dtype=dtype)
