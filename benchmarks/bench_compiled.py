"""Compiled training steps: ``python -m benchmarks compiled [workload ...]``.

Each workload runs as nbgrad eager, nbgrad compiled (``nb.compile`` of the whole step),
PyTorch eager, ``torch.compile`` (of the loss; its backward is AOTAutograd's compiled
backward, the optimiser eager) where a C++ compiler is present, and JAX
(``jax.jit`` of the value-and-gradient step) where JAX is installed -- in one process,
alternating, float32, 2 threads each; each contender's best median over the rounds.

W17  a chain of point-wise ops on 1M elements, forward and backward:
     h = tanh(1.5 x + 0.25) * 0.5; h = h + exp(-h*h) + x; h = silu(h); (h*h*g).sum(),
     the gradient with respect to x                      targets vs JAX jit <= 1.0x
W24  a chain with broadcast operands, forward and backward: x [4096, 256], w and b
     [256], y = tanh(x w + b) x + 1, y.backward(g): the gradients of x, w and b
W25  a softmax after a broadcast chain: x [4096, 512], w and b [512],
     y = softmax(x w + b) over the last axis, y.backward(g), as W24
W16  a tanh MLP [256, 2] -> 64 x 3 -> 1, mean squared error, SGD step      <= 1.0x
W16i W16 returning ``loss.item()``: a graph break at the step's end (every contender
     reads the loss into Python)
W3   tanh forward + backward on 4M elements (y = tanh(x); y.backward(g))
W2   gelu (exact, erf) forward + backward on 4M elements, as W3
W10  the digits CNN training step (conv-relu-pool x2, two linear layers, cross-entropy,
     SGD with momentum), batch 64                                          <= 0.8x
W23  an MLP classifier [128, 64] -> 128 -> 128 -> 10 with ReLU, cross-entropy on integer
     labels, Adam (lr 1e-3): the everyday small training step
W26  the classifier of W23 wide: [4096, 256] -> 512 -> 512 -> 10, a step of large
     products (a bias and a ReLU per layer in their epilogues)
W21  the physics-informed step of notebooks/pinn_poisson.ipynb: -u'' = pi^2 sin(pi x) on
     [0, 1], a tanh MLP 1 -> 32 -> 32 -> 1 at 64 collocation points, u'' by two
     ``grad(..., create_graph=True)``, the residual's mean square plus the boundary's
     (u(0), u(1)), the loss's gradient and an Adam step (lr 1e-2)        <= 1.0x
W22  one darcy-fno training step (nbgrad/examples/darcy_fno.py's model: lift 3 -> 64 ->
     32, four Fourier layers with modes (16, 14) on the grid padded 16 -> 24, projection
     32 -> 128 -> 1), batch 32 at 16x16, relative L2 loss, Adam (lr 3e-3, weight decay
     1e-4). PyTorch runs nbgrad.testing.torch_reference's FNO, JAX the same math in
     jax.numpy (rfft2, mode mixing by einsum, irfft2, 1x1 convolutions by einsum, gelu),
     all from the same weights                                            <= 1.0x
"""

from __future__ import annotations

import importlib
import shutil
import sys

import numpy as np

import nbgrad as nb

from .bench_train import W10_SHAPES, W16_SHAPES, _params
from .harness import THREADS, format_seconds, median_time

F32 = np.float32
CONTENDERS = ["nbgrad eager", "nbgrad compiled", "PyTorch eager", "torch.compile", "JAX jit"]


# -- W17 -----------------------------------------------------------------------------------


def _w17(torch, jax) -> dict:
    rng = np.random.default_rng(17)
    xa = rng.standard_normal(1 << 20).astype(F32)
    ga = rng.standard_normal(1 << 20).astype(F32)
    g = nb.tensor(ga)

    def chain(x, g, tanh, exp, silu):
        h = tanh(1.5 * x + 0.25) * 0.5
        h = h + exp(-h * h) + x
        h = silu(h)
        return (h * h * g).sum()

    def step(x):
        chain(x, g, nb.tanh, nb.exp, nb.silu).backward()
        return x.grad

    steps = _nbgrad_steps(step, xa)
    if torch is not None:
        tg = torch.from_numpy(ga)
        silu = torch.nn.functional.silu

        def loss(x):
            return chain(x, tg, torch.tanh, torch.exp, silu)

        steps.update(_torch_steps(torch, loss, torch.tensor(xa, requires_grad=True)))
    if jax is not None:
        jnp = jax.numpy
        grad = jax.jit(jax.grad(lambda x, g: chain(x, g, jnp.tanh, jnp.exp, jax.nn.silu)))
        jx, jg = jnp.asarray(xa), jnp.asarray(ga)
        steps["JAX jit"] = lambda: grad(jx, jg).block_until_ready()
    return steps


def _nbgrad_steps(step, xa: np.ndarray) -> dict:
    """nbgrad eager and compiled ``step`` of a leaf holding ``xa``, its gradient reset
    before each call (as a training loop's zero_grad)."""
    def on_leaf(fn):
        x = nb.tensor(xa, requires_grad=True)

        def run():
            x.grad = None
            return fn(x)
        return run
    return {"nbgrad eager": on_leaf(step), "nbgrad compiled": on_leaf(nb.compile(step))}


def _torch_steps(torch, loss, x) -> dict:
    """PyTorch eager and (with a C++ compiler) torch.compile of ``loss(x)``, each followed
    by its backward, ``x.grad`` reset before each call."""
    def run(fn):
        def step():
            x.grad = None
            fn(x).backward()
            return x.grad
        return step

    steps = {"PyTorch eager": run(loss)}
    if shutil.which("g++") or shutil.which("c++"):
        steps["torch.compile"] = run(torch.compile(loss))
    return steps


# -- W24 -----------------------------------------------------------------------------------


def _w24(torch, jax) -> dict:
    return _broadcast_chain(torch, jax, lambda x, w, b, lib: lib.tanh(x * w + b) * x + 1.0,
                            24, 256)


def _w25(torch, jax) -> dict:
    return _broadcast_chain(torch, jax, lambda x, w, b, lib: lib.softmax(x * w + b), 25, 512)


def _broadcast_chain(torch, jax, chain, seed: int, width: int) -> dict:
    """y = ``chain(x, w, b, lib)`` and ``y.backward(g)`` (the gradients of x, w and b) for
    x [4096, width] and w, b [width] (lib: a namespace with ``tanh`` and ``softmax`` over
    the last axis of the library)."""
    rng = np.random.default_rng(seed)
    xa, ga = (rng.standard_normal((4096, width)).astype(F32) for _ in range(2))
    wa, ba = (rng.standard_normal(width).astype(F32) for _ in range(2))

    def on_leaves(make, step):
        """``step(x, w, b, g)`` (the chain and its backward) on leaves, their gradients
        reset before each call."""
        leaves, g = [make(a, True) for a in (xa, wa, ba)], make(ga, False)

        def run():
            for t in leaves:
                t.grad = None
            step(*leaves, g)
            return leaves[1].grad
        return run

    def ours(x, w, b, g):
        chain(x, w, b, _Lib(nb.tanh, lambda v: nb.softmax(v, dim=-1))).backward(g)

    def leaf(a, requires_grad):
        return nb.tensor(a, requires_grad=requires_grad)

    steps = {"nbgrad eager": on_leaves(leaf, ours),
             "nbgrad compiled": on_leaves(leaf, nb.compile(ours))}
    if torch is not None:
        def torch_leaf(a, requires_grad):
            return torch.tensor(a, requires_grad=requires_grad)

        def theirs(forward):
            return lambda x, w, b, g: forward(x, w, b).backward(g)

        torch_lib = _Lib(torch.tanh, lambda v: torch.softmax(v, dim=-1))
        plain = lambda x, w, b: chain(x, w, b, torch_lib)  # noqa: E731
        steps["PyTorch eager"] = on_leaves(torch_leaf, theirs(plain))
        if shutil.which("g++") or shutil.which("c++"):
            steps["torch.compile"] = on_leaves(torch_leaf, theirs(torch.compile(plain)))
    if jax is not None:
        jnp = jax.numpy
        jax_lib = _Lib(jnp.tanh, lambda v: jax.nn.softmax(v, axis=-1))
        grads = jax.jit(jax.grad(lambda x, w, b, g: (chain(x, w, b, jax_lib) * g).sum(),
                                 argnums=(0, 1, 2)))
        args = [jnp.asarray(a) for a in (xa, wa, ba, ga)]
        steps["JAX jit"] = lambda: grads(*args)[1].block_until_ready()
    return steps


class _Lib:
    """The functions a broadcast chain takes from its library."""

    def __init__(self, tanh, softmax) -> None:
        self.tanh, self.softmax = tanh, softmax


# -- W3 ------------------------------------------------------------------------------------


def _activation_step(torch, jax, seed: int, ours, theirs, jax_fn) -> dict:
    """y = f(x); y.backward(g) on 4M float32 elements: nbgrad's ``ours``, PyTorch's
    ``theirs(torch)`` and ``jax_fn(jax)``."""
    rng = np.random.default_rng(seed)
    xa = rng.standard_normal(1 << 22).astype(F32)
    ga = rng.standard_normal(1 << 22).astype(F32)

    def step(x):
        ours(x).backward(ga)
        return x.grad

    steps = _nbgrad_steps(step, xa)
    if torch is not None:
        tg, torch_f = torch.from_numpy(ga), theirs(torch)
        steps.update(_torch_steps(torch, lambda x: (torch_f(x) * tg).sum(),
                                  torch.tensor(xa, requires_grad=True)))
    if jax is not None:
        jax_f = jax_fn(jax)
        vjp = jax.jit(lambda x, g: jax.vjp(jax_f, x)[1](g)[0])
        jx, jg = jax.numpy.asarray(xa), jax.numpy.asarray(ga)
        steps["JAX jit"] = lambda: vjp(jx, jg).block_until_ready()
    return steps


def _w3(torch, jax) -> dict:
    return _activation_step(torch, jax, 3, nb.tanh, lambda torch: torch.tanh,
                            lambda jax: jax.numpy.tanh)


def _w2(torch, jax) -> dict:
    return _activation_step(torch, jax, 2, nb.gelu,
                            lambda torch: torch.nn.functional.gelu,
                            lambda jax: lambda x: jax.nn.gelu(x, approximate=False))


# -- training steps: W16, W10, W21, W22 ----------------------------------------------------


def _training(torch, jax, params: dict, loss_of, optimizer: tuple[str, dict],
              nb_model=None, read_loss: bool = False) -> dict:
    """The training step of ``loss_of(lib, p)`` (lib: "nbgrad", "torch" or "jax") on
    copies of ``params`` with ``optimizer`` (a name both nb.optim and torch.optim have,
    "SGD" or "Adam", and its arguments): nbgrad eager and compiled, PyTorch eager and
    compiled, JAX. ``nb_model()``, if given, makes nbgrad's (parameters, loss) instead,
    for a model that is a Module. ``read_loss``: each step returns the loss as a Python
    float (``loss.item()`` inside the step: a graph break at its end)."""
    name, kwargs = optimizer
    nb_model = nb_model or _nb_functional(params, loss_of)
    steps = {}
    for kind in ("nbgrad eager", "nbgrad compiled"):
        leaves, loss_fn = nb_model()
        opt = getattr(nb.optim, name)(leaves, **kwargs)

        def step(opt=opt, loss_fn=loss_fn):
            opt.zero_grad()
            loss = loss_fn()
            loss.backward()
            opt.step()
            return loss.item() if read_loss else loss

        steps[kind] = nb.compile(step) if kind == "nbgrad compiled" else step
    if torch is not None:
        for kind, wrap in (("PyTorch eager", lambda f: f), ("torch.compile", torch.compile)):
            if kind == "torch.compile" and not (shutil.which("g++") or shutil.which("c++")):
                continue
            p = {k: torch.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
            opt = getattr(torch.optim, name)(list(p.values()), **kwargs)
            loss_fn = wrap(lambda p: loss_of("torch", p))

            def step(p=p, opt=opt, loss_fn=loss_fn):
                opt.zero_grad(set_to_none=True)
                loss = loss_fn(p)
                loss.backward()
                opt.step()
                return loss.item() if read_loss else loss

            steps[kind] = step
    if jax is not None:
        jax_optimizer = {"SGD": _jax_sgd, "Adam": _jax_adam}[name]
        jax_step = jax_optimizer(jax, params, lambda p: loss_of("jax", p), **kwargs)
        steps["JAX jit"] = (lambda: float(jax_step())) if read_loss else jax_step
    return steps


def _nb_functional(params: dict, loss_of):
    """nbgrad leaves holding copies of ``params``, and the loss of them."""
    def make():
        p = {k: nb.tensor(v.copy(), requires_grad=True) for k, v in params.items()}
        return list(p.values()), lambda: loss_of("nbgrad", p)
    return make


def _jax_sgd(jax, params: dict, loss, lr: float, momentum: float = 0.0):
    state = {"p": {k: jax.numpy.asarray(v) for k, v in params.items()},
             "v": {k: jax.numpy.zeros_like(v) for k, v in params.items()}}

    @jax.jit
    def update(p, v):
        value, g = jax.value_and_grad(loss)(p)
        v = jax.tree_util.tree_map(lambda v, g: momentum * v + g, v, g)
        p = jax.tree_util.tree_map(lambda p, v: p - lr * v, p, v)
        return value, p, v

    def step():
        value, state["p"], state["v"] = update(state["p"], state["v"])
        return value.block_until_ready()
    return step


def _jax_adam(jax, params: dict, loss, lr: float, weight_decay: float = 0.0,
              betas=(0.9, 0.999), eps: float = 1e-8):
    """PyTorch's Adam: d = g + wd p; m, v the moving averages of d and d^2;
    p -= lr m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps)."""
    b1, b2 = betas
    jnp, tree_map = jax.numpy, jax.tree_util.tree_map
    state = {"p": {k: jnp.asarray(v) for k, v in params.items()},
             "m": {k: jnp.zeros_like(v) for k, v in params.items()},
             "v": {k: jnp.zeros_like(v) for k, v in params.items()},
             "t": jnp.asarray(0, jnp.int32)}

    @jax.jit
    def update(state):
        value, g = jax.value_and_grad(loss)(state["p"])
        t = state["t"] + 1
        d = tree_map(lambda g, p: g + weight_decay * p, g, state["p"])
        m = tree_map(lambda m, d: b1 * m + (1 - b1) * d, state["m"], d)
        v = tree_map(lambda v, d: b2 * v + (1 - b2) * d * d, state["v"], d)
        c1, c2 = 1 - b1 ** t.astype(jnp.float32), 1 - b2 ** t.astype(jnp.float32)
        p = tree_map(lambda p, m, v: p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps),
                     state["p"], m, v)
        return value, {"p": p, "m": m, "v": v, "t": t}

    def step():
        value, new = update(state)
        state.update(new)
        return value.block_until_ready()
    return step


def _w16(torch, jax, read_loss: bool = False) -> dict:
    rng = np.random.default_rng(16)
    x = rng.random((256, 2)).astype(F32)
    target = rng.standard_normal((256, 1)).astype(F32)
    params = _params(rng, W16_SHAPES)
    data = _by_library(torch, jax, x, target)

    def loss_of(lib, p):
        tanh = {"nbgrad": nb.tanh, "torch": getattr(torch, "tanh", None),
                "jax": getattr(getattr(jax, "numpy", None), "tanh", None)}[lib]
        h, t = data[lib]
        for i in range(3):
            h = tanh(h @ p[f"w{i}"].T + p[f"b{i}"])
        return ((h @ p["w3"].T + p["b3"] - t) ** 2).mean()

    return _training(torch, jax, params, loss_of, ("SGD", {"lr": 0.05, "momentum": 0.0}),
                     read_loss=read_loss)


def _classifier_shapes(inputs: int, hidden: int) -> dict:
    """An MLP classifier inputs -> hidden -> hidden -> 10."""
    return {"w0": (hidden, inputs), "b0": (hidden,), "w1": (hidden, hidden), "b1": (hidden,),
            "w2": (10, hidden), "b2": (10,)}


def _classifier(torch, jax, rows: int, inputs: int, hidden: int, seed: int) -> dict:
    """W23 and W26: the classifier's step on a batch of ``rows`` (ReLU, cross-entropy,
    Adam with lr 1e-3)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inputs)).astype(F32)
    labels = rng.integers(0, 10, rows)
    params = _params(rng, _classifier_shapes(inputs, hidden))
    data = _by_library(torch, jax, x, labels)

    def loss_of(lib, p):
        h, y = data[lib]
        for i in range(2):
            h = h @ p[f"w{i}"].T + p[f"b{i}"]
            h = h * (h > 0) if lib == "jax" else (nb.relu(h) if lib == "nbgrad" else h.relu())
        logits = h @ p["w2"].T + p["b2"]
        if lib == "jax":
            logp = jax.nn.log_softmax(logits)
            return -jax.numpy.mean(logp[jax.numpy.arange(logits.shape[0]), y])
        return (nb.cross_entropy if lib == "nbgrad"
                else torch.nn.functional.cross_entropy)(logits, y)

    return _training(torch, jax, params, loss_of, ("Adam", {"lr": 1e-3}))


def _w10(torch, jax) -> dict:
    rng = np.random.default_rng(10)
    x = rng.random((64, 1, 8, 8)).astype(F32)
    labels = rng.integers(0, 10, 64)
    params = _params(rng, W10_SHAPES)
    data = _by_library(torch, jax, x, labels)

    def loss_of(lib, p):
        images, y = data[lib]
        if lib == "jax":
            return _jax_cnn_loss(jax, images, y, p)
        F = nb if lib == "nbgrad" else torch.nn.functional
        h = F.max_pool2d(F.relu(F.conv2d(images, p["w1"], p["b1"], padding=1)), 2)
        h = F.max_pool2d(F.relu(F.conv2d(h, p["w2"], p["b2"], padding=1)), 2)
        h = F.relu(h.flatten(1) @ p["l1"].T + p["c1"])
        return F.cross_entropy(h @ p["l2"].T + p["c2"], y)

    return _training(torch, jax, params, loss_of, ("SGD", {"lr": 0.05, "momentum": 0.9}))


def _jax_cnn_loss(jax, images, labels, p):
    lax, jnp = jax.lax, jax.numpy

    def conv_relu_pool(h, w, b):
        h = lax.conv_general_dilated(h, w, (1, 1), ((1, 1), (1, 1)))
        h = jax.nn.relu(h + b[None, :, None, None])
        return lax.reduce_window(h, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    h = conv_relu_pool(images, p["w1"], p["b1"])
    h = conv_relu_pool(h, p["w2"], p["b2"])
    h = jax.nn.relu(h.reshape(h.shape[0], -1) @ p["l1"].T + p["c1"])
    logits = h @ p["l2"].T + p["c2"]
    return -jnp.mean(jax.nn.log_softmax(logits)[jnp.arange(labels.shape[0]), labels])


# -- W21: the PINN step ----------------------------------------------------------------------

PINN_SIZES = (1, 32, 32, 1)
PINN_POINTS = 64


def _w21(torch, jax) -> dict:
    rng = np.random.default_rng(21)
    params = {}
    for i, (fan_in, fan_out) in enumerate(zip(PINN_SIZES[:-1], PINN_SIZES[1:])):
        params[f"w{i}"] = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(F32)
        params[f"b{i}"] = np.zeros(fan_out, F32)
    x = np.linspace(0.0, 1.0, PINN_POINTS, dtype=F32)[:, None]
    source = (np.pi ** 2 * np.sin(np.pi * x)).astype(F32)    # f of -u'' = f
    boundary = np.array([[0.0], [1.0]], F32)
    data = _by_library(torch, jax, source, boundary)
    points = _by_library(torch, jax, x)
    points["nbgrad"][0].requires_grad_(True)

    def loss_of(lib, p):
        f, xb = data[lib]
        tanh = {"nbgrad": nb.tanh, "torch": getattr(torch, "tanh", None),
                "jax": getattr(getattr(jax, "numpy", None), "tanh", None)}[lib]

        def u(s):
            return _pinn_mlp(tanh, p, s)

        if lib == "nbgrad":
            u_xx = _second_derivative(u, points[lib][0])
        else:   # torch.compile cannot differentiate its compiled backward: torch.func
            u_xx = _second_derivative_by_transform(
                torch.func.grad if lib == "torch" else jax.grad, u, points[lib][0])
        return ((u_xx + f) ** 2).mean() + (_pinn_mlp(tanh, p, xb) ** 2).mean()

    return _training(torch, jax, params, loss_of, ("Adam", {"lr": 1e-2}))


def _pinn_mlp(tanh, p: dict, x):
    h = x
    for i in range(len(PINN_SIZES) - 2):
        h = tanh(h @ p[f"w{i}"] + p[f"b{i}"])
    last = len(PINN_SIZES) - 2
    return h @ p[f"w{last}"] + p[f"b{last}"]


def _second_derivative(u, x):
    """u''(x) at every point: each u[n] depends on x[n] only, so d(sum u)/dx is u' at
    every point, and d(sum u')/dx is u''; both graphs kept for the loss's gradient."""
    (u_x,) = nb.grad(u(x).sum(), x, create_graph=True)
    (u_xx,) = nb.grad(u_x.sum(), x, create_graph=True)
    return u_xx


def _second_derivative_by_transform(grad, u, x):
    """The same u'' with a function transform (jax.grad, torch.func.grad)."""
    u_x = grad(lambda s: u(s).sum())
    return grad(lambda s: u_x(s).sum())(x)


# -- W22: a darcy-fno training step --------------------------------------------------------

FNO_BATCH = 32


def _w22(torch, jax) -> dict:
    from nbgrad.examples import darcy_fno

    rng = np.random.default_rng(22)
    x = rng.standard_normal((FNO_BATCH, 3, 16, 16)).astype(F32)   # [a, x, y]: the time
    y = rng.standard_normal((FNO_BATCH, 1, 16, 16)).astype(F32)   # needs no real data

    def model():
        nb.manual_seed(0)    # the same weights for every contender
        return darcy_fno.build_model()

    reference = model()
    params = {k: q.numpy().copy() for k, q in reference.named_parameters()}
    data = _by_library(torch, jax, x, y)

    def nb_model():
        m = model()
        inputs, target = data["nbgrad"]
        return (list(m.parameters()),
                lambda: darcy_fno.relative_l2_loss(m(inputs), target))

    def loss_of(lib, p):
        inputs, target = data[lib]
        if lib == "jax":
            return _jax_relative_l2(jax, _jax_fno(jax, inputs, p, reference), target)
        from nbgrad.testing.torch_reference import fno_forward

        prediction = fno_forward(torch, inputs, p, reference)
        dims = tuple(range(1, target.ndim))
        return (torch.linalg.vector_norm(prediction - target, dim=dims)
                / torch.linalg.vector_norm(target, dim=dims)).mean()

    return _training(torch, jax, params, loss_of,
                     ("Adam", {"lr": 3e-3, "weight_decay": 1e-4}), nb_model)


def _jax_relative_l2(jax, prediction, target):
    jnp = jax.numpy
    dims = tuple(range(1, target.ndim))
    return (jnp.sqrt(((prediction - target) ** 2).sum(dims))
            / jnp.sqrt((target ** 2).sum(dims))).mean()


def _jax_fno(jax, x, p: dict, model):
    """nbgrad.testing.torch_reference.fno_forward in jax.numpy for the darcy-fno model:
    lifting, symmetric padding, Fourier blocks u = gelu(gelu(K v + W v)) (the last
    without gelu), crop, projection."""
    from nbgrad.testing.torch_reference import _pad_sizes

    jnp = jax.numpy
    blocks = model.fno_blocks
    v = _jax_channel_mlp(jax, x, p, "lifting.")
    pads = _pad_sizes(model.domain_padding, v.shape[2:])
    v = jnp.pad(v, [(0, 0), (0, 0)] + [(k, k) for k in pads])
    for i in range(blocks.n_layers):
        u = _jax_spectral_conv(jax, v, p, f"fno_blocks.convs.{i}.", blocks.convs[i])
        u = u + _jax_conv1x1(jax, v, p[f"fno_blocks.fno_skips.{i}.conv.weight"])
        v = u if i == blocks.n_layers - 1 else _jax_gelu(jax, _jax_gelu(jax, u))
    v = v[(Ellipsis,) + tuple(slice(k, -k) if k else slice(None) for k in pads)]
    return _jax_channel_mlp(jax, v, p, "projection.")


def _jax_gelu(jax, v):
    return jax.nn.gelu(v, approximate=False)


def _jax_conv1x1(jax, v, w, b=None):
    """y[b, o, ...] = sum_i w[o, i] v[b, i, ...] (+ b[o])."""
    y = jax.numpy.einsum("oi,bi...->bo...", w[..., 0], v)
    return y if b is None else y + b.reshape((-1,) + (1,) * (v.ndim - 2))


def _jax_channel_mlp(jax, v, p: dict, pre: str):
    v = _jax_conv1x1(jax, v, p[pre + "fcs.0.weight"], p[pre + "fcs.0.bias"])
    return _jax_conv1x1(jax, _jax_gelu(jax, v), p[pre + "fcs.1.weight"], p[pre + "fcs.1.bias"])


def _jax_spectral_conv(jax, v, p: dict, pre: str, conv):
    """torch_reference.spectral_conv for 2-D dense weights: the rfft2 spectrum
    (fftshifted along x), Y = sum_i X_i W_io on the kept modes centred on frequency 0,
    placed back into a zero spectrum, the zero and Nyquist bins made real, irfft2."""
    from nbgrad.testing.torch_reference import _centred, _kept_weight_index

    jnp = jax.numpy
    grid = list(v.shape[2:])
    X = jnp.fft.fftshift(jnp.fft.rfft2(v, norm=conv.fft_norm), axes=-2)
    w = (p[pre + "weight_real"] + 1j * p[pre + "weight_imag"])[_kept_weight_index(conv)]
    kept = _centred(grid, conv.n_modes)
    Y = jnp.einsum("bixy,ioxy->boxy", X[kept], w)
    bins = grid[-1] // 2 + 1
    out = jnp.zeros((v.shape[0], conv.out_channels, grid[0], bins), X.dtype).at[kept].set(Y)
    out = jnp.fft.ifft(jnp.fft.ifftshift(out, axes=-2), axis=-2, norm=conv.fft_norm)
    real = jnp.ones(bins, v.dtype).at[0].set(0)
    if grid[-1] % 2 == 0:
        real = real.at[-1].set(0)
    out = out.real + 1j * (out.imag * real)
    y = jnp.fft.irfft(out, n=grid[-1], axis=-1, norm=conv.fft_norm)
    return y + p[pre + "bias"]


def _by_library(torch, jax, *arrays) -> dict:
    out = {"nbgrad": tuple(nb.tensor(a) for a in arrays)}
    if torch is not None:
        out["torch"] = tuple(torch.from_numpy(a) for a in arrays)
    if jax is not None:
        out["jax"] = tuple(jax.numpy.asarray(a) for a in arrays)
    return out


WORKLOADS = {"W17": ("W17 point-wise chain fwd+bwd, 1M", _w17),
             "W24": ("W24 broadcast chain fwd+bwd, [4096, 256] with [256] w, b", _w24),
             "W25": ("W25 softmax(x w + b) fwd+bwd, [4096, 512]", _w25),
             "W16": ("W16 tanh MLP train step [256,2]->64x3->1", _w16),
             "W16i": ("W16 returning loss.item() (a graph break at the end)",
                      lambda torch, jax: _w16(torch, jax, read_loss=True)),
             "W3": ("W3 tanh fwd+bwd, 4M", _w3),
             "W2": ("W2 gelu fwd+bwd, 4M", _w2),
             "W10": ("W10 digits CNN train step, batch 64", _w10),
             "W23": ("W23 MLP classifier step, 128 x 64 -> 128 x 2 -> 10, CE",
                     lambda torch, jax: _classifier(torch, jax, 128, 64, 128, 23)),
             "W26": ("W26 wide MLP classifier step, 4096 x 256 -> 512 x 2 -> 10, CE",
                     lambda torch, jax: _classifier(torch, jax, 4096, 256, 512, 26)),
             "W21": ("W21 PINN Poisson step, u'' by create_graph, 64 pts", _w21),
             "W22": ("W22 darcy-fno train step, batch 32 at 16x16", _w22)}


def measure(steps: dict, rounds: int = 3, repeats: int = 9) -> dict:
    """Each contender's best median over ``rounds`` alternating blocks."""
    best: dict = {}
    for _ in range(rounds):
        for name, step in steps.items():
            t = median_time(step, repeats, warmup=2)
            best[name] = min(best.get(name, t), t)
    return best


def main(argv: list[str]) -> None:
    import numba

    numba.set_num_threads(THREADS)
    torch = _optional("torch")
    if torch is not None:
        torch.set_num_threads(THREADS)
    jax = _optional("jax")
    names = argv or list(WORKLOADS)
    print(f"threads: {THREADS}; PyTorch {getattr(torch, '__version__', 'not installed')}; "
          f"JAX {getattr(jax, '__version__', 'not installed')}")
    header = ["workload"] + CONTENDERS + ["compiled / JAX", "compiled / torch.compile"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name in names:
        label, build = WORKLOADS[name]
        times = measure(build(torch, jax))
        cells = [format_seconds(times.get(c)) for c in CONTENDERS]
        ratios = [_ratio(times, "nbgrad compiled", peer) for peer in ("JAX jit", "torch.compile")]
        print("| " + " | ".join([label] + cells + ratios) + " |", flush=True)


def _ratio(times: dict, ours: str, peer: str) -> str:
    if ours not in times or peer not in times:
        return ""
    return f"{times[ours] / times[peer]:.2f}x"


def _optional(name: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


if __name__ == "__main__":
    main(sys.argv[1:])
