"""Neural-operator layers: GNO, ONO, LNO.

NumPy references of each layer's forward, gradchecks (float64) of the forward as a
function of the parameters and the input, batches on a shared graph, rectangular graphs,
1 vs 2 threads, errors, and a PyTorch twin of a GNO model (lift, two GNO layers,
projection) with index_add message passing: one forward and every parameter gradient.
"""

import contextlib

import numpy as np
import pytest
from conftest import assert_same_bits, at_threads

import nbgrad as nb
from nbgrad.nn import Linear, Module
from nbgrad.nn.operators import GNO, LNO, ONO
from nbgrad.testing import gradcheck

# -- helpers -------------------------------------------------------------------------------


def _owner(module, name):
    path, _, leaf = name.rpartition(".")
    for part in path.split(".") if path else ():
        module = getattr(module, part)
    return module, leaf


@contextlib.contextmanager
def parameters_replaced(module, tensors):
    """The module's parameters ``{name: tensor}`` swapped for the given tensors (so that
    a gradcheck can differentiate the forward in them), restored afterwards."""
    saved = {}
    try:
        for name, t in tensors.items():
            owner, leaf = _owner(module, name)
            saved[name] = owner._parameters[leaf]
            owner._parameters[leaf] = t
        yield
    finally:
        for name, p in saved.items():
            owner, leaf = _owner(module, name)
            owner._parameters[leaf] = p


def gradcheck_layer(layer, call, inputs=()):
    """Gradcheck of ``call(layer, *inputs)`` in every parameter and every input."""
    names = [n for n, _ in layer.named_parameters()]
    params = [p.numpy().copy() for _, p in layer.named_parameters()]

    def fn(*tensors):
        with parameters_replaced(layer, dict(zip(names, tensors[:len(names)]))):
            return call(layer, *tensors[len(names):])

    gradcheck(fn, params + list(inputs))


def grid(n):
    t = np.linspace(0, 1, n)
    return np.array([(a, b) for a in t for b in t])


def relu(a):
    return np.maximum(a, 0)


def gno_reference(layer, h, graph, x_src, x_dst):
    """NumPy: out_i = reduce_p kappa(e_p) h_j + W h_i + b with e = x_j - x_i or [x_i, x_j]."""
    P = {n: p.numpy() for n, p in layer.named_parameters()}
    e_j, e_i = x_src[graph.col], x_dst[graph.row]
    e = e_j - e_i if layer.edge_features == "relative" else np.concatenate([e_i, e_j], 1)
    hidden = relu(e @ P["kernel_in.weight"].T + P["kernel_in.bias"])
    kappa = (hidden @ P["kernel_out.weight"].T + P["kernel_out.bias"]).reshape(
        len(e), layer.out_features, layer.in_features)
    out = np.zeros(h.shape[:-2] + (graph.num_nodes, layer.out_features))
    for p, (i, j) in enumerate(zip(graph.row, graph.col)):
        out[..., i, :] += h[..., j, :] @ kappa[p].T
    if layer.reduce == "mean":
        out /= np.maximum(graph.degree, 1)[:, None]
    if "skip.weight" in P:
        out += h @ P["skip.weight"].T
    if "bias" in P:
        out += P["bias"]
    return out


# -- GNO -----------------------------------------------------------------------------------


@pytest.mark.parametrize("edge_features", ["relative", "pair"])
@pytest.mark.parametrize("reduce", ["sum", "mean"])
@pytest.mark.parametrize("batch", [None, 3])
def test_gno_layer_matches_numpy(edge_features, reduce, batch):
    rng = np.random.default_rng(0)
    x = rng.random((25, 2))
    graph = nb.radius_graph(x, 0.3)
    layer = GNO(3, 2, 5, edge_features=edge_features, coord_dim=2, reduce=reduce,
                dtype=np.float64)
    h = rng.standard_normal((25, 3) if batch is None else (batch, 25, 3))
    out = layer(h, graph, x=x)
    np.testing.assert_allclose(out.numpy(), gno_reference(layer, h, graph, x, x),
                               rtol=1e-10, atol=1e-12)


def test_gno_layer_rectangular_graph():
    rng = np.random.default_rng(1)
    x, q = rng.random((30, 2)), rng.random((12, 2))
    graph = nb.radius_graph(x, 0.35, query=q)
    layer = GNO(2, 4, 6, coord_dim=2, skip=False, reduce="mean", dtype=np.float64)
    h = rng.standard_normal((30, 2))
    out = layer(h, graph, x=(x, q))
    assert out.shape == (12, 4)
    np.testing.assert_allclose(out.numpy(), gno_reference(layer, h, graph, x, q),
                               rtol=1e-10, atol=1e-12)
    gradcheck_layer(layer, lambda m, h: m(h, graph, x=(x, q)), [h])


def test_gno_layer_shared_edge_ids_use_per_entry_features():
    # an undirected chain whose two directions share one id: x_j - x_i differs between
    # them, so the layer works on the per-entry graph
    x = np.array([[0.0], [1.0], [3.0]])
    shared = nb.Graph.from_edges([0, 1, 1, 2], [1, 0, 2, 1], 3, edge_id=[0, 0, 1, 1])
    plain = nb.Graph.from_edges([0, 1, 1, 2], [1, 0, 2, 1], 3)
    layer = GNO(2, 2, 4, coord_dim=1, dtype=np.float64)
    h = np.random.default_rng(2).standard_normal((3, 2))
    np.testing.assert_array_equal(layer(h, shared, x=x).numpy(), layer(h, plain, x=x).numpy())


def test_gno_layer_user_edge_features_by_edge_id():
    g = nb.Graph.from_edges([0, 1, 1, 2], [1, 0, 2, 1], 3, edge_id=[0, 0, 1, 1])
    layer = GNO(2, 3, 4, edge_features=1, dtype=np.float64)
    rng = np.random.default_rng(3)
    h, feats = rng.standard_normal((3, 2)), rng.standard_normal((2, 1))
    # the same as the per-entry features that repeat each id's row
    per_entry = feats[g.edge_id]
    plain = nb.Graph(g.row_ptr, g.col)
    np.testing.assert_allclose(layer(h, g, edge_feats=feats).numpy(),
                               layer(h, plain, edge_feats=per_entry).numpy(), rtol=1e-12)
    gradcheck_layer(layer, lambda m, h, f: m(h, g, edge_feats=f), [h, feats])


@pytest.mark.parametrize("batch", [None, 2])
def test_gno_layer_gradcheck(batch):
    rng = np.random.default_rng(4)
    x = rng.random((10, 2))
    graph = nb.radius_graph(x, 0.5)
    layer = GNO(2, 2, 3, coord_dim=2, reduce="mean", dtype=np.float64)
    h = rng.standard_normal((10, 2) if batch is None else (batch, 10, 2))
    gradcheck_layer(layer, lambda m, h, x: m(h, graph, x=x), [h, x])


def test_gno_layer_batch_equals_loop_and_threads():
    rng = np.random.default_rng(5)
    x = grid(12)
    graph = nb.radius_graph(x, 0.1)
    layer = GNO(4, 4, 16, coord_dim=2)
    h = rng.standard_normal((4, len(x), 4)).astype(np.float32)
    out = layer(h, graph, x=x).numpy()
    for b in range(4):
        np.testing.assert_allclose(out[b], layer(h[b], graph, x=x).numpy(), rtol=1e-5,
                                   atol=1e-5)

    def step():
        layer.zero_grad()
        y = layer(h, graph, x=x)
        (y * y).sum().backward()
        return [y.numpy()] + [p.grad.numpy() for p in layer.parameters()]

    for a, b in zip(at_threads(1, step), at_threads(2, step)):
        assert_same_bits(a, b)


def test_gno_layer_float32_positions_cast_and_defaults():
    layer = GNO(3, 5, 7, coord_dim=2)
    assert layer.kernel_in.weight.shape == (7, 2)
    assert layer.kernel_out.weight.shape == (15, 7)
    assert layer.skip.weight.shape == (5, 3) and layer.bias.shape == (5,)
    bound = 1 / np.sqrt(7)
    assert np.abs(layer.kernel_out.weight.numpy()).max() <= bound
    x = grid(4)  # float64 positions, float32 layer
    out = layer(np.ones((16, 3), np.float32), nb.radius_graph(x, 0.4), x=x)
    assert out.dtype == np.float32
    assert GNO(3, 5, 7, edge_features="pair", coord_dim=3).kernel_in.weight.shape == (7, 6)
    no_extras = GNO(3, 5, 7, coord_dim=2, bias=False, skip=False)
    assert sorted(n for n, _ in no_extras.named_parameters()) == [
        "kernel_in.bias", "kernel_in.weight", "kernel_out.bias", "kernel_out.weight"]


@pytest.mark.parametrize("make, call, error, match", [
    (lambda: GNO(2, 2, 2), None, ValueError, r"GNO: edge_features='relative' needs "
     r"coord_dim"),
    (lambda: GNO(2, 2, 2, edge_features="both"), None, ValueError,
     r"GNO: edge_features must be 'relative', 'pair' or a positive int"),
    (lambda: GNO(2, 2, 2, coord_dim=2, reduce="max"), None, ValueError,
     r"GNO: reduce must be 'sum' or 'mean', got 'max'"),
    (lambda: GNO(0, 2, 2, coord_dim=2), None, ValueError,
     r"GNO: in_features must be a positive int, got 0"),
    (lambda: GNO(2, 2, 2, coord_dim=2), lambda m, g: m(np.zeros((3, 2)), g), ValueError,
     r"GNO: edge_features='relative' computes the edge features from the positions: pass x"),
    (lambda: GNO(2, 2, 2, edge_features=3), lambda m, g: m(np.zeros((3, 2)), g, x=np.zeros(
        (3, 2))), ValueError, r"GNO: edge_features=3 takes user-supplied features: pass "
     r"edge_feats \[num_edge_ids, 3\]"),
    (lambda: GNO(2, 2, 2, coord_dim=2), lambda m, g: m(np.zeros((3, 2)), g,
                                                       x=np.zeros((3, 3))), ValueError,
     r"GNO: x has shape \(3, 3\), expected \[3, 2\]"),
    (lambda: GNO(2, 2, 2, coord_dim=2), lambda m, g: m(np.zeros((3, 2)), "g", x=None),
     TypeError, r"GNO: graph must be an nb.Graph, got str"),
])
def test_gno_layer_bad_input(make, call, error, match):
    with pytest.raises(error, match=match):
        layer = make()
        call(layer, nb.radius_graph(np.zeros((3, 2)), 1.0))


def test_gno_layer_skip_needs_a_square_graph():
    x, q = np.zeros((3, 2)), np.zeros((2, 2))
    graph = nb.radius_graph(x, 1.0, query=q)
    with pytest.raises(ValueError, match=r"GNO: skip=True adds W h_i at every target node, "
                                         r"but Graph\(num_nodes=2, num_source_nodes=3"):
        GNO(2, 2, 2, coord_dim=2)(np.zeros((3, 2), np.float32), graph, x=(x, q))
    with pytest.raises(ValueError, match=r"GNO: x_target has shape \(3, 2\), expected "
                                         r"\[2, 2\]"):
        GNO(2, 2, 2, coord_dim=2, skip=False)(np.zeros((3, 2), np.float32), graph, x=(x, x))


# -- ONO -----------------------------------------------------------------------------------


def mgs(B):
    Q = np.zeros_like(B)
    for j in range(B.shape[1]):
        v = B[:, j] - Q[:, :j] @ (Q[:, :j].T @ B[:, j])
        Q[:, j] = v / np.linalg.norm(v)
    return Q


def test_ono_matches_athena_formula():
    rng = np.random.default_rng(6)
    layer = ONO(12, 9, 4, dtype=np.float64)
    u = rng.standard_normal((5, 12))
    Q, R = mgs(layer.basis.numpy()), layer.mixing.numpy()
    W, b = layer.linear.weight.numpy(), layer.linear.bias.numpy()
    want = (u @ Q @ R.T @ Q.T + u) @ W.T + b  # v = W (Q R Q^T u + u) + b per field
    np.testing.assert_allclose(layer(u).numpy(), want, rtol=1e-10, atol=1e-12)
    # leading dims are fields: [B, C, n]
    np.testing.assert_allclose(layer(u.reshape(5, 1, 12)).numpy(), want.reshape(5, 1, 9),
                               rtol=1e-12)


@pytest.mark.parametrize("reorthogonalize", [False, True])
def test_ono_gradcheck(reorthogonalize):
    layer = ONO(6, 4, 3, reorthogonalize=reorthogonalize, dtype=np.float64)
    u = np.random.default_rng(7).standard_normal((3, 6))
    gradcheck_layer(layer, lambda m, u: m(u), [u])


def test_ono_reorthogonalize_keeps_q_orthonormal():
    layer = ONO(40, 40, 8, reorthogonalize=True, dtype=np.float64)
    base = np.random.default_rng(8).standard_normal(40)
    with nb.no_grad():
        layer.basis.data[...] = base[:, None] + 1e-7 * np.random.default_rng(9).standard_normal(
            (40, 8))
    Q = layer.orthonormal_basis().numpy()
    assert np.abs(Q.T @ Q - np.eye(8)).max() < 1e-12


def test_ono_bad_input():
    with pytest.raises(ValueError, match=r"ONO: k = 5 basis functions cannot be orthonormal "
                                         r"on in_points = 4 points"):
        ONO(4, 4, 5)
    with pytest.raises(ValueError, match=r"ONO: u has shape \(2, 5\); its last dim must be "
                                         r"in_points = 4"):
        ONO(4, 4, 2)(np.zeros((2, 5), np.float32))


# -- LNO -----------------------------------------------------------------------------------


def laplace(mu, n):
    t = np.linspace(0, 1, n) if n > 1 else np.zeros(1)
    return np.exp(-mu[:, None] * t[None, :])  # [M, n]


def test_lno_dynamic_matches_athena_formula():
    rng = np.random.default_rng(10)
    layer = LNO(16, 11, 4, dtype=np.float64)
    with nb.no_grad():
        layer.poles.data[...] += rng.uniform(-0.5, 0.5, 4)
    mu, beta = layer.poles.numpy(), layer.residues.numpy()
    W, b = layer.linear.weight.numpy(), layer.linear.bias.numpy()
    u = rng.standard_normal((3, 16))
    # v = D(mu) diag(beta) E(mu) u + W u + b
    want = (u @ laplace(mu, 16).T * beta) @ laplace(mu, 11) + u @ W.T + b
    np.testing.assert_allclose(layer(u).numpy(), want, rtol=1e-10, atol=1e-12)
    assert sorted(n for n, _ in layer.named_parameters()) == [
        "linear.bias", "linear.weight", "poles", "residues"]
    np.testing.assert_allclose(LNO(8, 8, 3).poles.numpy(), np.pi * np.arange(1, 4),
                               rtol=1e-7)


def test_lno_fixed_matches_athena_formula_and_keeps_its_poles():
    rng = np.random.default_rng(11)
    layer = LNO(16, 11, 4, learn_poles=False, dtype=np.float64)
    assert "poles" not in dict(layer.named_parameters())
    assert "poles" in layer.state_dict() and not layer.poles.requires_grad
    mu, R = np.pi * np.arange(1, 5), layer.mixing.numpy()
    W, b = layer.linear.weight.numpy(), layer.linear.bias.numpy()
    u = rng.standard_normal((3, 16))
    want = (u @ laplace(mu, 16).T @ R.T) @ laplace(mu, 11) + u @ W.T + b  # D R E u + W u + b
    np.testing.assert_allclose(layer(u).numpy(), want, rtol=1e-10, atol=1e-12)
    layer(u).sum().backward()
    assert layer.poles.grad is None and layer.mixing.grad is not None
    full = LNO(6, 6, 2, mixing="full")
    assert full.mixing.shape == (2, 2) and full.poles.requires_grad


@pytest.mark.parametrize("learn_poles", [True, False])
def test_lno_gradcheck(learn_poles):
    layer = LNO(7, 5, 3, learn_poles=learn_poles, dtype=np.float64)
    u = np.random.default_rng(12).standard_normal((2, 7))
    gradcheck_layer(layer, lambda m, u: m(u), [u])


def test_lno_bad_input():
    with pytest.raises(ValueError, match=r"LNO: mixing must be None, 'diagonal' or 'full', "
                                         r"got 'dense'"):
        LNO(4, 4, 2, mixing="dense")
    with pytest.raises(ValueError, match=r"LNO: u has shape \(3,\); its last dim must be "
                                         r"in_points = 4"):
        LNO(4, 4, 2)(np.zeros(3, np.float32))


def test_operator_layers_same_bits_at_1_and_2_threads():
    rng = np.random.default_rng(13)
    u = rng.standard_normal((64, 128)).astype(np.float32)
    for layer in (ONO(128, 128, 16), LNO(128, 128, 12)):
        def step(layer=layer):
            layer.zero_grad()
            y = layer(u)
            (y * y).sum().backward()
            return [y.numpy()] + [p.grad.numpy() for p in layer.parameters()]

        for a, b in zip(at_threads(1, step), at_threads(2, step)):
            assert_same_bits(a, b)


# -- the PyTorch twin of a GNO model -------------------------------------------------------


class GnoModel(Module):
    """lift -> GNO -> relu -> GNO -> projection, on one shared graph."""

    def __init__(self, f_in, width, f_out, hidden, dtype=None):
        super().__init__()
        self.lift = Linear(f_in, width, dtype=dtype)
        self.gno1 = GNO(width, width, hidden, coord_dim=2, reduce="mean", dtype=dtype)
        self.gno2 = GNO(width, width, hidden, edge_features="pair", coord_dim=2, dtype=dtype)
        self.proj = Linear(width, f_out, dtype=dtype)

    def forward(self, u, graph, x):
        h = self.lift(u)
        h = nb.relu(self.gno1(h, graph, x=x))
        return self.proj(self.gno2(h, graph, x=x))


def torch_gno(torch, P, prefix, h, e, src, dst, n, reduce, width):
    """A GNO layer the way a PyTorch user writes it: kernel MLP, gather, per-edge matrix
    products, index_add (h may be [B, N, F])."""
    hidden = torch.relu(e @ P[prefix + "kernel_in.weight"].T + P[prefix + "kernel_in.bias"])
    kappa = (hidden @ P[prefix + "kernel_out.weight"].T
             + P[prefix + "kernel_out.bias"]).view(-1, width, width)
    msg = torch.einsum("eoi,bei->beo", kappa, h[:, src])
    out = torch.zeros(h.shape[0], n, width, dtype=h.dtype).index_add(1, dst, msg)
    if reduce == "mean":
        deg = torch.bincount(dst, minlength=n).clamp(min=1).to(h.dtype)
        out = out / deg[:, None]
    return out + h @ P[prefix + "skip.weight"].T + P[prefix + "bias"]


def test_gno_model_pytorch_twin():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(14)
    x = grid(8)
    graph = nb.radius_graph(x, 0.2)
    model = GnoModel(3, 8, 2, 16)
    u = rng.standard_normal((4, len(x), 3)).astype(np.float32)
    g = rng.standard_normal((4, len(x), 2)).astype(np.float32)
    out = model(u, graph, x)
    out.backward(g)

    P = {n: torch.tensor(p.numpy(), requires_grad=True) for n, p in model.named_parameters()}
    src, dst = torch.tensor(graph.col), torch.tensor(graph.row)
    xt = torch.tensor(x, dtype=torch.float32)
    rel = xt[src] - xt[dst]
    pair = torch.cat([xt[dst], xt[src]], dim=1)
    n = len(x)
    h = torch.tensor(u) @ P["lift.weight"].T + P["lift.bias"]
    h = torch.relu(torch_gno(torch, P, "gno1.", h, rel, src, dst, n, "mean", 8))
    h = torch_gno(torch, P, "gno2.", h, pair, src, dst, n, "sum", 8)
    ref = h @ P["proj.weight"].T + P["proj.bias"]
    ref.backward(torch.tensor(g))

    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-4)
    for name, p in model.named_parameters():
        want = P[name].grad.numpy()
        np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-4,
                                   atol=1e-4 * np.abs(want).max(), err_msg=name)
