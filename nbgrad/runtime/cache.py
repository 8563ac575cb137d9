"""The on-disk cache of nbgrad's kernels: Numba's, made safe against damaged and mismatched
files and keyed by the installed nbgrad as well as by each kernel's source file
(docs/cache.md).

Numba 0.68 (``numba.core.caching``) already picks the directory: ``NUMBA_CACHE_DIR`` when
set, else ``__pycache__`` next to the source file when it is writable, else the user's
cache directory (``$XDG_CACHE_HOME/numba`` or ``~/.cache/numba``). It already drops an
index written by another Numba version or for another content of the kernel's file. What
it gets wrong, and this module fixes for nbgrad's kernels only:

* A truncated or otherwise unreadable index (``.nbi``) or data (``.nbc``) file raises from
  ``pickle`` (``EOFError``, ``UnpicklingError``) on the next call of the kernel, in every
  process, until someone deletes the file (numba issue #10434). Here it is a cache miss:
  the kernel is recompiled and the file rewritten.
* A data file is found by the index alone. Two processes that compile two signatures of one
  kernel at the same time can both pick the same free data file, and the index can end up
  naming the other one's machine code: the next process runs, say, the int64 kernel on
  float64 arrays and returns garbage. Here every data file records what it was compiled
  for (the index key, the source stamp and the Numba version) and is used only for that.
* The source stamp covers the kernel's own file only, but kernels inline kernels of other
  files (``basics.dot`` into ``conv_s1``): an upgrade or an edit that changes only
  ``basics.py`` kept the old ``dot`` in every caller. Here the stamp also covers every
  kernel source file and the installed distribution.

And one thing Numba has no notion of: a kernel that calls a C function of nbgrad by its
symbol name (runtime/jit.py: compiled_once) can be loaded only once the JIT linker
knows that symbol, so a data file that names one first loads the C function
(``provide_symbol``).

How it is wired in: ``Dispatcher.enable_caching`` (what ``njit(cache=True)`` calls) builds
its cache as ``FunctionCache(py_func)``, looking the name up in ``numba.core.dispatcher``'s
module globals at that moment (``cfunc(cache=True)`` likewise in ``numba.core.ccallback``'s).
``install`` rebinds that name once in both (from ``runtime.jit``, which
nbgrad imports before any other kernel module) to a function that gives functions of
nbgrad's modules (and of the modules nb.compile generates) a ``KernelCache`` (built on
first use, ``LazyKernelCache``) and every other function Numba's own ``FunctionCache``.
The kernel modules keep calling ``numba.njit`` with the presets of ``runtime.jit``.
tests/runtime/test_cache.py pins the wiring and the behaviour on damaged files.
"""

import hashlib
import importlib.metadata
import pickle
import warnings
from collections.abc import Callable
from functools import cache, cached_property
from pathlib import Path

from numba.core import caching, ccallback, dispatcher

# Distinct file names, so that an nbgrad without this module (which would pass the tagged
# data of ``CheckedCacheFile`` to Numba as a compile result) never reads these files.
FILE_PREFIX = "nbgrad"


@cache
def install_stamp() -> str:
    """What identifies the kernels of this nbgrad: the sha256 of the source files of
    ``nbgrad/kernels`` (every file a kernel is compiled from) and of ``runtime/jit.py``
    (the presets and ``compiled_once``), and of the RECORD of the
    installed distribution (it lists the sha256 of every installed file, so any upgrade
    or reinstall changes it) or its version when the installer wrote no RECORD. The
    sources' digest is what tracks the edits of a source checkout or an editable install,
    whose RECORD does not change."""
    sources = hashlib.sha256()
    package = Path(__file__).parents[1]
    for path in [*sorted((package / "kernels").glob("*.py")), package / "runtime" / "jit.py"]:
        sources.update(path.read_bytes())
    site = str(Path(__file__).resolve().parents[2])
    for dist in importlib.metadata.distributions(name="nbgrad", path=[site]):
        record = dist.read_text("RECORD")
        sources.update((hashlib.sha256(record.encode()).hexdigest() if record
                        else dist.version).encode())
        break
    return sources.hexdigest()


# External symbols that kernels call by name (the C functions of runtime/jit.py:
# compiled_once), each with what makes it known to the JIT linker. A kernel's cached machine
# code names the symbols it calls, and the linker must know them before the code loads.
_symbol_providers: dict[bytes, Callable[[], object]] = {}


def kernel_cache_dir(py_func: Callable) -> Path | None:
    """The directory Numba caches ``py_func``'s kernels in (the first of its locators that
    finds a writable place), or None where there is none."""
    for locator_class in caching.CacheImpl._locator_classes:
        locator = locator_class.from_function(py_func, py_func.__code__.co_filename)
        if locator is not None:
            return Path(locator.get_cache_path())
    return None


def provide_symbol(name: str, provide: Callable[[], object]) -> None:
    """Call ``provide()`` before loading any cached kernel whose data names ``name``."""
    _symbol_providers[name.encode()] = provide


def _provide_symbols_named_in(data: bytes) -> None:
    for name, provide in _symbol_providers.items():
        if name in data:
            provide()


class CacheFileWarning(RuntimeWarning):
    """A cache file was ignored (and is rewritten): the kernel is recompiled."""


def _recompiling(what: str) -> None:
    warnings.warn(f"nbgrad: {what}; recompiling the kernel", CacheFileWarning, stacklevel=2)


class CheckedCacheFile(caching.IndexDataCacheFile):
    """Numba's index + data files of one kernel, where a file that cannot be read, or data
    compiled for something else, is a cache miss (then overwritten by the recompiled kernel)
    instead of an exception or a wrong kernel."""

    def _load_index(self) -> dict:
        try:
            return super()._load_index()
        except Exception as exc:  # a damaged pickle can raise nearly anything
            _recompiling(f"cache index {self._index_path} is unreadable ({exc!r})")
            return {}

    def _load_data(self, name: str):
        path = self._data_path(name)
        with open(path, "rb") as f:  # OSError: a missing file, which ``load`` treats as a miss
            data = f.read()
        _provide_symbols_named_in(data)
        try:
            return pickle.loads(data)
        except Exception as exc:  # a damaged pickle can raise nearly anything
            _recompiling(f"cache file {path} is unreadable ({exc!r})")
            return None

    def _tag(self, key) -> tuple:
        return key, self._source_stamp, self._version

    def save(self, key, data) -> None:
        # Numba reads the index again to add the entry; ``load`` has already warned about
        # an unreadable one.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CacheFileWarning)
            super().save(key, (self._tag(key), data))

    def load(self, key):
        entry = super().load(key)
        if entry is None:
            return None
        if isinstance(entry, tuple) and len(entry) == 2 and entry[0] == self._tag(key):
            return entry[1]
        _recompiling(f"a data file listed in {self._index_path} holds another compilation")
        return None


class _KernelCacheImpl(caching.CompileResultCacheImpl):
    def get_filename_base(self, fullname: str, abiflags: str) -> str:
        return f"{FILE_PREFIX}-{super().get_filename_base(fullname, abiflags)}"


class KernelCache(caching.FunctionCache):
    """Numba's per-function cache (same directory), with ``CheckedCacheFile`` files named
    ``nbgrad-*`` and the install stamp next to the source file's stamp."""

    _impl_class = _KernelCacheImpl

    def __init__(self, py_func):
        super().__init__(py_func)
        stamp = self._impl.locator.get_source_stamp(), install_stamp()
        self._cache_file = CheckedCacheFile(self._cache_path, self._impl.filename_base, stamp)


class LazyKernelCache:
    """A ``KernelCache`` built when its kernel first compiles or loads. Building one looks
    up the source file, creates the cache directory and test-writes to it: file-system
    work for each of the 400-odd dispatchers that ``import nbgrad`` creates, most of
    which a process never calls (docs/benchmarks.md#the-python-layer)."""

    def __init__(self, py_func):
        self._py_func = py_func

    @cached_property
    def cache(self) -> KernelCache:
        return KernelCache(self._py_func)

    def __getattr__(self, name: str):
        return getattr(self.cache, name)


#: the name of every module nb.compile generates (compiler/fusion.py: load_generated)
GENERATED_PREFIX = "nbgrad_fused_"


def _is_nbgrad(py_func) -> bool:
    """nbgrad's modules and the ones nb.compile generates (whose functions call nbgrad's
    C functions too: a step program's products)."""
    module = py_func.__module__ or ""
    return (module == "nbgrad" or module.startswith("nbgrad.")
            or module.startswith(GENERATED_PREFIX))


_numba_function_cache = dispatcher.FunctionCache


def _function_cache(py_func):
    """What ``Dispatcher.enable_caching`` builds once ``install`` has run."""
    if _is_nbgrad(py_func):
        return LazyKernelCache(py_func)
    return _numba_function_cache(py_func)


def install() -> None:
    """Give the cached dispatchers of nbgrad's functions created from now on a
    ``KernelCache`` (see the module docstring for the Numba internal this relies on)."""
    dispatcher.FunctionCache = _function_cache
    ccallback.FunctionCache = _function_cache
