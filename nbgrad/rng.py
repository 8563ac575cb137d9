"""Random generators: ``nb.Generator`` and the one default generator that every draw
without its own ``generator=`` uses (``randn rand randint randperm``, ``normal_``,
``uniform_``, the ``*_like`` draws, dropout, ``nn.init``, shuffling ``DataLoader``s,
``RandomSampler`` and ``random_split``).

A Generator is NumPy's PCG64 bit generator behind PyTorch's ``torch.Generator``
interface, so the reproducibility rules are PyTorch's (same seed, same draws in the same
order; a generator passed in is advanced and the default one is not touched) while the
numbers themselves are NumPy's stream, not PyTorch's Mersenne Twister. A fresh process
starts the default generator from seed 0, so even an unseeded script repeats itself.

This module imports nothing from nbgrad (the Tensor factories draw through it), so a
state is a uint8 NumPy array (PyTorch: a uint8 tensor); ``set_state`` also takes a
uint8 Tensor. ``nb.save``/``nb.load`` store either without pickle.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np

from .autograd import tracing

DEFAULT_SEED = 0
SEED_LIMIT = 2 ** 64  # seeds are 0 <= s < 2**64, the range of torch's initial_seed()

# A state: magic, format version, initial seed (8 bytes), PCG64's 128-bit state and
# increment, and the cached half of a 64-bit draw (has_uint32 flag, uinteger) that
# 32-bit draws use; integers little-endian.
_MAGIC = b"NBRG"
_FORMAT = 1
_FIELDS = (("seed", 8), ("state", 16), ("inc", 16), ("has_uint32", 1), ("uinteger", 4))
STATE_BYTES = len(_MAGIC) + 1 + sum(width for _, width in _FIELDS)


def check_seed(op: str, seed: Any, name: str = "seed") -> int:
    """``seed`` as a Python int in [0, 2**64); a TypeError or ValueError naming ``op``
    and the argument otherwise (bools are not seeds)."""
    if isinstance(seed, bool | np.bool_) or not isinstance(seed, int | np.integer):
        raise TypeError(f"{op}: {name} must be an int, got {type(seed).__name__}")
    if not 0 <= seed < SEED_LIMIT:
        raise ValueError(f"{op}: {name} must be in [0, 2**64), got {seed}")
    return int(seed)


class Generator:
    """A source of random numbers with ``torch.Generator``'s methods: pass it as
    ``generator=`` to any draw to take the numbers from it instead of the default
    generator. Each draw advances it, so two draws from one generator differ and the
    sequence repeats after ``manual_seed(s)`` or ``set_state``.

    A new Generator starts from seed 0 (PyTorch's start from one fixed seed too); only
    ``device='cpu'`` exists.
    """

    __slots__ = ("_numpy", "_initial_seed")

    def __init__(self, device: Any = "cpu") -> None:
        if str(device) != "cpu":
            raise ValueError(f"Generator: nbgrad runs on the CPU; got device {device!r}")
        self._initial_seed = DEFAULT_SEED
        self._numpy = np.random.Generator(np.random.PCG64(DEFAULT_SEED))

    def manual_seed(self, seed: int) -> Generator:
        """Restart from ``seed`` (an int in [0, 2**64)); returns self, so
        ``nb.Generator().manual_seed(0)`` is a seeded generator."""
        return self._reseed(check_seed("Generator.manual_seed", seed))

    def seed(self) -> int:
        """Restart from a seed drawn from the operating system's entropy; returns it (keep
        it to repeat the run)."""
        seed = secrets.randbits(64)
        self._reseed(seed)
        return seed

    def initial_seed(self) -> int:
        """The seed this generator was last started from."""
        return self._initial_seed

    def get_state(self) -> np.ndarray:
        """The whole state as a uint8 array of ``STATE_BYTES`` bytes: ``set_state`` of it
        makes the generator repeat the draws that followed this call."""
        return _encode(self._initial_seed, self._numpy.bit_generator.state)

    def set_state(self, new_state: Any) -> Generator:
        """Go back to ``new_state`` (a uint8 array or tensor made by ``get_state``);
        returns self. A bad state raises and leaves the generator unchanged."""
        return self._restore("Generator.set_state", new_state)

    @property
    def device(self) -> str:
        """Where the generator's numbers are made: always the CPU."""
        return "cpu"

    def __repr__(self) -> str:
        return f"nbgrad.Generator(initial_seed={self._initial_seed})"

    def _reseed(self, seed: int) -> Generator:
        # in place: whoever holds this generator (a loader, a module) sees the new seed
        self._numpy.bit_generator.state = np.random.PCG64(seed).state
        self._initial_seed = seed
        return self

    def _restore(self, op: str, new_state: Any) -> Generator:
        seed, state = _decode(op, new_state)
        self._numpy.bit_generator.state = state
        self._initial_seed = seed
        return self


def _encode(seed: int, state: dict) -> np.ndarray:
    values = {"seed": seed, "state": state["state"]["state"], "inc": state["state"]["inc"],
              "has_uint32": state["has_uint32"], "uinteger": state["uinteger"]}
    body = b"".join(values[name].to_bytes(width, "little") for name, width in _FIELDS)
    return np.frombuffer(_MAGIC + bytes([_FORMAT]) + body, np.uint8).copy()


def _decode(op: str, new_state: Any) -> tuple[int, dict]:
    """(initial seed, PCG64 state dict) of a state from ``get_state``; errors name ``op``."""
    if not hasattr(new_state, "__array__"):
        raise TypeError(f"{op}: new_state must be a uint8 array or tensor made by "
                        f"get_state(), got {type(new_state).__name__}")
    array = np.asarray(new_state)
    if array.dtype != np.uint8:
        raise TypeError(f"{op}: new_state must be a uint8 array or tensor made by "
                        f"get_state(), got dtype {array.dtype}")
    if array.shape != (STATE_BYTES,):
        raise ValueError(f"{op}: new_state must have shape ({STATE_BYTES},) (a state made by "
                         f"get_state()), got shape {array.shape}")
    raw = array.tobytes()
    if raw[:len(_MAGIC)] != _MAGIC or raw[len(_MAGIC)] != _FORMAT:
        raise ValueError(f"{op}: new_state is not a generator state made by get_state() "
                         "(its header is wrong)")
    values, at = {}, len(_MAGIC) + 1
    for name, width in _FIELDS:
        values[name] = int.from_bytes(raw[at:at + width], "little")
        at += width
    if values["inc"] % 2 == 0 or values["has_uint32"] > 1:
        raise ValueError(f"{op}: new_state is corrupt (not a state made by get_state())")
    return values["seed"], {"bit_generator": "PCG64",
                            "state": {"state": values["state"], "inc": values["inc"]},
                            "has_uint32": values["has_uint32"],
                            "uinteger": values["uinteger"]}


default_generator = Generator()


def manual_seed(seed: int) -> Generator:
    """Seed the default generator, and so every draw that is not given a generator; returns
    the default generator. The same seed gives the same draws, in the same order, in
    every run."""
    return default_generator._reseed(check_seed("manual_seed", seed))


def seed() -> int:
    """Seed the default generator from the operating system's entropy; returns the seed."""
    return default_generator.seed()


def initial_seed() -> int:
    """The seed the default generator was last started from."""
    return default_generator.initial_seed()


def get_rng_state() -> np.ndarray:
    """The default generator's state (a uint8 array): save it, in a checkpoint through
    ``nb.save`` for instance, and ``set_rng_state`` it to draw the same numbers again."""
    return default_generator.get_state()


def set_rng_state(new_state: Any) -> None:
    """Restore the default generator to ``new_state`` (from ``get_rng_state``)."""
    default_generator._restore("set_rng_state", new_state)


def resolve(generator: Any, op: str) -> np.random.Generator:
    """The NumPy generator a draw of ``op`` takes its numbers from: the default
    generator's for None, an ``nb.Generator``'s own (the draw advances it), a NumPy
    Generator itself, or a new one seeded by an int (the older form of ``seed=``)."""
    if tracing.recorder is not None:
        tracing.recorder.event(f"a random draw ({op})", None)
    if generator is None:
        return default_generator._numpy
    if isinstance(generator, Generator):
        return generator._numpy
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, int | np.integer) and not isinstance(generator, bool | np.bool_):
        return np.random.default_rng(check_seed(op, generator, "generator"))
    raise TypeError(f"{op}: generator must be an nb.Generator, a numpy.random.Generator, "
                    f"an int seed or None, got {type(generator).__name__}")


def source(op: str, generator: Any, seed: Any) -> np.random.Generator:
    """The NumPy generator for a factory that takes ``generator=`` and the older ``seed=``
    (a fresh generator seeded with it: the numbers of ``Generator().manual_seed(seed)``,
    and the default generator is not touched); not both."""
    if seed is None:
        return resolve(generator, op)
    if generator is not None:
        raise ValueError(f"{op}: pass seed or generator, not both")
    return np.random.default_rng(check_seed(op, seed))
