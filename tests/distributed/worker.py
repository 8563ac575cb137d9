"""Run by tests/test_distributed.py under ``mpiexec -n N`` (or alone, a job of one):
``python worker.py MODE [DIR]``. Each mode prints ``rank R ok`` on success."""

from __future__ import annotations

import sys
import time

import numpy as np

import nbgrad as nb
from nbgrad import distributed, nn
from nbgrad.data import DataLoader, TensorDataset
from nbgrad.distributed import DistributedDataParallel
from nbgrad.examples._common import save_checkpoint, start_epoch, training_loader

BATCH, SAMPLES, STEPS = 8, 40, 20  # 5 steps per epoch, 4 epochs


def make_model(seed: int) -> nn.Module:
    nb.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 2)).double()


def make_data() -> TensorDataset:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((SAMPLES, 3))
    return TensorDataset(x, np.sin(x[:, :2]) + x[:, 1:] ** 2)


def sgd(model: nn.Module) -> nb.optim.SGD:
    return nb.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def step(model: nn.Module, opt: nb.optim.SGD, x: nb.Tensor, y: nb.Tensor) -> None:
    opt.zero_grad()
    nb.mse_loss(model(x), y).backward()
    opt.step()


def train_epochs(net: nn.Module, opt: nb.optim.SGD, loader: DataLoader, epochs: range) -> None:
    for epoch in epochs:
        for x, y in start_epoch(loader, epoch):
            step(net, opt, x, y)


def flat(model: nn.Module) -> np.ndarray:
    return np.concatenate([p.numpy().ravel() for p in model.parameters()])


def relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def same_on_all_ranks(a: np.ndarray) -> bool:
    low, high = a.copy(), a.copy()
    distributed.all_reduce(low, distributed.ReduceOp.MIN)
    distributed.all_reduce(high, distributed.ReduceOp.MAX)
    return bool((low == a).all() and (high == a).all())


def check_training(directory: str) -> None:
    """20 SGD steps on all ranks with a global batch of 8 equal one process's 20 steps with
    batch 8 (to 1e-10); the ranks hold bitwise the same parameters; a checkpoint of epoch
    2 written by rank 0 resumes to bitwise the same parameters."""
    ranks, data = distributed.world_size(), make_data()
    epochs = range(STEPS * BATCH // SAMPLES)
    reference = make_model(0)
    train_epochs(reference, sgd(reference), training_loader(data, BATCH, 1, 1), epochs)

    model = make_model(distributed.rank())  # rank 0's weights replace the others'
    net, opt = DistributedDataParallel(model), sgd(model)
    loader = training_loader(data, BATCH, 1, ranks)
    train_epochs(net, opt, loader, epochs[:2])
    path = f"{directory}/checkpoint.npz"
    save_checkpoint({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
    train_epochs(net, opt, loader, epochs[2:])
    assert relative(flat(model), flat(reference)) < 1e-10, relative(flat(model),
                                                                    flat(reference))
    assert same_on_all_ranks(flat(model))

    resumed = make_model(7 + distributed.rank())
    resumed_opt = sgd(resumed)
    state = nb.load(path)
    resumed.load_state_dict(state["model"])
    resumed_opt.load_state_dict(state["optimizer"])
    train_epochs(DistributedDataParallel(resumed), resumed_opt, loader, epochs[2:])
    assert (flat(resumed) == flat(model)).all()


def check_no_sync() -> None:
    """Two micro-batches, the first under no_sync, give the gradient of the whole batch."""
    ranks, rank = distributed.world_size(), distributed.rank()
    x, y = make_data().tensors
    reference = make_model(0)
    nb.mse_loss(reference(x[:BATCH]), y[:BATCH]).backward()
    model = make_model(0)
    net = DistributedDataParallel(model, bucket_cap_mb=1e-4)  # one bucket per parameter
    half, share = BATCH // 2, BATCH // ranks // 2
    for start in (0, half):
        begin = start + rank * share
        with net.no_sync() if start == 0 else nb.enable_grad():
            loss = nb.mse_loss(net(x[begin:begin + share]), y[begin:begin + share]) * 0.5
            loss.backward()
    for p, q in zip(model.parameters(), reference.parameters()):
        assert relative(p.grad.numpy(), q.grad.numpy()) < 1e-12


def check_buckets_start_during_backward() -> None:
    """With 3 small buckets, every bucket but the first layer weight's has started its
    all-reduce when that weight, the last parameter backward reaches, gets its
    gradient."""
    model = make_model(0)
    started = []
    model[0].weight.register_post_accumulate_grad_hook(  # runs before DDP's hook on it
        lambda p: started.append(net._launched))
    net = DistributedDataParallel(model, bucket_cap_mb=1e-4)
    x, y = make_data().tensors
    nb.mse_loss(net(x[:4]), y[:4]).backward()
    assert len(net._buckets) == 3 and started == [2], started


class PartlyUsed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = nn.Linear(3, 2), nn.Linear(3, 2)

    def forward(self, x: nb.Tensor) -> nb.Tensor:
        return self.used(x)


def check_unused_parameter() -> None:
    """A backward that gave no gradient to some parameters is reported at the next call."""
    net = DistributedDataParallel(PartlyUsed())
    x = nb.tensor(np.ones((4, 3), np.float32))
    net(x).sum().backward()
    try:
        net(x)
    except RuntimeError as error:
        assert "unused.weight, unused.bias" in str(error), error
    else:
        raise AssertionError("a backward that skipped parameters was not reported")


def check_bare_module_is_local() -> None:
    """The backward of the wrapped module called directly does not communicate."""
    model = make_model(0)
    DistributedDataParallel(model)
    x, y = make_data().tensors
    rows = slice(4 * distributed.rank(), 4 * distributed.rank() + 4)
    nb.mse_loss(model(x[rows]), y[rows]).backward()
    alone = make_model(0)
    nb.mse_loss(alone(x[rows]), y[rows]).backward()
    for p, q in zip(model.parameters(), alone.parameters()):
        assert (p.grad.numpy() == q.grad.numpy()).all()


def raises_value_error(fn, *parts: str) -> str:
    """The message of the ValueError ``fn()`` raises, which must contain ``parts``."""
    try:
        fn()
    except ValueError as error:
        message = str(error)
        assert all(p in message for p in parts), (parts, message)
        return message
    raise AssertionError(f"no ValueError (expected {parts})")


def check_collectives() -> None:
    """Mismatched collectives raise on every rank, naming each rank's call, and leave the
    ranks in step: a matching collective afterwards works. Rank 0 prints the first
    message."""
    rank, last = distributed.rank(), distributed.world_size() - 1
    others = "ranks " + ", ".join(map(str, range(last))) if last > 1 else "rank 0"
    first = raises_value_error(  # the all_reduce of 4 against 5 elements
        lambda: distributed.all_reduce(np.ones(5 if rank == last else 4)),
        "distributed.all_reduce: the ranks' calls differ",
        f"{others}: all_reduce of float64 (4,), op 'sum'",
        f"rank {last}: all_reduce of float64 (5,), op 'sum'")
    raises_value_error(  # and its broadcast of 4 elements into 3
        lambda: distributed.broadcast(nb.zeros(3 if rank == last else 4)),
        f"{others}: broadcast of float32 (4,) from rank 0",
        f"rank {last}: broadcast of float32 (3,) from rank 0")
    raises_value_error(
        lambda: distributed.all_reduce(np.ones((2, 3), np.float32 if rank else np.float64)),
        "rank 0: all_reduce of float64 (2, 3)", "all_reduce of float32 (2, 3)")
    raises_value_error(lambda: distributed.broadcast(np.ones(2), src=min(rank, 1)),
                       "rank 0: broadcast of float64 (2,) from rank 0",
                       "broadcast of float64 (2,) from rank 1")
    raises_value_error(
        lambda: distributed.all_reduce(np.ones(2), "max" if rank == last else "sum"),
        "op 'max'", "op 'sum'")
    raises_value_error(  # different collectives meet in the check
        lambda: distributed.barrier() if rank == 0 else distributed.all_reduce(np.ones(2)),
        "rank 0: barrier of no array", "all_reduce of float64 (2,)")
    raises_value_error(lambda: distributed.broadcast(np.ones(2), src=last + 1),
                       f"src must be a rank from 0 to {last}")
    ones = np.ones(4)
    distributed.all_reduce(ones)
    assert (ones == last + 1).all(), ones
    value = np.full(3, float(rank))
    distributed.broadcast(value, src=last)
    assert (value == last).all(), value
    distributed.barrier()
    if rank == 0:
        sys.stdout.write(f"message: {first}\n")
        sys.stdout.flush()


def check_unchecked() -> None:
    """NBGRAD_CHECK_COLLECTIVES=0 (set by the test) turns the check off; matching
    collectives work either way; init(check_collectives=True) turns it back on."""
    assert not distributed.collectives_checked()
    a = np.ones(3)
    distributed.all_reduce(a)
    assert (a == distributed.world_size()).all()
    distributed.init(check_collectives=True)
    assert distributed.collectives_checked()
    raises_value_error(lambda: distributed.all_reduce(np.ones(2 + distributed.rank())),
                       "the ranks' calls differ")


def main(mode: str, directory: str = ".") -> None:
    if mode == "hang":
        distributed.init(timeout=2.0)
    else:
        distributed.init()
    rank = distributed.rank()
    if mode == "train":
        check_training(directory)
        check_no_sync()
        check_buckets_start_during_backward()
        check_unused_parameter()
        check_bare_module_is_local()
    elif mode == "raise":
        if rank == 1:
            raise ValueError("rank 1 fails on purpose")
        distributed.all_reduce(np.ones(4))
    elif mode == "hang":
        if rank == 1:
            time.sleep(120)
        distributed.all_reduce(np.ones(4))
    elif mode == "mismatch":
        DistributedDataParallel(nn.Linear(4, 3 if rank == 1 else 2))
    elif mode == "collectives":
        check_collectives()
    elif mode == "unchecked":
        check_unchecked()
    # one write, which a pipe keeps whole (print writes the newline separately, and the
    # ranks' lines could interleave)
    sys.stdout.write(f"rank {rank} ok\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(*sys.argv[1:])
