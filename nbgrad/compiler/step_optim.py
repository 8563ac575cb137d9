"""An optimiser's ``step`` written into a step program (``step_program.py``), after the
gradients it reads.

Eager's ``step`` gathers the gradients into one buffer, works out each parameter's
scalars in Python and runs one update kernel; for a small model that bookkeeping costs
several times the update. Here the update of each parameter is the same per-element
function eager's kernel runs (``kernels/optim.py``: ``_sgd_chunk``, ``_adam_chunk``,
through ``sgd_update`` and ``adam_update``),
called at the end of the generated function on the gradient where the program left it,
so the parameters and the state get eager's bits. What stays in Python is the state
eager keeps there: the step counts (and Adam's bias corrections from them, by eager's own
``bias_corrections``), which parameters have state, and the version counters the
in-place update bumps.

It applies to SGD, Adam and AdamW stepping right after a ``zero_grad()`` of the same
optimiser (so that the parameters with a gradient are exactly the ones the program
computes one for), and it holds while the optimiser's groups, options that change its
state, and parameter arrays are the ones traced; otherwise the recorded program runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from ..autograd.versions import Version
from ..kernels.optim import _adam_chunk, _sgd_chunk
from ..optim import SGD, Adam, AdamW
from ..optim.adam import bias_corrections
from ..runtime.jit import CHUNK, PARALLEL_MIN, SERIAL_IEEE_DIV
from .trace import CallNode


# The update kernels' per-element functions are inlined where they are called; called
# through these (compiled once, with the kernels' flags), a program with a dozen
# parameters does not compile a dozen copies.
@njit(**SERIAL_IEEE_DIV)
def adam_update(p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, bias_correction2_sqrt,
                lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled):
    _adam_chunk(p, g, exp_avg, exp_avg_sq, max_exp_avg_sq, step_size, bias_correction2_sqrt,
                lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled)


@njit(**SERIAL_IEEE_DIV)
def sgd_update(p, g, buf, fresh, lr, momentum, dampening, weight_decay, nesterov, maximize):
    _sgd_chunk(p, g, buf, fresh, lr, momentum, dampening, weight_decay, nesterov, maximize)


@dataclass
class _Part:
    """One flat group of the optimiser: its group, which of its parameters step, and
    each stepping parameter's (index in the flat group, its Var, its gradient's Var)."""
    group: dict
    flat: Any
    active: np.ndarray
    stepping: list


@dataclass
class LoweredStep:
    optimizer: Any
    adam: bool
    layout: list
    flats: list
    parts: list

    @property
    def per_part(self) -> int:
        """Arguments per flat group: Adam's three state buffers, two per-parameter
        scalars, hyperparameters, three flags; SGD's buffer, first-step flags,
        hyperparameters, two flags."""
        return 9 if self.adam else 5

    @property
    def n_arguments(self) -> int:
        return len(self.parts) * self.per_part

    def holds(self) -> bool:
        """The optimiser's groups, state layout and parameter arrays are the traced ones."""
        opt = self.optimizer
        if [opt._layout_key(g) for g in opt.param_groups] != self.layout:
            return False
        flats = [flat for flats in opt._flat for flat in flats]
        return (len(flats) == len(self.flats) and all(a is b for a, b in zip(flats, self.flats))
                and all(flat.bound() for flat in flats))

    def arguments(self) -> list:
        """Counts this step and returns the update's arguments (per part: the state
        buffers, per-parameter scalars, the hyperparameters and the flags)."""
        args: list = []
        for part in self.parts:
            group, flat = part.group, part.flat
            if self.optimizer._counts_steps:
                flat.steps[part.active] += 1
            if self.adam:
                beta1, beta2 = group["betas"]
                hyper = np.array([group["lr"], beta1, beta2, group["eps"],
                                  group["weight_decay"]], np.float64)
                args += [flat.buffer("exp_avg"), flat.buffer("exp_avg_sq"),
                         flat.buffer("max_exp_avg_sq"),
                         *bias_corrections(group, flat, part.active), hyper,
                         bool(group["amsgrad"]), bool(group["maximize"]),
                         bool(group["decoupled_weight_decay"])]
            else:
                hyper = np.array([group["lr"], group["momentum"], group["dampening"],
                                  group["weight_decay"]], np.float64)
                args += [flat.buffer("momentum_buffer"), ~flat.has_state, hyper,
                         bool(group["nesterov"]), bool(group["maximize"])]
        return args

    def finish(self) -> None:
        """What eager's step records after its kernel: which parameters have state, and
        that their arrays changed in place."""
        for part in self.parts:
            if self.optimizer._counts_steps or part.flat.buffers:
                part.flat.has_state[part.active] = True
            Version.bump_all([part.flat.params[i]._version_counter()
                              for i, _, _ in part.stepping])

    def lines(self, first: int, name_of: Any) -> list[str]:
        """The update's source at the end of the function; its arguments are named
        ``u<first>``, ``u<first + 1>``, ..., a value by ``name_of(var)``. A parameter of
        PARALLEL_MIN elements or more is updated in chunks of CHUNK, one task each (the
        update is element by element: the same bits as in one call)."""
        out = []
        for k, part in enumerate(self.parts):
            u = [f"u{first + k * self.per_part + j}" for j in range(self.per_part)]
            for i, param, grad in part.stepping:
                start, size = part.flat.state_start[i], part.flat.sizes[i]
                p, g = name_of(param), name_of(grad)
                if size < PARALLEL_MIN:
                    out.append(self._update(u, i, p, g, f"{start}:{start + size}"))
                    continue
                out += [f"for c in prange({-(-size // CHUNK)}):",
                        f"    lo = c * {CHUNK}",
                        f"    hi = min({size}, lo + {CHUNK})",
                        "    " + self._update(u, i, f"{p}[lo:hi]", f"{g}[lo:hi]",
                                              f"{start} + lo:{start} + hi")]
        return out

    def _update(self, u: list[str], i: int, p: str, g: str, span: str) -> str:
        """The update call of parameter i (its values p, its gradient g, its state at
        ``span`` of the part's buffers)."""
        if self.adam:
            return (f"adam_update({p}, {g}, {u[0]}[{span}], {u[1]}[{span}], {u[2]}[{span}], "
                    f"{u[3]}[{i}], {u[4]}[{i}], {u[5]}[0], {u[5]}[1], {u[5]}[2], {u[5]}[3], "
                    f"{u[5]}[4], {u[6]}, {u[7]}, {u[8]})")
        return (f"sgd_update({p}, {g}, {u[0]}[{span}], {u[1]}[{i}], {u[2]}[0], {u[2]}[1], "
                f"{u[2]}[2], {u[2]}[3], {u[3]}, {u[4]})")


def lower(before: list, node: Any, leaf_grads: list, leaves: dict) -> LoweredStep | None:
    """The step of ``node`` (a CallNode) as an update in the program, or None.
    ``leaf_grads``: (leaf Var, gradient Var) pairs the program computes; ``leaves``:
    id(tensor) -> Var of the program's input tensors; ``before``: the calls before the
    program (a ``zero_grad()`` of the same optimiser must be among them)."""
    if not isinstance(node, CallNode) or node.method.__name__ != "step" or node.args:
        return None
    opt = node.method.__self__
    if type(opt) not in (SGD, Adam, AdamW) or not any(
            isinstance(c, CallNode) and c.method.__self__ is opt
            and c.method.__name__ == "zero_grad" and c.args in ((), (True,)) for c in before):
        return None
    grad_of = {leaf.index: grad for leaf, grad in leaf_grads}
    if len(grad_of) < len(leaf_grads):   # two backward passes: .grad is their sum
        return None
    parts = []
    for group, flats in zip(opt.param_groups, opt._flat):
        for flat in flats:
            stepping = []
            for i, p in enumerate(flat.params):
                leaf = leaves.get(id(p))
                if leaf is not None and leaf.index in grad_of:
                    stepping.append((i, leaf, grad_of[leaf.index]))
            active = np.zeros(len(flat.params), bool)
            active[[i for i, _, _ in stepping]] = True
            parts.append(_Part(group, flat, active, stepping))
    if not any(part.stepping for part in parts):
        return None
    return LoweredStep(opt, isinstance(opt, Adam),
                       [opt._layout_key(g) for g in opt.param_groups],
                       [flat for flats in opt._flat for flat in flats], parts)
