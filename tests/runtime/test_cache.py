"""The kernels' disk cache (docs/cache.md, nbgrad/runtime/cache.py): where it goes when
nbgrad is installed read-only, what invalidates it, and damaged or mismatched files.

Every case runs fresh Python processes on a copy of nbgrad installed with pip
(non-editable) into a temporary directory (made read-only where the test is about where
the cache goes), with the cache in a temporary directory, so the cache of this session
and of the source tree is never touched. Each process compiles at most two small
kernels: ``basics.vector_sum`` and ``softmax._exp_shifted_sum`` (which inlines
``vector_sum`` from another file).
"""

import base64
import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numba
import numba.core.caching
import pytest

import nbgrad  # noqa: F401  (imports every kernel module)
from nbgrad.kernels import basics
from nbgrad.runtime import cache as _cache

REPO = Path(__file__).resolve().parents[2]
# The cache files of basics.vector_sum (nbgrad names them nbgrad-basics.vector_sum-<line>...;
# the pattern matches Numba's own naming too, so that these tests check behaviour).
SUM = "*basics.vector_sum-*"

# Runs in the child: calls the kernels named in argv, prints what happened as JSON.
# "reread" counts the hits of a fresh dispatcher of each kernel called, which reads the
# index and data files again from disk: the files this process wrote or kept are loadable.
PROBE = """
import json, sys
import numpy as np
import numba
import nbgrad
from nbgrad.kernels import basics, softmax

CALLS = {
    "sum": (basics.vector_sum, lambda k: float(k(np.arange(4.0)))),
    "sum_int": (basics.vector_sum, lambda k: int(k(np.arange(4)))),
    "exp_sum": (softmax._exp_shifted_sum, lambda k: float(k(np.zeros(3), 0.0, np.empty(3)))),
}
values, hits, misses, reread = {}, 0, 0, 0
for name in sys.argv[1:]:
    kernel, call = CALLS[name]
    values[name] = call(kernel)
    hits += kernel.stats.cache_hits[kernel.signatures[-1]]
    misses += kernel.stats.cache_misses[kernel.signatures[-1]]
    fresh = numba.njit(cache=True)(kernel.py_func)
    call(fresh)
    reread += sum(fresh.stats.cache_hits.values())
print(json.dumps({"file": nbgrad.__file__, "values": values, "hits": hits,
                  "misses": misses, "reread": reread}))
"""


def _writable(directory: Path) -> bool:
    """Numba's own test (``_CacheLocator.ensure_cache_path``): can a file be created?"""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


def _set_read_only(root: Path, read_only: bool) -> None:
    """Make the directories under root read-only (or writable again). chmod does not stop
    root, so as root the directories are made immutable (chattr +i) instead; files stay
    writable, which the upgrade test uses to rewrite installed files in place."""
    dirs = [str(d) for d, _, _ in os.walk(root)]
    if os.geteuid() != 0:
        for d in dirs:
            os.chmod(d, 0o555 if read_only else 0o755)
    elif shutil.which("chattr"):
        subprocess.run(["chattr", "+i" if read_only else "-i", *dirs], capture_output=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """nbgrad installed by pip (non-editable, bytecode compiled as pip does) from a copy of
    the sources, so that the build writes nothing into the source tree."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    shutil.copytree(REPO / "nbgrad", src / "nbgrad",
                    ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                          "--no-build-isolation", "--target", str(tmp / "site"), str(src)],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        pytest.skip(f"pip cannot install nbgrad here: {pip.stderr[-500:]}")
    return tmp / "site"


@pytest.fixture
def site(installed, tmp_path):
    """This test's own read-only copy of the install."""
    copy = tmp_path / "site"
    shutil.copytree(installed, copy, symlinks=True)
    _set_read_only(copy, True)
    try:
        if _writable(copy / "nbgrad" / "kernels"):
            pytest.skip("cannot make a directory read-only here (root without chattr +i)")
        yield copy
    finally:
        _set_read_only(copy, False)


def _env(tmp_path: Path, site: Path, numba_cache_dir: Path | None) -> dict:
    """The child's environment: the install on PYTHONPATH (ahead of the editable install)
    and a private home and XDG cache directory (Numba's user-wide cache directory is
    $XDG_CACHE_HOME/numba, else ~/.cache/numba)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(site), HOME=str(tmp_path / "home"),
               XDG_CACHE_HOME=str(tmp_path / "xdg"))
    if numba_cache_dir is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache_dir)
    return env


def _start(tmp_path, site, *calls, numba_cache_dir=None) -> subprocess.Popen:
    """Start PROBE in a new process."""
    return subprocess.Popen([sys.executable, "-c", PROBE, *calls], cwd=tmp_path,
                            env=_env(tmp_path, site, numba_cache_dir), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _wait(run: subprocess.Popen) -> subprocess.CompletedProcess:
    stdout, stderr = run.communicate(timeout=300)
    return subprocess.CompletedProcess(run.args, run.returncode, stdout, stderr)


def _report(done: subprocess.CompletedProcess, site: Path) -> dict:
    """PROBE's report, with the child's stderr as "stderr"."""
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert Path(report["file"]).is_relative_to(site), report["file"]
    return {**report, "stderr": done.stderr}


def _probe(tmp_path, site, *calls, numba_cache_dir=None) -> dict:
    run = _start(tmp_path, site, *calls, numba_cache_dir=numba_cache_dir)
    return _report(_wait(run), site)


def _user_cache(tmp_path: Path) -> Path:
    return tmp_path / "xdg" / "numba"


def test_read_only_install_caches_in_the_user_cache_directory(tmp_path, site):
    first = _probe(tmp_path, site, "sum")
    assert (first["values"], first["misses"], first["hits"]) == ({"sum": 6.0}, 1, 0)
    assert list(_user_cache(tmp_path).glob(f"*/{SUM}.nbi"))
    assert not list(site.rglob("*.nbi"))
    second = _probe(tmp_path, site, "sum")
    assert (second["values"], second["misses"], second["hits"]) == ({"sum": 6.0}, 0, 1)


def test_numba_cache_dir_wins_over_the_user_cache_directory(tmp_path, site):
    cache_dir = tmp_path / "numba-cache"
    report = _probe(tmp_path, site, "sum", numba_cache_dir=cache_dir)
    assert (report["misses"], report["reread"]) == (1, 1)
    assert list(cache_dir.glob(f"*/{SUM}.nbi"))
    assert not _user_cache(tmp_path).exists()


def _record_row(path: str, content: bytes) -> str:
    """A RECORD row as pip writes it (PEP 376: urlsafe base64 sha256 without padding)."""
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=")
    return f"{path},sha256={digest.decode()},{len(content)}"


@pytest.mark.parametrize("rewrite_record", [True, False], ids=["upgrade", "edit"])
def test_a_changed_kernel_file_recompiles_its_kernels_and_their_callers(tmp_path, site,
                                                                      rewrite_record):
    """vector_sum's file (basics.py) changes, as an upgrade does it (pip rewrites the
    RECORD) or as an edit of a source checkout (no RECORD changes); softmax.py does not,
    but _exp_shifted_sum inlines vector_sum, so it must recompile too (Numba's stamp of
    softmax.py alone would keep the old vector_sum in it)."""
    before = _probe(tmp_path, site, "sum", "exp_sum")
    assert (before["values"], before["misses"]) == ({"sum": 6.0, "exp_sum": 3.0}, 2)
    jit = site / "nbgrad" / "kernels" / "basics.py"
    source = jit.read_text()
    assert source.count("s = a.dtype.type(0)") == 1
    jit.write_text(source.replace("s = a.dtype.type(0)", "s = a.dtype.type(1)"))
    if rewrite_record:
        record = next(site.glob("nbgrad-*.dist-info")) / "RECORD"
        rows = [_record_row("nbgrad/kernels/basics.py", jit.read_bytes())
                if row.startswith("nbgrad/kernels/basics.py,") else row
                for row in record.read_text().splitlines()]
        record.write_text("\n".join(rows) + "\n")
    after = _probe(tmp_path, site, "sum", "exp_sum")
    assert (after["values"], after["misses"]) == ({"sum": 7.0, "exp_sum": 4.0}, 2)


def _truncate(files: list[Path]) -> None:
    for f in files:
        os.truncate(f, f.stat().st_size // 2)


def _index_of_another_numba(files: list[Path]) -> None:
    (index,) = files
    with index.open("rb") as f:
        pickle.load(f)  # the Numba version, which heads the index
        rest = f.read()
    with index.open("wb") as f:
        pickle.dump("0.0.1", f, protocol=-1)
        f.write(rest)


def _swap(files: list[Path]) -> None:
    """The float64 and the int64 kernels' data files trade places: the index names the
    other signature's machine code (what two processes compiling at once can leave)."""
    first, second = files
    first.rename(first.with_suffix(".tmp"))
    second.rename(first)
    first.with_suffix(".tmp").rename(second)


# name: (what is done to vector_sum's cache files, to which ones, whether nbgrad warns;
# Numba itself drops an index of another Numba version before reading the rest).
DAMAGES = {
    "truncated-index": (_truncate, ".nbi", True),
    "truncated-data": (_truncate, ".nbc", True),
    "index-of-another-numba": (_index_of_another_numba, ".nbi", False),
    "swapped-data": (_swap, ".nbc", True),
}


@pytest.fixture(scope="module")
def after_damage(installed, tmp_path_factory) -> tuple[Path, dict]:
    """The install, and for each of DAMAGES the finished process run on a cache of
    vector_sum's float64 and int64 kernels damaged that way. One process writes the cache;
    the copies damaged each way then run at the same time (each in its own directory)."""
    tmp = tmp_path_factory.mktemp("damage")
    site = tmp / "site"
    shutil.copytree(installed, site, symlinks=True)
    assert _probe(tmp, site, "sum", "sum_int", numba_cache_dir=tmp / "cache")["misses"] == 2
    runs = {}
    for name, (damage, suffix, _) in DAMAGES.items():
        shutil.copytree(tmp / "cache", tmp / name)
        damage(sorted((tmp / name).glob(f"*/{SUM}{suffix}")))
        runs[name] = _start(tmp, site, "sum", "sum_int", numba_cache_dir=tmp / name)
    return site, {name: _wait(run) for name, run in runs.items()}


@pytest.mark.parametrize("name", DAMAGES)
def test_a_damaged_cache_file_is_recompiled_and_rewritten(after_damage, name):
    site, done = after_damage
    report = _report(done[name], site)
    assert report["values"] == {"sum": 6.0, "sum_int": 6}
    assert (report["hits"], report["misses"]) == (0, 2)
    assert report["reread"] == 2  # both rewritten entries load again
    assert ("CacheFileWarning" in report["stderr"]) == DAMAGES[name][2]


def _identity(x):
    return x


def test_every_cached_nbgrad_kernel_has_the_checked_cache():
    """The wiring: numba.core.dispatcher.FunctionCache was rebound before any kernel
    module decorated its kernels, and only nbgrad's functions get the nbgrad cache."""
    kernels = [
        k for name, module in list(sys.modules.items()) if name.startswith("nbgrad.")
        for obj in vars(module).values() if isinstance(obj, numba.core.dispatcher.Dispatcher)
        for k in (obj, getattr(obj, "serial", None)) if k is not None
    ]
    assert len(kernels) > 50 and basics.vector_sum in kernels
    assert all(isinstance(k._cache, _cache.LazyKernelCache) for k in kernels)
    assert isinstance(basics.vector_sum._cache.cache, _cache.KernelCache)
    other = numba.njit(cache=True)(_identity)
    assert type(other._cache) is numba.core.caching.FunctionCache
