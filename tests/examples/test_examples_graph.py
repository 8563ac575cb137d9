"""The graph-neural-operator examples, gno-regression and darcy-gno: each learns at its
quick size, is deterministic for a seed, runs from the command line, and darcy-gno's
PyTorch twin (the W12 benchmark's reference) computes the same loss and gradients."""

import subprocess
import sys

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.datasets import darcy2d
from nbgrad.examples import darcy_gno, gno_regression
from nbgrad.examples.__main__ import main as examples_main


def test_gno_regression_fits_sin_and_cos():
    history = gno_regression.train(**gno_regression.SIZES["quick"], show_progress=False)
    assert history["mse"] < 1e-3
    assert history["loss"][-1] < history["loss"][0] / 100
    assert history["prediction"].shape == (20, 2)


def test_gno_regression_is_deterministic_for_a_seed():
    runs = [gno_regression.train(epochs=20, seed=3, show_progress=False)["loss"]
            for _ in range(2)]
    assert runs[0] == runs[1]


def test_gno_regression_command_line(tmp_path, capsys):
    png = tmp_path / "chain.png"
    assert examples_main(["gno-regression", "--epochs", "30", "--no-progress",
                          "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "final MSE" in out and "seconds" in out
    pytest.importorskip("matplotlib")
    assert png.stat().st_size > 0


def test_darcy_gno_learns_at_the_quick_size():
    history = darcy_gno.train(**darcy_gno.SIZES["quick"], show_progress=False)
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 2
    assert history["test_relative_l2"][-1] < 0.4
    model = history["model"]
    assert model.graph.num_nodes == 256 and len(model.layers) == darcy_gno.DEPTH


def test_darcy_gno_data_layout():
    data = darcy_gno.load_data(6, 2)
    x, y = data["x_train"], data["y_train"]
    assert x.shape == (6, 256, 3) and y.shape == (6, 256) and x.dtype == np.float32
    assert data["x_test"].shape == (2, 256, 3)
    points, _ = darcy_gno.grid_graph(16, 1.0)
    np.testing.assert_array_equal(x[3, :, 1:], points)
    _, u = darcy2d(8)
    np.testing.assert_allclose(y[2] * data["u_scale"], u[2].reshape(-1), rtol=1e-6,
                               atol=1e-9)
    # a takes two values, scaled to zero mean and unit variance over the training set
    assert len(np.unique(x[:, :, 0])) == 2
    assert abs(x[:, :, 0].mean()) < 1e-5 and abs(x[:, :, 0].std() - 1) < 1e-5


def test_darcy_gno_twin_matches_pytorch():
    torch = pytest.importorskip("torch")
    data = darcy_gno.load_data(6, 2)
    nb.manual_seed(5)
    model = darcy_gno.build_model()
    twin = darcy_gno.torch_twin(torch, model)
    x, y = data["x_train"][:4], data["y_train"][:4]

    loss = darcy_gno.relative_l2_loss(model(nb.tensor(x)), nb.tensor(y))
    loss.backward()
    out = twin(torch.from_numpy(x))
    t_y = torch.from_numpy(y)
    t_loss = (((out - t_y) ** 2).sum(dim=1) / (t_y ** 2).sum(dim=1)).sqrt().mean()
    t_loss.backward()

    np.testing.assert_allclose(loss.item(), t_loss.item(), rtol=1e-5)
    t_params = dict(twin.named_parameters())
    assert set(t_params) == {name for name, _ in model.named_parameters()}
    for name, p in model.named_parameters():
        want = t_params[name].grad.numpy()
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-3,
                                   atol=1e-4 * np.abs(want).max(), err_msg=name)


def test_the_example_after_the_demo_needs_no_kernel_the_demo_did_not(tmp_path):
    """A user who ran ``python -m nbgrad demo`` finds the gno-regression example's kernels
    compiled: in a fresh process, the example's training step after the demo's adds no
    signature to any of nbgrad's kernels (a dtype or layout the demo did not run would)."""
    code = """
import gc, sys
from numba.core.registry import CPUDispatcher
from nbgrad import demo
from nbgrad.examples import gno_regression

def signatures():
    return {(d.py_func.__qualname__, s) for d in gc.get_objects()
            if isinstance(d, CPUDispatcher) and d.py_func.__module__.startswith("nbgrad")
            for s in d.signatures}

demo.main(epochs=2, plot_path=sys.argv[1], show_progress=False)
before = signatures()
gno_regression.main(["--epochs", "2", "--no-progress", "--plot", sys.argv[2]])
print(sorted(signatures() - before))
"""
    plots = [str(tmp_path / name) for name in ("demo.png", "example.png")]
    done = subprocess.run([sys.executable, "-c", code, *plots], capture_output=True,
                          text=True, timeout=600, check=True)
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_the_example_takes_float32_on_request(tmp_path, capsys):
    assert examples_main(["gno-regression", "--epochs", "3", "--no-progress", "--plot",
                          str(tmp_path / "chain.png"),
                          "--dtype", "float32"]) == 0
    assert "final MSE" in capsys.readouterr().out
