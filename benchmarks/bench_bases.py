"""W7 orthogonal basis encode (ONO) and W7b Laplace basis encode + decode (LNO).

W7: ``ono_encode(u[256, 1024], B[1024, 64])``, float32, forward + backward with
gradients for u and B. PyTorch the way a user would write it: ``Q, _ =
torch.linalg.qr(B); u @ Q`` (Householder QR and its autograd formula); also PyTorch
autograd through the same modified Gram-Schmidt loop nbgrad runs, and nbgrad with
``reorthogonalize=True``. nbgrad runs it as one op: MGS in panels (one barrier per 8
columns), ``u @ Q`` and ``g^T u`` on both threads, then the serial sweep on one thread
while ``g @ Q^T`` runs on the other.

W7-large: ``gram_schmidt(B[65536, 64])`` forward + backward against ``torch.linalg.qr``
(the same kernels: MGS in panels, the blocked serial sweep).

W7b: ``lno_decode(lno_encode(u[256, 1024], mu[32]), mu, 1024)``, float32, gradients for
u and mu; PyTorch builds ``E = exp(-mu t)`` once and computes ``(u @ E.T) @ E``.
"""

from __future__ import annotations

import numpy as np

import nbgrad as nb

from .harness import Row, median_time, paired_times

S, N, K, M = 256, 1024, 64, 32
N_LARGE = 65536


def _data():
    rng = np.random.default_rng(0)
    f32 = np.float32
    return {
        "u": rng.standard_normal((S, N)).astype(f32),
        "B": rng.standard_normal((N, K)).astype(f32),
        "g7": rng.standard_normal((S, K)).astype(f32),
        "mu": rng.uniform(0.1, 10.0, M).astype(f32),
        "g7b": rng.standard_normal((S, N)).astype(f32),
        "B_large": rng.standard_normal((N_LARGE, K)).astype(f32),
        "g_large": rng.standard_normal((N_LARGE, K)).astype(f32),
    }


def _ono_step(a, reorthogonalize=False):
    u = nb.tensor(a["u"], requires_grad=True)
    B = nb.tensor(a["B"], requires_grad=True)
    nb.ono_encode(u, B, reorthogonalize=reorthogonalize).backward(a["g7"])
    return B.grad


def _basis_step(a):
    B = nb.tensor(a["B_large"], requires_grad=True)
    nb.gram_schmidt(B).backward(a["g_large"])
    return B.grad


def _lno_step(a):
    u = nb.tensor(a["u"], requires_grad=True)
    mu = nb.tensor(a["mu"], requires_grad=True)
    nb.lno_decode(nb.lno_encode(u, mu), mu, N).backward(a["g7b"])
    return mu.grad


def _torch_mgs(torch, B):
    cols = []
    for j in range(B.shape[1]):
        v = B[:, j]
        for q in cols:
            v = v - (q @ v) * q
        cols.append(v / torch.linalg.norm(v))
    return torch.stack(cols, dim=1)


def _torch_ono_step(torch, t, mgs):
    u = t["u"].clone().requires_grad_()
    B = t["B"].clone().requires_grad_()
    Q = _torch_mgs(torch, B) if mgs else torch.linalg.qr(B)[0]
    (u @ Q).backward(t["g7"])
    return B.grad


def _torch_basis_step(torch, t):
    B = t["B_large"].clone().requires_grad_()
    torch.linalg.qr(B)[0].backward(t["g_large"])
    return B.grad


def _torch_lno_step(torch, t):
    u = t["u"].clone().requires_grad_()
    mu = t["mu"].clone().requires_grad_()
    E = torch.exp(-mu[:, None] * torch.linspace(0, 1, N))
    ((u @ E.T) @ E).backward(t["g7b"])
    return mu.grad


def run(torch) -> list[Row]:
    a = _data()
    t = None if torch is None else {k: torch.from_numpy(v) for k, v in a.items()}
    def with_torch(step):
        return None if torch is None else (lambda: step(torch, t))

    ono, qr = paired_times(lambda: _ono_step(a),
                           with_torch(lambda torch, t: _torch_ono_step(torch, t, mgs=False)))
    lno, tlno = paired_times(lambda: _lno_step(a), with_torch(_torch_lno_step))
    ono2 = median_time(lambda: _ono_step(a, reorthogonalize=True))
    large = median_time(lambda: _basis_step(a), repeats=3, warmup=1)
    mgs = tlarge = None
    if torch is not None:
        mgs = median_time(lambda: _torch_ono_step(torch, t, mgs=True), repeats=3, warmup=1)
        tlarge = median_time(lambda: _torch_basis_step(torch, t), repeats=3, warmup=1)
    return [
        Row("W7 ono_encode vs torch.linalg.qr path", ono, qr, "<= 1.0x"),
        Row("W7 ono_encode vs torch autograd MGS loop", ono, mgs, "far < 1",
            "same MGS math, autograd per op"),
        Row("W7 ono_encode reorthogonalize=True vs qr", ono2, qr, "",
            "two MGS passes and sweeps"),
        Row("W7-large gram_schmidt B[65536, 64] vs qr", large, tlarge, ""),
        Row("W7b lno_encode + lno_decode (M=32)", lno, tlno, "<= 1.0x"),
    ]
