"""The Optimizer base class: PyTorch's interface over flat per-group state, stepped by one
kernel call per parameter group.

PyTorch's interface: ``param_groups`` (dicts holding the parameters and every
hyperparameter), ``defaults``, ``state``, ``zero_grad``, ``step(closure)``,
``add_param_group``, ``state_dict``/``load_state_dict`` in PyTorch's layout.

The layout behind it (``FlatGroup``, one per param group and parameter dtype):

* the parameters and a typed List of their flat views (``p._data.reshape(-1)``; a
  parameter's array is made C-contiguous once if it is not), so the kernel updates each
  parameter's own array in place;
* one flat buffer per kind of state (Adam: exp_avg, exp_avg_sq) for all of them, with
  each parameter's step count and whether it has state yet (PyTorch creates a parameter's
  state at its first step with a gradient);
* a buffer the gradients are gathered into: one copy of the gradients that exist, after
  which one kernel runs over all the elements in fixed-size chunks
  (``nbgrad.kernels.optim``). Parameters whose ``.grad`` is None are skipped, their state
  untouched.

Subclasses give the state they keep (``_state_names``), check their hyperparameters and
run their kernel (``_update``).
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

import numpy as np

from ..autograd import enable_grad, tracing
from ..autograd.versions import Version
from ..kernels import optim as kernels
from ..runtime.compile_ahead import compile_hook
from ..tensor import FLOAT_DTYPES, Tensor

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]] | Iterable[tuple[str, Tensor]]


class Work(NamedTuple):
    """One step's work for a FlatGroup: the gathered gradients and the chunks (see
    nbgrad.kernels.optim)."""

    grads: np.ndarray
    grad_start: np.ndarray
    chunk_param: np.ndarray
    chunk_begin: np.ndarray
    chunk_end: np.ndarray
    active: np.ndarray  # bool per parameter: has a gradient this step
    size: int           # elements updated


class FlatGroup:
    """The parameters of one dtype from one param group, with their optimiser state in one
    flat buffer per kind of state."""

    def __init__(self, owner: str, params: list[Tensor], names: tuple[str, ...],
                 fill: dict[str, float]):
        self.owner = owner
        self.params = params
        self.dtype = params[0].dtype
        self.shapes = [p.shape for p in params]
        self.sizes = np.array([p._data.size for p in params], np.int64)
        self.state_start = np.cumsum(self.sizes) - self.sizes
        total = int(self.sizes.sum())
        self.buffers = {name: np.full(total, fill.get(name, 0.0), self.dtype) for name in names}
        self.steps = np.zeros(len(params))
        self.has_state = np.zeros(len(params), bool)
        self.grad_buffer = np.empty(total, self.dtype)
        self.layouts: dict[tuple, tuple] = {}  # gather's layouts, by pattern of gradients
        self.empty = np.empty(0, self.dtype)
        self._bind_arrays()

    def buffer(self, name: str) -> np.ndarray:
        """The flat buffer of state ``name``, or an empty array if it is not kept."""
        return self.buffers.get(name, self.empty)

    # -- the parameters' arrays -------------------------------------------------------------
    def _bind_arrays(self) -> None:
        """Record each parameter's array and make the typed List of their flat views."""
        for i, p in enumerate(self.params):
            _check_array(self.owner, p, self.shapes[i], self.dtype)
        self.arrays = [p._data for p in self.params]
        self.views = kernels.array_list(self.arrays[0].reshape(-1))
        for a in self.arrays[1:]:
            kernels.append_array(self.views, a.reshape(-1))

    def bound(self) -> bool:
        """Whether every parameter still holds the array its view was made of."""
        return all(p._data is a for p, a in zip(self.params, self.arrays))

    def refresh(self) -> None:
        """Re-bind the views if code assigned a new array to some ``p._data``."""
        if not self.bound():
            self._bind_arrays()

    # -- a step -----------------------------------------------------------------------------
    def gather(self) -> Work | None:
        """The gradients that exist, concatenated, and the chunks over them (None if no
        parameter has a gradient)."""
        grads = [p.grad for p in self.params]
        key = tuple([g is not None for g in grads])
        if True not in key:
            return None
        layout = self.layouts.get(key)
        if layout is None:
            layout = self.layouts[key] = self._layout(np.array(key))
        active, grad_start, chunk_param, chunk_begin, chunk_end, size = layout
        flat = self.grad_buffer[:size]
        np.concatenate([g._data.reshape(-1) for g in grads if g is not None], out=flat)
        return Work(flat, grad_start, chunk_param, chunk_begin, chunk_end, active, size)

    def _layout(self, active: np.ndarray) -> tuple:
        """(active, grad_start, chunk_param, chunk_begin, chunk_end, size) of the gathered
        gradients of the parameters marked in ``active``: the same every step in which the
        same parameters have gradients, so ``gather`` keeps it per pattern."""
        active.flags.writeable = False  # shared by the steps of this pattern
        sizes = np.where(active, self.sizes, 0)
        return (active, np.cumsum(sizes) - sizes, *kernels.chunk_work(sizes),
                int(sizes.sum()))

    # -- per-parameter state ----------------------------------------------------------------
    def param_state(self, i: int, counts_steps: bool, copy: bool) -> dict[str, Any]:
        """Parameter i's state in PyTorch's layout: {"step": float, name: array}; the
        arrays are views of the flat buffers unless ``copy``."""
        entry: dict[str, Any] = {"step": float(self.steps[i])} if counts_steps else {}
        start, stop = self.state_start[i], self.state_start[i] + self.sizes[i]
        for name, buf in self.buffers.items():
            view = buf[start:stop].reshape(self.shapes[i])
            entry[name] = view.copy() if copy else view
        return entry

    def set_param_state(self, i: int, entry: dict[str, Any]) -> None:
        """Give parameter i the state ``entry`` (a checked PyTorch-layout dict); state
        kinds it lacks keep their initial values."""
        start, stop = self.state_start[i], self.state_start[i] + self.sizes[i]
        for name, value in entry.items():
            if name == "step":
                self.steps[i] = value
            else:
                self.buffers[name][start:stop] = np.asarray(value).reshape(-1)
        self.has_state[i] = True


class Optimizer:
    """Base class of the optimisers (PyTorch's ``torch.optim.Optimizer``).

    ``params``: an iterable of Tensors, of ``(name, Tensor)`` pairs, or of param-group
    dicts (``{"params": [...], "lr": 1e-2}``) whose missing hyperparameters take the
    ``defaults``. Every parameter must be a float leaf tensor that requires grad, listed
    once. The update is in place on each ``p._data``.
    """

    _counts_steps = False  # whether per-parameter state holds a "step" count
    _eager_state = False   # state made with the parameter (Adagrad), not at its first step

    def __init__(self, params: ParamsT, defaults: dict[str, Any]):
        owner = type(self).__name__
        self._check_hyperparameters(defaults)
        self.defaults = defaults
        self.param_groups: list[dict[str, Any]] = []
        self._flat: list[list[FlatGroup]] = []
        self._layout: list[tuple] = []
        if isinstance(params, Tensor):
            raise TypeError(f"{owner}: params must be an iterable of Tensors or dicts, got "
                            "a single Tensor (wrap it in a list)")
        _check_ordered(owner, params)
        groups = list(params)
        if not groups:
            raise ValueError(f"{owner}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        compiled = compile_hook.compiles.started
        for group in groups:
            self.add_param_group(group)
        self._ahead = 0
        if (compile_hook.compiles.started != compiled
                and type(self).__module__.startswith("nbgrad.")):
            # a first use: the helper compiles the step while the forward pass goes on
            self._ahead = compile_hook.submit_step(type(self).__name__, [
                ([p._data for p in g["params"]],
                 {k: v for k, v in g.items() if k not in ("params", "param_names")})
                for g in self.param_groups])

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {key}: {group[key]}" for key in sorted(group) if key != "params"]
        return "\n".join(lines) + "\n)"

    # -- subclass interface -----------------------------------------------------------------
    def _state_names(self, group: dict[str, Any]) -> tuple[str, ...]:
        """The kinds of per-parameter state the group's options need, in PyTorch's order."""
        raise NotImplementedError

    def _state_fill(self, group: dict[str, Any]) -> dict[str, float]:
        """Initial values of state kinds that do not start at zero."""
        return {}

    def _check_hyperparameters(self, group: dict[str, Any]) -> None:
        """ValueError/TypeError naming the optimiser for an invalid hyperparameter."""
        raise NotImplementedError

    def _update(self, group: dict[str, Any], flat: FlatGroup, work: Work) -> None:
        """Run the group's update kernel over ``work`` (steps already counted)."""
        raise NotImplementedError

    # -- param groups -----------------------------------------------------------------------
    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """Add a group of parameters with its own hyperparameters (missing ones take the
        defaults), e.g. layers unfrozen during fine-tuning."""
        owner = type(self).__name__
        if not isinstance(param_group, dict):
            raise TypeError(f"{owner}: a param group must be a dict, got "
                            f"{type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError(f"{owner}: the param group has no 'params' entry")
        params, names = _split_names(owner, param_group["params"])
        param_group["params"] = params
        if names is not None:
            param_group["param_names"] = names
        for i, p in enumerate(params):
            _check_param(owner, p, i)
        _check_unique(owner, params, self.param_groups)
        for name, default in self.defaults.items():
            param_group.setdefault(name, default)
        self._check_hyperparameters(param_group)
        self.param_groups.append(param_group)
        self._flat.append(self._build(param_group, {}))
        self._layout.append(self._layout_key(param_group))

    def _layout_key(self, group: dict[str, Any]) -> tuple:
        return tuple(map(id, group["params"])), self._state_names(group)

    def _build(self, group: dict[str, Any], states: dict[int, dict]) -> list[FlatGroup]:
        """The group's FlatGroups (one per dtype, in order of first appearance), with the
        state ``states[id(p)]`` of each parameter that has some."""
        owner = type(self).__name__
        names, fill = self._state_names(group), self._state_fill(group)
        by_dtype: dict[np.dtype, list[Tensor]] = {}
        for p in group["params"]:
            by_dtype.setdefault(p.dtype, []).append(p)
        flats = [FlatGroup(owner, params, names, fill) for params in by_dtype.values()]
        for flat in flats:
            if self._eager_state:
                flat.has_state[:] = True
            for i, p in enumerate(flat.params):
                entry = states.get(id(p))
                if entry is not None:
                    flat.set_param_state(i, {k: v for k, v in entry.items()
                                             if k == "step" or k in flat.buffers})
        return flats

    def _synced(self) -> list[list[FlatGroup]]:
        """The flat groups, rebuilt (keeping each parameter's state) where code changed a
        group's parameters or an option that changes the state kept (amsgrad, centered,
        momentum on or off), and re-bound where it assigned a new ``p._data``."""
        layout = [self._layout_key(g) for g in self.param_groups]
        if layout != self._layout:
            owner = type(self).__name__
            for group in self.param_groups:
                for i, p in enumerate(group["params"]):
                    _check_param(owner, p, i)
            states = {id(p): entry for entry, p in self._states(copy=True)}
            self._flat = [self._build(g, states) for g in self.param_groups]
            self._layout = layout
        for flats in self._flat:
            for flat in flats:
                flat.refresh()
        return self._flat

    def _states(self, copy: bool) -> list[tuple[dict[str, Any], Tensor]]:
        """(state entry, parameter) for every parameter that has state."""
        return [(flat.param_state(i, self._counts_steps, copy), p)
                for flats in self._flat for flat in flats
                for i, p in enumerate(flat.params) if flat.has_state[i]]

    # -- stepping ---------------------------------------------------------------------------
    def zero_grad(self, set_to_none: bool = True) -> None:
        """Set every parameter's gradient to None (default), or to zeros in place, cut
        from any graph."""
        recorder = tracing.recorder
        if recorder is not None and recorder.recording():  # nb.compile is tracing
            return recorder.call(self.zero_grad, set_to_none)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    grad = p.grad.detach() if p.grad.requires_grad else p.grad
                    grad._data.fill(0)
                    p.grad = grad

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient. ``closure`` (optional)
        re-evaluates the model and returns the loss; it runs with gradients enabled and
        its result is returned."""
        recorder = tracing.recorder
        if recorder is not None and recorder.recording() and closure is None:
            return recorder.call(self.step)  # nb.compile is tracing
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        compile_hook.join(self._ahead)
        for group, flats in zip(self.param_groups, self._synced()):
            for flat in flats:
                work = flat.gather()
                if work is None:
                    continue
                if self._counts_steps:
                    flat.steps[work.active] += 1
                self._update(group, flat, work)
                # in-place writes: a graph that saved a parameter refuses its backward
                Version.bump_all([p._version_counter() for p, stepped
                                  in zip(flat.params, work.active.tolist()) if stepped])
                if self._counts_steps or flat.buffers:
                    flat.has_state[work.active] = True
        return loss

    # -- state ------------------------------------------------------------------------------
    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        """{parameter: {"step": float, "exp_avg": array, ...}} for the parameters that
        have state (PyTorch's ``optimizer.state``). The arrays are views of the flat
        buffers: they follow the steps, and writing into them changes the state."""
        return {p: entry for entry, p in self._states_synced(copy=False)}

    def _states_synced(self, copy: bool) -> list[tuple[dict[str, Any], Tensor]]:
        self._synced()
        return self._states(copy)

    def state_dict(self) -> dict[str, Any]:
        """{"state": {index: {name: value}}, "param_groups": [{..., "params": [index]}]}
        in PyTorch's layout: parameters are numbered in group order, the state values are
        copies (floats and ndarrays)."""
        index: dict[int, int] = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = [id(p) for p in group["params"]]
            for pid in ids:
                index.setdefault(pid, len(index))
            packed["params"] = [index[pid] for pid in ids]
            groups.append(packed)
        state = {index[id(p)]: entry for entry, p in self._states_synced(copy=True)}
        return {"state": dict(sorted(state.items())), "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load a ``state_dict()`` (from this nbgrad or converted from PyTorch; integer
        keys may be strings). The groups take the saved hyperparameters and keep their
        parameters. Everything is checked first (number of groups, parameters per group,
        state names and shapes), so a bad state dict raises and loads nothing."""
        owner = f"{type(self).__name__}.load_state_dict"
        saved_groups, saved_state = _unpack(owner, state_dict)
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(f"{owner}: the state dict has {len(saved_groups)} parameter "
                             f"groups, the optimizer {len(self.param_groups)}")
        params_of: dict[int, Tensor] = {}
        groups = []
        for gi, (group, saved) in enumerate(zip(self.param_groups, saved_groups)):
            indices = [_index(owner, k, f"param_groups[{gi}]['params']")
                       for k in saved["params"]]
            if len(indices) != len(group["params"]):
                raise ValueError(f"{owner}: param group {gi} has {len(indices)} parameters "
                                 f"in the state dict, {len(group['params'])} in the optimizer")
            params_of.update(zip(indices, group["params"]))
            groups.append(self._loaded_group(owner, gi, group, saved))
        group_of = {id(p): g for g in groups for p in g["params"]}
        states = {}
        for key, entry in saved_state.items():
            index = _index(owner, key, "state")
            if index not in params_of:
                raise ValueError(f"{owner}: state[{key!r}] names no parameter (the groups "
                                 f"hold parameters {sorted(params_of)})")
            p = params_of[index]
            states[id(p)] = self._checked_state(owner, index, entry, p, group_of[id(p)])
        flat = [self._build(g, states) for g in groups]
        self.param_groups = groups
        self._flat = flat
        self._layout = [self._layout_key(g) for g in groups]

    def _loaded_group(self, owner: str, gi: int, group: dict[str, Any],
                      saved: dict[str, Any]) -> dict[str, Any]:
        """The saved hyperparameters with the group's parameters (tuples saved as lists,
        e.g. betas, back to tuples), checked."""
        loaded = {k: copy.deepcopy(v) for k, v in saved.items() if k != "params"}
        for key, value in group.items():
            if isinstance(value, tuple) and isinstance(loaded.get(key), list):
                loaded[key] = tuple(loaded[key])
            loaded.setdefault(key, value)
        loaded["params"] = group["params"]
        try:
            self._check_hyperparameters(loaded)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{owner}: param group {gi}: {err}") from None
        return {"params": group["params"], **{k: v for k, v in loaded.items()
                                              if k != "params"}}

    def _checked_state(self, owner: str, index: int, entry: Any, p: Tensor,
                       group: dict[str, Any]) -> dict[str, Any] | None:
        """A saved state entry as {name: float or array of the parameter's dtype}, or None
        for an empty one; ValueError for unknown or missing kinds, or wrong shapes."""
        if not isinstance(entry, dict):
            raise TypeError(f"{owner}: state[{index}] must be a dict, got "
                            f"{type(entry).__name__}")
        if not entry:
            return None
        names = self._state_names(group)
        expected = (("step",) if self._counts_steps else ()) + names
        unknown = sorted(set(map(str, entry)) - set(expected))
        missing = [k for k in expected if k not in entry]
        if unknown or missing:
            raise ValueError(f"{owner}: state[{index}] has {sorted(map(str, entry))}; "
                             f"{type(self).__name__} with these options keeps "
                             f"{list(expected)}")
        checked: dict[str, Any] = {}
        for name in expected:
            value = entry[name]
            if name == "step":
                checked[name] = _step_count(owner, index, value)
                continue
            array = np.asarray(value._data if isinstance(value, Tensor) else value)
            if array.dtype.kind not in "fiu" or array.shape != p.shape:
                raise ValueError(f"{owner}: state[{index}][{name!r}] is an array of shape "
                                 f"{array.shape} and dtype {array.dtype}; parameter {index} "
                                 f"has shape {p.shape}")
            checked[name] = array.astype(p.dtype)
        return checked


# -- checks --------------------------------------------------------------------------------
def check_number(owner: str, name: str, value: Any, minimum: float = 0.0,
                 below: float | None = None) -> None:
    """TypeError unless ``value`` is a real number; ValueError unless
    minimum <= value (< below)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r}")
    if not value >= minimum or (below is not None and not value < below):
        bound = f"in [{minimum}, {below})" if below is not None else f">= {minimum}"
        raise ValueError(f"{owner}: invalid {name} {value!r}: it must be {bound}")


def check_numbers(owner: str, group: dict[str, Any], **names: str) -> None:
    """``check_number`` (minimum 0) of ``group[key]``, called ``names[key]`` in the
    errors, for each keyword in the order given."""
    for key, name in names.items():
        check_number(owner, name, group[key])


def _split_names(owner: str, params: Any) -> tuple[list[Tensor], list[str] | None]:
    """The group's tensors, and their names when given as (name, tensor) pairs."""
    if isinstance(params, Tensor):
        return [params], None
    _check_ordered(owner, params)
    items = list(params)
    named = [isinstance(x, tuple) for x in items]
    if not any(named):
        return items, None
    if not all(named):
        raise ValueError(f"{owner}: give every parameter of a group with a name "
                         "((name, tensor) pairs) or none")
    return [x[1] for x in items], [x[0] for x in items]


def _check_ordered(owner: str, params: Any) -> None:
    if isinstance(params, set | frozenset):
        raise TypeError(f"{owner}: parameters must be in an ordered collection (a list), "
                        "not a set, whose order changes between runs")


def _check_param(owner: str, p: Any, i: int) -> None:
    """A parameter is a float leaf tensor that requires grad."""
    if not isinstance(p, Tensor):
        raise TypeError(f"{owner}: can only optimize Tensors, but params[{i}] is a "
                        f"{type(p).__name__}")
    if p.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{owner}: params[{i}] has dtype {p.dtype}; only float32 and "
                        "float64 tensors can be optimized")
    if not p.is_leaf:
        raise ValueError(f"{owner}: can't optimize a non-leaf Tensor: params[{i}] was made "
                         f"by {p.grad_fn!r}; optimize the leaf it came from, or a "
                         "detach()ed copy with requires_grad=True")
    if not p.requires_grad:
        raise ValueError(f"{owner}: params[{i}] does not require grad, so it never gets a "
                         "gradient; create it with requires_grad=True or as nn.Parameter")


def _check_unique(owner: str, params: list[Tensor], groups: list[dict[str, Any]]) -> None:
    seen: dict[int, int] = {}
    for i, p in enumerate(params):
        if id(p) in seen:
            raise ValueError(f"{owner}: the parameter group lists a parameter twice "
                             f"(params[{seen[id(p)]}] and params[{i}])")
        seen[id(p)] = i
    for gi, group in enumerate(groups):
        if any(id(p) in seen for p in group["params"]):
            raise ValueError(f"{owner}: some parameters appear in more than one parameter "
                             f"group (also in group {gi})")


def _check_array(owner: str, p: Tensor, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """The array of a parameter being stepped: its shape and dtype unchanged, writable,
    and C-contiguous (a copy is made its array if it is not), so that its flat view is a
    view."""
    if p._data.shape != shape or p._data.dtype != dtype:
        raise ValueError(f"{owner}: a parameter's array changed from shape {shape} and dtype "
                         f"{dtype} to {p._data.shape} and {p._data.dtype} after it was added; "
                         "its optimizer state no longer fits (make a new optimizer)")
    if not p._data.flags.writeable:
        raise ValueError(f"{owner}: a parameter of shape {shape} has a read-only array; "
                         "the optimizer updates parameters in place")
    if not p._data.flags.c_contiguous:
        p._data = np.ascontiguousarray(p._data)


def _unpack(owner: str, state_dict: Any) -> tuple[list[dict], dict]:
    if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
        raise ValueError(f"{owner}: expected a dict with 'state' and 'param_groups' entries")
    groups, state = state_dict["param_groups"], state_dict["state"]
    if not isinstance(groups, list | tuple) or not all(
            isinstance(g, dict) and "params" in g for g in groups):
        raise ValueError(f"{owner}: 'param_groups' must be a list of dicts with a 'params' "
                         "entry each")
    if not isinstance(state, dict):
        raise ValueError(f"{owner}: 'state' must be a dict, got {type(state).__name__}")
    return list(groups), state


def _index(owner: str, key: Any, where: str) -> int:
    """A parameter index saved as an int or a string of digits."""
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return int(key)
    if isinstance(key, str) and key.isdigit():
        return int(key)
    raise ValueError(f"{owner}: {where} holds {key!r}, which is not a parameter index")


def _step_count(owner: str, index: int, value: Any) -> float:
    value = np.asarray(value._data if isinstance(value, Tensor) else value)
    if value.shape != () or value.dtype.kind not in "fiu" or not value >= 0:
        raise ValueError(f"{owner}: state[{index}]['step'] must be a number >= 0, got "
                         f"{value!r}")
    return float(value)
