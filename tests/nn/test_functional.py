"""nbgrad.nn.functional against torch.nn.functional: every F name gives PyTorch's values and
gradients (float64 and float32), has PyTorch's parameter names, and names itself in errors."""

import inspect
import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nbgrad as nb
import nbgrad.nn.functional as F
from nbgrad import ops
from nbgrad.testing import gradcheck, gradgradcheck

torch = pytest.importorskip("torch")
TF = torch.nn.functional

TOL = {np.float64: dict(rtol=1e-10, atol=1e-12), np.float32: dict(rtol=2e-4, atol=2e-5)}


class Int:
    """An integer argument (class indices, token ids): passed as it is, no gradient."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.int64)


class Const:
    """A float argument that takes no gradient (running statistics)."""

    def __init__(self, values):
        self.values = np.asarray(values)


def _x(r, *shape, scale=1.0):
    return r.standard_normal(shape) * scale


def _edges(r):
    # exact kinks of relu / relu6 / hardtanh, with random values
    return np.concatenate([[-1.0, -0.5, 0.0, 2.0, 6.0, 1.0], _x(r, 10, scale=4)]).reshape(4, 4)


# name -> (args from a generator, keyword arguments); several cases per name
CASES = {
    "relu": [(lambda r: [_edges(r)], {})],
    "relu6": [(lambda r: [_edges(r)], {})],
    "hardtanh": [(lambda r: [_edges(r)], {}),
                 (lambda r: [_edges(r)], dict(min_val=-0.5, max_val=2.0))],
    "leaky_relu": [(lambda r: [_edges(r)], dict(negative_slope=0.2))],
    "elu": [(lambda r: [_x(r, 3, 4, scale=2)], dict(alpha=0.7))],
    "silu": [(lambda r: [_x(r, 3, 4, scale=3)], {})],
    "gelu": [(lambda r: [_x(r, 3, 4, scale=3)], {}),
             (lambda r: [_x(r, 3, 4, scale=3)], dict(approximate="tanh"))],
    "softplus": [(lambda r: [_x(r, 3, 4, scale=3)], {}),
                 (lambda r: [_x(r, 3, 4, scale=3)], dict(beta=2, threshold=3))],
    "tanh": [(lambda r: [_x(r, 2, 5)], {})],
    "sigmoid": [(lambda r: [_x(r, 2, 5)], {})],
    "logsigmoid": [(lambda r: [np.concatenate([_x(r, 6, scale=5), [-40.0, 40.0]])], {})],
    "softmax": [(lambda r: [_x(r, 3, 4)], dict(dim=1)), (lambda r: [_x(r, 3, 4)], dict(dim=0))],
    "log_softmax": [(lambda r: [_x(r, 2, 3, 4)], dict(dim=-1))],
    "softmin": [(lambda r: [_x(r, 3, 4)], dict(dim=1))],
    "linear": [(lambda r: [_x(r, 2, 3, 4), _x(r, 5, 4), _x(r, 5)], {}),
               (lambda r: [_x(r, 3, 4), _x(r, 2, 4)], {})],
    "conv1d": [(lambda r: [_x(r, 2, 3, 9)], dict(weight=_x(np.random.default_rng(1), 4, 3, 3),
                                                  bias=np.arange(4.0), stride=2, padding=1))],
    "conv2d": [(lambda r: [_x(r, 2, 3, 7, 6), _x(r, 4, 3, 3, 3), _x(r, 4)],
                dict(stride=(2, 1), padding=1, dilation=1)),
               (lambda r: [_x(r, 1, 4, 6, 6), _x(r, 4, 2, 3, 3)], dict(groups=2))],
    "conv_transpose2d": [(lambda r: [_x(r, 2, 4, 5, 5), _x(r, 4, 3, 3, 3), _x(r, 3)],
                          dict(stride=2, padding=1, output_padding=1))],
    "max_pool2d": [(lambda r: [_x(r, 2, 3, 8, 8)], dict(kernel_size=2)),
                   (lambda r: [_x(r, 1, 2, 7, 7)], dict(kernel_size=3, stride=2, padding=1))],
    "avg_pool2d": [(lambda r: [_x(r, 2, 3, 7, 7)], dict(kernel_size=3, stride=2, padding=1))],
    "batch_norm": [(lambda r: [_x(r, 4, 3, 5), Const(_x(r, 3)), Const(np.ones(3) + 0.5),
                               _x(r, 3), _x(r, 3)], dict(training=True, momentum=0.2)),
                   (lambda r: [_x(r, 4, 3), Const(_x(r, 3)), Const(np.full(3, 2.0))],
                    dict(training=False))],
    "layer_norm": [(lambda r: [_x(r, 2, 3, 4), (3, 4), _x(r, 3, 4), _x(r, 3, 4)], {}),
                   (lambda r: [_x(r, 2, 5), [5]], dict(eps=1e-3))],
    "pad": [(lambda r: [_x(r, 2, 3, 4), (1, 2, 0, 1)], dict(value=0.5)),
            (lambda r: [_x(r, 1, 2, 5), (2, 1)], dict(mode="reflect"))],
    "embedding": [(lambda r: [Int([[0, 2, 1], [4, 1, 1]]), _x(r, 5, 4)], dict(padding_idx=1))],
    "cross_entropy": [(lambda r: [_x(r, 4, 5), Int([0, 3, 4, 1])], {}),
                      (lambda r: [_x(r, 4, 5), Int([0, 3, -100, 1])],
                       dict(label_smoothing=0.1, reduction="sum"))],
    "nll_loss": [(lambda r: [_x(r, 4, 5), Int([0, 3, 4, 1])], dict(reduction="none"))],
    "binary_cross_entropy_with_logits": [
        (lambda r: [_x(r, 3, 4), Const(r.uniform(size=(3, 4)))],
         dict(pos_weight=Const(np.arange(1.0, 5))))],
    "mse_loss": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4)], {})],
    "l1_loss": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4)], dict(reduction="sum"))],
    "smooth_l1_loss": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4)], dict(beta=0.5))],
    "huber_loss": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4)], dict(delta=0.7, reduction="none"))],
    "normalize": [(lambda r: [np.vstack([_x(r, 3, 4), np.zeros((1, 4))])], {}),
                  (lambda r: [_x(r, 3, 4)], dict(p=1.0, dim=0)),
                  (lambda r: [_x(r, 2, 3, 2)], dict(p=3.0, dim=-1, eps=0.5))],
}


def _probabilities(r, *shape):
    return 1 / (1 + np.exp(-_x(r, *shape, scale=2)))


def _signs(r, *shape):
    return Const(np.where(r.random(shape) < 0.5, -1.0, 1.0))


# ops tested in depth in their own files (tests/ops/test_loss_extra.py, test_resample.py,
# test_pool1d.py, test_activation_extra.py); here: F's names and signatures against torch's
CASES.update({
    "max_pool1d": [(lambda r: [_x(r, 2, 3, 9)], dict(kernel_size=3, stride=2, padding=1))],
    "avg_pool1d": [(lambda r: [_x(r, 3, 8)], dict(kernel_size=2, ceil_mode=True))],
    "binary_cross_entropy": [(lambda r: [_probabilities(r, 3, 4), Const(r.random((3, 4)))],
                              {})],
    "kl_div": [(lambda r: [np.log(_probabilities(r, 3, 4)), _probabilities(r, 3, 4)],
                dict(reduction="batchmean"))],
    "poisson_nll_loss": [(lambda r: [_x(r, 3, 4), Const(r.poisson(2.0, (3, 4)) * 1.0)],
                          dict(full=True))],
    "gaussian_nll_loss": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4), r.random((3, 1)) + 0.5], {})],
    "margin_ranking_loss": [(lambda r: [_x(r, 6), _x(r, 6), _signs(r, 6)], dict(margin=0.3))],
    "hinge_embedding_loss": [(lambda r: [_x(r, 6), _signs(r, 6)], dict(margin=0.8))],
    "soft_margin_loss": [(lambda r: [_x(r, 6), _signs(r, 6)], {})],
    "multilabel_soft_margin_loss": [(lambda r: [_x(r, 3, 4), Const(r.random((3, 4)) < 0.5)],
                                     {})],
    "cosine_embedding_loss": [(lambda r: [_x(r, 4, 5), _x(r, 4, 5), _signs(r, 4)],
                               dict(margin=0.1))],
    "triplet_margin_loss": [(lambda r: [_x(r, 4, 5), _x(r, 4, 5), _x(r, 4, 5)], dict(p=1.5))],
    "softsign": [(lambda r: [_x(r, 3, 4, scale=3)], {})],
    "tanhshrink": [(lambda r: [_x(r, 3, 4, scale=3)], {})],
    "glu": [(lambda r: [_x(r, 3, 4)], dict(dim=1))],
    "hardswish": [(lambda r: [_x(r, 3, 4, scale=4)], {})],
    "hardsigmoid": [(lambda r: [_x(r, 3, 4, scale=4)], {})],
    "mish": [(lambda r: [_x(r, 3, 4, scale=3)], {})],
    "selu": [(lambda r: [_x(r, 3, 4, scale=3)], {})],
    "celu": [(lambda r: [_x(r, 3, 4, scale=3)], dict(alpha=0.5))],
    "interpolate": [(lambda r: [_x(r, 2, 3, 5, 4)], dict(scale_factor=1.7, mode="bilinear")),
                    (lambda r: [_x(r, 2, 3, 5)], dict(size=8, mode="linear",
                                                       align_corners=True)),
                    (lambda r: [_x(r, 1, 2, 3, 3)], dict(size=(5, 7)))],
    "upsample_nearest": [(lambda r: [_x(r, 1, 2, 3, 3)], dict(scale_factor=2))],
    "upsample_bilinear": [(lambda r: [_x(r, 1, 2, 3, 3)], dict(size=(4, 6)))],
    "adaptive_avg_pool1d": [(lambda r: [_x(r, 2, 3, 10)], dict(output_size=4))],
    "adaptive_avg_pool2d": [(lambda r: [_x(r, 2, 3, 7, 5)], dict(output_size=(3, None)))],
    "adaptive_avg_pool3d": [(lambda r: [_x(r, 2, 5, 4, 3)], dict(output_size=(2, 3, 2)))],
    "adaptive_max_pool1d": [(lambda r: [_x(r, 2, 3, 10)], dict(output_size=3))],
    "adaptive_max_pool2d": [(lambda r: [_x(r, 2, 3, 7, 5)], dict(output_size=2))],
    "pixel_shuffle": [(lambda r: [_x(r, 2, 8, 3, 2)], dict(upscale_factor=2))],
    "pixel_unshuffle": [(lambda r: [_x(r, 2, 2, 6, 4)], dict(downscale_factor=2))],
    "group_norm": [(lambda r: [_x(r, 2, 6, 3), 2, _x(r, 6), _x(r, 6)], {})],
    "instance_norm": [(lambda r: [_x(r, 2, 3, 5), None, None, _x(r, 3), _x(r, 3)], {})],
    "cosine_similarity": [(lambda r: [_x(r, 3, 4), _x(r, 1, 4)], dict(dim=-1))],
    "pairwise_distance": [(lambda r: [_x(r, 3, 4), _x(r, 3, 4)], dict(p=3.0))],
    "scaled_dot_product_attention": [(lambda r: [_x(r, 2, 5, 4), _x(r, 2, 6, 4), _x(r, 2, 6, 3)],
                                      dict(is_causal=True))],
})
# float32 constants in PyTorch's kernels (hardsigmoid's 1/6) show in float64 at ~3e-8
F64_RTOL = {"hardsigmoid": 1e-7}
RANDOM = {"dropout", "one_hot"}  # tested on their own below
DEPRECATED = {"upsample"}  # warns, as PyTorch's; tested on its own below


def _pair(a, dtype):
    """The same argument for nbgrad and for torch (float ones requiring grad)."""
    if isinstance(a, Int):
        return nb.tensor(a.values), torch.tensor(a.values)
    if isinstance(a, Const):
        v = a.values.astype(dtype)
        return nb.tensor(v.copy()), torch.tensor(v.copy())
    if isinstance(a, np.ndarray):
        v = a.astype(dtype)
        return nb.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    return a, a


def _run_both(name, args, kwargs, dtype):
    tol = dict(TOL[dtype])
    if dtype == np.float64:
        tol["rtol"] = F64_RTOL.get(name, tol["rtol"])
    pairs = [_pair(a, dtype) for a in args]
    kw = {k: _pair(v, dtype) for k, v in kwargs.items()}
    ours = getattr(F, name)(*[p[0] for p in pairs], **{k: p[0] for k, p in kw.items()})
    theirs = getattr(TF, name)(*[p[1] for p in pairs], **{k: p[1] for k, p in kw.items()})
    assert ours.shape == tuple(theirs.shape) and ours.dtype == np.dtype(dtype)
    np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), **tol)
    # a weighted sum, so every output element's gradient counts differently
    w = np.random.default_rng(7).standard_normal(ours.shape).astype(dtype)
    (ours * nb.tensor(w)).sum().backward()
    (theirs * torch.tensor(w)).sum().backward()
    for ours_arg, theirs_arg in [*pairs, *kw.values()]:
        if isinstance(theirs_arg, torch.Tensor) and theirs_arg.requires_grad:
            np.testing.assert_allclose(ours_arg.grad.numpy(), theirs_arg.grad.numpy(),
                                       **tol)
        elif isinstance(theirs_arg, torch.Tensor) and theirs_arg.is_floating_point():
            # in-place state (batch_norm's running statistics)
            np.testing.assert_allclose(ours_arg.numpy(), theirs_arg.numpy(), **tol)


def test_every_name_has_a_case_and_all_is_complete():
    assert set(CASES) | RANDOM | DEPRECATED == set(F.__all__)
    public = {n for n, v in vars(F).items() if callable(v) and not n.startswith("_")
              and getattr(v, "__module__", "").startswith("nbgrad.ops")
              or getattr(v, "__module__", "") == F.__name__ and inspect.isfunction(v)
              and not n.startswith("_")}
    assert public <= set(F.__all__)
    assert nb.nn.functional is F


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name,case", [(n, i) for n in CASES for i in range(len(CASES[n]))])
def test_values_and_gradients_match_torch(name, case, dtype):
    make, kwargs = CASES[name][case]
    args = make(np.random.default_rng(case))
    _run_both(name, args, kwargs, dtype)


POINTWISE = ["relu", "relu6", "hardtanh", "leaky_relu", "elu", "silu", "gelu", "softplus",
             "tanh", "sigmoid", "logsigmoid"]


@pytest.mark.parametrize("name", POINTWISE)
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                    elements=st.floats(-30, 30, width=32)),
       dtype=st.sampled_from([np.float64, np.float32]))
def test_pointwise_over_shapes(name, x, dtype):
    _run_both(name, [x], {}, dtype)


@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4), data=st.data())
def test_softmax_family_over_shapes_and_dims(shape, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(len(shape)).standard_normal(shape)
    for name in ("softmax", "log_softmax", "softmin"):
        _run_both(name, [x], dict(dim=dim), np.float64)


@pytest.mark.parametrize("ndim", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("name", ["softmax", "log_softmax", "softmin"])
def test_implicit_softmax_dim_is_pytorchs_with_its_warning(name, ndim):
    x = np.random.default_rng(ndim).standard_normal((2, 3, 2, 2)[:ndim])
    with pytest.warns(UserWarning, match=f"Implicit dimension choice for {name}"):
        ours = getattr(F, name)(nb.tensor(x))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = getattr(TF, name)(torch.tensor(x))
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


@pytest.mark.parametrize("name,kwargs", [("relu", {}), ("relu6", {}), ("silu", {}),
                                         ("leaky_relu", dict(negative_slope=0.3)),
                                         ("elu", dict(alpha=0.5)),
                                         ("hardtanh", dict(min_val=-0.2, max_val=0.4))])
def test_inplace_overwrites_the_input_and_differentiates_as_torch(name, kwargs):
    x = _edges(np.random.default_rng(3))
    a, b = nb.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ha, hb = a * 2, b * 2
    ra = getattr(F, name)(ha, inplace=True, **kwargs)
    getattr(TF, name)(hb, inplace=True, **kwargs)
    assert ra is ha
    np.testing.assert_allclose(ha.detach().numpy(), hb.detach().numpy(), rtol=1e-12)
    (ha * ha).sum().backward()
    (hb * hb).sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-15)
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(F, name)(nb.tensor(x, requires_grad=True), inplace=True, **kwargs)
    with pytest.raises(TypeError, match=name):
        getattr(F, name)(x, inplace=True, **kwargs)


def test_dropout():
    x = np.random.default_rng(0).standard_normal((200, 50)) + 3.0
    t = nb.tensor(x, requires_grad=True)
    assert F.dropout(t, 0.3, training=False) is t
    nb.manual_seed(5)
    y = F.dropout(t, p=0.3)
    kept = y.numpy() != 0
    np.testing.assert_allclose(y.numpy()[kept], x[kept] / 0.7, rtol=1e-12)
    assert abs(kept.mean() - 0.7) < 0.02
    y.sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), kept / 0.7, rtol=1e-12)
    nb.manual_seed(5)  # the same mask from the same seed, written in place
    h = nb.tensor(x.copy())
    assert F.dropout(h, p=0.3, inplace=True) is h
    np.testing.assert_array_equal(h.numpy(), y.numpy())
    assert np.all(F.dropout(t, p=1.0).numpy() == 0)
    np.testing.assert_array_equal(F.dropout(t, p=0.0).numpy(), x)


@given(idx=hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4),
                      elements=st.integers(0, 6)), extra=st.sampled_from([None, 0, 3]))
def test_one_hot(idx, extra):
    num = -1 if extra is None else int(idx.max()) + 1 + extra
    ours = F.one_hot(nb.tensor(idx), num)
    theirs = TF.one_hot(torch.tensor(idx), num)
    assert ours.dtype == np.int64 and ours.shape == tuple(theirs.shape)
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    assert F.one_hot(nb.tensor(np.zeros(0, np.int64)), 3).shape == (0, 3)


@pytest.mark.parametrize("name,fn", [
    ("hardtanh", lambda x: F.hardtanh(x, -0.5, 0.8)), ("relu6", lambda x: F.relu6(x * 4)),
    ("logsigmoid", F.logsigmoid), ("softmin", lambda x: F.softmin(x, dim=0)),
    ("normalize", F.normalize), ("normalize p=3", lambda x: F.normalize(x, p=3.0, dim=0))])
def test_compositions_have_first_and_second_derivatives(name, fn):
    x = np.array([[-1.3, -0.2, 0.3, 0.9], [1.4, -0.7, 0.45, 2.2], [0.1, 1.1, -1.9, 0.6]])
    assert gradcheck(fn, [x]) and gradgradcheck(fn, [x])


# -- signatures --------------------------------------------------------------------------------
def _torch_parameters(name):
    fn = getattr(TF, name)
    try:
        params = list(inspect.signature(fn).parameters)
    except ValueError:
        params = []
    if not params or params[0] == "args":
        # a builtin: its docstring opens with the signature (over one or more lines)
        head = re.match(r"\s*\w+\((.*?)\)", fn.__doc__, re.DOTALL)[1]
        params = [p.split("=")[0].strip() for p in head.split(",")]
    return params


@pytest.mark.parametrize("name", sorted(set(F.__all__)))
def test_each_name_is_the_op_or_an_adapter_with_torchs_parameter_names(name):
    fn = getattr(F, name)
    ours = list(inspect.signature(fn).parameters)
    theirs = _torch_parameters(name)
    if fn.__module__ == F.__name__:
        # an adapter: torch's names, in torch's order, for what nbgrad supports
        assert set(ours) <= set(theirs), (ours, theirs)
        assert ours == [p for p in theirs if p in ours]
        assert ours[0] == theirs[0]
    else:
        # the op itself, exported by nbgrad under the same name: its parameters after the
        # input tensor are torch's, in torch's order
        assert getattr(nb, name, fn) is fn and fn.__module__.startswith(ops.__name__)
        rest = [p for p in ours[1:] if inspect.signature(fn).parameters[p].kind
                is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        assert rest == [p for p in theirs[1:] if p in rest], (ours, theirs)
        assert set(rest) <= set(theirs)


# -- bad input ---------------------------------------------------------------------------------
_I = nb.tensor(np.arange(6).reshape(2, 3))
_X = nb.tensor(np.ones((2, 3)))
BAD = {
    "relu": lambda: F.relu(_I),
    "relu6": lambda: F.relu6(_I),
    "hardtanh": lambda: F.hardtanh(_X, 1.0, -1.0),
    "leaky_relu": lambda: F.leaky_relu(_I),
    "elu": lambda: F.elu(_I),
    "silu": lambda: F.silu(_I),
    "gelu": lambda: F.gelu(_X, approximate="fast"),
    "softplus": lambda: F.softplus(_X, beta=0),
    "tanh": lambda: F.tanh(_I),
    "sigmoid": lambda: F.sigmoid(_I),
    "logsigmoid": lambda: F.logsigmoid(_I),
    "softmax": lambda: F.softmax(_X, dim=2),
    "log_softmax": lambda: F.log_softmax(_X, dim=-3),
    "softmin": lambda: F.softmin(_X, dim=5),
    "linear": lambda: F.linear(_X, np.ones((4, 2))),
    "conv1d": lambda: F.conv1d(np.ones((1, 2, 5)), weight=np.ones((1, 3, 2))),
    "conv2d": lambda: F.conv2d(np.ones((1, 2, 5, 5)), weight=np.ones((1, 3, 2, 2))),
    "conv_transpose2d": lambda: F.conv_transpose2d(np.ones((1, 2, 5, 5)), np.ones((3, 1, 2, 2))),
    "max_pool2d": lambda: F.max_pool2d(np.ones((1, 1, 4, 4)), kernel_size=0),
    "avg_pool2d": lambda: F.avg_pool2d(np.ones((1, 1, 4, 4)), kernel_size=0),
    "batch_norm": lambda: F.batch_norm(np.ones((2, 3)), np.zeros(4), np.ones(4)),
    "layer_norm": lambda: F.layer_norm(_X, (4,)),
    "pad": lambda: F.pad(_X, (1, 2, 3)),
    "embedding": lambda: F.embedding(nb.tensor(np.array([7])), np.ones((5, 2))),
    "cross_entropy": lambda: F.cross_entropy(_X, nb.tensor(np.array([0, 1, 2]))),
    "nll_loss": lambda: F.nll_loss(_X, nb.tensor(np.array([0]))),
    "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(
        _X, np.ones((3, 2))),
    "mse_loss": lambda: F.mse_loss(_X, _X, reduction="avg"),
    "l1_loss": lambda: F.l1_loss(_X, _X, reduction="avg"),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(_X, _X, reduction="avg"),
    "huber_loss": lambda: F.huber_loss(_X, _X, reduction="avg"),
    "normalize": lambda: F.normalize(_X, dim=2),
    "one_hot": lambda: F.one_hot(_X),
    "dropout": lambda: F.dropout(_X, p=1.5),
    "max_pool1d": lambda: F.max_pool1d(np.ones((1, 4)), kernel_size=0),
    "avg_pool1d": lambda: F.avg_pool1d(np.ones((1, 1, 1, 4)), kernel_size=2),
    "binary_cross_entropy": lambda: F.binary_cross_entropy(_X, np.ones((3, 2))),
    "kl_div": lambda: F.kl_div(_X, _X, reduction="avg"),
    "poisson_nll_loss": lambda: F.poisson_nll_loss(_X, _X, reduction="avg"),
    "gaussian_nll_loss": lambda: F.gaussian_nll_loss(_X, _X, np.ones((2, 2))),
    "margin_ranking_loss": lambda: F.margin_ranking_loss(_X, _X, _X, reduction="avg"),
    "hinge_embedding_loss": lambda: F.hinge_embedding_loss(_X, _X, reduction="avg"),
    "soft_margin_loss": lambda: F.soft_margin_loss(_X, _X, reduction="avg"),
    "multilabel_soft_margin_loss": lambda: F.multilabel_soft_margin_loss(_X, _X,
                                                                         reduction="avg"),
    "cosine_embedding_loss": lambda: F.cosine_embedding_loss(_X, _X, _X, reduction="avg"),
    "triplet_margin_loss": lambda: F.triplet_margin_loss(_X, _X, _X, margin=-1.0),
    "softsign": lambda: F.softsign(_I),
    "tanhshrink": lambda: F.tanhshrink(_I),
    "glu": lambda: F.glu(_X, dim=5),
    "hardswish": lambda: F.hardswish(_I),
    "hardsigmoid": lambda: F.hardsigmoid(_I),
    "mish": lambda: F.mish(_I),
    "selu": lambda: F.selu(_I),
    "celu": lambda: F.celu(_I),
    "interpolate": lambda: F.interpolate(np.ones((1, 1, 4)), size=0),
    "upsample": lambda: F.upsample(np.ones((1, 1, 4)), size=0),
    "upsample_nearest": lambda: F.upsample_nearest(np.ones((1, 1, 4)), size=0),
    "upsample_bilinear": lambda: F.upsample_bilinear(np.ones((1, 1, 4)), size=2),
    "adaptive_avg_pool1d": lambda: F.adaptive_avg_pool1d(np.ones((1, 1, 4)), (2, 2)),
    "adaptive_avg_pool2d": lambda: F.adaptive_avg_pool2d(np.ones((1, 1, 4, 4)), (2, 2, 2)),
    "adaptive_avg_pool3d": lambda: F.adaptive_avg_pool3d(np.ones((1, 1, 4, 4)), (2, 2)),
    "adaptive_max_pool1d": lambda: F.adaptive_max_pool1d(np.ones((1, 1, 4, 4)), 2),
    "adaptive_max_pool2d": lambda: F.adaptive_max_pool2d(np.ones((1, 1, 4, 4)), -1),
    "pixel_shuffle": lambda: F.pixel_shuffle(np.ones((1, 3, 2, 2)), 2),
    "pixel_unshuffle": lambda: F.pixel_unshuffle(np.ones((1, 1, 3, 3)), 2),
    "group_norm": lambda: F.group_norm(np.ones((2, 6, 3)), 4),
    "instance_norm": lambda: F.instance_norm(np.ones((2, 3, 4)), weight=np.ones(4)),
    "cosine_similarity": lambda: F.cosine_similarity(_X, np.ones((3, 3))),
    "pairwise_distance": lambda: F.pairwise_distance(_X, np.ones((3, 3))),
    "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(_X, _X, _X.T),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_errors_name_the_op(name):
    assert set(BAD) == set(F.__all__)
    with pytest.raises((ValueError, TypeError, IndexError, RuntimeError),
                       match=name.replace("upsample_nearest", "interpolate")
                       .replace("upsample_bilinear", "interpolate")
                       .replace("upsample", "interpolate")), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        BAD[name]()


@pytest.mark.parametrize("call,match", [
    (lambda: F.one_hot(nb.tensor(np.array([0, -1]))), "non-negative"),
    (lambda: F.one_hot(nb.tensor(np.array([0, 3])), 3), "smaller than num_classes"),
    (lambda: F.one_hot(nb.tensor(np.zeros(0, np.int64))), "empty"),
    (lambda: F.normalize(_I), "float32 or float64"),
])
def test_bad_input_details(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_upsample_warns_as_torch_and_is_interpolate():
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 3)).astype(np.float32)
    with pytest.warns(UserWarning, match="upsample"):
        ours = F.upsample(nb.tensor(x), scale_factor=2, mode="bilinear")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = TF.upsample(torch.tensor(x), scale_factor=2, mode="bilinear")
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6, atol=1e-6)
