"""kernels/matmul.py's blocking choices (kernels/gemm_search.py): every candidate depth of
the packed blocks of b, reading b in place or packed, and reading a transposed a in place
or copied, gives products that match float64 NumPy and the same bits as each other, at 1
and 2 threads."""

import itertools

import numba
import numpy as np
import pytest

from nbgrad.kernels import matmul, tiles
from nbgrad.runtime import host

DEPTHS = [host.GEMM_DEPTH_MIN, 2048, 4096, host.GEMM_DEPTH_MAX]
# Always pack (0), pack past 48 KiB, never pack below 1 GiB.
SPANS = [0, 48 << 10, 1 << 30]

SHAPES = [  # (batches, M, N, K)
    (1, 67, 131, 1100),    # odd sizes; K spans several blocks of every depth
    (1, 128, 192, 600),    # whole tiles; partial k block
    (3, 130, 70, 257),     # batched, partial last panel and sliver
    (2, 128, 128, 2049),   # K just past two 4 KiB-deep float32 blocks
]


def _operands(rng, b, m, n, k, x_t, y_t, dtype):
    x = rng.standard_normal((b, k, m) if x_t else (b, m, k)).astype(dtype)
    y = rng.standard_normal((b, n, k) if y_t else (b, k, n)).astype(dtype)
    return x, y


def _reference(x, y, x_t, y_t):
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    return np.matmul(x64.transpose(0, 2, 1) if x_t else x64, y64.transpose(0, 2, 1) if y_t else y64)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_t, y_t", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_choice_is_correct_and_bitwise_equal(shape, x_t, y_t, dtype):
    b, m, n, k = shape
    rng = np.random.default_rng(hash((shape, x_t, y_t)) % 2**32)
    x, y = _operands(rng, b, m, n, k, x_t, y_t, dtype)
    maps = np.arange(b)
    want = _reference(x, y, x_t, y_t)
    # float32: each sum of k terms of unit variance rounds within ~k eps of its size
    tol = 4e-6 * k if dtype == np.float32 else 1e-13 * k
    scale = np.sqrt(k)
    first = None
    for depth, span, pack_t in itertools.product(DEPTHS, SPANS, (False, True)):
        got = matmul.product(x, y, maps, maps, x_t, y_t, 1, False, depth, span, pack_t)
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=0, atol=tol * scale)
        if first is None:
            first = got
        else:
            np.testing.assert_array_equal(got, first, err_msg=f"{depth} {span} {pack_t}")


@pytest.mark.parametrize("x_t, y_t", [(False, False), (False, True), (True, False)])
def test_one_and_two_threads_same_bits(x_t, y_t):
    rng = np.random.default_rng(7)
    b, m, n, k = 2, 200, 260, 700
    x, y = _operands(rng, b, m, n, k, x_t, y_t, np.float32)
    maps = np.arange(b)
    serial = matmul.product(x, y, maps, maps, x_t, y_t, 1, False)
    previous = numba.get_num_threads()
    numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
    try:
        for threads in (1, 2):
            parallel = matmul.product(x, y, maps, maps, x_t, y_t, threads, True)
            np.testing.assert_array_equal(parallel, serial)
    finally:
        numba.set_num_threads(previous)
    np.testing.assert_allclose(serial, _reference(x, y, x_t, y_t), rtol=0, atol=4e-6 * k ** 1.5)


def test_tile_fits_the_registers():
    """Accumulators, broadcasts of two steps of k and two loads of b within the register
    file: 32 vector registers with AVX-512, 16 below."""
    registers = 32 if tiles.VECTOR_BYTES == 64 else 16
    assert tiles.TILE_ROWS * tiles.TILE_VECTORS + 2 * tiles.TILE_ROWS + 2 <= registers
    assert tiles.panel_cols(np.zeros(1, np.float32)) * 4 == tiles.TILE_VECTORS * tiles.VECTOR_BYTES
