"""Data parallelism over MPI (the ``mpi`` extra: ``pip install nbgrad[mpi]``).

``init()`` joins the MPI job that ``mpiexec`` started (a process started without
``mpiexec`` is a job of one); ``rank()``, ``world_size()``, ``all_reduce``,
``broadcast`` and ``barrier`` act on all of its processes, with
``torch.distributed``'s semantics (in place, every rank calls them in the same order).
``DistributedDataParallel`` keeps the replicas of a model in step by averaging their
gradients in every backward, bucket by bucket as backward completes them (see
docs/distributed.md).

Every collective waits at most ``timeout`` seconds (``init``'s argument) and raises
``TimeoutError`` after that, and ``init`` installs a ``sys.excepthook`` that aborts the
whole job on an uncaught exception: a rank that fails makes its peers exit with an error
instead of waiting for it forever.

Before ``all_reduce``, ``broadcast`` and ``barrier`` the ranks compare what they are
about to do (the collective, the array's shape and dtype, the op or the source rank) in
one small allgather, and on a mismatch every rank raises a ``ValueError`` listing each
rank's call, instead of MPI reducing arrays of different sizes into garbage or failing
on some ranks only. ``init(check_collectives=False)`` or the environment variable
``NBGRAD_CHECK_COLLECTIVES=0`` turns the check off (PyTorch has it off unless
``TORCH_DISTRIBUTED_DEBUG=DETAIL``).
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import numpy as np

from .autograd.grad_mode import no_grad
from .nn.module import Module
from .nn.parameter import Parameter
from .runtime.compile_ahead import compile_hook
from .tensor import Tensor
from .world import job

_DEFAULT_TIMEOUT = 1800.0  # seconds: torch.distributed's default of 30 minutes
# Busy polling of a collective before _wait sleeps between polls: longer than the
# all-reduce of a step's gradients and than the usual lag between ranks.
_SPIN_SECONDS = 0.05
# How long a failed rank waits, after writing its traceback, before it aborts the job.
_ABORT_GRACE_SECONDS = 1.0
_CHECK_ENV = "NBGRAD_CHECK_COLLECTIVES"
# Bytes of each rank's description of a collective call in the check's allgather; a
# longer description keeps its first part and a CRC-32 of the whole.
_CALL_BYTES = 512


class ReduceOp:
    """The reductions of ``all_reduce`` (``torch.distributed.ReduceOp``'s names); ``AVG``
    is the sum divided by the world size."""

    SUM = "sum"
    PRODUCT = "product"
    MIN = "min"
    MAX = "max"
    AVG = "avg"


class _World:
    """The job's communicator and the collectives' time limit, set by ``init``."""

    comm: Any = None
    mpi: Any = None
    timeout: float = _DEFAULT_TIMEOUT
    check: bool = True  # compare the ranks' calls before each collective


def init(timeout: timedelta | float = _DEFAULT_TIMEOUT,
         check_collectives: bool | None = None) -> None:
    """Join the MPI job of this process (``MPI.COMM_WORLD``); a second call only updates
    ``timeout``, the seconds (or ``timedelta``) any collective may wait before raising
    ``TimeoutError``, and ``check_collectives``. With more than one rank, an uncaught
    exception prints its traceback and then aborts every rank (``MPI_Abort``).

    ``check_collectives``: compare the ranks' shapes, dtypes and arguments before each
    collective (one allgather of ``_CALL_BYTES`` bytes per rank and call); None (the
    default) means on unless the environment variable ``NBGRAD_CHECK_COLLECTIVES`` is
    ``0``, ``false``, ``no`` or ``off``."""
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if not seconds > 0:
        raise ValueError(f"distributed.init: timeout must be > 0 seconds, got {timeout!r}")
    if check_collectives is not None and not isinstance(check_collectives, bool):
        raise TypeError(f"distributed.init: check_collectives must be True, False or None, "
                        f"got {check_collectives!r}")
    _World.timeout = seconds
    _World.check = (os.environ.get(_CHECK_ENV, "1").strip().lower()
                    not in ("0", "false", "no", "off")
                    if check_collectives is None else check_collectives)
    if _World.comm is not None:
        return
    try:
        from mpi4py import MPI
    except ImportError as error:
        raise ImportError("nbgrad.distributed needs mpi4py and an MPI library: "
                          "pip install nbgrad[mpi]") from error
    _World.mpi, _World.comm = MPI, MPI.COMM_WORLD
    job.size, job.rank = _World.comm.Get_size(), _World.comm.Get_rank()
    compile_hook.enabled = False  # the ranks have the cores: no compile helpers
    if _World.comm.Get_size() > 1:
        sys.excepthook = _aborting_hook(sys.excepthook)


def _aborting_hook(previous: Any) -> Any:
    def hook(kind: type, error: BaseException, traceback: Any) -> None:
        previous(kind, error, traceback)
        sys.stderr.write(f"nbgrad.distributed: rank {rank()} failed; aborting all "
                         f"{world_size()} ranks\n")
        sys.stderr.flush()
        # MPI_Abort ends the job at once, and mpiexec drops what a rank wrote that it had
        # not forwarded yet (seen: the traceback cut after its first line, about one run
        # in six); a moment lets it forward the traceback first.
        time.sleep(_ABORT_GRACE_SECONDS)
        _World.comm.Abort(1)
    return hook


def is_initialized() -> bool:
    return _World.comm is not None


def _comm() -> Any:
    if _World.comm is None:
        raise RuntimeError("nbgrad.distributed: call nbgrad.distributed.init() first")
    return _World.comm


def rank() -> int:
    """This process's index in the job, 0 to ``world_size() - 1``."""
    return _comm().Get_rank()


def world_size() -> int:
    """The number of processes in the job."""
    return _comm().Get_size()


def collectives_checked() -> bool:
    """Whether the ranks' calls are compared before each collective (see ``init``)."""
    return _World.check


def _wait(requests: list, what: str) -> None:
    """Complete the non-blocking ``requests``, or raise ``TimeoutError`` after the
    collectives' time limit.

    MPI moves a non-blocking collective on only inside MPI calls, so a sleeping rank
    stalls it (and its peers, which wait for this rank's part): polls back to back for
    the first ``_SPIN_SECONDS``, as a blocking ``MPI_Wait`` would, then with sleeps
    growing from 10 us to 1 ms, which leave the core to others while a peer is late or
    has failed."""
    mpi = _World.mpi
    start = time.monotonic()
    deadline = start + _World.timeout
    pause = 1e-5
    while not mpi.Request.Testall(requests):
        now = time.monotonic()
        if now > deadline:
            raise TimeoutError(f"nbgrad.distributed: {what} did not complete within "
                               f"{_World.timeout:g} s on rank {rank()}; a peer rank has "
                               "probably failed or is not calling the same collective")
        if now - start > _SPIN_SECONDS:
            time.sleep(pause)
            pause = min(2 * pause, 1e-3)


def _array(t: Tensor | np.ndarray, caller: str) -> np.ndarray:
    """The contiguous array behind ``t``, which a collective overwrites in place."""
    a = t._data if isinstance(t, Tensor) else t
    if not isinstance(a, np.ndarray) or not a.flags.c_contiguous or not a.flags.writeable:
        raise TypeError(f"distributed.{caller}: expected a Tensor or a writeable C-contiguous "
                        f"ndarray, got {type(t).__name__}")
    return a


def _describe(a: np.ndarray) -> str:
    return f"{a.dtype} {tuple(a.shape)}"


def _check_same_call(name: str, call: str) -> None:
    """Raise a ValueError on every rank unless every rank describes its call to the
    collective ``name`` by the same ``call`` text: one Iallgather of a fixed-size record,
    so ranks calling different collectives still meet in it (and all raise)."""
    if not _World.check or world_size() == 1:
        return
    text = f"{name} of {call}".encode()
    if len(text) > _CALL_BYTES:
        text = text[:_CALL_BYTES - 12] + f" ~{zlib.crc32(text):08x}".encode()
    mine = np.zeros(_CALL_BYTES, np.uint8)
    mine[:len(text)] = np.frombuffer(text, np.uint8)
    everyone = np.empty((world_size(), _CALL_BYTES), np.uint8)
    _wait([_comm().Iallgather(mine, everyone)], f"the check before {name}")
    calls = [row.tobytes().rstrip(b"\0").decode(errors="replace") for row in everyone]
    if len(set(calls)) > 1:
        ranks: dict[str, list[int]] = {}
        for r, c in enumerate(calls):
            ranks.setdefault(c, []).append(r)
        listing = "; ".join(f"rank{'s' if len(rs) > 1 else ''} "
                            f"{', '.join(map(str, rs))}: {c}" for c, rs in ranks.items())
        raise ValueError(f"distributed.{name}: the ranks' calls differ ({listing}); every "
                         "rank must call the same collective with arrays of the same shape "
                         f"and dtype (this check: {_CHECK_ENV}=0 or "
                         "init(check_collectives=False) turns it off)")


def all_reduce(tensor: Tensor | np.ndarray, op: str = ReduceOp.SUM) -> None:
    """Replace ``tensor`` (a Tensor's array or an ndarray), in place on every rank, by its
    reduction over all ranks: ``ReduceOp.SUM`` (default), ``PRODUCT``, ``MIN``, ``MAX``
    or ``AVG``. Every rank passes an array of the same shape and dtype and the same
    ``op`` (checked, see ``init``)."""
    a = _array(tensor, "all_reduce")
    _check_same_call("all_reduce", f"{_describe(a)}, op {op!r}")
    comm, mpi = _comm(), _World.mpi
    ops = {ReduceOp.SUM: mpi.SUM, ReduceOp.AVG: mpi.SUM, ReduceOp.PRODUCT: mpi.PROD,
           ReduceOp.MIN: mpi.MIN, ReduceOp.MAX: mpi.MAX}
    if op not in ops:
        raise ValueError(f"distributed.all_reduce: op must be one of {sorted(ops)}, got "
                         f"{op!r}")
    _wait([comm.Iallreduce(mpi.IN_PLACE, a, ops[op])], "all_reduce")
    if op == ReduceOp.AVG:
        a /= world_size()


def broadcast(tensor: Tensor | np.ndarray, src: int = 0) -> None:
    """Overwrite ``tensor`` on every rank, in place, with its value on rank ``src``.
    Every rank passes an array of the same shape and dtype and the same ``src``
    (checked, see ``init``)."""
    a = _array(tensor, "broadcast")
    _check_same_call("broadcast", f"{_describe(a)} from rank {src!r}")
    _broadcast(a, src)


def _broadcast(a: np.ndarray, src: int = 0) -> None:
    """``broadcast`` without the check of the ranks' calls (DistributedDataParallel's, of
    a model whose structure it checked once)."""
    if isinstance(src, bool) or not isinstance(src, int | np.integer) \
            or not 0 <= src < world_size():
        raise ValueError(f"distributed.broadcast: src must be a rank from 0 to "
                         f"{world_size() - 1}, got {src!r}")
    _wait([_comm().Ibcast(a, root=int(src))], "broadcast")


def barrier() -> None:
    """Return once every rank has called ``barrier``."""
    _check_same_call("barrier", "no array")
    _wait([_comm().Ibarrier()], "barrier")


def _all_gather_bytes(data: bytes) -> list[bytes]:
    """Every rank's ``data``, in rank order."""
    comm, n = _comm(), world_size()
    lengths = np.zeros(n, np.int64)
    _wait([comm.Iallgather(np.array([len(data)], np.int64), lengths)], "all_gather")
    gathered = np.zeros(int(lengths.sum()), np.uint8)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    mine = np.frombuffer(data, np.uint8)
    _wait([comm.Iallgatherv(mine, [gathered, lengths, offsets[:-1], _World.mpi.BYTE])],
          "all_gather")
    return [gathered[offsets[i]:offsets[i + 1]].tobytes() for i in range(n)]


def _structure(module: Module) -> list[str]:
    """One line per parameter and buffer: name, shape, NumPy dtype (as the collectives'
    check names it)."""
    entries = list(module.named_parameters()) + list(module.named_buffers())
    return [f"{name} {tuple(t.shape)} {t._data.dtype}" for name, t in entries]


def _check_same_structure(module: Module) -> None:
    """Raise on every rank if any rank's parameters or buffers differ from rank 0's in
    number, name, shape or dtype."""
    mine = _structure(module)
    ranks = [s.decode().split("\n") if s else []
             for s in _all_gather_bytes("\n".join(mine).encode())]
    for r, theirs in enumerate(ranks[1:], start=1):
        if theirs != ranks[0]:
            raise ValueError(
                f"DistributedDataParallel: the model on rank {r} differs from rank 0's "
                f"({len(theirs)} vs {len(ranks[0])} parameters and buffers); first "
                f"difference: {_first_difference(ranks[0], theirs)} "
                "(every rank must build the same model)")


def _first_difference(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b):
        if x != y:
            return f"rank 0 has {x!r}, the other {y!r}"
    longer, which = (a, "rank 0") if len(a) > len(b) else (b, "the other rank")
    return f"{which} also has {longer[min(len(a), len(b))]!r}"


class _Bucket:
    """Parameters whose gradients are reduced together in one flat buffer: parameter
    ``params[k]`` owns ``buffer[offsets[k]:offsets[k + 1]]``."""

    def __init__(self, params: list[Parameter]) -> None:
        self.params = params
        self.offsets = [0, *np.cumsum([p._data.size for p in params]).tolist()]
        self.buffer = np.empty(self.offsets[-1], params[0].dtype)
        self.missing = len(params)  # parameters not yet packed in this backward
        self.request: Any = None

    def part(self, flat: np.ndarray, k: int) -> np.ndarray:
        """Parameter ``k``'s part of ``flat`` (the buffer, or an array like it), shaped
        like the parameter."""
        return flat[self.offsets[k]:self.offsets[k + 1]].reshape(self.params[k].shape)


_PACK_COLUMNS = 16  # columns per block of _pack


def _pack(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src``. A Linear weight's gradient is the transposed view of
    ``x^T g``; NumPy copies such a matrix row by row of ``dst``, reading each row down a
    column of the source array, a cache line per value. Blocks of 16 columns read 16
    whole source rows at a time instead, using every line they load (about 2.4x faster
    for a 768 x 1024 weight)."""
    if src.ndim != 2 or src.flags.c_contiguous or not src.flags.f_contiguous:
        np.copyto(dst, src)
        return
    for j in range(0, src.shape[1], _PACK_COLUMNS):
        np.copyto(dst[:, j:j + _PACK_COLUMNS], src[:, j:j + _PACK_COLUMNS])


def _make_buckets(params: list[Parameter], cap_bytes: float) -> list[_Bucket]:
    """Consecutive parameters of one dtype, each bucket closed once it holds at least
    ``cap_bytes`` (so a bucket is never empty and a large parameter has its own)."""
    buckets, current, size = [], [], 0
    for p in params:
        if current and (p.dtype != current[0].dtype or size >= cap_bytes):
            buckets.append(_Bucket(current))
            current, size = [], 0
        current.append(p)
        size += p._data.nbytes
    if current:
        buckets.append(_Bucket(current))
    return buckets


class DistributedDataParallel(Module):
    """``module`` replicated on every rank, its gradients averaged over the ranks
    (``torch.nn.parallel.DistributedDataParallel``'s semantics).

    At construction every rank checks that all ranks built the same model (parameter and
    buffer names, shapes, dtypes; a ``ValueError`` on every rank otherwise) and copies
    rank 0's parameters and buffers. Calling the wrapper calls ``module``; with
    ``broadcast_buffers`` rank 0's buffers are copied to all ranks first. After the
    ``backward`` of an output of the wrapper (not of ``module`` called directly) every
    parameter's ``.grad`` is the mean over the ranks of what it would be on each rank
    alone: each rank computing a mean loss on its own ``B / world_size``
    samples gives the gradient of the mean loss over all ``B``.

    Gradients are reduced in buckets of about ``bucket_cap_mb`` MB of parameters in
    reverse registration order, about the order in which backward completes their
    gradients. A post-accumulate-grad hook on each parameter packs its gradient into its
    bucket's flat buffer the moment backward has accumulated it, and a bucket whose last
    parameter is packed starts its non-blocking ``Iallreduce`` while backward goes on
    through the earlier layers. The last parameter's hook waits for every bucket and sets
    each ``.grad`` to the sum over the ranks divided by ``world_size()``
    (docs/distributed.md).

    Every parameter that requires grad must get a gradient in each synchronised backward
    (PyTorch's ``find_unused_parameters=False``); the next call raises otherwise. For
    first-order ``backward()`` only: not with ``create_graph`` or ``nb.grad``.
    """

    def __init__(self, module: Module, bucket_cap_mb: float = 25.0,
                 broadcast_buffers: bool = True) -> None:
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: expected an nn.Module, got "
                            f"{type(module).__name__}")
        _check_same_structure(module)
        self.module = module
        self.broadcast_buffers = bool(broadcast_buffers)
        self.require_backward_grad_sync = True
        self._reduce_next = False  # armed by a synchronised forward, for one backward
        with no_grad():  # the structure is checked: no check per tensor
            for t in list(module.parameters()) + list(module.buffers()):
                _broadcast(_array(t, "DistributedDataParallel"))
        params = [p for p in module.parameters() if p.requires_grad][::-1]
        self._buckets = _make_buckets(params, bucket_cap_mb * 2**20)
        self._place = {}  # parameter -> (bucket, position in it)
        for bucket in self._buckets:
            for k, p in enumerate(bucket.params):
                self._place[p] = (bucket, k)
                p.register_post_accumulate_grad_hook(self._grad_ready)
        self._packed: set = set()  # parameters packed in this backward
        self._launched = 0  # buckets whose Iallreduce has started in this backward

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._check_finished()
        self._reduce_next = self.require_backward_grad_sync
        if self.broadcast_buffers and world_size() > 1:
            with no_grad():
                for b in self.module.buffers():
                    _broadcast(_array(b, "DistributedDataParallel"))
        return self.module(*args, **kwargs)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Backward passes of forwards run inside the block accumulate gradients locally
        without communication; the first synchronised backward after it averages the
        accumulated sums."""
        previous = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = previous

    def _check_finished(self) -> None:
        """Raise if the last synchronised backward left parameters without a gradient."""
        if not self._packed:
            return
        missing = [name for name, p in self.module.named_parameters()
                   if p in self._place and p not in self._packed]
        raise RuntimeError(
            f"DistributedDataParallel: the previous backward gave no gradient to "
            f"{len(missing)} parameter(s) ({', '.join(missing)}); every parameter that "
            "requires grad must take part in the loss of a synchronised backward")

    def _grad_ready(self, p: Parameter) -> None:
        """The post-accumulate hook of parameter ``p``: pack ``p.grad`` (this backward's
        gradient plus any accumulated under ``no_sync``) into its bucket, start the
        buckets that are complete, and finish the reduction after the last parameter."""
        if not self._reduce_next:
            return
        bucket, k = self._place[p]
        _pack(bucket.part(bucket.buffer, k), p.grad._data)
        self._packed.add(p)
        bucket.missing -= 1
        self._launch_ready()
        if len(self._packed) == len(self._place):
            self._finish()

    def _launch_ready(self) -> None:
        """Start the Iallreduce of complete buckets, in bucket order on every rank (MPI
        matches collectives by their order), and let MPI advance those in flight, which
        it does only inside its calls."""
        mpi, comm = _World.mpi, _comm()
        while (self._launched < len(self._buckets)
               and self._buckets[self._launched].missing == 0):
            bucket = self._buckets[self._launched]
            bucket.request = comm.Iallreduce(mpi.IN_PLACE, bucket.buffer, mpi.SUM)
            self._launched += 1
        if self._launched:
            mpi.Request.Testall([b.request for b in self._buckets[:self._launched]])

    def _finish(self) -> None:
        """Wait for every bucket and set grad = (sum over ranks) / world_size: one
        division per bucket into a new array, which the bucket's parameters share."""
        _wait([b.request for b in self._buckets], "the gradient all-reduce")
        n = world_size()
        for bucket in self._buckets:
            mean = bucket.buffer / n
            for k, p in enumerate(bucket.params):
                p.grad = Tensor._wrap(bucket.part(mean, k), None, 0)
            bucket.missing, bucket.request = len(bucket.params), None
        self._packed.clear()
        self._launched = 0
        self._reduce_next = False
