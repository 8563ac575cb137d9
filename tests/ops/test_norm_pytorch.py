"""layer_norm, batch_norm, dropout and their modules against PyTorch (values, gradients,
second derivatives, reprs and state dicts), and their bad input."""

import numpy as np
import pytest
from ops.norm_cases import assert_close, run

import nbgrad as nb
from nbgrad.nn.normalization import BatchNorm1d, BatchNorm2d, Dropout, LayerNorm

# -- PyTorch oracle ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle_layer_norm(dtype):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(9)
    for shape, pshape in [((8, 64), (64,)), ((2, 3, 4, 5), (4, 5)), ((7,), (7,))]:
        x = (rng.standard_normal(shape) * 2 + 3).astype(dtype)
        w = rng.uniform(0.5, 1.5, pshape).astype(dtype)
        b = rng.standard_normal(pshape).astype(dtype)
        g = rng.standard_normal(shape).astype(dtype)
        got = run(lambda t, *p, s=pshape: nb.layer_norm(t, s, *p, eps=1e-3), x, [w, b], g)
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        ty = torch.nn.functional.layer_norm(tx, pshape, tw, tb, eps=1e-3)
        ty.backward(torch.tensor(g))
        want = [ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]
        assert_close(got, want, dtype)


@pytest.mark.parametrize("shape", [(16, 4), (5, 3, 6), (4, 3, 5, 5)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pytorch_oracle_batch_norm_training_then_evaluation(shape, dtype):
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    rng = np.random.default_rng(10)
    c = shape[1]
    w = rng.uniform(0.5, 1.5, c).astype(dtype)
    b = rng.standard_normal(c).astype(dtype)
    rm, rv = np.zeros(c, dtype), np.ones(c, dtype)
    trm, trv = torch.tensor(rm), torch.tensor(rv)
    for training in (True, True, False):
        x = (rng.standard_normal(shape) * 2 - 1).astype(dtype)
        g = rng.standard_normal(shape).astype(dtype)
        got = run(lambda t, *p, tr=training: nb.batch_norm(t, rm, rv, *p, training=tr,
                                                             momentum=0.2), x, [w, b], g)
        tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
        ty = f.batch_norm(tx, trm, trv, tw, tb, training=training, momentum=0.2)
        ty.backward(torch.tensor(g))
        want = [ty.detach().numpy(), tx.grad.numpy(), tw.grad.numpy(), tb.grad.numpy()]
        assert_close(got, want, dtype)
        assert_close([rm, rv], [trm.numpy(), trv.numpy()], dtype)


@pytest.mark.parametrize("op", ["layer_norm", "batch_norm train", "batch_norm eval"])
def test_pytorch_oracle_second_derivatives(op):
    """d/d(x, w) of <dL/dx, v> (a Hessian-vector product through the backward), against
    PyTorch's double backward."""
    torch = pytest.importorskip("torch")
    f = torch.nn.functional
    rng = np.random.default_rng(11)
    shape = (4, 6) if op == "layer_norm" else (3, 2, 4)
    d = shape[-1] if op == "layer_norm" else shape[1]
    x, g, v = (rng.standard_normal(shape) for _ in range(3))
    w, b = rng.uniform(0.5, 1.5, d), rng.standard_normal(d)
    rm, rv = rng.standard_normal(d), rng.uniform(0.5, 2, d)
    training = op == "batch_norm train"
    if op == "layer_norm":
        ours, theirs = (lambda t, wt, bt: nb.layer_norm(t, d, wt, bt),
                        lambda t, wt, bt: f.layer_norm(t, (d,), wt, bt))
    else:
        ours = lambda t, wt, bt: nb.batch_norm(t, rm.copy(), rv.copy(), wt, bt,  # noqa: E731
                                               training=training)
        theirs = lambda t, wt, bt: f.batch_norm(  # noqa: E731
            t, torch.tensor(rm), torch.tensor(rv), wt, bt, training=training)

    xt, wt, bt = (nb.tensor(a, requires_grad=True) for a in (x, w, b))
    gx, gw = nb.grad([ours(xt, wt, bt)], [xt, wt], grad_outputs=[nb.tensor(g)],
                     create_graph=True)
    hx, hw = nb.grad([(gx * nb.tensor(v)).sum() + gw.sum()], [xt, wt])
    tx, tw, tb = (torch.tensor(a, requires_grad=True) for a in (x, w, b))
    qx, qw = torch.autograd.grad(theirs(tx, tw, tb), [tx, tw], torch.tensor(g),
                                 create_graph=True)
    px, pw = torch.autograd.grad((qx * torch.tensor(v)).sum() + qw.sum(), [tx, tw],
                                 allow_unused=True)
    np.testing.assert_allclose(hx.numpy(), 0 if px is None else px.numpy(), atol=1e-10)
    np.testing.assert_allclose(hw.numpy(), 0 if pw is None else pw.numpy(), atol=1e-10)


# -- modules -----------------------------------------------------------------------------------


def _module_pairs(torch):
    tnn = torch.nn
    return [
        (LayerNorm(10), tnn.LayerNorm(10)),
        (LayerNorm((3, 4), eps=1e-3, bias=False), tnn.LayerNorm((3, 4), eps=1e-3, bias=False)),
        (LayerNorm(5, elementwise_affine=False), tnn.LayerNorm(5, elementwise_affine=False)),
        (BatchNorm1d(3), tnn.BatchNorm1d(3)),
        (BatchNorm1d(3, momentum=None, bias=False), tnn.BatchNorm1d(3, momentum=None, bias=False)),
        (BatchNorm2d(4, affine=False, track_running_stats=False),
         tnn.BatchNorm2d(4, affine=False, track_running_stats=False)),
        (BatchNorm2d(4, eps=1e-3, momentum=0.5), tnn.BatchNorm2d(4, eps=1e-3, momentum=0.5)),
        (Dropout(), tnn.Dropout()), (Dropout(0.25), tnn.Dropout(0.25)),
    ]


def test_modules_match_pytorch_reprs_state_dicts_and_load_its_checkpoints():
    torch = pytest.importorskip("torch")
    for ours, theirs in _module_pairs(torch):
        assert repr(ours) == repr(theirs)
        theirs_state = theirs.state_dict()
        assert list(ours.state_dict()) == list(theirs_state)
        for p in theirs.parameters():
            p.data.uniform_(0.5, 1.5)
        for buf in theirs.buffers():
            if buf.is_floating_point():
                buf.uniform_(0.5, 1.5)
            else:
                buf.fill_(7)
        ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
        for k, v in ours.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), theirs.state_dict()[k].numpy())
            assert v.dtype == theirs.state_dict()[k].numpy().dtype


@pytest.mark.parametrize("make", [
    lambda nn: nn.BatchNorm1d(3), lambda nn: nn.BatchNorm1d(3, momentum=None),
    lambda nn: nn.BatchNorm1d(3, track_running_stats=False),
    lambda nn: nn.BatchNorm2d(3, affine=False, momentum=0.3)],
    ids=["bn1d", "bn1d cumulative", "bn1d untracked", "bn2d no affine"])
def test_batch_norm_modules_train_and_eval_like_pytorch(make):
    torch = pytest.importorskip("torch")
    import nbgrad.nn.normalization as ours_nn
    ours, theirs = make(ours_nn), make(torch.nn)
    rng = np.random.default_rng(12)
    if ours.affine:
        w = rng.uniform(0.5, 1.5, 3).astype(np.float32)
        ours.weight.data[...] = w
        theirs.weight.data[...] = torch.tensor(w)
    shape = (6, 3, 2, 2) if isinstance(ours, BatchNorm2d) else (6, 3)
    for step, mode in enumerate(["train", "train", "train", "eval", "train", "eval"]):
        ours.train(mode == "train")
        theirs.train(mode == "train")
        x = (rng.standard_normal(shape) * (step + 1) + step).astype(np.float32)
        g = rng.standard_normal(shape).astype(np.float32)
        got = run(ours, x, [], g)
        tx = torch.tensor(x, requires_grad=True)
        ty = theirs(tx)
        ty.backward(torch.tensor(g))
        assert_close(got, [ty.detach().numpy(), tx.grad.numpy()], np.float32)
        for k, v in theirs.state_dict().items():
            np.testing.assert_allclose(ours.state_dict()[k].numpy(), v.numpy(), rtol=2e-6)
        if ours.affine:
            np.testing.assert_allclose(ours.weight.grad.numpy(), theirs.weight.grad.numpy(),
                                       rtol=2e-5, atol=2e-5)
            ours.weight.grad, theirs.weight.grad = None, None
    ours.reset_running_stats()
    theirs.reset_running_stats()
    for k, v in theirs.state_dict().items():
        np.testing.assert_array_equal(ours.state_dict()[k].numpy(), v.numpy())


def test_layer_norm_module_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    ours, theirs = LayerNorm((4, 5)), torch.nn.LayerNorm((4, 5))
    w = rng.uniform(0.5, 1.5, (4, 5)).astype(np.float32)
    ours.weight.data[...] = w
    theirs.weight.data[...] = torch.tensor(w)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    g = rng.standard_normal(x.shape).astype(np.float32)
    got = run(ours, x, [], g)
    tx = torch.tensor(x, requires_grad=True)
    ty = theirs(tx)
    ty.backward(torch.tensor(g))
    assert_close(got, [ty.detach().numpy(), tx.grad.numpy()], np.float32)
    for ours_p, theirs_p in zip(ours.parameters(), theirs.parameters()):
        np.testing.assert_allclose(ours_p.grad.numpy(), theirs_p.grad.numpy(), rtol=2e-5,
                                   atol=2e-5)


def test_dropout_module_drops_in_training_only_and_counts_no_parameters():
    m = Dropout(0.5)
    x = nb.tensor(np.ones((50, 50), np.float32))
    assert (m(x).numpy() == 0).any()
    assert m.eval()(x) is x
    assert not list(m.parameters())
    m64 = BatchNorm2d(2, dtype=np.float64)
    assert m64.weight.dtype == np.float64 and m64.running_var.dtype == np.float64
    assert m64.num_batches_tracked.dtype == np.int64


# -- bad input -------------------------------------------------------------------------------


def test_bad_input_raises_naming_op_argument_and_shapes():
    x = nb.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError,
                       match=r"layer_norm: x must be float32 or float64, got nbgrad.int64"):
        nb.layer_norm(nb.tensor(np.arange(6).reshape(2, 3)), 3)
    with pytest.raises(ValueError, match=r"layer_norm: normalized_shape \(2,\) does not match "
                                         r"the last dims of x with shape \(2, 3\)"):
        nb.layer_norm(x, 2)
    with pytest.raises(ValueError, match=r"layer_norm: normalized_shape \(1, 2, 3\) does not"):
        nb.layer_norm(x, (1, 2, 3))
    with pytest.raises(TypeError, match="layer_norm: normalized_shape must be an int"):
        nb.layer_norm(x, 3.0)
    with pytest.raises(ValueError, match=r"layer_norm: weight has shape \(4,\) but "
                                         r"normalized_shape needs shape \(3,\)"):
        nb.layer_norm(x, 3, np.ones(4, np.float32))
    with pytest.raises(TypeError, match="layer_norm: inputs must share one dtype"):
        nb.layer_norm(x, 3, np.ones(3))
    with pytest.raises(ValueError, match="batch_norm: running_mean and running_var must be "
                                         "given in evaluation mode"):
        nb.batch_norm(x, None, None)
    with pytest.raises(ValueError, match=r"batch_norm: running_mean has shape \(4,\) but x "
                                         r"has 3 channels"):
        nb.batch_norm(x, np.zeros(4), np.ones(4))
    with pytest.raises(ValueError, match=r"batch_norm: expected more than 1 value per "
                                         r"channel when training, got x of shape \(1, 3\)"):
        nb.batch_norm(x[:1], None, None, training=True)
    with pytest.raises(ValueError, match=r"batch_norm: x must be \[N, C, \*\]"):
        nb.batch_norm(nb.tensor(np.zeros(3, np.float32)), None, None, training=True)
    with pytest.raises(ValueError, match="batch_norm: give both running_mean and running_var"):
        nb.batch_norm(x, np.zeros(3), None, training=True)
    with pytest.raises(ValueError, match=r"batch_norm: bias has shape \(2,\) but x's channel "
                                         r"count needs shape \(3,\)"):
        nb.batch_norm(x, None, None, None, np.zeros(2, np.float32), training=True)
    with pytest.raises(TypeError, match="batch_norm: momentum must be a real number"):
        nb.batch_norm(x, np.zeros(3), np.ones(3), training=True, momentum=None)
    for p in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="dropout: dropout probability has to be between "
                                             "0 and 1, but got"):
            nb.dropout(x, p)
    with pytest.raises(ValueError, match="Dropout: dropout probability"):
        Dropout(2.0)
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected 4D input \(got 2D input"):
        BatchNorm2d(3)(x)
    with pytest.raises(ValueError, match=r"BatchNorm1d: expected 2D or 3D input \(got 4D"):
        BatchNorm1d(3)(nb.tensor(np.zeros((2, 3, 1, 1), np.float32)))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_an_empty_1d_input_is_empty_like_torch(training):
    torch = pytest.importorskip("torch")
    empty = np.zeros(0, np.float32)
    x = nb.tensor(empty, requires_grad=True)
    y = nb.nn.functional.batch_norm(x, nb.tensor(empty), nb.tensor(empty), training=training)
    ty = torch.nn.functional.batch_norm(torch.tensor(empty), torch.tensor(empty),
                                        torch.tensor(empty), training=training)
    assert y.shape == tuple(ty.shape) == (0,) and y.dtype == np.float32
    y.sum().backward()
    assert x.grad.shape == (0,)
    with pytest.raises(ValueError, match=r"batch_norm: x must be \[N, C, \*\] \(at least 2 "
                                         r"dims\), got shape \(3,\)"):
        nb.nn.functional.batch_norm(nb.zeros(3), None, None, training=training)
