"""DataLoader(num_workers > 0): the batches of num_workers=0 in the same order, worker
ids and seeds, worker_init_fn, persistent workers, errors with the worker's traceback,
timeouts, no worker left behind, the fork/OpenMP limit, and PyTorch's argument errors."""

import multiprocessing
import os
import random
import subprocess
import sys
import time

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.data import DataLoader, SequentialSampler, TensorDataset
from nbgrad.data.workers import get_worker_info

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- datasets (module level, so that spawned workers can unpickle them) ----------------------
class Items:
    """Item i: a dict of arrays and scalars, and who made it."""

    def __init__(self, n=11):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = get_worker_info()
        return {"x": np.arange(3, dtype=np.float32) + i, "i": i,
                "t": nb.tensor(np.array([i, -i])),
                "worker": -1 if info is None else info.id,
                "pid": os.getpid(), "init": _INIT.get("value", -1)}


class Draws(Items):
    """Item i: draws from the worker's generators and its seed."""

    def __getitem__(self, i):
        info = get_worker_info()
        return (np.array([random.random(), np.random.rand(), nb.rand(1).item()]),
                np.array(info.seed), np.array(info.id), np.array(info.num_workers))


class Failing(Items):
    def __getitem__(self, i):
        if i == 4:
            raise ValueError(f"item {i} is broken on purpose")
        return np.array([i])


class Slow(Items):
    def __getitem__(self, i):
        time.sleep(3 if i == 2 else 0)
        return np.array([i])


class BigOp(Items):
    """Runs a parallel nbgrad kernel (>= 2**17 elements) per item."""

    def __getitem__(self, i):
        return (nb.ones(1 << 18) * float(i)).sum().numpy()


_INIT = {}


def _init(worker_id):
    _INIT["value"] = 100 + worker_id


def _pairs_collate(items):
    return [(item["i"], item["x"].sum()) for item in items]


def _plain(batch):
    """A batch as nested Python/NumPy values, to compare two loaders' batches."""
    if isinstance(batch, nb.Tensor):
        return ("tensor", str(batch.dtype), batch.numpy().tolist())
    if isinstance(batch, dict):
        return {k: _plain(v) for k, v in batch.items() if k not in ("worker", "pid", "init")}
    if isinstance(batch, list | tuple):
        return [type(batch).__name__] + [_plain(v) for v in batch]
    if isinstance(batch, np.generic | np.ndarray):
        return np.asarray(batch).tolist()
    return batch


def _no_workers_left():
    deadline = time.monotonic() + 5
    while multiprocessing.active_children() and time.monotonic() < deadline:
        time.sleep(0.05)
    return multiprocessing.active_children() == []


class EvenFirst:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(list(range(0, self.n, 2)) + list(range(1, self.n, 2)))


CONFIGS = {
    "shuffle": dict(batch_size=3, shuffle=True),
    "shuffle drop_last": dict(batch_size=4, shuffle=True, drop_last=True),
    "sequential drop_last": dict(batch_size=2, drop_last=True),
    "seed": dict(batch_size=5, shuffle=True, seed=7),
    "sampler": dict(batch_size=3, sampler=EvenFirst(11)),
    "batch_sampler": dict(batch_sampler=[[3, 1], [0], [10, 9, 8, 7], [2, 2]]),
    "collate_fn": dict(batch_size=4, shuffle=True, collate_fn=_pairs_collate),
}


@pytest.mark.parametrize("workers", [1, 2, 3])
@pytest.mark.parametrize("config", list(CONFIGS))
def test_workers_give_the_batches_of_one_process(config, workers):
    kwargs = dict(CONFIGS[config])
    runs = []
    for k in (0, workers):
        generator = None if "seed" in kwargs or "sampler" in kwargs or "batch_sampler" in \
            kwargs else nb.Generator().manual_seed(3)
        loader = DataLoader(Items(), num_workers=k, generator=generator, **kwargs)
        assert len(loader) == len(DataLoader(Items(), **kwargs))
        runs.append([[_plain(b) for b in loader] for _ in range(2)])  # two epochs
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1] or "shuffle" not in kwargs
    assert _no_workers_left()


def test_tensor_datasets_and_requires_grad_cross_to_the_main_process():
    x = nb.tensor(np.random.default_rng(0).standard_normal((9, 2)))
    y = nb.arange(9)
    ds = TensorDataset(x, y)
    one = list(DataLoader(ds, 4, shuffle=True, generator=nb.Generator().manual_seed(1)))
    two = list(DataLoader(ds, 4, shuffle=True, generator=nb.Generator().manual_seed(1),
                          num_workers=2, pin_memory=True))
    assert [_plain(b) for b in one] == [_plain(b) for b in two]
    assert all(isinstance(t, nb.Tensor) and t.dtype == u.dtype
               for a, b in zip(one, two) for t, u in zip(b, a))
    leaf = list(DataLoader([nb.ones(2, requires_grad=True)] * 2, 2, num_workers=1,
                           collate_fn=lambda items: items[0]))
    assert leaf[0].requires_grad and leaf[0].is_leaf
    with pytest.raises(RuntimeError, match="non-leaf tensor that requires grad"):
        list(DataLoader([nb.ones(2, requires_grad=True) * 2] * 2, 2, num_workers=1,
                        collate_fn=lambda items: items[0]))


def test_round_robin_worker_ids_and_worker_init_fn():
    assert get_worker_info() is None
    loader = DataLoader(Items(), 2, num_workers=3, worker_init_fn=_init)
    batches = list(loader)
    assert [b["worker"].numpy().tolist() for b in batches] == [[i % 3] * 2 for i in range(5)] \
        + [[2]]
    assert [b["init"].numpy()[0] for b in batches] == [100 + i % 3 for i in range(6)]
    pids = {int(b["pid"][0]) for b in batches}
    assert len(pids) == 3 and os.getpid() not in pids
    assert _INIT == {}  # worker_init_fn ran in the workers only


def test_workers_are_seeded_per_worker_and_epoch_from_the_generator():
    def run(seed):
        loader = DataLoader(Draws(6), 1, num_workers=2, generator=nb.Generator().manual_seed(seed),
                            shuffle=True)
        return [[b[j].numpy() for j in range(4)] for b in loader]

    first, again, other = run(5), run(5), run(6)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, again))
    assert not any(np.array_equal(a[0], b[0]) for a, b in zip(first, other))
    seeds = {int(b[2][0]): int(b[1][0]) for b in first}
    assert sorted(seeds) == [0, 1] and seeds[1] == seeds[0] + 1
    assert all(int(b[3][0]) == 2 for b in first)
    draws = [b[0][0] for b in first]  # each worker's first two draws of each source
    assert len({tuple(d) for d in draws}) == len(draws)
    loader = DataLoader(Draws(2), 2, num_workers=1)
    assert int(next(iter(loader))[1][0]) != int(next(iter(loader))[1][0])  # new each epoch


def test_persistent_workers_keep_their_processes_across_epochs():
    loader = DataLoader(Items(6), 2, num_workers=2, persistent_workers=True)
    epochs = [[int(b["pid"][0]) for b in loader] for _ in range(2)]
    assert epochs[0] == epochs[1] and len(set(epochs[0])) == 2
    assert len(multiprocessing.active_children()) == 2
    iterator = iter(loader)
    next(iterator)  # leave an epoch early: the next one starts cleanly
    del iterator
    assert [int(b["i"][0]) for b in loader] == [0, 2, 4]
    del loader
    assert _no_workers_left()
    fresh = DataLoader(Items(6), 2, num_workers=2)
    pids = [{int(b["pid"][0]) for b in fresh} for _ in range(2)]
    assert not pids[0] & pids[1]  # without persistent_workers: new workers per epoch
    assert _no_workers_left()


def test_a_worker_error_is_raised_with_its_traceback_and_no_worker_is_left():
    loader = DataLoader(Failing(8), 2, num_workers=2)
    with pytest.raises(ValueError) as info:
        list(loader)
    message = str(info.value)
    assert message.startswith("Caught ValueError in DataLoader worker process 0.")
    assert "Original Traceback (most recent call last)" in message
    assert "item 4 is broken on purpose" in message and "__getitem__" in message
    assert _no_workers_left()
    for _ in DataLoader(Items(), 1, num_workers=2):
        break  # leaving an epoch early stops its workers
    assert _no_workers_left()


def test_timeout_raises_and_stops_the_workers():
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.5 seconds"):
        list(DataLoader(Slow(4), 1, num_workers=2, timeout=0.5))
    assert _no_workers_left()


def test_workers_exit_with_the_interpreter():
    script = ("import numpy as np, nbgrad as nb\n"
              "from nbgrad.data import DataLoader, TensorDataset\n"
              "loader = DataLoader(TensorDataset(np.arange(8)), 2, num_workers=2, "
              "persistent_workers=True)\n"
              "list(loader)\n"
              "print(*[w.pid for w in loader._iterator._workers])\n")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_fork_workers_cannot_run_parallel_kernels_and_spawn_workers_can():
    expected = [b.numpy().tolist() for b in DataLoader(BigOp(4), 2)]
    with pytest.raises(RuntimeError, match="exited unexpectedly.*multiprocessing_context="
                                           "'spawn'"):
        list(DataLoader(BigOp(4), 2, num_workers=1, multiprocessing_context="fork"))
    assert _no_workers_left()
    spawned = DataLoader(BigOp(4), 2, num_workers=1, multiprocessing_context="spawn")
    assert [b.numpy().tolist() for b in spawned] == expected
    assert _no_workers_left()


BAD = [
    (dict(num_workers=-1), ValueError, "num_workers option should be non-negative"),
    (dict(prefetch_factor=2), ValueError, "prefetch_factor option could only be specified"),
    (dict(persistent_workers=True), ValueError, "persistent_workers option needs "
                                                "num_workers > 0"),
    (dict(timeout=-1), ValueError, "timeout option should be non-negative"),
    (dict(num_workers=1, multiprocessing_context="teleport"), ValueError,
     "multiprocessing_context option should specify a valid start method"),
    (dict(multiprocessing_context="spawn"), ValueError,
     "multiprocessing_context can only be used with multi-process loading"),
    (dict(batch_sampler=[[0, 1]], batch_size=2), ValueError,
     "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler"),
    (dict(batch_sampler=[[0, 1]], shuffle=True), ValueError,
     "batch_sampler option is mutually exclusive"),
    (dict(batch_sampler=[[0, 1]], drop_last=True), ValueError,
     "batch_sampler option is mutually exclusive"),
    (dict(num_workers=1, prefetch_factor=0), ValueError, "prefetch_factor option should be"),
    (dict(num_workers=1.5), TypeError, "num_workers must be an int"),
    (dict(worker_init_fn=3), TypeError, "worker_init_fn must be callable"),
]


@pytest.mark.parametrize("kwargs, error, message", BAD)
def test_bad_arguments_raise_pytorchs_errors(kwargs, error, message):
    with pytest.raises(error, match="DataLoader: " + message):
        DataLoader(TensorDataset(np.arange(4)), **kwargs)


@pytest.mark.parametrize("kwargs, error, message", BAD[:9])
def test_bad_arguments_agree_with_torch(kwargs, error, message):
    torch = pytest.importorskip("torch")
    with pytest.raises(error, match=message):
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(4)), **kwargs)


def test_the_signature_is_torchs():
    torch = pytest.importorskip("torch")
    import inspect
    ours = inspect.signature(DataLoader).parameters
    theirs = inspect.signature(torch.utils.data.DataLoader).parameters
    positional = [n for n, p in theirs.items() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert [n for n, p in ours.items() if p.kind is p.POSITIONAL_OR_KEYWORD] == positional
    for name in ["batch_size", "num_workers", "timeout", "prefetch_factor",
                 "persistent_workers", "pin_memory", "drop_last", "generator"]:
        assert ours[name].default == theirs[name].default, name
    assert len(DataLoader(Items(), sampler=SequentialSampler(range(3)))) == 3
    assert len(DataLoader(Items(), batch_sampler=[[0], [1, 2]])) == 2
