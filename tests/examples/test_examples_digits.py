"""The digits example: it learns (>= 97% test accuracy in 15 epochs) and tracks PyTorch
step by step from the same weights and batch order (oracle)."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.data import DataLoader, TensorDataset
from nbgrad.datasets import load_digits, split_digits
from nbgrad.examples import digits


def test_bundled_digits_and_split():
    images, labels = load_digits()
    assert images.shape == (1797, 1, 8, 8) and images.dtype == np.float32
    assert images.min() == 0 and images.max() == 1
    assert np.bincount(labels).tolist() == [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    (x_train, y_train), (x_test, y_test) = split_digits(0)
    assert len(y_train) == 1437 and len(y_test) == 360
    seen = np.concatenate([x_train, x_test]).reshape(1797, -1)
    assert len(np.unique(seen, axis=0)) == len(np.unique(images.reshape(1797, -1), axis=0))


def test_digits_example_reaches_97_percent():
    history = digits.train(epochs=15, show_progress=False)
    assert history["test_accuracy"][-1] >= 0.97
    assert history["epoch_loss"][-1] < history["epoch_loss"][0] / 5


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_first_epoch_tracks_pytorch(optimizer):
    torch = pytest.importorskip("torch")
    nb.manual_seed(3)
    model = digits.build_model()
    reference = digits.torch_twin(torch)
    with torch.no_grad():
        for (name, p), (t_name, tp) in zip(model.named_parameters(),
                                           reference.named_parameters()):
            assert name == t_name
            tp.copy_(torch.from_numpy(p.numpy().copy()))
    opt = digits.make_optimizer(model, optimizer, None)
    t_opt = (torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
             if optimizer == "sgd" else torch.optim.Adam(reference.parameters(), lr=1e-3))
    (x_train, y_train), _ = split_digits(0)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=64, shuffle=True, seed=0)
    batches = list(loader)
    losses = digits.train_epoch(model, batches, opt)
    t_losses = []
    for x, y in batches:
        loss = torch.nn.functional.cross_entropy(reference(torch.from_numpy(x.numpy())),
                                                 torch.from_numpy(y.numpy()))
        t_opt.zero_grad()
        loss.backward()
        t_opt.step()
        t_losses.append(loss.item())
    np.testing.assert_allclose(losses, t_losses, rtol=1e-4)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_checkpoint_resumes_training_bit_for_bit(tmp_path, optimizer):
    """Model, optimiser and scheduler saved after epoch 1 and loaded into fresh objects
    (built from other random weights) train epoch 2 to exactly the same parameters."""
    (x_train, y_train), _ = split_digits(0)
    loader = DataLoader(TensorDataset(x_train[:320], y_train[:320]), batch_size=64,
                        shuffle=True, seed=0)

    def fresh(seed):
        nb.manual_seed(seed)
        model = digits.build_model()
        opt = digits.make_optimizer(model, optimizer, None)
        return model, opt, nb.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)

    model, opt, schedule = fresh(0)
    digits.train_epoch(model, loader, opt)
    schedule.step()
    nb.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
             "scheduler": schedule.state_dict(), "epoch": 1}, tmp_path / "ckpt.npz")

    checkpoint = nb.load(tmp_path / "ckpt.npz")
    resumed, resumed_opt, resumed_schedule = fresh(1)
    resumed.load_state_dict(checkpoint["model"])
    resumed_opt.load_state_dict(checkpoint["optimizer"])
    resumed_schedule.load_state_dict(checkpoint["scheduler"])
    assert resumed_opt.param_groups[0]["lr"] == opt.param_groups[0]["lr"]

    for m, o in ((model, opt), (resumed, resumed_opt)):
        loader.set_epoch(checkpoint["epoch"])
        digits.train_epoch(m, loader, o)
    for (name, p), (_, q) in zip(model.named_parameters(), resumed.named_parameters()):
        assert np.array_equal(p.numpy(), q.numpy()), name
