"""Compile latency: what a new user waits for. ``python -m benchmarks compile``.

Each workload runs in a fresh Python process with an empty ``NUMBA_CACHE_DIR`` (the cold
start of a fresh install), then five times more in fresh processes on the cache the first
one wrote (warm; Python writes its ``.pyc`` files as on a user's machine, whatever
``PYTHONDONTWRITEBYTECODE`` says). Reported: the wall time of the workload (imports
excluded), the seconds spent in Numba's compiler (outermost compiles, from the
``numba:compile`` events), the median of the warm processes' import + workload times, and
the kernels that took longest (a kernel's time includes the kernels it calls that were not
compiled yet).

ops f32 / ops f64  every registered op forward + backward through its samples
                   (``nbgrad.compiling.warm_op`` without the parallel twins)
digits step        one training step of the digits CNN, batch 64 (float32, SGD momentum)
digits, no helper  the same with NBGRAD_COMPILE_AHEAD=0: every backward kernel compiled
                   in this process instead of alongside in the helper
gno                ``nn.GNO`` forward + backward on a radius graph of 256 points in 2-D,
                   width 32, kernel MLP hidden 32 (float32)
ono_encode         ``ono_encode(u[64, 256], B[256, 16])`` forward + backward (float32)
check              ``python -m nbgrad check`` (every op, first and second derivatives,
                   float64), in its default worker processes; wall time of the command
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

#: workload name -> Python statements run after ``import nbgrad as nb, numpy as np``
WORKLOADS = {
    "ops f32": "from nbgrad.compiling import warm_op\n"
               "for name in sorted(nb.REGISTRY): warm_op(name, ['float32'], twins=False)",
    "ops f64": "from nbgrad.compiling import warm_op\n"
               "for name in sorted(nb.REGISTRY): warm_op(name, ['float64'], twins=False)",
    "digits step": """
from nbgrad.datasets import split_digits
from nbgrad.examples.digits import build_model
nb.manual_seed(0)
model = build_model()
opt = nb.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
(x, y), _ = split_digits(0)
loss = nb.cross_entropy(model(nb.tensor(x[:64])), nb.tensor(y[:64]))
opt.zero_grad(); loss.backward(); opt.step(); loss.item()
""",
    "gno": """
rng = np.random.default_rng(0)
points = rng.random((256, 2)).astype(np.float32)
graph = nb.radius_graph(points, 0.1)
layer = nn.GNO(32, 32, 32, coord_dim=2)
h = nb.tensor(rng.standard_normal((256, 32)).astype(np.float32), requires_grad=True)
layer(h, graph, nb.tensor(points)).sum().backward()
""",
    "ono_encode": """
rng = np.random.default_rng(0)
u = nb.tensor(rng.standard_normal((64, 256)).astype(np.float32), requires_grad=True)
B = nb.tensor(rng.standard_normal((256, 16)).astype(np.float32), requires_grad=True)
nb.ono_encode(u, B).sum().backward()
""",
}

#: workload name -> (the workload it runs again, the environment variables it sets)
VARIANTS = {"digits, no helper": ("digits step", {"NBGRAD_COMPILE_AHEAD": "0"})}

_RUNNER = """
import json, sys, time
start = time.perf_counter()
import numpy as np
import nbgrad as nb
from nbgrad import nn
from nbgrad.runtime.notices import recording_compiles
imported = time.perf_counter() - start
start = time.perf_counter()
with recording_compiles() as rec:
    exec(sys.argv[1])
seconds = time.perf_counter() - start
top = {}
for kernel, s, depth in rec.records:
    if depth == 0:
        top[kernel] = top.get(kernel, 0.0) + s
print(json.dumps({"import": imported, "seconds": seconds, "compile": rec.total(),
                  "kernels": len(rec.records),
                  "top": sorted(top.items(), key=lambda kv: -kv[1])[:5]}))
"""


#: warm processes per workload; the median is reported
WARM_RUNS = 5


def _run(code: str, cache: str, settings: dict) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, **settings)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    done = subprocess.run([sys.executable, "-c", _RUNNER, code], env=env,
                          capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the workload failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _import_and_run(result: dict) -> float:
    """A warm process's seconds: its imports plus its workload."""
    return result["import"] + result["seconds"]


def _check_seconds(cache: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nbgrad", "check"], env=env, check=True,
                   capture_output=True)
    return time.perf_counter() - start


def _short(kernel: str) -> str:
    return kernel.removeprefix("nbgrad.kernels.")


def main(names: list[str] | None = None) -> None:
    names = names or ["ops f32", "ops f64", "digits step", *VARIANTS, "gno", "ono_encode",
                      "check"]
    print(f"{'workload':<17} {'cold s':>7} {'compile s':>9} {'kernels':>7} {'warm s':>7}  "
          f"slowest kernels (cold, s)\n(warm: import + workload, median of {WARM_RUNS} "
          f"processes; check: the whole command)")
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            if name == "check":
                cold, warm = _check_seconds(cache), _check_seconds(cache)
                print(f"{name:<17} {cold:>7.1f} {'':>9} {'':>7} {warm:>7.1f}", flush=True)
                continue
            workload, settings = VARIANTS.get(name, (name, {}))
            code = WORKLOADS[workload]
            first = _run(code, cache, settings)
            warm = statistics.median(_import_and_run(_run(code, cache, settings))
                                     for _ in range(WARM_RUNS))
        slowest = ", ".join(f"{_short(k)} {s:.1f}" for k, s in first["top"][:3])
        print(f"{name:<17} {first['seconds']:>7.1f} {first['compile']:>9.1f} "
              f"{first['kernels']:>7d} {warm:>7.2f}  "
              f"{slowest}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
