"""The darcy-tfno example: the data at two resolutions, the reference's TFNO
configuration, the data processor's encoding, the metrics against NumPy formulas,
determinism, the command line, and that it learns at its quick size."""

import numpy as np
import pytest

from nbgrad.datasets import darcy2d
from nbgrad.examples import __main__ as examples_main
from nbgrad.examples import darcy_tfno
from nbgrad.nn.fno import FNO


def test_data_is_raw_darcy2d_at_16_and_32():
    data = darcy_tfno.load_data(6, (3, 2), seed=0)
    a, u = darcy2d(9, resolution=16, seed=0)
    assert data["x_train"].shape == (6, 1, 16, 16) and data["x_train"].dtype == np.float32
    np.testing.assert_array_equal(data["x_train"][:, 0], a[:6].astype(np.float32))
    np.testing.assert_array_equal(data["y_train"][:, 0], u[:6].astype(np.float32))
    x16, y16 = data["tests"][16]
    np.testing.assert_array_equal(x16[:, 0], a[6:].astype(np.float32))  # disjoint samples
    np.testing.assert_array_equal(y16[:, 0], u[6:].astype(np.float32))
    x32, y32 = data["tests"][32]
    assert x32.shape == (2, 1, 32, 32) and y32.shape == (2, 1, 32, 32)
    assert set(np.unique(x32)) == {3.0, 12.0} and np.all(y32[:, 0, 0] == 0)


def test_mismatched_test_sizes_are_refused():
    with pytest.raises(ValueError, match="n_tests"):
        darcy_tfno.load_data(4, (2,), test_resolutions=(16, 32))


def test_model_is_the_reference_darcy_tfno():
    model = darcy_tfno.build_model()
    assert model.n_modes == (16, 16) and model.hidden_channels == 32
    assert model.factorization == "tucker" and model.rank == 0.42
    assert model.lifting_channels == 64 and model.projection_channels == 64
    tucker = sum(p.numel() for p in model.parameters())
    dense = sum(p.numel() for p in FNO((16, 16), 1, 1, 32, projection_channel_ratio=2)
                .parameters())
    assert tucker < 0.6 * dense  # the Tucker core and factors: about half the weights


def test_processor_encodes_per_channel_and_decodes_in_eval():
    data = darcy_tfno.load_data(20, (4, 2))
    processor = darcy_tfno.build_processor(data, darcy_tfno.build_model())
    x, y = data["x_train"], data["y_train"]
    batch = processor.preprocess({"x": x[:5], "y": y[:5]})
    np.testing.assert_allclose(batch["x"].numpy(),
                               (x[:5] - x.mean()) / (x.std(ddof=1) + 1e-7), rtol=1e-5)
    np.testing.assert_allclose(batch["y"].numpy(),
                               (y[:5] - y.mean()) / (y.std(ddof=1) + 1e-7), rtol=1e-4,
                               atol=1e-5)
    processor.eval()
    output, _ = processor(x=x[:2], y=y[:2])
    raw = processor.model(processor.in_normalizer.transform(x[:2])).numpy()
    np.testing.assert_allclose(output.numpy(), raw * (y.std(ddof=1) + 1e-7) + y.mean(),
                               rtol=1e-4, atol=1e-7)


def _central_gradients(u):
    """Periodic central differences along the last two axes, h = 1 / n."""
    n1, n2 = u.shape[-2:]
    d1 = (np.roll(u, -1, -2) - np.roll(u, 1, -2)) * n1 / 2
    d2 = (np.roll(u, -1, -1) - np.roll(u, 1, -1)) * n2 / 2
    return d1, d2


def test_metrics_are_relative_l2_and_h1_per_sample():
    data = darcy_tfno.load_data(10, (3, 2))
    processor = darcy_tfno.build_processor(data, darcy_tfno.build_model())
    metrics = darcy_tfno.evaluate(processor, data)
    for res, (x, y) in data["tests"].items():
        p = darcy_tfno.predict(processor, x).astype(np.float64)
        t = y.astype(np.float64)
        flat = (p - t).reshape(len(t), -1)
        l2 = np.mean(np.linalg.norm(flat, axis=1) / np.linalg.norm(t.reshape(len(t), -1),
                                                                   axis=1))
        dp, dt = _central_gradients(p), _central_gradients(t)
        num = ((p - t) ** 2 + sum((a - b) ** 2 for a, b in zip(dp, dt))).sum((1, 2, 3))
        den = (t ** 2 + sum(b ** 2 for b in dt)).sum((1, 2, 3))
        h1 = np.mean(np.sqrt(num) / np.sqrt(den))
        assert metrics[f"{res}_l2"] == pytest.approx(l2, rel=1e-4)
        assert metrics[f"{res}_h1"] == pytest.approx(h1, rel=1e-4)


def test_same_seed_same_training_bit_for_bit():
    runs = [darcy_tfno.train(n_train=8, n_tests=(4, 2), epochs=1, batch_size=4, seed=3,
                             show_progress=False) for _ in range(2)]
    assert runs[0]["loss"] == runs[1]["loss"]
    for (name, p), (_, q) in zip(runs[0]["model"].named_parameters(),
                                 runs[1]["model"].named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name


def test_darcy_tfno_learns_at_the_quick_size():
    # measured (seed 0, 200 samples, 6 epochs): training H1 0.98 -> 0.22; test L2 / H1
    # 0.13 / 0.21 at 16x16 and 0.14 / 0.30 at 32x32 (full size, 20 epochs: 0.017 / 0.025
    # at 16x16)
    history = darcy_tfno.train(**darcy_tfno.SIZES["quick"], show_progress=False)
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 3
    assert history["16_l2"][-1] < 0.2 and history["16_h1"][-1] < 0.3
    assert history["32_l2"][-1] < 0.2 and history["32_h1"][-1] < 0.45


def test_command_line_prints_the_table_and_saves_the_figure(tmp_path, capsys):
    png = tmp_path / "darcy-tfno.png"
    assert examples_main.main(["darcy-tfno", "--quick", "--epochs", "1", "--no-progress",
                               "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert "test relative L2 (16x16)" in out and "test relative H1 (32x32)" in out
    assert "seconds per epoch" in out
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "no figure" in out
    else:
        assert png.stat().st_size > 0
