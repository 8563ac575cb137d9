"""The FNO examples (darcy-fno, burgers-fno): the data layout, the loss, determinism, the
command line, and that each learns at its quick size."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.examples import __main__ as examples_main
from nbgrad.examples import burgers_fno, darcy_fno
from nbgrad.examples._common import relative_l2


def test_darcy_data_is_channels_first_a_x_y():
    data = darcy_fno.load_data(6, 2, resolution=8)
    x, y = data["x_train"], data["y_train"]
    assert x.shape == (6, 3, 8, 8) and y.shape == (6, 1, 8, 8)
    assert x.dtype == np.float32 and y.dtype == np.float32
    axis = np.linspace(0, 1, 8, dtype=np.float32)
    np.testing.assert_array_equal(x[:, 1], np.broadcast_to(axis[:, None], (6, 8, 8)))
    np.testing.assert_array_equal(x[:, 2], np.broadcast_to(axis[None, :], (6, 8, 8)))
    # a takes two values; u vanishes on the boundary
    assert len(np.unique(x[:, 0])) == 2
    assert np.all(y[:, 0, 0] == 0) and np.all(y[:, 0, :, -1] == 0)


def test_burgers_data_is_channels_first_u0_x():
    data = burgers_fno.load_data(5, 3, resolution=16)
    x, y = data["x_train"], data["y_train"]
    assert x.shape == (5, 2, 16) and y.shape == (5, 1, 16) and x.dtype == np.float32
    np.testing.assert_allclose(x[:, 1], np.broadcast_to(np.arange(16) / 16, (5, 16)))
    assert data["x_test"].shape == (3, 2, 16)


def test_relative_l2_loss_is_the_metric_and_differentiates():
    rng = np.random.default_rng(0)
    pred, truth = rng.standard_normal((2, 4, 1, 5, 6))
    p = nb.tensor(pred, requires_grad=True)
    loss = darcy_fno.relative_l2_loss(p, nb.tensor(truth))
    np.testing.assert_allclose(loss.item(), relative_l2(pred, truth), rtol=1e-12)
    loss.backward()
    d = (pred - truth).reshape(4, -1)
    expect = d / (np.linalg.norm(d, axis=1, keepdims=True)
                  * np.linalg.norm(truth.reshape(4, -1), axis=1, keepdims=True)) / 4
    np.testing.assert_allclose(p.grad.numpy(), expect.reshape(pred.shape), rtol=1e-10)


def test_same_seed_same_training_bit_for_bit():
    runs = [darcy_fno.train(n_train=8, n_test=4, epochs=1, batch_size=4, seed=3,
                            show_progress=False) for _ in range(2)]
    assert runs[0]["loss"] == runs[1]["loss"]
    for (name, p), (_, q) in zip(runs[0]["model"].named_parameters(),
                                 runs[1]["model"].named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_darcy_fno_learns_at_the_quick_size():
    # measured: epoch losses 0.99 -> 0.38, test relative L2 0.38 (seed 0)
    history = darcy_fno.train(**darcy_fno.SIZES["quick"], show_progress=False)
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 2
    assert history["test_relative_l2"][-1] < 0.5


def test_burgers_fno_learns_at_the_quick_size():
    # measured: epoch losses 0.99 -> 0.024, test relative L2 0.028 (seed 0)
    history = burgers_fno.train(**burgers_fno.SIZES["quick"], show_progress=False)
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 5
    assert history["test_relative_l2"][-1] < 0.06


@pytest.mark.parametrize("name", ["darcy-fno", "burgers-fno"])
def test_command_line_prints_the_table_and_saves_the_figure(name, tmp_path, capsys):
    png = tmp_path / f"{name}.png"
    assert examples_main.main([name, "--quick", "--epochs", "1", "--no-progress",
                               "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "test relative L2" in out and "seconds" in out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no figure" in out
    else:
        assert png.stat().st_size > 0
