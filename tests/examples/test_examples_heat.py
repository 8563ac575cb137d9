"""The heat-equation operator examples, ono-heat, lno-heat and lno-rollout: each learns at
its quick size, is deterministic for a seed and runs from the command line; the rollout
data pairs and the rollout itself keep the solver's layout and boundary values."""

import numpy as np
import pytest

from nbgrad import nn
from nbgrad.datasets import heat1d, heat_trajectories
from nbgrad.examples import _heat, lno_heat, lno_rollout, ono_heat
from nbgrad.examples.__main__ import main as examples_main


def test_heat_data_is_heat1d_in_float32():
    data = _heat.load_data(20, 5)
    (u0, u), (v0, v) = heat1d(20, 5)
    for key, ref in (("x_train", u0), ("y_train", u), ("x_test", v0), ("y_test", v)):
        assert data[key].dtype == np.float32
        np.testing.assert_allclose(data[key], ref, rtol=1e-6, atol=1e-7)
    assert data["x"].shape == (32,)


@pytest.mark.parametrize("example, layer", [(ono_heat, nn.ONO), (lno_heat, nn.LNO)])
def test_heat_example_reaches_the_target_at_the_quick_size(example, layer):
    # measured at the quick size: ONO 1.2e-4, LNO 2.7e-4 (full size: see the README)
    history = example.train(**example.SIZES["quick"], show_progress=False)
    assert history["mse"] < 1e-3
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 100
    assert history["mse"] < history["baseline_mse"] / 300
    assert history["prediction"].shape == (50, 32)
    model = history["model"]
    assert isinstance(model[0], layer) and isinstance(model[2], layer)


def test_heat_example_is_deterministic_for_a_seed():
    runs = [lno_heat.train(epochs=2, seed=3, show_progress=False) for _ in range(2)]
    assert runs[0]["loss"] == runs[1]["loss"]
    assert np.array_equal(runs[0]["prediction"], runs[1]["prediction"])


@pytest.mark.parametrize("name", ["ono-heat", "lno-heat"])
def test_heat_example_command_line(name, tmp_path, capsys):
    png = tmp_path / "heat.png"
    assert examples_main([name, "--epochs", "2", "--no-progress", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "test MSE" in out and "seconds" in out
    pytest.importorskip("matplotlib")
    assert png.stat().st_size > 0


def test_rollout_pairs_are_k_solver_steps_apart():
    data = lno_rollout.load_data(3, 2, k=5, horizon=4, pair_every=2)
    traj = heat_trajectories(5, 20, dt=lno_rollout.DT).astype(np.float32)
    starts = np.arange(0, 16, 2)  # t_i + k <= k * horizon
    assert data["x_train"].shape == (3 * len(starts), 48)
    np.testing.assert_array_equal(data["x_train"][len(starts) + 1], traj[1, starts[1]])
    np.testing.assert_array_equal(data["y_train"][len(starts) + 1], traj[1, starts[1] + 5])
    np.testing.assert_array_equal(data["x_test"][0], traj[3, 0])
    np.testing.assert_array_equal(data["test_states"], traj[3:, ::5])
    assert data["test_states"].shape == (2, 5, 48)


def test_rollout_starts_at_u0_and_keeps_the_boundary_values():
    data = lno_rollout.load_data(2, 2, k=5, horizon=3)
    model = lno_rollout.build_model()
    u0 = data["test_states"][:, 0]
    states = lno_rollout.rollout(model, u0, 3)
    assert states.shape == (2, 4, 48)
    np.testing.assert_array_equal(states[:, 0], u0)
    assert np.all(states[:, :, 0] == -1) and np.all(states[:, :, -1] == 1)


def test_lno_rollout_learns_at_the_quick_size():
    # measured at the quick size: one-step 5.9e-9, rollout 1.6e-7, persistence 5.8e-2
    history = lno_rollout.train(**lno_rollout.SIZES["quick"], show_progress=False)
    assert history["one_step_mse"] < 1e-6
    assert history["rollout_mse"] < 1e-5
    assert history["rollout_mse"] < history["persistence_mse"] / 1e3
    assert history["final_relative_l2"] < 1e-2
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 1e3
    assert history["rollout"].shape == history["data"]["test_states"].shape
    assert len(history["rollout_mse_per_step"]) == 50


def test_lno_rollout_command_line_and_athena_network(tmp_path, capsys):
    png = tmp_path / "rollout.png"
    assert examples_main(["lno-rollout", "--quick", "--epochs", "1", "--hidden", "8",
                          "--no-progress", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "test one-step MSE" in out and "rollout MSE" in out and "seconds" in out
    pytest.importorskip("matplotlib")
    assert png.stat().st_size > 0
