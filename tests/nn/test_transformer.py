"""MultiheadAttention, TransformerEncoderLayer, TransformerEncoder: torch modules as the
oracle (a torch state dict loaded into nbgrad's), outputs and gradients in float64 and
float32, parameter names, shapes and initialisation, dropout, bad input."""

import numpy as np
import pytest

import nbgrad as nb
from nbgrad.nn.transformer import (
    MultiheadAttention,
    TransformerEncoder,
    TransformerEncoderLayer,
)

torch = pytest.importorskip("torch")

TDTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def tol(dtype):
    return dict(rtol=1e-9, atol=1e-11) if dtype == np.float64 else dict(rtol=1e-4, atol=2e-5)


def copy_weights(ours, theirs):
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    assert list(state) == list(ours.state_dict())
    ours.load_state_dict(state)


def leaves(arrays):
    return ([nb.tensor(a, requires_grad=True) for a in arrays],
            [torch.tensor(a, requires_grad=True) for a in arrays])


def assert_grads(ours_mod, theirs_mod, ours_in, theirs_in, dtype):
    theirs_params = dict(theirs_mod.named_parameters())
    for name, p in ours_mod.named_parameters():
        np.testing.assert_allclose(p.grad.numpy(), theirs_params[name].grad.numpy(),
                                   err_msg=name, **tol(dtype))
    for a, b in zip(ours_in, theirs_in):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), **tol(dtype))


def torch_mask(m):
    return None if m is None else torch.tensor(m)


MHA_CASES = [
    # (kwargs of the module, L, S, batch (None: unbatched), masks)
    ({}, 5, 5, 3, {}),
    ({"batch_first": True}, 4, 6, 2, {"key_padding_mask": "bool"}),
    ({"kdim": 3, "vdim": 5}, 4, 7, 2, {"attn_mask": "bool"}),
    ({"bias": False}, 6, 6, 2, {"attn_mask": "float3d", "key_padding_mask": "float"}),
    ({}, 5, 4, None, {"attn_mask": "float"}),
    ({"batch_first": True}, 6, 6, 2, {"attn_mask": "causal", "is_causal": True}),
]


def make_masks(spec, rng, n, h, n_l, n_s, dtype):
    out = {}
    for name, kind in spec.items():
        if name == "is_causal":
            out[name] = kind
        elif kind == "bool" and name == "attn_mask":
            m = rng.random((n_l, n_s)) < 0.3
            m[:, 0] = False
            out[name] = m
        elif kind == "bool":
            m = rng.random((n, n_s)) < 0.3
            m[:, 0] = False
            out[name] = m
        elif kind == "float" and name == "attn_mask":
            out[name] = rng.standard_normal((n_l, n_s)).astype(dtype)
        elif kind == "float":
            out[name] = rng.standard_normal((n, n_s)).astype(dtype)
        elif kind == "float3d":
            out[name] = rng.standard_normal((n * h, n_l, n_s)).astype(dtype)
        elif kind == "causal":
            out[name] = np.triu(np.ones((n_l, n_s), bool), 1)
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("need_weights, average", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("case", range(len(MHA_CASES)))
def test_multihead_attention_matches_torch(case, need_weights, average, dtype):
    kwargs, n_l, n_s, n, mask_spec = MHA_CASES[case]
    e, h = 8, 2
    rng = np.random.default_rng(case)
    torch.manual_seed(case)
    theirs = torch.nn.MultiheadAttention(e, h, dtype=TDTYPE[dtype], **kwargs)
    ours = MultiheadAttention(e, h, dtype=dtype, **kwargs)
    copy_weights(ours, theirs)
    kd, vd = kwargs.get("kdim", e), kwargs.get("vdim", e)
    first = kwargs.get("batch_first", False)

    def shape(length, d):
        if n is None:
            return (length, d)
        return (n, length, d) if first else (length, n, d)

    arrays = [rng.standard_normal(shape(n_l, e)).astype(dtype),
              rng.standard_normal(shape(n_s, kd)).astype(dtype),
              rng.standard_normal(shape(n_s, vd)).astype(dtype)]
    masks = make_masks(mask_spec, rng, n or 1, h, n_l, n_s, dtype)
    if n is None and "key_padding_mask" in masks:
        masks["key_padding_mask"] = masks["key_padding_mask"][0]
    ours_in, theirs_in = leaves(arrays)
    o, w = ours(*ours_in, need_weights=need_weights, average_attn_weights=average, **masks)
    tmasks = {k: (torch_mask(v) if isinstance(v, np.ndarray) else v) for k, v in masks.items()}
    to, tw = theirs(*theirs_in, need_weights=need_weights, average_attn_weights=average,
                    **tmasks)
    np.testing.assert_allclose(o.numpy(), to.detach().numpy(), **tol(dtype))
    if need_weights:
        np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), **tol(dtype))
    else:
        assert w is None and tw is None
    g = rng.standard_normal(o.shape).astype(dtype)
    loss = (o * nb.tensor(g)).sum() + (0 if w is None else (w * w).sum())
    loss.backward()
    tloss = (to * torch.tensor(g)).sum() + (0 if tw is None else (tw * tw).sum())
    tloss.backward()
    assert_grads(ours, theirs, ours_in, theirs_in, dtype)


def test_multihead_attention_parameters_and_init():
    m = MultiheadAttention(12, 3)
    assert m.in_proj_weight.shape == (36, 12) and m.in_proj_bias.shape == (36,)
    assert m.out_proj.weight.shape == (12, 12)
    assert np.all(m.in_proj_bias.numpy() == 0) and np.all(m.out_proj.bias.numpy() == 0)
    bound = np.sqrt(6 / (12 + 36))  # xavier_uniform_ on [3E, E]
    w = m.in_proj_weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    sep = MultiheadAttention(12, 3, kdim=4, vdim=5, bias=False)
    names = dict(sep.named_parameters())
    assert set(names) == {"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}
    assert names["k_proj_weight"].shape == (12, 4) and names["v_proj_weight"].shape == (12, 5)
    theirs = torch.nn.MultiheadAttention(12, 3, kdim=4, vdim=5, bias=False)
    assert list(sep.state_dict()) == list(theirs.state_dict())


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("kwargs, masks", [
    ({}, {}),
    ({"norm_first": True, "activation": "gelu", "batch_first": True},
     {"src_key_padding_mask": True}),
    ({"activation": torch.nn.functional.silu, "bias": False}, {"mask": True}),
])
def test_encoder_matches_torch(kwargs, masks, dtype):
    rng = np.random.default_rng(0)
    torch.manual_seed(0)
    d, h, ff, n, n_l = 8, 2, 16, 3, 5
    act = kwargs.get("activation")
    ours_kwargs = dict(kwargs)
    if callable(act):  # the same function for nbgrad
        ours_kwargs["activation"] = nb.nn.functional.silu
    tl = torch.nn.TransformerEncoderLayer(d, h, ff, dropout=0.0, dtype=TDTYPE[dtype], **kwargs)
    theirs = torch.nn.TransformerEncoder(tl, 2, norm=torch.nn.LayerNorm(d, dtype=TDTYPE[dtype]),
                                         enable_nested_tensor=False)
    ours = TransformerEncoder(TransformerEncoderLayer(d, h, ff, dropout=0.0, dtype=dtype,
                                                      **ours_kwargs), 2,
                              norm=nb.nn.LayerNorm(d, dtype=dtype))
    for p in theirs.parameters():  # non-trivial norm weights and biases
        p.data += 0.1 * torch.randn(p.shape, dtype=p.dtype)
    copy_weights(ours, theirs)
    first = kwargs.get("batch_first", False)
    x = rng.standard_normal((n, n_l, d) if first else (n_l, n, d)).astype(dtype)
    call = {}
    if masks.get("src_key_padding_mask"):
        kpm = rng.random((n, n_l)) < 0.3
        kpm[:, 0] = False
        call["src_key_padding_mask"] = kpm
    if masks.get("mask"):
        call["mask"] = np.triu(np.ones((n_l, n_l), bool), 1)
    ours_in, theirs_in = leaves([x])
    o = ours(ours_in[0], **call)
    to = theirs(theirs_in[0], **{k: torch.tensor(v) for k, v in call.items()})
    np.testing.assert_allclose(o.numpy(), to.detach().numpy(), **tol(dtype))
    g = rng.standard_normal(o.shape).astype(dtype)
    o.backward(nb.tensor(g))
    to.backward(torch.tensor(g))
    assert_grads(ours, theirs, ours_in, theirs_in, dtype)


def test_encoder_layers_are_deep_copies():
    layer = TransformerEncoderLayer(8, 2, 16)
    enc = TransformerEncoder(layer, 3)
    ws = [lay.linear1.weight for lay in enc.layers]
    assert len(ws) == 3 and len({id(w) for w in ws}) == 3
    assert all(np.array_equal(w.numpy(), layer.linear1.weight.numpy()) for w in ws)
    theirs = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, 16), 3,
                                         enable_nested_tensor=False)
    assert list(enc.state_dict()) == list(theirs.state_dict())


def test_dropout_in_training_only():
    layer = TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = nb.tensor(np.random.default_rng(0).standard_normal((4, 2, 8)).astype(np.float32))
    a, b = layer(x).numpy(), layer(x).numpy()
    assert not np.array_equal(a, b)
    layer.eval()
    np.testing.assert_array_equal(layer(x).numpy(), layer(x).numpy())
    mha = MultiheadAttention(8, 2, dropout=0.5)
    w1 = mha(x, x, x)[1].numpy()
    assert not np.array_equal(w1, mha(x, x, x)[1].numpy())


@pytest.mark.parametrize("make, words", [
    (lambda: MultiheadAttention(8, 3), ["divisible", "8", "3"]),
    (lambda: MultiheadAttention(8, 2, add_bias_kv=True), ["add_bias_kv"]),
    (lambda: MultiheadAttention(8, 2, add_zero_attn=True), ["add_zero_attn"]),
    (lambda: TransformerEncoderLayer(8, 2, activation="tanh"), ["activation", "tanh"]),
])
def test_bad_construction(make, words):
    with pytest.raises(ValueError) as err:
        make()
    for w in words:
        assert w in str(err.value)


def test_bad_forward():
    m = MultiheadAttention(8, 2)
    x = nb.tensor(np.zeros((5, 2, 8)))
    with pytest.raises(ValueError, match=r"MultiheadAttention.*embed_dim 8.*\(5, 2, 7\)"):
        m(nb.tensor(np.zeros((5, 2, 7))), x, x)
    with pytest.raises(ValueError, match="batch size"):
        m(x, nb.tensor(np.zeros((5, 3, 8))), nb.tensor(np.zeros((5, 3, 8))))
    with pytest.raises(ValueError, match="3-D"):
        m(nb.tensor(np.zeros((5, 2, 2, 8))), x, x)
    with pytest.raises(ValueError, match="attn_mask must have shape"):
        m(x, x, x, attn_mask=np.zeros((4, 5), bool))
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        m(x, x, x, key_padding_mask=np.zeros((5, 2), bool))
    with pytest.raises(ValueError, match="is_causal"):
        m(x, x, x, is_causal=True)
