"""The activation tests' shared cases: the registered op names and the float64 NumPy/SciPy
references (name, nbgrad call, f(x), f'(x)) of the element-wise activations."""

import numpy as np
from scipy.special import erf, expit

import nbgrad as nb

OPS = ["tanh", "sigmoid", "relu", "leaky_relu", "elu", "gelu", "gelu_derivative", "gelu_quick",
       "silu", "softplus", "clamp", "clamp_tensor", "softmax", "log_softmax", "logsumexp"]

# -- float64 references: (name, nbgrad call, f(x), f'(x)) ------------------------------------

K_TANH = np.sqrt(2 / np.pi)


def _phi_cdf(x):
    return 0.5 * (1 + erf(x / np.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(K_TANH * (x + 0.044715 * x ** 3)))


def _gelu_tanh_grad(x):
    t = np.tanh(K_TANH * (x + 0.044715 * x ** 3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * K_TANH * (1 + 3 * 0.044715 * x * x)


def _softplus(x, beta, threshold):
    z = beta * x
    return np.where(z > threshold, x, np.logaddexp(0, z) / beta)


ELEMENTWISE = [
    ("tanh", nb.tanh, np.tanh, lambda x: 1 - np.tanh(x) ** 2),
    ("sigmoid", nb.sigmoid, expit, lambda x: expit(x) * (1 - expit(x))),
    ("relu", nb.relu, lambda x: np.maximum(x, 0), lambda x: (x > 0) * 1.0),
    ("leaky_relu", lambda t: nb.leaky_relu(t, 0.1), lambda x: np.where(x > 0, x, 0.1 * x),
     lambda x: np.where(x > 0, 1.0, 0.1)),
    ("elu", lambda t: nb.elu(t, 1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(x)),
     lambda x: np.where(x > 0, 1.0, 1.5 * np.exp(x))),
    ("gelu", nb.gelu, lambda x: x * _phi_cdf(x),
     lambda x: _phi_cdf(x) + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi)),
    ("gelu_tanh", lambda t: nb.gelu(t, "tanh"), _gelu_tanh, _gelu_tanh_grad),
    ("gelu_quick", nb.gelu_quick, lambda x: x * expit(1.702 * x),
     lambda x: expit(1.702 * x) * (1 + 1.702 * x * (1 - expit(1.702 * x)))),
    ("silu", nb.silu, lambda x: x * expit(x), lambda x: expit(x) * (1 + x * (1 - expit(x)))),
    ("softplus", lambda t: nb.softplus(t, 2.0, 5.0), lambda x: _softplus(x, 2.0, 5.0),
     lambda x: np.where(2 * x > 5, 1.0, expit(2 * x))),
    ("clamp", lambda t: nb.clamp(t, -1.0, 2.0), lambda x: np.clip(x, -1, 2),
     lambda x: ((x >= -1) & (x <= 2)) * 1.0),
]
EW_IDS = [c[0] for c in ELEMENTWISE]


def forward_backward(fn, x, g):
    t = nb.tensor(x, requires_grad=True)
    y = fn(t)
    y.backward(g)
    return y.numpy(), t.grad.numpy()


def torch_cases(torch):
    """(name, nbgrad call, the PyTorch call) of the ops the PyTorch oracles compare."""
    f = torch.nn.functional
    return [
        ("tanh", nb.tanh, torch.tanh), ("sigmoid", nb.sigmoid, torch.sigmoid),
        ("relu", nb.relu, torch.relu),
        ("leaky_relu", lambda t: nb.leaky_relu(t, 0.3), lambda t: f.leaky_relu(t, 0.3)),
        ("elu", lambda t: nb.elu(t, 0.8), lambda t: f.elu(t, 0.8)),
        ("gelu", nb.gelu, f.gelu),
        ("gelu_tanh", lambda t: nb.gelu(t, "tanh"), lambda t: f.gelu(t, approximate="tanh")),
        ("silu", nb.silu, f.silu),
        ("softplus", lambda t: nb.softplus(t, 1.5, 3.0), lambda t: f.softplus(t, 1.5, 3.0)),
        ("clamp", lambda t: nb.clamp(t, -0.5, 1.0), lambda t: torch.clamp(t, -0.5, 1.0)),
        ("softmax", lambda t: nb.softmax(t, 0), lambda t: torch.softmax(t, 0)),
        ("log_softmax", nb.log_softmax, lambda t: torch.log_softmax(t, -1)),
        ("logsumexp", lambda t: nb.logsumexp(t, 1), lambda t: torch.logsumexp(t, 1)),
    ]
