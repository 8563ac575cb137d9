"""L-BFGS (PyTorch's ``torch.optim.LBFGS``): the two-loop recursion over the parameters
flattened into one vector, an optional strong-Wolfe line search, PyTorch's stopping rules
and PyTorch's state names.

L-BFGS works on whole vectors (dot products, the history of steps), not element by
element, so it does not use the per-element kernels and flat state buffers of the other
optimisers: the gradients are concatenated with NumPy and the parameters updated in place
through their arrays. Scalars (dot products, step lengths) are NumPy scalars of the
parameters' dtype where PyTorch has 0-d tensors, and Python numbers where PyTorch has
Python numbers, so float32 runs round like PyTorch's.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from ..autograd import enable_grad, no_grad
from ..autograd.versions import Version
from ..tensor import Tensor
from .optimizer import FlatGroup, Optimizer, ParamsT, _index, _unpack

__all__ = ["LBFGS"]

VECTORS = ("d", "prev_flat_grad")
VECTOR_LISTS = ("old_dirs", "old_stps")
SCALARS = ("t", "H_diag")
SCALAR_LISTS = ("ro", "al")
COUNTS = ("func_evals", "n_iter")
STATE_NAMES = ("func_evals", "n_iter", "al", "d", "t", "old_dirs", "old_stps", "ro", "H_diag",
               "prev_flat_grad", "prev_loss")


def _cubic_interpolate(x1: Any, f1: Any, g1: Any, x2: Any, f2: Any, g2: Any,
                       bounds: tuple[Any, Any] | None = None) -> Any:
    """The minimiser of the cubic through (x1, f1) and (x2, f2) with slopes g1 and g2,
    clamped to ``bounds`` (default: between x1 and x2); the middle of the bounds when the
    cubic has no minimum (PyTorch's ``_cubic_interpolate``, from minFunc's polyinterp)."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func: Callable[[Any], tuple[float, np.ndarray]], t: Any,
                  d: np.ndarray, f: float, g: np.ndarray, gtd: Any, c1: float = 1e-4,
                  c2: float = 0.9, tolerance_change: float = 1e-9,
                  max_ls: int = 25) -> tuple[float, np.ndarray, Any, int]:
    """A step length t along d satisfying the strong Wolfe conditions
    f(t) <= f + c1 t gtd and |f'(t)| <= -c2 gtd: bracketing, then zooming with cubic
    interpolation (PyTorch's ``_strong_wolfe``, from minFunc's lswolfe). ``obj_func(t)``
    is the loss and flat gradient at x + t d. Returns (loss, gradient, t, evaluations)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(t)
    ls_func_evals = 1
    gtd_new = g_new @ d

    # bracket an interval containing a point satisfying the Wolfe criteria
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    bracket: list[Any] | None = None
    bracket_f: list[Any] = []
    bracket_g: list[np.ndarray] = []
    bracket_gtd: list[Any] = []
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # interpolate
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(t_prev, f_prev, gtd_prev, t, f_new, gtd_new,
                               bounds=(min_step, max_step))
        # next step
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = g_new @ d
        ls_iter += 1

    # reached the maximum number of iterations?
    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]
    if bracket is None:
        raise ValueError(f"LBFGS: max_eval leaves {max_ls} evaluations for the line search; "
                         "it needs at least 0 (make max_eval >= 1)")

    # zoom phase: refine the bracket until a point satisfies the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        # the bracket is too small
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break
        t = _cubic_interpolate(bracket[0], bracket_f[0], bracket_gtd[0],
                               bracket[1], bracket_f[1], bracket_gtd[1])
        # t close to a boundary twice in a row, or on it: move it 0.1 of the bracket in
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new = obj_func(t)
        ls_func_evals += 1
        gtd_new = g_new @ d
        ls_iter += 1

        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            # Armijo condition not met, or not lower than the lowest point
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True  # Wolfe conditions met
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                # the old high becomes the new low
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            # the new point becomes the new low
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new

    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


class LBFGS(Optimizer):
    """L-BFGS (PyTorch's ``torch.optim.LBFGS``, after minFunc). One ``step(closure)`` runs
    up to ``max_iter`` iterations, each:

        d = -H g   (two-loop recursion over the last ``history_size`` pairs
                    s = t d, y = g_new - g with y.s > 1e-10; H's diagonal y.s / y.y;
                    d = -g on the very first iteration)
        t = min(1, 1 / |g|_1) lr on the very first iteration, lr afterwards, or the
            strong-Wolfe line search's (``line_search_fn="strong_wolfe"``) from there
        x = x + t d

    and stops when |g|_inf <= tolerance_grad, g.d > -tolerance_change,
    |t d|_inf <= tolerance_change, |loss change| < tolerance_change, or after ``max_iter``
    iterations or ``max_eval`` closure calls (default max_iter * 5 // 4).

    One param group only. ``closure`` re-evaluates the model and returns the loss (it
    runs with gradients enabled); parameters whose ``.grad`` is None count as zero
    gradients. The state, PyTorch's (``func_evals``, ``n_iter``, ``d``, ``t``,
    ``old_dirs``, ``old_stps``, ``ro``, ``al``, ``H_diag``, ``prev_flat_grad``,
    ``prev_loss``), is kept under the first parameter, as in PyTorch.
    """

    def __init__(self, params: ParamsT, lr: float | Tensor = 1, max_iter: int = 20,
                 max_eval: int | None = None, tolerance_grad: float = 1e-7,
                 tolerance_change: float = 1e-9, history_size: int = 100,
                 line_search_fn: str | None = None):
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        defaults = {"lr": lr, "max_iter": max_iter, "max_eval": max_eval,
                    "tolerance_grad": tolerance_grad, "tolerance_change": tolerance_change,
                    "history_size": history_size, "line_search_fn": line_search_fn}
        self._lbfgs_state: dict[str, Any] = {}
        super().__init__(params, defaults)

    # -- the Optimizer interface: no per-parameter state ------------------------------------
    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        return ()

    def _build(self, group: dict[str, Any], states: dict[int, dict]) -> list[FlatGroup]:
        return []

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        lr = group["lr"]
        if isinstance(lr, Tensor):
            if lr.numel() != 1:
                raise ValueError(f"LBFGS: a Tensor lr must be 1-element, got shape "
                                 f"{lr.shape}")
            lr = lr.item()
        if isinstance(lr, bool) or not isinstance(lr, numbers.Real):
            raise TypeError(f"LBFGS: lr must be a real number, got {lr!r}")
        if not 0.0 <= lr:
            raise ValueError(f"LBFGS: Invalid learning rate: {lr} (lr must be >= 0)")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """PyTorch's LBFGS has one param group: a second one is a ValueError."""
        if self.param_groups:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        super().add_param_group(param_group)

    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        """{first parameter: its state} once a step has run (PyTorch keeps the global
        L-BFGS state under the first parameter); the dict is the live state."""
        if not self._lbfgs_state:
            return {}
        return {self.param_groups[0]["params"][0]: self._lbfgs_state}

    # -- flat views -------------------------------------------------------------------------
    def _params(self) -> list[Tensor]:
        if len(self.param_groups) != 1:
            raise ValueError(f"LBFGS: expected exactly one param group, got "
                             f"{len(self.param_groups)}")
        params = self.param_groups[0]["params"]
        for i, p in enumerate(params):
            if not p._data.flags.writeable:
                raise ValueError(f"LBFGS: params[{i}] of shape {p.shape} has a read-only "
                                 "array; the optimizer updates parameters in place")
        return params

    @staticmethod
    def _gather_flat_grad(params: list[Tensor]) -> np.ndarray:
        """The gradients concatenated into one vector (zeros for a missing gradient)."""
        return np.concatenate([np.zeros(p._data.size, p.dtype) if p.grad is None
                               else p.grad._data.reshape(-1) for p in params])

    @staticmethod
    def _add_grad(params: list[Tensor], step_size: Any, update: np.ndarray) -> None:
        """p += step_size * update, each parameter from its slice of the vector."""
        offset = 0
        for p in params:
            size = p._data.size
            p._data += (step_size * update[offset:offset + size]).reshape(p._data.shape)
            offset += size
        Version.bump_all([p._version_counter() for p in params])

    @staticmethod
    def _set_param(params: list[Tensor], values: list[np.ndarray]) -> None:
        for p, value in zip(params, values, strict=True):
            p._data[...] = value
        Version.bump_all([p._version_counter() for p in params])

    # -- the step ---------------------------------------------------------------------------
    def step(self, closure: Callable[[], Any]) -> Any:  # type: ignore[override]
        """Up to ``max_iter`` L-BFGS iterations; ``closure()`` clears the gradients,
        computes the loss, calls ``backward()`` and returns the loss (it is called
        several times). Returns the loss of the first call."""
        if not callable(closure):
            raise TypeError("LBFGS.step: closure must be a callable that re-evaluates the "
                            f"model and returns the loss, got {type(closure).__name__}")
        params = self._params()

        def evaluate() -> Any:
            with enable_grad():
                return closure()

        with no_grad(), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._step(params, evaluate)

    def _step(self, params: list[Tensor], closure: Callable[[], Any]) -> Any:
        group = self.param_groups[0]
        lr = group["lr"]
        if isinstance(lr, Tensor):
            lr = lr._data.reshape(())[()]
        max_iter, max_eval = group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        state = self._lbfgs_state
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        # evaluate the initial f(x) and df/dx
        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad(params)
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        d, t = state.get("d"), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # the descent direction
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                # update the memory
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y @ s
                if ys > 1e-10:
                    if len(old_dirs) == history_size:
                        old_dirs.pop(0)
                        old_stps.pop(0)
                        ro.pop(0)
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / (y @ y)  # scale of the initial inverse Hessian

                # the two-loop recursion: d = -H g
                num_old = len(old_dirs)
                al = state.setdefault("al", [None] * history_size)
                if len(al) < num_old:
                    al.extend([None] * (num_old - len(al)))
                q = -flat_grad
                for i in range(num_old - 1, -1, -1):
                    al[i] = (old_stps[i] @ q) * ro[i]
                    q += (-al[i]) * old_dirs[i]
                d = r = q * H_diag
                for i in range(num_old):
                    be_i = (old_dirs[i] @ r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]

            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            # the step length
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr
            else:
                t = lr
            gtd = flat_grad @ d  # directional derivative
            if gtd > -tolerance_change:
                break

            ls_func_evals = 0
            if line_search_fn is not None:
                if line_search_fn != "strong_wolfe":
                    raise RuntimeError("LBFGS: only 'strong_wolfe' is supported as "
                                       f"line_search_fn, got {line_search_fn!r}")
                x_init = [p._data.copy() for p in params]

                def obj_func(step: Any, x: list = x_init, d: np.ndarray = d
                             ) -> tuple[float, np.ndarray]:
                    self._add_grad(params, step, d)
                    value = float(closure())
                    grad = self._gather_flat_grad(params)
                    self._set_param(params, x)
                    return value, grad

                # as in PyTorch, the search uses its own tolerance_change (1e-9)
                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, t, d, loss, flat_grad, gtd, max_ls=max_eval - current_evals)
                self._add_grad(params, t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                # a fixed step; the function is re-evaluated except after the last one
                self._add_grad(params, t, d)
                opt_cond = False
                if n_iter != max_iter:
                    loss = float(closure())
                    flat_grad = self._gather_flat_grad(params)
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1

            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            # the stopping rules
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tolerance_change:  # lack of progress
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, old_dirs=old_dirs, old_stps=old_stps, ro=ro, H_diag=H_diag,
                     prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss

    # -- state dicts ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """PyTorch's layout: {"state": {0: {...}} (the state of the first parameter, once
        a step has run), "param_groups": [{..., "params": [0, 1, ...]}]}; the state is a
        copy (ndarrays, lists of ndarrays, NumPy scalars and Python numbers)."""
        packed = super().state_dict()
        if self._lbfgs_state:
            first = packed["param_groups"][0]["params"][0]
            packed["state"] = {first: copy.deepcopy(self._lbfgs_state)}
        return packed

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict()`` (this nbgrad's, after ``nb.save``/``nb.load``, or
        PyTorch's with its tensors): the hyperparameters and the state are checked first,
        so a bad state dict raises and loads nothing."""
        owner = "LBFGS.load_state_dict"
        saved_groups, saved_state = _unpack(owner, state_dict)
        before = (self.param_groups, self._flat, self._layout)
        super().load_state_dict({"state": {}, "param_groups": saved_groups})
        try:
            first = _index(owner, saved_groups[0]["params"][0], "param_groups[0]['params']")
            loaded: dict[str, Any] = {}
            for key, entry in saved_state.items():
                if _index(owner, key, "state") != first:
                    raise ValueError(f"{owner}: state[{key!r}]: LBFGS keeps its state "
                                     f"under its first parameter, {first}")
                loaded = self._checked_entry(owner, entry)
        except (TypeError, ValueError):
            self.param_groups, self._flat, self._layout = before
            raise
        self._lbfgs_state = loaded

    def _checked_entry(self, owner: str, entry: Any) -> dict[str, Any]:
        """A saved L-BFGS state as this optimizer keeps it (copies in the dtype of the
        flat vectors)."""
        if not isinstance(entry, dict):
            raise TypeError(f"{owner}: the state must be a dict, got {type(entry).__name__}")
        unknown = sorted(set(map(str, entry)) - set(STATE_NAMES))
        if unknown:
            raise ValueError(f"{owner}: unknown state {unknown}; LBFGS keeps "
                             f"{list(STATE_NAMES)}")
        params = self.param_groups[0]["params"]
        dtype = np.result_type(*[p.dtype for p in params])
        numel = sum(p._data.size for p in params)

        def vector(name: str, value: Any) -> np.ndarray:
            array = np.asarray(value._data if isinstance(value, Tensor) else value)
            if array.shape != (numel,) or array.dtype.kind not in "fiu":
                raise ValueError(f"{owner}: state[{name!r}] is an array of shape "
                                 f"{array.shape} and dtype {array.dtype}; the parameters "
                                 f"have {numel} elements")
            return array.astype(dtype)

        def scalar(name: str, value: Any) -> Any:
            if value is None or isinstance(value, numbers.Real) and not isinstance(
                    value, np.generic | bool):
                return value
            array = np.asarray(value._data if isinstance(value, Tensor) else value)
            if array.size != 1 or array.dtype.kind not in "fiu":
                raise ValueError(f"{owner}: state[{name!r}] must be a number, got {value!r}")
            return array.astype(dtype).reshape(())[()]

        loaded: dict[str, Any] = {}
        for name, value in entry.items():
            if name in COUNTS:
                count = np.asarray(value._data if isinstance(value, Tensor) else value)
                if count.shape != () or count.dtype.kind not in "iu" or count < 0:
                    raise ValueError(f"{owner}: state[{name!r}] must be an int >= 0, got "
                                     f"{value!r}")
                loaded[name] = int(count)
            elif name == "prev_loss":
                loaded[name] = None if value is None else float(value)
            elif value is None:
                loaded[name] = None
            elif name in VECTORS:
                loaded[name] = vector(name, value)
            elif name in SCALARS:
                loaded[name] = scalar(name, value)
            elif not isinstance(value, list | tuple):
                raise ValueError(f"{owner}: state[{name!r}] must be a list, got "
                                 f"{type(value).__name__}")
            elif name in VECTOR_LISTS:
                loaded[name] = [vector(f"{name}[{i}]", v) for i, v in enumerate(value)]
            else:
                loaded[name] = [scalar(f"{name}[{i}]", v) for i, v in enumerate(value)]
        if loaded.get("n_iter", 0) > 0:
            missing = [k for k in ("d", "t", "old_dirs", "old_stps", "ro", "H_diag",
                                   "prev_flat_grad") if loaded.get(k) is None]
            if missing:
                raise ValueError(f"{owner}: the state has n_iter={loaded['n_iter']} but "
                                 f"no {missing}")
            if not len(loaded["old_dirs"]) == len(loaded["old_stps"]) == len(loaded["ro"]):
                raise ValueError(f"{owner}: old_dirs, old_stps and ro have different "
                                 f"lengths ({len(loaded['old_dirs'])}, "
                                 f"{len(loaded['old_stps'])}, {len(loaded['ro'])})")
        return loaded
