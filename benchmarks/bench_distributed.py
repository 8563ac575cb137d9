"""W15: data parallelism between 2 ranks on this machine, nbgrad over MPI against
``torch.distributed`` with gloo, one thread per rank.

A 1M-parameter MLP (1024 -> 768 -> 256 -> 10, float32). Per step, rank 0's median of:
the all-reduce of a flat 1M-float buffer; a training step (forward, backward, batch 8 per
rank) on the bare model; the same step through DistributedDataParallel. The difference
of the last two is what averaging the gradients adds to a step. With the default 25 MB
buckets the model is one bucket, reduced once the first layer's gradient is complete;
``bucket_cap_mb=0.5`` splits it in two (the last two layers, then the first), and the
first bucket's all-reduce overlaps the backward of the first layer.

``python -m benchmarks.bench_distributed`` runs it alone; each side runs in its own
``mpiexec -n 2`` job (PyTorch's ranks meet over TCP on 127.0.0.1, its rank taken from
the launcher's ``PMI_RANK``).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .harness import Row, print_table, torch_or_none

SIZES = (1024, 768, 256, 10)  # 986,634 parameters
BATCH, REPEATS, WARMUP = 8, 30, 5
SPLIT_MB = 0.5  # buckets: the last two layers (0.8 MB), then the first (3.1 MB)


def _median_per_step(fn, barrier) -> float:
    """Rank 0's median wall time of ``fn()``, all ranks entering each call together."""
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(REPEATS):
        barrier()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def _nbgrad_worker() -> dict:
    import nbgrad as nb
    from nbgrad import distributed, nn
    from nbgrad.distributed import DistributedDataParallel

    distributed.init()
    nb.manual_seed(0)
    layers = [m for a, b in zip(SIZES, SIZES[1:]) for m in (nn.Linear(a, b), nn.ReLU())][:-1]
    model = nn.Sequential(*layers)
    ddp = DistributedDataParallel(model)
    ddp_split = DistributedDataParallel(model, bucket_cap_mb=SPLIT_MB)
    rng = np.random.default_rng(distributed.rank())
    x = nb.tensor(rng.standard_normal((BATCH, SIZES[0]), dtype=np.float32))
    y = nb.tensor(rng.integers(0, SIZES[-1], BATCH))
    buffer = np.ones(sum(p.numel() for p in model.parameters()), np.float32)

    def step(net):
        model.zero_grad()
        nb.cross_entropy(net(x), y).backward()

    return {"all_reduce": _median_per_step(lambda: distributed.all_reduce(buffer),
                                           distributed.barrier),
            "step": _median_per_step(lambda: step(model), distributed.barrier),
            "step_ddp": _median_per_step(lambda: step(ddp), distributed.barrier),
            "step_ddp_split": _median_per_step(lambda: step(ddp_split), distributed.barrier)}


def _torch_worker() -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['W15_PORT']}",
                            rank=int(os.environ["PMI_RANK"]),
                            world_size=int(os.environ["PMI_SIZE"]))
    torch.manual_seed(0)
    tnn = torch.nn
    layers = [m for a, b in zip(SIZES, SIZES[1:]) for m in (tnn.Linear(a, b), tnn.ReLU())]
    model = tnn.Sequential(*layers[:-1])
    ddp = tnn.parallel.DistributedDataParallel(model)
    ddp_split = tnn.parallel.DistributedDataParallel(model, bucket_cap_mb=SPLIT_MB)
    generator = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(BATCH, SIZES[0], generator=generator)
    y = torch.randint(0, SIZES[-1], (BATCH,), generator=generator)
    buffer = torch.ones(sum(p.numel() for p in model.parameters()))

    def step(net):
        model.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()

    result = {"all_reduce": _median_per_step(lambda: dist.all_reduce(buffer), dist.barrier),
              "step": _median_per_step(lambda: step(model), dist.barrier),
              "step_ddp": _median_per_step(lambda: step(ddp), dist.barrier),
              "step_ddp_split": _median_per_step(lambda: step(ddp_split), dist.barrier)}
    dist.destroy_process_group()
    return result


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(side: str) -> dict | None:
    """Run ``side``'s worker in an ``mpiexec -n 2`` job; rank 0's times (None on failure,
    with the job's output on stderr)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1",
               W15_PORT=str(_free_port()))
    root = Path(__file__).resolve().parent.parent
    job = subprocess.run([shutil.which("mpiexec"), "-n", "2", sys.executable, "-m",
                          "benchmarks.bench_distributed", "--worker", side],
                         env=env, cwd=root, capture_output=True, text=True, timeout=600)
    lines = [ln for ln in job.stdout.splitlines() if ln.startswith("{")]
    if job.returncode != 0 or not lines:
        sys.stderr.write(f"bench_distributed: the {side} job failed:\n{job.stderr}\n")
        return None
    return json.loads(lines[0])


def _mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mpiexec") is not None


def run(torch) -> list[Row]:
    if not _mpi_available():
        print("bench_distributed: the mpi extra is not installed (pip install nbgrad[mpi])")
        return []
    nb_times = _launch("nbgrad")
    if nb_times is None:
        return []
    t_times = _launch("torch") if torch is not None else None

    def pick(key):
        return None if t_times is None else t_times[key]

    def overhead(times):
        return None if times is None else times["step_ddp"] - times["step"]

    note = "2 ranks x 1 thread, float32, 986,634 parameters"
    return [
        Row("W15 all_reduce of 1M floats, 2 ranks", nb_times["all_reduce"], pick("all_reduce"),
            note=note),
        Row("W15 train step, bare model (batch 8/rank)", nb_times["step"], pick("step")),
        Row("W15 train step, DistributedDataParallel", nb_times["step_ddp"],
            pick("step_ddp")),
        Row("W15 DDP gradient averaging per step", overhead(nb_times), overhead(t_times),
            note="DDP step - bare step"),
        Row("W15 train step, DDP, 2 buckets (bucket_cap_mb=0.5)", nb_times["step_ddp_split"],
            pick("step_ddp_split"), note="the first bucket overlaps layer 1's backward"),
    ]


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        result = _nbgrad_worker() if sys.argv[2] == "nbgrad" else _torch_worker()
        if int(os.environ.get("PMI_RANK", "0")) == 0:
            print(json.dumps(result), flush=True)
        return
    print_table(run(torch_or_none()))


if __name__ == "__main__":
    main()
