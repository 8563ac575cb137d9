"""Compile latency: what a new user waits for. ``python -m benchmarks compile``.

Each workload runs in a fresh Python process with an empty ``NUMBA_CACHE_DIR`` (the cold
start of a fresh install), then five times more in fresh processes on the cache the first
one wrote (warm; Python writes its ``.pyc`` files as on a user's machine, whatever
``PYTHONDONTWRITEBYTECODE`` says). Reported: the wall time of the workload (imports
excluded), the seconds spent in Numba's compiler (outermost compiles, from the
``numba:compile`` events), the median of the warm processes' import + workload times, and
the kernels that took longest (a kernel's time includes the kernels it calls that were not
compiled yet), and the median of the warm processes' ``import nbgrad`` (NumPy and Numba
included).

ops f32 / ops f64  every registered op forward + backward through its samples
                   (``nbgrad.compiling.warm_op`` without the parallel twins)
digits step        one training step of the digits CNN, batch 64 (float32, SGD momentum)
digits, no helper  the same with NBGRAD_COMPILE_AHEAD=0: every backward kernel compiled
                   in this process instead of alongside in the helper
compiled digits    the same step under ``nb.compile``, called three times (the trace, the
                   first replay, which compiles the generated code, and one more), in a
                   process whose op kernels the eager step put in the cache before: cold
                   is what tracing and generating cost, warm a later process with the
                   generated functions cached too (a step program: its convolutions and
                   pooling are host calls, the rest two generated functions)
chain step         W17's point-wise chain on 1M float32 values, its sum and backward, eager
compiled chain     the same under ``nb.compile`` after ``chain step`` (as ``compiled
                   digits``): one fused loop, generated and compiled in the cold process
pinn step          W21's physics-informed step (a tanh MLP 1 -> 32 -> 32 -> 1 at 64
                   points, u'' by two create_graph grads, Adam), eager, three steps
compiled pinn      the same under ``nb.compile`` after ``pinn step``: one step program
                   (forward, second derivatives, gradient and Adam in one function),
                   generated and compiled in the cold process
gno                ``nn.GNO`` forward + backward on a radius graph of 256 points in 2-D,
                   width 32, kernel MLP hidden 32 (float32)
ono_encode         ``ono_encode(u[64, 256], B[256, 16])`` forward + backward (float32)
gno after demo     the ``gno-regression`` example (quick size) in a fresh process right
                   after ``python -m nbgrad demo`` ran on the empty cache: what it still
                   compiles (cold), and the same on a warm cache
check              ``python -m nbgrad check`` (every op, first and second derivatives,
                   float64), in its default worker processes; wall time of the command
demo               ``python -m nbgrad demo``, wall time of the command
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
    "compiled digits": """
from nbgrad.datasets import split_digits
from nbgrad.examples.digits import build_model
nb.manual_seed(0)
model = build_model()
opt = nb.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
(x, y), _ = split_digits(0)
images, labels = nb.tensor(x[:64]), nb.tensor(y[:64])

@nb.compile
def step(images, labels):
    opt.zero_grad()
    loss = nb.cross_entropy(model(images), labels)
    loss.backward()
    opt.step()
    return loss

for _ in range(3):
    step(images, labels).item()
""",
    "chain step": """
rng = np.random.default_rng(17)
x = nb.tensor(rng.standard_normal(1 << 20).astype(np.float32), requires_grad=True)
g = nb.tensor(rng.standard_normal(1 << 20).astype(np.float32))

def step(x):
    h = nb.tanh(1.5 * x + 0.25) * 0.5
    h = h + nb.exp(-h * h) + x
    h = nb.silu(h)
    (h * h * g).sum().backward()
    return x.grad

run = STEP
for _ in range(3):
    x.grad = None
    run(x)
""",
    "pinn step": """
rng = np.random.default_rng(21)
sizes = (1, 32, 32, 1)
params = []
for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
    params += [nb.tensor((rng.standard_normal((fan_in, fan_out)) / fan_in ** 0.5)
                         .astype(np.float32), requires_grad=True),
               nb.tensor(np.zeros(fan_out, np.float32), requires_grad=True)]
opt = nb.optim.Adam(params, lr=1e-2)
x = nb.tensor(np.linspace(0, 1, 64, dtype=np.float32)[:, None], requires_grad=True)
f = nb.tensor((np.pi ** 2 * np.sin(np.pi * x.numpy())).astype(np.float32))

def u(h):
    for w, b in zip(params[:-2:2], params[1:-2:2]):
        h = nb.tanh(h @ w + b)
    return h @ params[-2] + params[-1]

def step(x):
    opt.zero_grad()
    (u_x,) = nb.grad(u(x).sum(), x, create_graph=True)
    (u_xx,) = nb.grad(u_x.sum(), x, create_graph=True)
    loss = ((u_xx + f) ** 2).mean()
    loss.backward()
    opt.step()
    return loss

run = STEP
for _ in range(3):
    run(x).item()
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
    "gno after demo": "from nbgrad.examples import gno_regression\n"
                      "gno_regression.main(['--quick', '--no-progress', '--plot', "
                      "sys.argv[2]])",
}

#: command rows: name -> the arguments of ``python``, timed whole
COMMANDS = {"check": ["-m", "nbgrad", "check"],
            "demo": ["-m", "nbgrad", "demo", "--no-progress", "--plot", "{png}"]}

for _eager, _compiled in (("chain step", "compiled chain"), ("pinn step", "compiled pinn")):
    WORKLOADS[_compiled] = WORKLOADS[_eager].replace("STEP", "nb.compile(step)")
    WORKLOADS[_eager] = WORKLOADS[_eager].replace("STEP", "step")

#: workload name -> the command or workload that runs first on its empty cache
AFTER = {"gno after demo": "demo", "compiled digits": "digits step",
         "compiled chain": "chain step", "compiled pinn": "pinn step"}

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


def _environment(cache: str, settings: dict | None = None) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, **(settings or {}))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _run(code: str, cache: str, settings: dict) -> dict:
    png = os.path.join(cache, "figure.png")
    done = subprocess.run([sys.executable, "-c", _RUNNER, code, png],
                          env=_environment(cache, settings), capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"the workload failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _import_and_run(result: dict) -> float:
    """A warm process's seconds: its imports plus its workload."""
    return result["import"] + result["seconds"]


def _command_seconds(name: str, cache: str) -> float:
    args = [a.format(png=os.path.join(cache, "figure.png")) for a in COMMANDS[name]]
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=_environment(cache), check=True,
                   capture_output=True)
    return time.perf_counter() - start


def _short(kernel: str) -> str:
    return kernel.removeprefix("nbgrad.kernels.")


def _workload_row(name: str, cache: str) -> str:
    workload, settings = VARIANTS.get(name, (name, {}))
    before = AFTER.get(name)
    if before in COMMANDS:
        _command_seconds(before, cache)
    elif before is not None:
        _run(WORKLOADS[before], cache, settings)
    code = WORKLOADS[workload]
    first = _run(code, cache, settings)
    warm = [_run(code, cache, settings) for _ in range(WARM_RUNS)]
    seconds = statistics.median(_import_and_run(result) for result in warm)
    imported = statistics.median(result["import"] for result in warm)
    slowest = ", ".join(f"{_short(k)} {s:.1f}" for k, s in first["top"][:3])
    return (f"{name:<17} {first['seconds']:>7.1f} {first['compile']:>9.1f} "
            f"{first['kernels']:>7d} {seconds:>7.2f} {imported:>8.2f}  {slowest}")


def _command_row(name: str, cache: str) -> str:
    cold, warm = _command_seconds(name, cache), _command_seconds(name, cache)
    return f"{name:<17} {cold:>7.1f} {'':>9} {'':>7} {warm:>7.1f}"


def main(names: list[str] | None = None) -> None:
    names = names or ["ops f32", "ops f64", "digits step", *VARIANTS, "compiled digits",
                      "chain step", "compiled chain", "pinn step", "compiled pinn", "gno",
                      "ono_encode", "gno after demo", "check", "demo"]
    print(f"{'workload':<17} {'cold s':>7} {'compile s':>9} {'kernels':>7} {'warm s':>7} "
          f"{'import s':>8}  slowest kernels (cold, s)\n(warm: import + workload, median "
          f"of {WARM_RUNS} processes; check, demo: the whole command)")
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            row = _command_row if name in COMMANDS else _workload_row
            print(row(name, cache), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
