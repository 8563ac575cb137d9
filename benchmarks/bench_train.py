"""Whole training steps of small models, where the per-call costs (thread wake-ups,
parallel regions, the Python layer) count as much as the kernels.

W10  digits CNN, float32, batch 64: conv 1->16 k3 p1 on 8x8, relu, max-pool 2, conv
     16->32 k3 p1, relu, max-pool 2, linear 128->64, relu, linear 64->10, cross-entropy,
     backward, SGD with momentum 0.9                                   target <= 0.8x
W16  MLP of 3 tanh layers of width 64 on [256, 2] inputs, linear head, mean squared
     error against a random target, backward, SGD                      target <= 1.0x
W12s graph neural operator on a 16x16 Darcy grid, batch 4 (one block-diagonal graph of
     four copies, radius 2.5 cells: 4,616 edges per grid): lift 3->32, three fused gno
     layers of width 32 (kernel MLP 2->32->32*32 on x_j - x_i, plus a point-wise linear
     skip, relu), projection 32->1, mean squared error, backward, SGD  target <= 0.4x
W4s  matmul forward + backward: a batch of 32 products 64x64 @ 64x64, and one
     256x256 @ 256x256                                                 target <= 1.0x

The data are random arrays of the shapes named (scikit-learn's digits are 8x8 images in
ten classes; the speed depends on the shapes only). Both sides step with their SGD
(``nb.optim.SGD``, ``torch.optim.SGD``).

W10e the digits example's training epoch as a user runs it: ``nbgrad.examples.digits``'s
     model (conv 1->16, conv 16->32, one max-pool, linear 512->64->10) built from
     ``nbgrad.nn``, the bundled 1,437 training images from ``nbgrad.data.DataLoader``
     (batch 64, shuffled), cross-entropy, SGD momentum 0.9; PyTorch runs the same model
     (``torch.nn``) from the same weights over the same batch order  target <= 0.8x
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, paired_times

F32 = np.float32
LR, MOMENTUM = 0.01, 0.9


#: the parameters of the W10 digits CNN and the W16 tanh MLP (bench_compiled.py times the
#: same steps compiled)
W10_SHAPES = {"w1": (16, 1, 3, 3), "b1": (16,), "w2": (32, 16, 3, 3), "b2": (32,),
              "l1": (64, 128), "c1": (64,), "l2": (10, 64), "c2": (10,)}
W16_SHAPES = {"w0": (64, 2), "b0": (64,), "w1": (64, 64), "b1": (64,), "w2": (64, 64),
              "b2": (64,), "w3": (1, 64), "b3": (1,)}


def _params(rng, shapes: dict) -> dict:
    """He-scaled float32 weights (fan-in = product of all but the first dim), zero biases."""
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            out[name] = np.zeros(shape, F32)
        else:
            fan_in = int(np.prod(shape[1:]))
            out[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(F32)
    return out


def _trainer(loss_nb, params_np: dict, loss_torch, torch, lr: float, momentum: float):
    """(nbgrad step, PyTorch step or None): forward, backward, SGD on copies of the same
    initial parameters."""
    p_nb = {k: nb.tensor(v.copy(), requires_grad=True) for k, v in params_np.items()}
    opt_nb = nb.optim.SGD(list(p_nb.values()), lr=lr, momentum=momentum)

    def step_nb():
        opt_nb.zero_grad()
        loss_nb(p_nb).backward()
        opt_nb.step()

    if torch is None:
        return step_nb, None
    p_t = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params_np.items()}
    opt_t = torch.optim.SGD(list(p_t.values()), lr=lr, momentum=momentum)

    def step_torch():
        opt_t.zero_grad(set_to_none=True)
        loss_torch(p_t).backward()
        opt_t.step()

    return step_nb, step_torch


# -- W10 digits CNN ---------------------------------------------------------------------------
def _w10(torch) -> Row:
    rng = np.random.default_rng(10)
    x = rng.random((64, 1, 8, 8)).astype(F32)
    labels = rng.integers(0, 10, 64)
    params = _params(rng, W10_SHAPES)

    def loss_nb(p):
        h = nb.max_pool2d(nb.relu(nb.conv2d(x, p["w1"], p["b1"], padding=1)), 2)
        h = nb.max_pool2d(nb.relu(nb.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
        h = nb.relu(h.flatten(1) @ p["l1"].T + p["c1"])
        return nb.cross_entropy(h @ p["l2"].T + p["c2"], labels)

    loss_torch = None
    if torch is not None:
        F = torch.nn.functional
        tx, tl = torch.from_numpy(x), torch.from_numpy(labels)

        def loss_torch(p):
            h = F.max_pool2d(F.relu(F.conv2d(tx, p["w1"], p["b1"], padding=1)), 2)
            h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
            h = F.relu(h.flatten(1) @ p["l1"].T + p["c1"])
            return F.cross_entropy(h @ p["l2"].T + p["c2"], tl)

    step_nb, step_torch = _trainer(loss_nb, params, loss_torch, torch, LR, MOMENTUM)
    t_nb, t_torch = paired_times(step_nb, step_torch, repeats=23, warmup=3)
    return Row("W10 digits CNN train step, batch 64", t_nb, t_torch, "<=0.8x",
               "conv-relu-pool x2, 2 linear, CE, SGD momentum")


# -- W10e the digits example's epoch ----------------------------------------------------------
def _w10e(torch) -> Row:
    from nbgrad.data import DataLoader, TensorDataset
    from nbgrad.datasets import split_digits
    from nbgrad.examples import digits

    (x_train, y_train), _ = split_digits(0)
    nb.manual_seed(0)
    model = digits.build_model()
    opt = digits.make_optimizer(model, "sgd", None)
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=64, shuffle=True, seed=0)

    def epoch_nb():
        digits.train_epoch(model, loader, opt)

    epoch_torch = None
    if torch is not None:
        reference = digits.torch_twin(torch)
        with torch.no_grad():
            for p, tp in zip(model.parameters(), reference.parameters()):
                tp.copy_(torch.from_numpy(p.numpy().copy()))
        t_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
        tx, ty = torch.from_numpy(x_train), torch.from_numpy(y_train)
        generator = torch.Generator().manual_seed(0)

        def epoch_torch():
            order = torch.randperm(len(ty), generator=generator)
            for start in range(0, len(ty), 64):
                batch = order[start:start + 64]
                loss = torch.nn.functional.cross_entropy(reference(tx[batch]), ty[batch])
                t_opt.zero_grad()
                loss.backward()
                t_opt.step()

    t_nb, t_torch = paired_times(epoch_nb, epoch_torch, repeats=5, warmup=1)
    return Row("W10e digits example epoch (23 steps)", t_nb, t_torch, "<=0.8x",
               "nbgrad.nn + optim.SGD + DataLoader")


# -- W16 tanh MLP --------------------------------------------------------------------------------
def _w16(torch) -> Row:
    rng = np.random.default_rng(16)
    x = rng.random((256, 2)).astype(F32)
    target = rng.standard_normal((256, 1)).astype(F32)
    params = _params(rng, W16_SHAPES)

    def mlp(h, p, tanh):
        for i in range(3):
            h = tanh(h @ p[f"w{i}"].T + p[f"b{i}"])
        return h @ p["w3"].T + p["b3"]

    def loss_nb(p):
        return ((mlp(x, p, nb.tanh) - target) ** 2).mean()

    loss_torch = None
    if torch is not None:
        tx, tt = torch.from_numpy(x), torch.from_numpy(target)

        def loss_torch(p):
            return ((mlp(tx, p, torch.tanh) - tt) ** 2).mean()

    step_nb, step_torch = _trainer(loss_nb, params, loss_torch, torch, LR, 0.0)
    t_nb, t_torch = paired_times(step_nb, step_torch, repeats=31, warmup=3)
    return Row("W16 tanh MLP train step [256,2]->64x3->1", t_nb, t_torch, "<=1.0x",
               "MSE, SGD")


# -- W12s Darcy GNO ------------------------------------------------------------------------------
GRID, BATCH, WIDTH, KERNEL_HIDDEN, RADIUS_CELLS = 16, 4, 32, 32, 2.5


def _darcy_graph():
    """Grid points in [0, 1]^2, the radius graph of one grid, and its edges repeated for
    BATCH grids as one block-diagonal graph (edge ids run over all copies)."""
    axis = np.linspace(0.0, 1.0, GRID)
    points = np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)
    one = nb.radius_graph(points, RADIUS_CELLS * (axis[1] - axis[0]))
    src, dst = one.col, np.repeat(np.arange(one.num_nodes), np.diff(one.row_ptr))
    n = one.num_nodes
    src_b = np.concatenate([src + b * n for b in range(BATCH)])
    dst_b = np.concatenate([dst + b * n for b in range(BATCH)])
    rel = (points[src] - points[dst]).astype(F32)
    return points, src_b, dst_b, n * BATCH, np.tile(rel, (BATCH, 1)), src.size


def _w12s(torch) -> Row:
    rng = np.random.default_rng(12)
    points, src, dst, nodes, rel, edges_per_grid = _darcy_graph()
    graph = nb.Graph.from_edges(src, dst, nodes)
    coeff = rng.random((BATCH, GRID * GRID, 1))
    inputs = np.concatenate([coeff, np.broadcast_to(points, (BATCH,) + points.shape)], -1)
    inputs = inputs.reshape(nodes, 3).astype(F32)
    target = rng.standard_normal((nodes, 1)).astype(F32)
    shapes = {"lift": (WIDTH, 3), "lift_b": (WIDTH,), "proj": (1, WIDTH), "proj_b": (1,)}
    for i in range(3):
        shapes |= {f"U{i}": (KERNEL_HIDDEN, 2), f"bu{i}": (KERNEL_HIDDEN,),
                   f"V{i}": (WIDTH * WIDTH, KERNEL_HIDDEN), f"bv{i}": (WIDTH * WIDTH,),
                   f"W{i}": (WIDTH, WIDTH)}
    params = _params(rng, shapes)
    for i in range(3):  # kernel matrices of mean size ~1/(width * neighbours)
        params[f"V{i}"] *= F32(1.0 / (WIDTH * edges_per_grid / GRID**2))

    def loss_nb(p):
        h = inputs @ p["lift"].T + p["lift_b"]
        for i in range(3):
            m = nb.gno(h, rel, p[f"U{i}"], p[f"bu{i}"], p[f"V{i}"], p[f"bv{i}"], graph)
            h = nb.relu(m + h @ p[f"W{i}"].T)
        return ((h @ p["proj"].T + p["proj_b"] - target) ** 2).mean()

    loss_torch = None
    if torch is not None:
        t_in, t_target, t_rel = (torch.from_numpy(a) for a in (inputs, target, rel))
        t_src, t_dst = torch.from_numpy(src), torch.from_numpy(dst)

        def loss_torch(p):
            h = t_in @ p["lift"].T + p["lift_b"]
            for i in range(3):
                hidden = torch.relu(t_rel @ p[f"U{i}"].T + p[f"bu{i}"])
                kappa = (hidden @ p[f"V{i}"].T + p[f"bv{i}"]).view(-1, WIDTH, WIDTH)
                msg = torch.bmm(kappa, h.index_select(0, t_src).unsqueeze(-1)).squeeze(-1)
                m = torch.zeros(nodes, WIDTH, dtype=msg.dtype).index_add(0, t_dst, msg)
                h = torch.relu(m + h @ p[f"W{i}"].T)
            return ((h @ p["proj"].T + p["proj_b"] - t_target) ** 2).mean()

    step_nb, step_torch = _trainer(loss_nb, params, loss_torch, torch, LR, MOMENTUM)
    t_nb, t_torch = paired_times(step_nb, step_torch, repeats=9, warmup=2)
    return Row(f"W12s darcy GNO train step, batch {BATCH}", t_nb, t_torch, "<=0.4x",
               f"{edges_per_grid} edges per grid, 3 fused gno layers")


# -- W4s small matmuls ---------------------------------------------------------------------------
def _w4s(torch) -> list[Row]:
    rng = np.random.default_rng(4)
    rows = []
    for label, shape in [("W4s matmul 32 x [64,64]@[64,64] fwd+bwd", (32, 64, 64)),
                         ("W4s matmul [256,256]@[256,256] fwd+bwd", (256, 256))]:
        a, b = (rng.standard_normal(shape).astype(F32) for _ in range(2))
        ta, tb = nb.tensor(a, requires_grad=True), nb.tensor(b, requires_grad=True)

        def step_nb(ta=ta, tb=tb):
            ta.grad = tb.grad = None
            (ta @ tb).sum().backward()

        step_torch = None
        if torch is not None:
            xa = torch.tensor(a, requires_grad=True)
            xb = torch.tensor(b, requires_grad=True)

            def step_torch(xa=xa, xb=xb):
                xa.grad = xb.grad = None
                (xa @ xb).sum().backward()

        t_nb, t_torch = paired_times(step_nb, step_torch, repeats=31, warmup=3)
        rows.append(Row(label, t_nb, t_torch, "<=1.0x"))
    return rows


def run(torch) -> list[Row]:
    return [_w10(torch), _w10e(torch), _w16(torch), _w12s(torch), *_w4s(torch)]
