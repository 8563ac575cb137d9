"""Parallel regions per training step: ``python -m benchmarks.regions`` (needs valgrind).

Every parallel region costs a wake-up of the thread pool and a barrier at its end: tens
of microseconds on a quiet machine, milliseconds when another process holds a core. This
counts them for the W10 digits-CNN step (benchmarks/bench_train.py), nbgrad and PyTorch
each in a process of its own at 2 threads: both runtimes open their regions through
libgomp's ``GOMP_parallel`` (Numba's OpenMP threading layer and PyTorch's ``at::parallel_for``),
so the count is the calls to it that callgrind records, over a run of ``STEPS`` steps minus
a run of ``BASE`` steps (which removes start-up and compilation).

Slow the first time: valgrind's emulated CPU reports other features than the host, so
Numba's disk cache misses and the first run compiles every kernel of the step under
valgrind (tens of minutes on 2 cores); later runs load those entries.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
BASE, STEPS = 2, 12
REGION_ENTRY = "GOMP_parallel"

# A child process: build the W10 step for one library, run it `steps` times.
_CHILD = """
import sys
from benchmarks import bench_train
library, steps = sys.argv[1], int(sys.argv[2])
torch = None
if library == "torch":
    import torch
    torch.set_num_threads(2)
else:
    import numba
    numba.set_num_threads(2)
steps_of = {}
def keep(step_nb, step_torch, **_):
    steps_of["nbgrad"], steps_of["torch"] = step_nb, step_torch
    return 1.0, None
bench_train.paired_times = keep
bench_train._w10(torch)
step = steps_of[library]
for _ in range(3 + steps):
    step()
"""


def _calls_to(profile: Path, name: str) -> int:
    """Calls to the function ``name`` recorded in a callgrind output file (function names
    are compressed: ``cfn=(id) name`` the first time, ``cfn=(id)`` after)."""
    names: dict[str, str] = {}
    total, callee = 0, None
    for line in profile.read_text(errors="replace").splitlines():
        m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
        if m:
            if m.group(2):
                names[m.group(1)] = m.group(2)
            callee = names.get(m.group(1)) if line.startswith("cfn") else None
        elif line.startswith("calls=") and callee == name:
            total += int(line.split()[0].split("=")[1])
    return total


def _regions(library: str, steps: int, workdir: Path) -> int:
    out = workdir / f"{library}.{steps}.callgrind"
    # passive OpenMP waits: under valgrind a spinning thread is emulated instruction by
    # instruction and holds up the other one (the region count does not change)
    env = dict(os.environ, PYTHONPATH=str(_ROOT), PYTHONHASHSEED="0",
               OMP_WAIT_POLICY="PASSIVE")
    subprocess.run(["valgrind", "--tool=callgrind", "--fair-sched=yes",
                    f"--callgrind-out-file={out}",
                    sys.executable, "-c", _CHILD, library, str(steps)],
                   env=env, check=True, capture_output=True)
    return _calls_to(out, REGION_ENTRY)


def main() -> None:
    if shutil.which("valgrind") is None:
        sys.exit("benchmarks.regions needs valgrind (apt install valgrind)")
    libraries = ["nbgrad"]
    try:
        import torch  # noqa: F401
        libraries.append("torch")
    except ImportError:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        for library in libraries:
            counts = [_regions(library, n, Path(tmp)) for n in (BASE, STEPS)]
            per_step = (counts[1] - counts[0]) / (STEPS - BASE)
            print(f"W10 digits CNN step, {library}: {per_step:.1f} parallel regions per step")


if __name__ == "__main__":
    main()
