"""Data parallelism: DistributedSampler and DataLoader(sampler=) in one process, and
DistributedDataParallel in jobs of 2 ranks launched with ``mpiexec`` on this machine
(skipped without the ``mpi`` extra). The jobs run tests/distributed/worker.py; each has a
wall-clock limit, so a hang fails the test instead of stalling the suite."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.data import DataLoader, DistributedSampler, TensorDataset

WORKER = Path(__file__).parent / "distributed" / "worker.py"


def _mpi_available() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return shutil.which("mpiexec") is not None


needs_mpi = pytest.mark.skipif(not _mpi_available(),
                               reason="the mpi extra (mpi4py, mpiexec) is not installed")


def run(args: list[str], ranks: int | None = 2, limit: float = 300.0,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``args`` under ``mpiexec -n ranks`` (alone when ranks is None), one Numba thread
    per rank, with ``env`` added to the environment; the job and its ranks are killed
    after ``limit`` seconds (generous: a cold Numba cache compiles the kernels first)."""
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1", **(env or {}))
    launcher = [] if ranks is None else [shutil.which("mpiexec"), "-n", str(ranks)]
    command = launcher + [sys.executable, *args]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, cwd=Path(__file__).parent.parent,
                          start_new_session=True) as job:
        try:
            out, err = job.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
            pytest.fail(f"{' '.join(command)} still ran after {limit} s")
    return subprocess.CompletedProcess(command, job.returncode, out, err)


def worker(mode: str, *args: str, ranks: int | None = 2,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run([str(WORKER), mode, *args], ranks, env=env)


# -- one process ------------------------------------------------------------------------

def test_sampler_shards_are_disjoint_and_cover_the_dataset():
    data = TensorDataset(np.arange(10.0))
    shards = [list(DistributedSampler(data, num_replicas=3, rank=r, seed=4)) for r in range(3)]
    assert [len(s) for s in shards] == [4, 4, 4]  # 10 indices padded to 12
    assert set(sum(shards, [])) == set(range(10))
    dropped = [list(DistributedSampler(data, 3, r, seed=4, drop_last=True)) for r in range(3)]
    flat = sum(dropped, [])
    assert len(flat) == 9 and len(set(flat)) == 9


def test_sampler_order_follows_seed_and_epoch():
    data = TensorDataset(np.arange(50.0))
    sampler = DistributedSampler(data, num_replicas=2, rank=0, seed=1)
    first = list(sampler)
    assert list(sampler) == first  # no set_epoch: the same order (PyTorch's semantics)
    sampler.set_epoch(1)
    assert list(sampler) != first
    sampler.set_epoch(0)
    assert list(sampler) == first
    assert list(DistributedSampler(data, 2, 0, shuffle=False)) == list(range(0, 50, 2))


def test_rank_batches_together_are_the_single_process_batches():
    """Batch k of each of 2 ranks (4 items each) is together batch k of one loader with
    batch 8, epoch after epoch: the identity data-parallel training rests on."""
    data = TensorDataset(np.arange(40.0))
    single = DataLoader(data, batch_size=8, shuffle=True, seed=5)
    samplers = [DistributedSampler(data, 2, r, seed=5) for r in range(2)]
    loaders = [DataLoader(data, batch_size=4, sampler=s) for s in samplers]
    assert len(loaders[0]) == 5
    for epoch in range(3):
        for s in samplers:
            s.set_epoch(epoch)
        single.set_epoch(epoch)
        for whole, *parts in zip(single, *loaders):
            together = np.concatenate([p[0].numpy() for p in parts])
            assert sorted(together) == sorted(whole[0].numpy())


def test_dataloader_sampler_argument_errors():
    data = TensorDataset(np.arange(8.0))
    sampler = DistributedSampler(data, 2, 0)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(data, batch_size=2, shuffle=True, sampler=sampler)
    with pytest.raises(TypeError, match="sampler must be"):
        DataLoader(data, batch_size=2, sampler=5)
    with pytest.raises(RuntimeError, match="sampler's set_epoch"):
        DataLoader(data, batch_size=2, sampler=sampler).set_epoch(1)
    with pytest.raises(ValueError, match="0 <= rank < num_replicas"):
        DistributedSampler(data, num_replicas=2, rank=2)
    with pytest.raises(TypeError, match="seed"):
        DistributedSampler(data, 2, 0, seed=None)


def test_sampler_without_init_asks_for_it():
    from nbgrad import distributed

    if distributed.is_initialized():
        pytest.skip("a test of this session initialised nbgrad.distributed")
    with pytest.raises(RuntimeError, match="init"):
        DistributedSampler(TensorDataset(nb.zeros(4)))


# -- jobs of 2 ranks ---------------------------------------------------------------------

@needs_mpi
def test_two_ranks_train_like_one_process_and_resume(tmp_path):
    """20 steps, float64: same parameters as one process with the global batch (1e-10),
    bitwise equal on both ranks; a checkpoint written by rank 0 resumes on 2 ranks to
    the same bits; no_sync accumulation; a parameter left out of the loss is reported."""
    result = worker("train", str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert {"rank 0 ok", "rank 1 ok"} <= set(result.stdout.splitlines())


@needs_mpi
def test_a_single_process_is_a_job_of_one(tmp_path):
    result = worker("train", str(tmp_path), ranks=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "rank 0 ok"


@needs_mpi
@pytest.mark.parametrize("mode, message", [
    ("raise", "rank 1 fails on purpose"),
    # rank 1 never joins the all-reduce: rank 0 times out after 2 s and aborts both
    ("hang", "did not complete within 2 s"),
])
def test_a_failing_or_missing_rank_ends_the_job(mode, message):
    start = time.monotonic()
    result = worker(mode)
    assert result.returncode != 0
    assert message in result.stderr
    assert "ok" not in result.stdout
    assert time.monotonic() - start < 200


@needs_mpi
def test_different_models_on_the_ranks_fail_on_every_rank():
    result = worker("mismatch")
    assert result.returncode != 0
    assert "ok" not in result.stdout
    message = "the model on rank 1 differs from rank 0's"
    assert "'weight (2, 4) float32', the other 'weight (3, 4) float32'" in result.stderr
    assert result.stderr.count(message) >= 1


@needs_mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_mismatched_collectives_raise_on_every_rank(ranks):
    """all_reduce of 4 against 5 elements, broadcast of 4 into 3, other dtypes, sources,
    ops and collectives: a ValueError on every rank naming each rank's call; the ranks
    stay in step (tests/distributed/worker.py, check_collectives)."""
    result = worker("collectives", ranks=ranks)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert {f"rank {r} ok" for r in range(ranks)} <= set(lines)
    others = "ranks 0, 1" if ranks == 3 else "rank 0"
    assert (f"message: distributed.all_reduce: the ranks' calls differ ({others}: all_reduce "
            f"of float64 (4,), op 'sum'; rank {ranks - 1}: all_reduce of float64 (5,), op "
            "'sum'); every rank must call the same collective") in result.stdout


@needs_mpi
def test_the_collective_check_can_be_turned_off():
    result = worker("unchecked", env={"NBGRAD_CHECK_COLLECTIVES": "0"})
    assert result.returncode == 0, result.stdout + result.stderr
    assert {"rank 0 ok", "rank 1 ok"} <= set(result.stdout.splitlines())


@needs_mpi
def test_digits_example_runs_on_two_ranks(tmp_path):
    """Rank 0 alone prints the table and writes the figure and the checkpoint."""
    checkpoint = tmp_path / "digits.npz"
    result = run(["-m", "nbgrad.examples", "digits", "--distributed", "--epochs", "1",
                  "--no-progress", "--plot", str(tmp_path / "digits.png"),
                  "--checkpoint", str(checkpoint)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("final training loss") == 1
    assert result.stdout.count("epoch  1/1") == 1
    assert nb.load(checkpoint)["epoch"] == 1
