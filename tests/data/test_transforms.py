"""UnitGaussianNormalizer and DefaultDataProcessor of nbgrad/data/transforms.py: fitted
statistics against NumPy and PyTorch, chunked fitting, transforms and their gradients,
state_dict round trips, the processor's train / eval behaviour around a model, bad
input."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nbgrad as nb
from nbgrad.data.transforms import DataProcessor, DefaultDataProcessor, UnitGaussianNormalizer

rng = np.random.default_rng(46)
DATA = rng.normal(1.5, 2.0, size=(12, 3, 5, 4)) * np.arange(1, 4)[None, :, None, None]


@pytest.mark.parametrize("dim,axes", [
    (None, (0, 1, 2, 3)), (0, (0,)), ([0, 2, 3], (0, 2, 3)), ([0, -1], (0, 3)),
])
def test_fit_matches_numpy_mean_and_unbiased_std(dim, axes):
    norm = UnitGaussianNormalizer(dim=dim).fit(DATA)
    np.testing.assert_allclose(norm.mean.numpy(), DATA.mean(axis=axes, keepdims=True),
                               rtol=1e-12)
    np.testing.assert_allclose(norm.std.numpy(), DATA.std(axis=axes, ddof=1, keepdims=True),
                               rtol=1e-12)
    assert norm.n_elements == int(np.prod([DATA.shape[a] for a in axes]))


def test_fit_and_transform_match_torch_with_gradients():
    torch = pytest.importorskip("torch")
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        data = DATA.astype(dtype)
        norm = UnitGaussianNormalizer(dim=[0, 2, 3], eps=1e-3).fit(nb.tensor(data))
        td = torch.tensor(data)
        tmean = td.mean(dim=[0, 2, 3], keepdim=True)
        tstd = td.std(dim=[0, 2, 3], keepdim=True)
        np.testing.assert_allclose(norm.mean.numpy(), tmean.numpy(), rtol=rtol)
        np.testing.assert_allclose(norm.std.numpy(), tstd.numpy(), rtol=rtol)
        assert norm.mean.dtype == (nb.float64 if dtype == np.float64 else nb.float32)
        x0 = rng.normal(size=(2, 3, 5, 4)).astype(dtype)
        w0 = rng.normal(size=(2, 3, 5, 4)).astype(dtype)
        for method, ref in (
                ("transform", lambda t, m=tmean, s=tstd: (t - m) / (s + 1e-3)),
                ("inverse_transform", lambda t, m=tmean, s=tstd: t * (s + 1e-3) + m)):
            x = nb.tensor(x0, requires_grad=True)
            tx = torch.tensor(x0, requires_grad=True)
            out, tout = getattr(norm, method)(x), ref(tx)
            np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=rtol,
                                       atol=rtol)
            (out * nb.tensor(w0)).sum().backward()
            (tout * torch.tensor(w0)).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=rtol)


def test_transformed_training_data_is_unit_gaussian_and_inverse_round_trips():
    norm = UnitGaussianNormalizer(dim=[0, 2, 3], eps=0.0).fit(DATA)
    z = norm(nb.tensor(DATA)).numpy()
    np.testing.assert_allclose(z.mean(axis=(0, 2, 3)), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.std(axis=(0, 2, 3), ddof=1), 1.0, rtol=1e-12)
    back = norm.inverse_transform(norm.transform(DATA))
    assert isinstance(back, np.ndarray)  # NumPy in, NumPy out
    np.testing.assert_allclose(back, DATA, rtol=1e-12, atol=1e-12)


@given(n=st.integers(2, 9), batch_size=st.integers(1, 5), seed=st.integers(0, 2 ** 16),
       dim=st.sampled_from([None, [0], [0, 2]]), split=st.booleans())
def test_partial_fit_in_chunks_equals_fit_on_all(n, batch_size, seed, dim, split):
    data = np.random.default_rng(seed).normal(3.0, 0.5, size=(n, 2, 3))
    whole = UnitGaussianNormalizer(dim=dim).fit(data)
    chunked = UnitGaussianNormalizer(dim=dim)
    if split:  # two calls, as from a data loader's batches
        chunked.partial_fit(data[: n // 2], batch_size=batch_size)
        chunked.partial_fit(data[n // 2:], batch_size=batch_size)
    else:
        chunked.partial_fit(nb.tensor(data), batch_size=batch_size)
    assert chunked.n_elements == whole.n_elements
    np.testing.assert_allclose(chunked.mean.numpy(), whole.mean.numpy(), rtol=1e-12)
    np.testing.assert_allclose(chunked.std.numpy(), whole.std.numpy(), rtol=1e-10)


def test_given_statistics_state_dict_and_casting():
    mean, std = np.full((1, 3, 1, 1), 2.0), np.full((1, 3, 1, 1), 4.0)
    given_ = UnitGaussianNormalizer(mean=mean, std=std, eps=0.0)
    np.testing.assert_allclose(given_.transform(np.full((2, 3, 1, 1), 6.0)), 1.0)
    fitted = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(DATA)
    state = fitted.state_dict()
    assert sorted(state) == ["mean", "std"]
    fresh = UnitGaussianNormalizer(dim=[0, 2, 3])
    assert fresh.state_dict() == {}
    fresh.load_state_dict(state)
    np.testing.assert_array_equal(fresh.transform(DATA), fitted.transform(DATA))
    other = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(DATA[:4])
    other.load_state_dict(state)
    np.testing.assert_array_equal(other.std.numpy(), fitted.std.numpy())
    fitted.to(nb.float32)
    assert fitted.mean.dtype == nb.float32 and fitted.std.dtype == nb.float32
    with pytest.raises(RuntimeError, match="mis-shaped keys: mean"):
        UnitGaussianNormalizer(dim=0).fit(DATA).load_state_dict(state)


# -- the data processor ---------------------------------------------------------------
class Scale(nb.nn.Module):
    """y = w * x with one learnable scalar: the output is the input times w."""

    def __init__(self):
        super().__init__()
        self.weight = nb.nn.Parameter(nb.tensor(np.array(3.0)))

    def forward(self, x):
        return x * self.weight


def processor():
    x, y = DATA, DATA[:, :1] * 2.0 + 1.0
    inn = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(x)
    out = UnitGaussianNormalizer(dim=[0, 2, 3]).fit(y)
    return DefaultDataProcessor(inn, out).wrap(Scale()), x, y, inn, out


def test_processor_train_mode_encodes_inputs_and_targets():
    proc, x, y, inn, out = processor()
    assert proc.training and isinstance(proc, DataProcessor)
    batch = {"x": x[:4], "y": y[:4, :1], "id": 7}
    output, data = proc(**batch)
    xn = (x[:4] - inn.mean.numpy()) / (inn.std.numpy() + 1e-7)
    yn = (y[:4] - out.mean.numpy()) / (out.std.numpy() + 1e-7)
    np.testing.assert_allclose(data["x"].numpy(), xn, rtol=1e-12)
    np.testing.assert_allclose(data["y"].numpy(), yn, rtol=1e-12)
    np.testing.assert_allclose(output.numpy(), 3.0 * xn, rtol=1e-12)  # not decoded
    assert data["id"] == 7  # other keys pass through
    # The loss gradient reaches the wrapped model's parameter.
    ((output[:, :1] - data["y"]) ** 2).sum().backward()
    want = (2 * (3.0 * xn[:, :1] - yn) * xn[:, :1]).sum()
    assert proc.model.weight.grad.item() == pytest.approx(want, rel=1e-10)


def test_processor_eval_mode_decodes_outputs_and_keeps_targets():
    proc, x, y, inn, out = processor()
    proc.eval()
    assert not proc.model.training  # eval reaches the wrapped model
    output, data = proc(x=nb.tensor(x[:3]), y=nb.tensor(y[:3]))
    xn = (x[:3] - inn.mean.numpy()) / (inn.std.numpy() + 1e-7)
    decoded = 3.0 * xn[:, :1] * (out.std.numpy() + 1e-7) + out.mean.numpy()
    np.testing.assert_allclose(output.numpy()[:, :1], decoded, rtol=1e-12)
    np.testing.assert_allclose(data["y"].numpy(), y[:3], rtol=0)
    proc.train()
    assert proc.model.training


def test_processor_state_dict_holds_model_and_normalisers():
    proc = processor()[0]
    keys = sorted(proc.state_dict())
    assert keys == ["in_normalizer.mean", "in_normalizer.std", "model.weight",
                    "out_normalizer.mean", "out_normalizer.std"]
    twin = DefaultDataProcessor(UnitGaussianNormalizer(dim=[0, 2, 3]),
                                UnitGaussianNormalizer(dim=[0, 2, 3])).wrap(Scale())
    twin.in_normalizer.fit(DATA[:2])
    twin.out_normalizer.fit(DATA[:2, :1])
    twin.load_state_dict(proc.state_dict())
    a, _ = proc(x=DATA[:2], y=DATA[:2, :1])
    b, _ = twin(x=DATA[:2], y=DATA[:2, :1])
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_processor_without_normalisers_passes_data_through():
    proc = DefaultDataProcessor().wrap(Scale())
    output, data = proc(x=DATA[:2], y=DATA[:2])
    np.testing.assert_allclose(output.numpy(), 3.0 * DATA[:2], rtol=1e-12)
    np.testing.assert_array_equal(data["y"].numpy(), DATA[:2])


# -- bad input ------------------------------------------------------------------------
def test_transform_before_fit_names_the_class_and_method():
    norm = UnitGaussianNormalizer()
    for method in ("transform", "inverse_transform", "forward"):
        with pytest.raises(RuntimeError, match=r"UnitGaussianNormalizer\.(inverse_)?transform"
                                               r": the normaliser is not fitted"):
            getattr(norm, method)(DATA)


@pytest.mark.parametrize("make,match", [
    (lambda: UnitGaussianNormalizer(mean=np.zeros(3)), "mean and std must be given together"),
    (lambda: UnitGaussianNormalizer(mean=np.zeros(3), std=np.ones(2)),
     r"mean and std must have one shape, got \(3,\) and \(2,\)"),
    (lambda: UnitGaussianNormalizer(eps=-1.0), "eps must be a real number >= 0"),
    (lambda: UnitGaussianNormalizer(dim=[0, 0]), "dim must be an int, a list of distinct"),
    (lambda: UnitGaussianNormalizer(dim="0"), "dim must be"),
    (lambda: UnitGaussianNormalizer(dim=[0, 4]).fit(DATA),
     r"dim=\[0, 4\] is out of range for data of shape \(12, 3, 5, 4\)"),
    (lambda: UnitGaussianNormalizer(dim=[1, -3]).fit(DATA), "names a dim twice"),
    (lambda: UnitGaussianNormalizer().fit(np.zeros((0, 3))), r"fit: data is empty"),
    (lambda: UnitGaussianNormalizer(dim=[0, 2, 3]).fit(DATA).transform(np.zeros((2, 4, 5, 4))),
     r"transform: data of shape \(2, 4, 5, 4\) does not broadcast .* \(1, 3, 1, 1\)"),
    (lambda: UnitGaussianNormalizer(dim=0).fit(DATA).partial_fit(DATA[:, :2]),
     r"partial_fit: data of shape \(1, 2, 5, 4\) gives statistics of shape"),
    (lambda: UnitGaussianNormalizer().partial_fit(DATA, batch_size=0),
     "batch_size must be a positive int"),
])
def test_bad_normaliser_input(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_processor_input():
    with pytest.raises(RuntimeError, match=r"DefaultDataProcessor.forward: no model"):
        DefaultDataProcessor()(x=DATA, y=DATA)
    proc = DefaultDataProcessor().wrap(Scale())
    with pytest.raises(KeyError, match=r"DefaultDataProcessor: data_dict has no key 'y'"):
        proc(x=DATA)
    with pytest.raises(TypeError, match="data_dict must be a dict"):
        proc.preprocess([DATA, DATA])
    with pytest.raises(NotImplementedError, match="DataProcessor.preprocess"):
        DataProcessor().wrap(Scale())(x=DATA, y=DATA)
