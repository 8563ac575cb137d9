"""The kernels on CPUs other than the host: a fresh process told by Numba's environment
variables to compile for an AVX2 CPU (Haswell: 16 ymm registers, no AVX-512) or for
plain x86-64 (SSE2: 16 xmm registers) sizes its vectors and register tiles for that CPU
(nbgrad/runtime/startup.py: target_vector_bytes; kernels/tiles.py), emits no wider
instructions than it has, and computes what NumPy computes in float64.

``NUMBA_CPU_NAME=haswell`` alone would not do: Numba then keeps the host's feature list,
AVX-512 included, and only tunes for Haswell. ``NUMBA_CPU_FEATURES=-avx512f`` replaces
that list, leaving Haswell's own features. Each process compiles into its own empty
cache, which is most of this file's time (about a minute per CPU, the two CPUs'
processes running side by side)."""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from llvmlite import binding as llvm

X86_64 = llvm.get_process_triple().startswith("x86_64")

# CPU: the environment, the vector width (bytes) and the register tile's rows (kernels/
# tiles.py: four rows only with AVX-512's 32 registers) it must give, and the vector
# registers its code may not use.
TARGETS = {
    "haswell": ({"NUMBA_CPU_NAME": "haswell", "NUMBA_CPU_FEATURES": "-avx512f"}, 32, 3,
                ("zmm",)),
    "generic": ({"NUMBA_CPU_NAME": "generic"}, 16, 3, ("zmm", "ymm")),
}
SEED = 49

# Run in the child: every op's forward and the gradients of sum(out * W) for a fixed
# random W, on inputs drawn from SEED (the parent draws the same ones), saved to OUT.
CHILD = r"""
import json, re, sys
import numpy as np
import nbgrad
import nbgrad.nn.functional as F
from nbgrad.kernels import matmul as kmatmul, tiles
from nbgrad.runtime import jit, startup

rng = np.random.default_rng(int(sys.argv[2]))
results = {}

def leaf(a):
    return nbgrad.tensor(a, requires_grad=True)

def run(name, fn, *inputs):
    leaves = [leaf(a) for a in inputs]
    out = fn(*leaves)
    weight = rng.standard_normal(out.shape).astype(out.numpy().dtype)
    (out * nbgrad.tensor(weight)).sum().backward()
    results[name] = out.numpy()
    for i, t in enumerate(leaves):
        results[f"{name}.grad{i}"] = t.grad.numpy()

def draw(*shape):
    return rng.standard_normal(shape).astype(np.float32)

run("matmul", nbgrad.matmul, draw(37, 53), draw(53, 71))
run("bmm", nbgrad.matmul, draw(3, 13, 29), draw(3, 29, 19))
run("matmul64", nbgrad.matmul, draw(21, 45).astype(np.float64), draw(45, 33).astype(np.float64))
run("conv_cols", lambda x, w: F.conv2d(x, w, padding=1), draw(2, 4, 8, 8), draw(16, 4, 3, 3))
run("conv_gemm", lambda x, w: F.conv2d(x, w, stride=2), draw(2, 3, 24, 24), draw(8, 3, 3, 3))
run("conv_s1", lambda x, w: F.conv2d(x, w, padding=1), draw(2, 3, 12, 12), draw(4, 3, 3, 3))
run("conv_direct", lambda x, w: F.conv2d(x, w, stride=2), draw(2, 1, 9, 9), draw(4, 1, 3, 3))
run("softmax", lambda x: F.softmax(x, dim=-1), draw(7, 37))
run("tanh", nbgrad.tanh, draw(1000))
run("gelu", F.gelu, draw(1000))
run("cumsum", lambda x: nbgrad.cumsum(x, 1), draw(5, 43))
run("attention", F.scaled_dot_product_attention, draw(2, 7, 16), draw(2, 11, 16),
    draw(2, 11, 16))
values, indices = nbgrad.sort(nbgrad.tensor(draw(6, 41)), dim=-1)
results["sort"], results["sort.indices"] = values.numpy(), indices.numpy()

kernels = [k for k in vars(kmatmul).values()
           if hasattr(k, "inspect_asm") and k.signatures]
registers = sorted({r for k in kernels for text in k.inspect_asm().values()
                    for r in re.findall(r"%([xyz]mm)\d", text)})
np.savez(sys.argv[1], **results)
print(json.dumps({"vector_bytes": jit.VECTOR_BYTES, "tile_rows": tiles.TILE_ROWS,
                  "target": startup.numba_target()[0], "kernels": len(kernels),
                  "registers": registers}))
"""


def draws(rng):
    def draw(*shape):
        return rng.standard_normal(shape).astype(np.float32).astype(np.float64)
    return draw


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def conv(x, w, stride, padding):
    """out[n, f, i, j] = sum_{c, p, q} xpad[n, c, i s + p, j s + q] w[f, c, p, q], and the
    adjoint maps of its two arguments for an output gradient g."""
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(xp, (kh, kw), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    out = np.einsum("ncijpq,fcpq->nfij", win, w)

    def grads(g):
        gw = np.einsum("nfij,ncijpq->fcpq", g, win)
        gxp = np.zeros_like(xp)
        oh, ow = g.shape[2:]
        for p in range(kh):
            for q in range(kw):
                gxp[:, :, p:p + stride * oh:stride, q:q + stride * ow:stride] += np.einsum(
                    "nfij,fc->ncij", g, w[:, :, p, q])
        return gxp[:, :, padding:xp.shape[2] - padding, padding:xp.shape[3] - padding], gw

    return out, grads


def references(seed):
    """Each op's output and gradients, in float64 from the child's float32 inputs, in the
    order the child draws them (the inputs, then the weight W of the loss)."""
    rng = np.random.default_rng(seed)
    draw = draws(rng)
    ref = {}

    def weight(shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype).astype(np.float64)

    a, b = draw(37, 53), draw(53, 71)
    g = weight((37, 71))
    ref["matmul"], ref["matmul.grad0"], ref["matmul.grad1"] = a @ b, g @ b.T, a.T @ g
    a, b = draw(3, 13, 29), draw(3, 29, 19)
    g = weight((3, 13, 19))
    ref["bmm"] = a @ b
    ref["bmm.grad0"], ref["bmm.grad1"] = g @ b.swapaxes(1, 2), a.swapaxes(1, 2) @ g
    a, b = draw(21, 45), draw(45, 33)
    g = weight((21, 33), np.float64)
    ref["matmul64"], ref["matmul64.grad0"], ref["matmul64.grad1"] = a @ b, g @ b.T, a.T @ g
    for name, xs, ws, stride, padding in [("conv_cols", (2, 4, 8, 8), (16, 4, 3, 3), 1, 1),
                                          ("conv_gemm", (2, 3, 24, 24), (8, 3, 3, 3), 2, 0),
                                          ("conv_s1", (2, 3, 12, 12), (4, 3, 3, 3), 1, 1),
                                          ("conv_direct", (2, 1, 9, 9), (4, 1, 3, 3), 2, 0)]:
        x, w = draw(*xs), draw(*ws)
        out, grads = conv(x, w, stride, padding)
        ref[name] = out
        ref[name + ".grad0"], ref[name + ".grad1"] = grads(weight(out.shape))
    x = draw(7, 37)
    y, g = softmax(x), weight((7, 37))
    ref["softmax"], ref["softmax.grad0"] = y, y * (g - (y * g).sum(-1, keepdims=True))
    x = draw(1000)
    ref["tanh"], ref["tanh.grad0"] = np.tanh(x), (1 - np.tanh(x) ** 2) * weight(1000)
    x = draw(1000)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    pdf = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    ref["gelu"], ref["gelu.grad0"] = x * cdf, (cdf + x * pdf) * weight(1000)
    x = draw(5, 43)
    g = weight((5, 43))
    ref["cumsum"], ref["cumsum.grad0"] = x.cumsum(1), g[:, ::-1].cumsum(1)[:, ::-1]
    q, k, v = draw(2, 7, 16), draw(2, 11, 16), draw(2, 11, 16)
    scale = 1 / math.sqrt(16)
    p = softmax(q @ k.swapaxes(1, 2) * scale)
    g = weight((2, 7, 16))
    dp = g @ v.swapaxes(1, 2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True))
    ref["attention"] = p @ v
    ref["attention.grad0"], ref["attention.grad1"] = ds @ k * scale, ds.swapaxes(1, 2) @ q * scale
    ref["attention.grad2"] = p.swapaxes(1, 2) @ g
    x = draw(6, 41)
    ref["sort"], ref["sort.indices"] = np.sort(x, -1), np.argsort(x, -1, kind="stable")
    return ref


# A float32 loop compiled after ``import nbgrad``: the widest vector register in its code,
# beside the width nbgrad sized its tiles for.
LOOP_WIDTH = r"""
import os, re
if os.environ.get("COMPILE_FIRST"):
    import numba
    numba.njit(lambda x: x + 1)(1)
import numba, numpy as np
import nbgrad
from nbgrad.runtime import jit

@numba.njit(fastmath=True)
def axpy(x, y):
    for i in range(x.size):
        x[i] += np.float32(2) * y[i]

axpy(np.ones(64, np.float32), np.ones(64, np.float32))
found = set(re.findall(r"%([xyz])mm\d", next(iter(axpy.inspect_asm().values()))))
print(jit.VECTOR_BYTES, 64 if "z" in found else 32 if "y" in found else 16)
"""


@pytest.mark.skipif(not X86_64, reason="x86-64 registers")
@pytest.mark.parametrize("environment", [
    {}, {"COMPILE_FIRST": "1"}, {"NUMBA_CPU_NAME": "haswell"},
    {"NUMBA_CPU_NAME": "skylake-avx512"}, {"NUMBA_CPU_NAME": "generic"}],
    ids=["host", "Numba compiled first", "haswell with the host's features",
         "skylake-avx512", "generic"])
def test_vector_bytes_is_the_width_numba_vectorises_to(environment):
    """VECTOR_BYTES is the width of the vectors Numba's loops get in that process,
    whatever chose it: nbgrad on the host (the full width), the host's tuning when Numba
    compiled first (256-bit on Intel's AVX-512 cores), a CPU name whose tuning or
    features differ (a name alone keeps the host's features)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", LOOP_WIDTH], env=env, check=True,
                          capture_output=True, text=True, timeout=300)
    vector_bytes, widest = done.stdout.split()
    assert vector_bytes == widest


@pytest.fixture(scope="module")
def children(tmp_path_factory):
    """One child per CPU, started together (each compiles on one core), each with an
    empty cache: {cpu: (process, results file)}."""
    if not X86_64:
        pytest.skip("x86-64 CPU names")
    started = {}
    for cpu, (env_vars, *_) in TARGETS.items():
        tmp = tmp_path_factory.mktemp(cpu)
        env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
        env.update(env_vars, NUMBA_CACHE_DIR=str(tmp / "cache"))
        out = tmp / "results.npz"
        started[cpu] = (subprocess.Popen([sys.executable, "-c", CHILD, str(out), str(SEED)],
                                         env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True), out)
    yield started
    for process, _ in started.values():
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.fixture(scope="module", params=sorted(TARGETS))
def compiled_for(request, children):
    """The child's report and results for one CPU."""
    process, out = children[request.param]
    stdout, stderr = process.communicate(timeout=900)
    assert process.returncode == 0, stderr[-3000:]
    report = json.loads(stdout.strip().splitlines()[-1])
    with np.load(out) as results:
        return request.param, report, dict(results)


def test_vectors_and_tiles_follow_the_cpu_numba_compiles_for(compiled_for):
    cpu, report, _ = compiled_for
    _, vector_bytes, tile_rows, _ = TARGETS[cpu]
    assert report["target"] == cpu
    assert (report["vector_bytes"], report["tile_rows"]) == (vector_bytes, tile_rows)


def test_matmul_kernels_use_no_wider_registers_than_the_cpu_has(compiled_for):
    cpu, report, _ = compiled_for
    *_, forbidden = TARGETS[cpu]
    assert report["kernels"] > 0
    assert "xmm" in report["registers"] or "ymm" in report["registers"]
    assert not set(forbidden) & set(report["registers"]), report["registers"]


def test_ops_match_numpy_in_float64(compiled_for):
    cpu, _, results = compiled_for
    ref = references(SEED)
    assert sorted(results) == sorted(ref)
    for name, expected in ref.items():
        got = results[name]
        assert got.shape == expected.shape, name
        if name == "sort.indices":
            np.testing.assert_array_equal(got, expected, err_msg=f"{cpu}: {name}")
            continue
        # float32 results (float64 for matmul64): within 16 roundings of the largest
        # magnitude: sums of up to 53 products, in any order the tiles give
        eps = np.finfo(got.dtype).eps
        scale = max(1.0, float(np.abs(expected).max()))
        np.testing.assert_allclose(got, expected, rtol=0, atol=16 * eps * scale,
                                   err_msg=f"{cpu}: {name}")
