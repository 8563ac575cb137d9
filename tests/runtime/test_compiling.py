"""nbgrad.compiling: the first-use notice, the compile recorder, warm-up (in this process
and in workers) and the command lines built on them. Subprocesses get an empty kernel
cache of their own, so that they really compile."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.compiling import warmup
from nbgrad.demo import ops_in_graph
from nbgrad.runtime.notices import recording_compiles


def _run(code: str, cache: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, NUMBA_CACHE_DIR=cache, **env), timeout=600)


def test_a_first_compile_is_announced_once_with_the_op_name(tmp_path):
    code = ("import numpy as np, nbgrad as nb\n"
            "x = nb.tensor(np.ones(3))\n"
            "x.exp(); x.exp()\n"
            "nb.tensor(np.ones(3, np.float32)).exp()\n")
    done = _run(code, str(tmp_path), NBGRAD_COMPILE_NOTICE_SECONDS="0")
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if line.startswith("nbgrad: compiling")]
    assert notices == ["nbgrad: compiling exp kernels (first use, cached afterwards; "
                       "`python -m nbgrad warmup` compiles ahead of time)"]


def test_no_notice_from_the_cache_or_when_turned_off(tmp_path):
    code = "import numpy as np, nbgrad as nb\nnb.tensor(np.ones(3)).exp()\n"
    assert _run(code, str(tmp_path)).returncode == 0
    again = _run(code, str(tmp_path), NBGRAD_COMPILE_NOTICE_SECONDS="0")
    assert "compiling" not in again.stderr
    off = _run(code, str(tmp_path / "other"), NBGRAD_COMPILE_NOTICE_SECONDS="-1")
    assert off.returncode == 0 and "compiling" not in off.stderr


def test_user_functions_without_a_module_still_compile():
    """A function made by exec() with no __name__ in its globals has __module__ None; the
    compile counter nbgrad listens with must take it, and keep counting nbgrad's own."""
    from numba import njit

    from nbgrad.runtime.compile_ahead import compiles

    namespace: dict = {}
    exec("def twice(x):\n    return 2 * x\n", namespace)
    assert namespace["twice"].__module__ is None
    assert njit(namespace["twice"])(21) == 42
    assert compiles.depth == 0


def test_recorder_sees_the_compiles_of_a_new_signature():
    from numba import njit

    @njit
    def twice(a):
        return 2 * a

    with recording_compiles() as rec:
        twice(np.ones(2, np.int16))
    assert [depth for name, _, depth in rec.records if name.endswith("twice")] == [0]
    assert rec.total() > 0
    with recording_compiles() as rec:
        twice(np.ones(2, np.int16))
    assert rec.records == []


# The two tests below run in a process of their own on this process's kernel cache:
# compile_twins compiles the other form of every kernel the process has compiled, which in
# a test worker that ran other files first is hundreds of kernels (minutes), and in a
# fresh process the few the op needs.
def _in_fresh_process(code: str) -> None:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr


def test_warm_op_compiles_what_a_call_needs_then_a_call_compiles_nothing():
    _in_fresh_process(
        "import numpy as np, nbgrad as nb\n"
        "from nbgrad.compiling import warm_op\n"
        "from nbgrad.runtime.notices import recording_compiles\n"
        "name, seconds = warm_op('tanh', ['float32'])\n"
        "assert name == 'tanh' and seconds >= 0\n"
        "x = nb.tensor(np.linspace(-1, 1, 7, dtype=np.float32), requires_grad=True)\n"
        "with recording_compiles() as rec:\n"
        "    nb.tanh(x).sum().backward()\n"
        "assert [r for r in rec.records if 'activation' in r[0]] == [], rec.records\n")


def test_compile_twins_leaves_every_twin_pair_with_the_same_signatures():
    _in_fresh_process(
        "from nbgrad.compiling import _nbgrad_dispatchers, compile_twins, warm_op\n"
        "warm_op('relu', ['float64'], twins=False)\n"
        "compile_twins()\n"
        "for kernel in _nbgrad_dispatchers():\n"
        "    twin = getattr(kernel, 'serial', None)\n"
        "    if twin is not None:\n"
        "        assert set(kernel.signatures) == set(twin.signatures), kernel\n")


def test_warmup_rejects_bad_arguments():
    with pytest.raises(ValueError, match="unknown op"):
        warmup(["no_such_op"])
    with pytest.raises(ValueError, match="floating-point"):
        warmup(["relu"], ["int64"])
    with pytest.raises(ValueError, match="jobs"):
        warmup(["relu"], jobs=-1)


def test_warmup_command_in_workers_fills_the_cache_for_a_later_process(tmp_path):
    cache = str(tmp_path)
    done = subprocess.run([sys.executable, "-m", "nbgrad", "warmup", "--ops", "relu,neg",
                           "--dtype", "float32", "--jobs", "2"], capture_output=True, text=True,
                          env=dict(os.environ, NUMBA_CACHE_DIR=cache), timeout=600)
    assert done.returncode == 0, done.stderr
    assert "compiled the kernels of 2 ops for float32" in done.stdout
    code = ("import numpy as np, nbgrad as nb\n"
            "from nbgrad.runtime.notices import recording_compiles\n"
            "x = nb.tensor(np.ones(5, np.float32), requires_grad=True)\n"
            "with recording_compiles() as rec:\n"
            "    nb.relu(x).backward(nb.tensor(np.ones(5, np.float32)))\n"
            "print([r[0] for r in rec.records if 'activation' in r[0]])\n")
    assert _run(code, cache).stdout.strip() == "[]"


def test_check_command_in_two_workers_prints_every_row_in_order(tmp_path):
    done = subprocess.run([sys.executable, "-m", "nbgrad", "check", "relu", "neg", "--jobs",
                           "2"], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path)))
    assert done.returncode == 0, done.stderr
    rows = [line.split()[0] for line in done.stdout.splitlines()[1:3]]
    assert rows == ["relu", "neg"]
    assert "2 passed, 0 failed" in done.stdout


def test_command_line_rejects_zero_jobs_and_unknown_ops():
    for args in (["check", "--jobs", "0"], ["warmup", "--jobs", "0"]):
        done = subprocess.run([sys.executable, "-m", "nbgrad", *args], capture_output=True,
                              text=True)
        assert done.returncode == 2 and "--jobs must be at least 1" in done.stderr
    done = subprocess.run([sys.executable, "-m", "nbgrad", "warmup", "--ops", "nope"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "unknown op(s): nope" in done.stderr


def test_ops_in_graph_lists_the_ops_recorded_for_a_loss():
    x = nb.tensor(np.ones((2, 3)), requires_grad=True)
    w = nb.tensor(np.ones((3, 4)), requires_grad=True)
    loss = nb.mse_loss(nb.tanh(x @ w), nb.tensor(np.zeros((2, 4))))
    assert ops_in_graph(loss) == ["matmul", "mse_loss", "tanh"]


def test_demo_trains_checks_the_ops_it_ran_and_plots(tmp_path, capsys):
    from nbgrad.demo import main

    path = tmp_path / "demo.png"
    assert main(epochs=5, plot_path=str(path), show_progress=False) == 0
    out = capsys.readouterr().out
    assert "gradcheck of the 5 ops the training step ran" in out
    for op in ("add", "gno", "linear", "mse_loss", "tanh"):
        assert f"\n{op} " in out and "FAIL" not in out
    pytest.importorskip("matplotlib")
    assert path.stat().st_size > 0


def test_ops_registered_outside_nbgrad_stay_in_this_process():
    from nbgrad.compiling import workers_for

    assert workers_for(["relu", "neg", "exp"], 2) == 2
    assert workers_for(["relu"], 4) == 1
    # in a process of its own (see _in_fresh_process): an op defined in the script, which a
    # spawned worker cannot know, keeps the warm-up in that process
    _in_fresh_process(
        "import nbgrad as nb\n"
        "from nbgrad.compiling import warmup, workers_for\n"
        "@nb.register('test_local_square', samples=lambda rng: [nb.Sample(rng.random(3))])\n"
        "class LocalDouble(nb.Function):\n"
        "    forward = staticmethod(lambda ctx, x: 2 * x)\n"
        "    backward = staticmethod(lambda ctx, g: 2 * g)\n"
        "assert workers_for(['relu', 'test_local_square'], 2) == 1\n"
        "done = warmup(['test_local_square', 'relu'], ['float64'], jobs=2)\n"
        "assert done[0][0] == 'test_local_square', done\n")


_AHEAD_SCRIPT = """
import sys
import numpy as np
import nbgrad as nb
from nbgrad.runtime.compile_ahead import compile_hook as backward_ahead
from nbgrad.runtime.notices import recording_compiles

with open(sys.argv[1], "a") as runs:
    runs.write("ran\\n")
x = nb.tensor(np.linspace(-2.0, 2.0, 7), requires_grad=True)
y = nb.tanh(x)
print("helper done:", backward_ahead.wait(300), "calls:", backward_ahead.sent)
with recording_compiles() as rec:
    y.backward(nb.tensor(np.ones(7)))
print("backward compiles:", sorted({k for k, _, depth in rec.records if depth == 0}))
assert np.allclose(x.grad.numpy(), 1 - np.tanh(np.linspace(-2.0, 2.0, 7)) ** 2)
"""


@pytest.mark.parametrize("ahead", ["1", "0"])
def test_the_helper_compiles_the_backward_while_the_forward_goes_on(tmp_path, ahead):
    script, runs = tmp_path / "train.py", tmp_path / "runs.txt"
    script.write_text(_AHEAD_SCRIPT)  # no __main__ guard: the helper must not run it
    lines = _run_on_empty_cache([str(script), str(runs)], tmp_path / "cache", ahead)
    assert runs.read_text() == "ran\n"
    _check_compiled_ahead(lines, ahead, "backward",
                          "nbgrad.kernels.activation.tanh_backward_serial")


def _run_on_empty_cache(args: list[str], cache, ahead: str) -> list[str]:
    """The stdout lines of ``python *args`` on the empty cache directory ``cache``, with
    the helper on (``ahead`` "1") or off ("0")."""
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, NUMBA_CACHE_DIR=str(cache),
                                                NBGRAD_COMPILE_AHEAD=ahead))
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def _check_compiled_ahead(lines: list[str], ahead: str, stage: str, kernel: str) -> None:
    """With the helper: two calls sent (the early C functions at the first compile, then
    the op or step), and nothing compiled at ``stage``. Without it (the control): no call
    sent, and ``kernel`` compiled at ``stage``."""
    if ahead == "1":
        assert lines == ["helper done: True calls: 2", f"{stage} compiles: []"]
    else:
        assert lines[0] == "helper done: True calls: 0"
        assert kernel in lines[1]


_STEP_AHEAD_SCRIPT = """
import numpy as np
import nbgrad as nb
from nbgrad.runtime.compile_ahead import compile_hook as backward_ahead
from nbgrad.runtime.notices import recording_compiles

w = nb.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3), requires_grad=True)
b = nb.tensor(np.zeros(2), requires_grad=True)
opt = nb.optim.SGD([{"params": [w], "lr": 0.5}, {"params": [b]}], lr=0.1, momentum=0.9)
print("helper done:", backward_ahead.wait(300), "calls:", backward_ahead.sent)
w.grad = nb.tensor(np.full((2, 3), 2.0))
b.grad = nb.tensor(np.ones(2))
with recording_compiles() as rec:
    opt.step()
print("step compiles:", sorted({k for k, _, depth in rec.records if depth == 0}))
assert np.array_equal(w.numpy(), np.linspace(-1.0, 1.0, 6).reshape(2, 3) - 0.5 * 2.0)
assert np.array_equal(b.numpy(), -0.1 * np.ones(2))
"""


@pytest.mark.parametrize("ahead", ["1", "0"])
def test_the_helper_compiles_the_optimizer_step_of_a_new_optimizer(tmp_path, ahead):
    lines = _run_on_empty_cache(["-c", _STEP_AHEAD_SCRIPT], tmp_path, ahead)
    _check_compiled_ahead(lines, ahead, "step", "nbgrad.kernels.optim.sgd_step_serial")


_EARLY_SCRIPT = """
import numpy as np
import nbgrad as nb
from nbgrad.runtime.compile_ahead import compile_hook
from nbgrad.runtime.notices import recording_compiles

x = nb.tensor(np.arange(12.0, dtype=np.float32).reshape(3, 4))
with recording_compiles() as rec:
    y = nb.matmul(x, x.T)
print("helper calls:", compile_hook.sent)
print("GEMM block compiled here:", "nbgrad.kernels.matmul._block" in {k for k, _, _ in rec.records})
assert np.array_equal(y.numpy(), x.numpy() @ x.numpy().T)
"""


@pytest.mark.parametrize("ahead", ["1", "0"])
def test_the_helper_compiles_the_gemm_block_at_the_first_compile_of_a_dtype(tmp_path,
                                                                             ahead):
    lines = _run_on_empty_cache(["-c", _EARLY_SCRIPT], tmp_path, ahead)
    if ahead == "1":  # sent, waited for, then loaded from the cache the helper wrote
        assert lines == ["helper calls: 1", "GEMM block compiled here: False"]
    else:
        assert lines == ["helper calls: 0", "GEMM block compiled here: True"]


_CHECK_AHEAD_SCRIPT = """
from nbgrad.runtime.compile_ahead import compile_hook
from nbgrad.runtime.notices import recording_compiles
from nbgrad.testing import check_registered

tickets = compile_hook.submit_checks(["relu", "tanh"])  # sent last first
compile_hook.join(tickets["relu"])
print("helper done:", compile_hook.wait(300), "calls:", compile_hook.sent, tickets)
with recording_compiles() as rec:
    report = check_registered("tanh")
    report_relu = check_registered("relu")
print("check compiles:", sorted({k for k, _, depth in rec.records if depth == 0}))
assert report.passed and report_relu.passed
"""


@pytest.mark.parametrize("ahead", ["1", "0"])
def test_the_helper_compiles_the_kernels_of_a_gradcheck_sent_to_it(tmp_path, ahead):
    lines = _run_on_empty_cache(["-c", _CHECK_AHEAD_SCRIPT], tmp_path, ahead)
    if ahead == "1":  # the checks only: this process then compiles nothing at all
        assert lines == ["helper done: True calls: 2 {'tanh': 1, 'relu': 2}",
                         "check compiles: []"]
    else:
        assert lines[0] == "helper done: True calls: 0 {'tanh': 0, 'relu': 0}"
        assert "nbgrad.kernels.activation.tanh_backward_serial" in lines[1]


_HELPER_ENDS_SCRIPT = """
import numpy as np
import nbgrad as nb
from nbgrad.runtime.compile_ahead import compile_hook as backward_ahead

x = nb.tensor(np.linspace(-2.0, 2.0, 7), requires_grad=True)
y = nb.tanh(x)
print(backward_ahead.process.pid, flush=True)
if KILL:
    backward_ahead.process.kill()  # a helper that dies mid-call: no wait for it
y.backward(nb.tensor(np.ones(7)))
assert np.allclose(x.grad.numpy(), 1 - np.tanh(np.linspace(-2.0, 2.0, 7)) ** 2)
"""


@pytest.mark.parametrize("kill", [True, False])
def test_the_helper_ends_with_its_process_and_a_dead_helper_is_not_waited_for(tmp_path,
                                                                              kill):
    done = subprocess.run([sys.executable, "-c", f"KILL = {kill}\n" + _HELPER_ENDS_SCRIPT],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path),
                                   NBGRAD_COMPILE_AHEAD="1"))
    assert done.returncode == 0, done.stderr
    pid = int(done.stdout.split()[0])
    for _ in range(50):  # killed at exit; the kernel removes it from the table at once
        if not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid):
            break
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}") or "Z" in _state(pid)


def _state(pid: int) -> str:
    """The process state letter from /proc (Z for a zombie), '' once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return ""


def test_the_helper_skips_what_it_cannot_send():
    from nbgrad.function import REGISTRY, _is_nbgrad_op
    from nbgrad.runtime.compile_ahead import BackwardAhead, compiles

    class Twice(nb.Function):  # not registered: a fresh interpreter would not know it
        @staticmethod
        def forward(ctx, x):
            return 2 * x

    assert not _is_nbgrad_op(Twice) and _is_nbgrad_op(REGISTRY["tanh"])
    helper = BackwardAhead(compiles)
    helper.enabled = True
    assert helper.submit("tanh", [np.ones(3)], (True,), {"unpicklable": lambda: 0}) == 0
    assert helper.sent == 0 and helper.process is None
    assert helper.wait(0)


def test_a_call_like_one_the_helper_is_still_on_is_sent_too(monkeypatch):
    """The digits CNN's second convolution reuses the first one's forward kernel (nothing
    compiles) but needs an input gradient the first did not: while the helper has not
    finished a call of an op, later calls of that op go to it too; after that, none do."""
    from nbgrad import function
    from nbgrad.runtime.compile_ahead import BackwardAhead, compiles

    x = nb.tensor(np.ones(3), requires_grad=True)
    nb.tanh(x), nb.sin(x)  # compiled before the helper is watched
    helper = BackwardAhead(compiles)
    sent = []
    monkeypatch.setattr(helper, "_send", lambda call: sent.append(call[1]) or len(sent))
    monkeypatch.setattr(function, "compile_hook", helper)
    nb.tanh(x)
    assert sent == []
    # the helper is on a tanh call: one call sent, none done
    helper.last_call["tanh"], helper.sent, helper.done = 1, 1, 0
    nb.tanh(x)
    nb.sin(x)  # another op: not sent
    assert sent == ["tanh"] and helper.last_call["tanh"] == 1
    helper.done = 1
    nb.tanh(x)
    assert sent == ["tanh"]


def test_only_nbgrad_optimizers_are_sent_to_the_helper(monkeypatch):
    """A step is sent when building the optimiser compiled a kernel (here: the compile
    count moves at every read), for nbgrad's own classes only: a fresh interpreter does
    not know a subclass defined elsewhere."""
    from nbgrad.optim import optimizer

    class MovingCount:
        reads = 0

        @property
        def started(self):
            self.reads += 1
            return self.reads

    sent = []
    monkeypatch.setattr(optimizer.compile_hook, "compiles", MovingCount())
    monkeypatch.setattr(optimizer.compile_hook, "submit_step",
                        lambda name, groups: sent.append((name, groups)) or len(sent))

    class OwnSGD(nb.optim.SGD):
        pass

    p = nb.tensor(np.ones(3), requires_grad=True)
    OwnSGD([p], lr=0.1)
    nb.optim.SGD([p], lr=0.1, momentum=0.5)
    assert [name for name, _ in sent] == ["SGD"]
    (arrays, options), = sent[0][1]
    assert arrays[0] is p._data and options["momentum"] == 0.5 and "params" not in options
