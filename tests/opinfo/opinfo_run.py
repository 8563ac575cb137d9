"""How much of PyTorch's OpInfo sample surface nbgrad runs, and runs right.

For every entry of PyTorch's OpInfo database (``torch.testing._internal.
common_methods_invocations.op_db``) whose op nbgrad has under the same public name
(``nbgrad.<name>``, ``nbgrad.nn.functional.<x>`` for ``nn.functional.<x>``,
``nbgrad.linalg.<x>`` for ``linalg.<x>``, any dotted name the same way, an alias of the
entry, or the Tensor method for method-only entries), every CPU sample input of the chosen
dtypes (float32 by default; int64 for integer-only ops such as bitwise_and) is converted
to nbgrad (tensors through NumPy, torch dtypes to nbgrad dtypes, ``torch.Size`` to tuples)
and passed to nbgrad's op; the result is compared with torch's.

Each sample lands in one category:

- ``ok``: runs and matches torch (same shape and dtype, ``allclose`` rtol 1e-4 / atol 1e-5,
  exact for integers and bools; tuples element by element; random ops by shape and dtype).
- ``wrong``: runs, but the value, shape, dtype or result type differs.
- ``missing argument``: nbgrad raises TypeError for an unexpected keyword, too many
  positional arguments or a missing required one, any error saying that something is not
  supported, or a TypeError/ValueError naming one of the op's parameters other than the
  input as refused ("dim must be an int, got tensor(...)", "ord='nuc' needs singular
  values"); also a sample passing a torch-only object (memory_format).
- ``rejects``: nbgrad raises where torch does not, for any other reason.
- ``both raise`` / ``torch raises``: torch raises on the sample (and nbgrad does / does not).

Samples that cannot be converted (complex or bfloat16 tensors, generators, callables) are
counted as skipped. The acceptance figure is ``missing argument / samples of mapped ops``.

Run ``python tests/opinfo/opinfo_run.py [--dtypes float32,float64] [--ops add,sum]
[--details PATH]``; import ``measure`` to run it from code (tests/opinfo/test_opinfo.py).
"""

from __future__ import annotations

import argparse
import inspect
import re
import signal
import sys
import time
import types
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

try:
    import nbgrad as nb
except ImportError:  # run as a script from a checkout: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import nbgrad as nb

RTOL, ATOL = 1e-4, 1e-5
CATEGORIES = ("ok", "wrong", "missing argument", "rejects", "both raise", "torch raises")
SAMPLE_TIMEOUT = 60  # seconds per nbgrad call (best effort: SIGALRM between bytecodes)

# OpInfo entries whose results are random: compared by shape and dtype only.
RANDOM = {"bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial",
          "normal", "uniform", "rand_like", "randn_like", "randint_like", "randint", "randn",
          "empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
          "empty_permuted", "nn.functional.dropout", "nn.functional.dropout1d",
          "nn.functional.dropout2d", "nn.functional.dropout3d", "nn.functional.alpha_dropout",
          "nn.functional.feature_alpha_dropout", "nn.functional.rrelu",
          "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d"}


class Unconvertible(Exception):
    """A sample holds a torch object with no nbgrad counterpart (skipped)."""


class TorchOnly(Exception):
    """A sample passes a torch-only argument value nbgrad has no form of (memory_format)."""


class SampleTimeout(Exception):
    pass


# ---------------------------------------------------------------- torch -> nbgrad


def _torch():
    import torch
    return torch


def convert(obj: Any) -> Any:
    """The nbgrad counterpart of a sample's input, argument or keyword value."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        if obj.is_complex() or obj.layout != torch.strided or obj.is_quantized \
                or obj.dtype == torch.bfloat16:
            raise Unconvertible(f"{obj.dtype} {obj.layout} tensor")
        arr = obj.detach().cpu().resolve_conj().resolve_neg().numpy().copy()
        return nb.tensor(arr)
    if isinstance(obj, torch.dtype):
        name = str(obj).removeprefix("torch.")
        target = getattr(nb.dtypes, name, None) if hasattr(nb, "dtypes") else None
        target = target if target is not None else getattr(nb, name, None)
        if target is None or not hasattr(target, "itemsize"):
            raise Unconvertible(f"dtype {obj}")
        return target
    if isinstance(obj, torch.Size):
        return tuple(obj)
    if isinstance(obj, torch.device):
        return nb.device(str(obj))
    if isinstance(obj, (torch.memory_format, torch.layout)):
        # nb.preserve_format, nb.channels_last, nb.strided, ...: nbgrad's objects of the
        # same names; a torch-only one nbgrad has no form of
        target = getattr(nb, str(obj).removeprefix("torch."), None)
        if target is None:
            raise TorchOnly(str(obj))
        return target
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return tuple(convert(v) for v in obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(convert(v) for v in obj)
    if isinstance(obj, dict):
        return {k: convert(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, (bool, int, float, str, slice, type(Ellipsis))):
        return obj
    if isinstance(obj, (np.ndarray, np.generic)):
        return obj
    raise Unconvertible(type(obj).__name__)


def describe(obj: Any) -> str:
    """A short text of a sample value: tensors as T[shape]:dtype."""
    torch = _torch()
    if isinstance(obj, torch.Tensor):
        return f"T{list(obj.shape)}:{str(obj.dtype).removeprefix('torch.')}"
    if isinstance(obj, (list, tuple)):
        inner = ", ".join(describe(v) for v in obj)
        return f"[{inner}]" if isinstance(obj, list) else f"({inner})"
    if isinstance(obj, dict):
        return "{" + ", ".join(f"{k}={describe(v)}" for k, v in obj.items()) + "}"
    return repr(obj)


def describe_sample(sample: Any) -> str:
    parts = [describe(sample.input)] + [describe(a) for a in sample.args]
    parts += [f"{k}={describe(v)}" for k, v in sample.kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 240 else text[:237] + "..."


# ---------------------------------------------------------------- compare


def _svd_invariants(usv: Any) -> tuple:
    """An SVD's singular vectors are unique only up to signs (and any basis of the extra
    columns of full_matrices): compare S and the product U[:, :k] diag(S) Vh[:k]."""
    torch = _torch()
    u, s, vh = (t.detach().numpy() for t in usv)
    k = s.shape[-1]
    wrap = torch.from_numpy if isinstance(usv[0], torch.Tensor) else nb.tensor
    return wrap(s.copy()), wrap((u[..., :k] * s[..., None, :]) @ vh[..., :k, :])


# Ops whose outputs are compared through what does not depend on a free choice
GAUGE: dict[str, Callable[[Any], Any]] = {"linalg.svd": _svd_invariants,
                                           "svd": _svd_invariants}


def compare(expected: Any, actual: Any, values: bool = True, where: str = "") -> str | None:
    """None when nbgrad's result matches torch's, else what differs."""
    torch = _torch()
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, nb.Tensor):
            return f"{where}expected a tensor, got {type(actual).__name__}"
        if tuple(expected.shape) != tuple(actual.shape):
            return f"{where}shape {tuple(actual.shape)} != torch {tuple(expected.shape)}"
        tdt = str(expected.dtype).removeprefix("torch.")
        if tdt != actual.dtype.name:
            return f"{where}dtype {actual.dtype.name} != torch {tdt}"
        if not values or expected.is_complex():
            return None
        want = expected.detach().cpu().resolve_conj().resolve_neg().numpy()
        got = np.asarray(actual.numpy())
        if want.dtype.kind == "f":
            ok = np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=RTOL,
                             atol=ATOL, equal_nan=True)
        else:
            ok = np.array_equal(got, want)
        if not ok:
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            worst = float(np.nanmax(diff)) if diff.size else 0.0
            return f"{where}values differ (max abs diff {worst:.3g})"
        return None
    if isinstance(expected, (tuple, list)):
        if not isinstance(actual, (tuple, list)):
            return f"{where}expected a sequence, got {type(actual).__name__}"
        if len(expected) != len(actual):
            return f"{where}{len(actual)} results != torch {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            why = compare(e, a, values, f"{where}[{i}] ")
            if why:
                return why
        return None
    if expected is None:
        return None if actual is None else f"{where}expected None, got {type(actual).__name__}"
    if isinstance(expected, (bool, int, float)):
        if isinstance(actual, nb.Tensor):
            if actual.numel() != 1:
                return f"{where}expected a number, got a tensor of shape {actual.shape}"
            actual = actual.item()
        if not isinstance(actual, (bool, int, float, np.generic)):
            return f"{where}expected a number, got {type(actual).__name__}"
        if values and not np.isclose(float(actual), float(expected), rtol=RTOL, atol=ATOL,
                                     equal_nan=True):
            return f"{where}value {actual!r} != torch {expected!r}"
        return None
    return f"{where}cannot compare a torch {type(expected).__name__}"


# ---------------------------------------------------------------- errors


_SIGNATURE = [
    (re.compile(r"unexpected keyword argument '(\w+)'"), "{}="),
    (re.compile(r"takes (?:from \d+ to )?(\d+) positional arguments? but (\d+)"), "positional"),
    (re.compile(r"missing (\d+) required (?:positional|keyword-only) argument"), "required"),
    (re.compile(r"got multiple values for argument '(\w+)'"), "multiple {}"),
]
_UNSUPPORTED = re.compile(r"not supported|unsupported|does not support|not implemented|"
                          r"only supports|is not implemented|no support", re.IGNORECASE)


def classify_error(err: BaseException, fn: Callable | None, args: tuple,
                   kwargs: dict) -> tuple[str, str]:
    """(category, form) of an nbgrad error on a sample torch runs."""
    msg = str(err)
    if isinstance(err, TypeError):
        for pattern, _ in _SIGNATURE:
            if pattern.search(msg):
                return "missing argument", _signature_form(fn, args, kwargs, msg)
    if isinstance(err, (TypeError, ValueError, NotImplementedError)) and _UNSUPPORTED.search(msg):
        return "missing argument", "value: " + _first_line(msg, 90)
    named = _refused_argument(err, fn, msg)
    if named:
        reason = re.split(r",? got |; ", _first_line(msg, 400))[0]
        return "missing argument", f"{named}= value: {reason[:80]}"
    return "rejects", f"{type(err).__name__}: {_first_line(msg, 90)}"


_REFUSED = re.compile(r"\b(\w+)(?:=\S+)?(?: \([^)]*\))? (?:must be|needs|should be)")


def _refused_argument(err: BaseException, fn: Callable | None, msg: str) -> str | None:
    """The parameter (not the input) whose value nbgrad refuses: 'dim must be an int, got..'."""
    if not isinstance(err, (TypeError, ValueError, NotImplementedError)) or fn is None:
        return None
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    for m in _REFUSED.finditer(_first_line(msg, 400)):
        if m.group(1) in params[1:] and m.group(1) != "self":
            return m.group(1)
    return None


def _signature_form(fn: Callable | None, args: tuple, kwargs: dict, msg: str) -> str:
    """Name the arguments nbgrad's signature lacks, as ``name=`` or ``#k positional``."""
    try:
        params = inspect.signature(fn).parameters if fn is not None else None
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        extra = [f"{k}=" for k in kwargs if k not in params]
        if extra:
            return ", ".join(extra)
    if params is not None and not any(p.kind == p.VAR_POSITIONAL for p in params.values()):
        positional = [p for p in params.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(args) > len(positional):
            return f"positional #{len(positional) + 1}+ ({len(args)} given)"
    m = _SIGNATURE[0][0].search(msg)
    if m:
        return f"{m.group(1)}="
    return _first_line(msg, 90)


def _first_line(text: str, limit: int = 200) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[:limit - 3] + "..."


def _alarm(signum: int, frame: Any) -> None:
    raise SampleTimeout(f"no result within {SAMPLE_TIMEOUT} s")


# ---------------------------------------------------------------- mapping


def _lookup(root: Any, dotted: str) -> Any:
    obj = root
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_function(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, (type, types.ModuleType))


def _method(name: str) -> Callable:
    def call(x: Any, *args: Any, **kwargs: Any) -> Any:
        attr = getattr(x, name)
        return attr(*args, **kwargs) if callable(attr) or args or kwargs else attr
    call.__name__ = name
    return call


def _lambda_source(op: Any) -> str | None:
    fn = op.op
    if getattr(fn, "__name__", "") != "<lambda>":
        return None
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


# Entries whose OpInfo lambda reorders the arguments of a torch function: the same order
# for nbgrad's function (path under nbgrad, adapter taking that function).
ADAPTERS: dict[str, tuple[str, Callable]] = {
    "where": ("where", lambda f: lambda x, cond, other, **kw: f(cond, x, other, **kw)),
    "einsum": ("einsum", lambda f: lambda tensors, eq: f(eq, tensors)),
    "nn.functional.embedding": ("nn.functional.embedding",
                                lambda f: lambda w, idx, **kw: f(idx, w, **kw)),
    "nn.functional.embedding_bag": ("nn.functional.embedding_bag",
                                    lambda f: lambda w, idx, **kw: f(idx, w, **kw)),
    "polygamma": ("polygamma", lambda f: lambda x, n, **kw: f(n, x, **kw)),
    "special.polygamma": ("special.polygamma", lambda f: lambda x, n, **kw: f(n, x, **kw)),
    "normal.number_mean": ("normal", lambda f: lambda std, mean, *a, **kw: f(mean, std, *a, **kw)),
    "linalg.pinv.singular": ("linalg.pinv", lambda f: lambda a, b: f(a @ b.mT)),
    "linalg.lstsq.grad_oriented": ("linalg.lstsq",
                                   lambda f: lambda a, b, driver: f(a, b, driver=driver)[:2]),
    "resize_as_": ("Tensor.resize_as_", lambda f: lambda x, other: f(x.clone(), other)),
    "zero_": ("Tensor.zero_", lambda f: lambda x: f(x.clone())),
    "normal.in_place": ("Tensor.normal_", lambda f: lambda x, *a, **kw: f(x.clone(), *a, **kw)),
}
_UNMAPPABLE = {"svd_lowrank", "pca_lowrank", "nn.functional.multi_head_attention_forward",
               "max_pool2d_with_indices_backward"}


@dataclass
class Mapping:
    fn: Callable | None  # nbgrad's callable taking the sample as torch's op does
    path: str  # where it was found, e.g. "nbgrad.sum" or "Tensor.view"
    note: str = ""  # e.g. found at the top level but not in nbgrad.nn.functional


def resolve(op: Any) -> Mapping:
    """nbgrad's counterpart of an OpInfo entry, or Mapping(None, reason)."""
    torch = _torch()
    key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
    if op.name in _UNMAPPABLE:
        return Mapping(None, "no nbgrad form of this OpInfo wrapper")
    if key in ADAPTERS or op.name in ADAPTERS:
        path, adapt = ADAPTERS.get(key) or ADAPTERS[op.name]
        target = (_method(path[7:]) if path.startswith("Tensor.") and
                  hasattr(nb.Tensor, path[7:]) else _lookup(nb, path))
        if not _is_function(target):
            return Mapping(None, f"nbgrad.{path} missing")
        return Mapping(adapt(target), path if path.startswith("Tensor.") else f"nbgrad.{path}")
    source = _lambda_source(op)
    if source is not None and "torch." not in source and "wrapper_set_seed" not in source:
        # a method-style lambda (x.view(shape), x.T): run it on nbgrad tensors as it is
        used = re.findall(r"\b(?:x|self)\.(\w+)", source.split(":", 1)[-1])
        name = used[0] if used else op.name
        if not hasattr(nb.Tensor, name):
            return Mapping(None, f"Tensor.{name} missing")
        return Mapping(op.op, f"Tensor.{name}")
    names = [op.name] + [a.name for a in getattr(op, "aliases", ()) or ()]
    method_only = _lookup(torch, op.name) is None or op.op is getattr(torch.Tensor, op.name, 0)
    for name in names:
        if method_only or name.startswith("__"):
            if hasattr(nb.Tensor, name):
                return Mapping(_method(name), f"Tensor.{name}")
            continue
        target = _lookup(nb, name)
        if _is_function(target):
            return Mapping(target, f"nbgrad.{name}")
    for name in names:
        if "." not in name and hasattr(nb.Tensor, name) and not method_only:
            return Mapping(_method(name), f"Tensor.{name}", "only as a Tensor method")
    short = op.name.rsplit(".", 1)[-1]
    if op.name.startswith("nn.functional."):
        for name in dict.fromkeys([short, op.aten_name or short]):
            target = getattr(nb, name, None)
            if _is_function(target):
                return Mapping(target, f"nbgrad.{name}",
                               f"nbgrad.{name} exists, nbgrad.nn.functional.{short} does not")
    return Mapping(None, "not in nbgrad")


# ---------------------------------------------------------------- run


@dataclass
class OpResult:
    key: str
    path: str
    note: str = ""
    counts: Counter = field(default_factory=Counter)
    failures: list[tuple[str, str, str, str]] = field(default_factory=list)
    forms: Counter = field(default_factory=Counter)  # (category, form) -> samples

    @property
    def samples(self) -> int:
        return sum(self.counts[c] for c in CATEGORIES)


@dataclass
class Report:
    results: list[OpResult]
    absent: list[tuple[str, str]]  # (OpInfo key, reason)
    skipped: list[tuple[str, str]]  # (OpInfo key, reason): no float dtype on CPU, ...
    seconds: float = 0.0

    def total(self) -> Counter:
        out: Counter = Counter()
        for r in self.results:
            out.update({c: r.counts[c] for c in CATEGORIES + ("skipped",)})
        return out

    @property
    def samples(self) -> int:
        return sum(r.samples for r in self.results)

    def fraction_missing(self) -> float:
        return self.total()["missing argument"] / max(self.samples, 1)


def opinfo_key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def load_op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def run_op(op: Any, mapping: Mapping, dtypes: Iterable[Any]) -> OpResult:
    torch = _torch()
    result = OpResult(opinfo_key(op), mapping.path, mapping.note)
    random = op.name in RANDOM
    supported = op.supported_dtypes("cpu")
    for dtype in dtypes:
        if dtype not in supported:
            continue
        try:
            samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
        except Exception as err:  # noqa: BLE001 - a broken generator is reported, not fatal
            result.failures.append(("skipped", "sample_inputs", _first_line(str(err)), ""))
            continue
        for sample in samples:
            _run_sample(op, mapping, sample, random, result, torch)
    return result


def _run_sample(op: Any, mapping: Mapping, sample: Any, random: bool, result: OpResult,
                torch: Any) -> None:
    desc = describe_sample(sample)
    try:
        nb_input, nb_args, nb_kwargs = convert((sample.input, sample.args, sample.kwargs))
        torch_only = None
    except Unconvertible:
        result.counts["skipped"] += 1
        return
    except TorchOnly as err:
        torch_only = str(err)
    try:
        torch.manual_seed(0)
        expected = op(sample.input, *sample.args, **sample.kwargs)
        torch_error = None
    except Exception as err:  # noqa: BLE001
        expected, torch_error = None, err
    if torch_only is not None:
        category = "both raise" if torch_error else "missing argument"
        form = f"{torch_only} (torch-only value)"
        _record(result, category, desc, f"torch-only argument value {torch_only}", form)
        return
    sample_random = random or (op.name.endswith("scaled_dot_product_attention")
                               and sample.kwargs.get("dropout_p", 0) > 0)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SAMPLE_TIMEOUT)
    try:
        actual = mapping.fn(nb_input, *nb_args, **nb_kwargs)
        nb_error = None
    except Exception as err:  # noqa: BLE001
        actual, nb_error = None, err
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if torch_error is not None:
        category = "both raise" if nb_error is not None else "torch raises"
        _record(result, category, desc, _first_line(str(torch_error)), "")
    elif nb_error is not None:
        category, form = classify_error(nb_error, _callee(mapping), nb_args, nb_kwargs)
        _record(result, category, desc,
                f"{type(nb_error).__name__}: {_first_line(str(nb_error))}", form)
    else:
        try:
            if op.name in GAUGE:
                expected, actual = GAUGE[op.name](expected), GAUGE[op.name](actual)
            why = compare(expected, actual, values=not sample_random)
        except Exception as err:  # noqa: BLE001
            why = f"comparison failed: {type(err).__name__}: {_first_line(str(err))}"
        if why is None:
            result.counts["ok"] += 1
        else:
            _record(result, "wrong", desc, why, _wrong_form(why))


def _callee(mapping: Mapping) -> Callable | None:
    if mapping.path.startswith("nbgrad."):
        return _lookup(nb, mapping.path[7:])
    if mapping.path.startswith("Tensor."):
        return getattr(nb.Tensor, mapping.path[7:], None)
    return None


def _wrong_form(why: str) -> str:
    text = re.sub(r"\[\d+\] ", "", why)
    text = re.sub(r"\(max abs diff .*\)", "", text)
    return re.sub(r"\d+", "N", text).strip()


def _record(result: OpResult, category: str, desc: str, text: str, form: str) -> None:
    result.counts[category] += 1
    result.failures.append((category, desc, text, form))
    if form:
        result.forms[(category, form)] += 1


def measure(names: Iterable[str] | None = None, dtypes: Iterable[Any] | None = None,
            progress: Callable[[str], None] | None = None) -> Report:
    """Run the OpInfo samples of nbgrad's ops (all, or the OpInfo names/keys given)."""
    torch = _torch()
    dtypes = list(dtypes) if dtypes is not None else [torch.float32]
    wanted = set(names) if names is not None else None
    start = time.perf_counter()
    report = Report([], [], [])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for op in load_op_db():
            key = opinfo_key(op)
            if wanted is not None and op.name not in wanted and key not in wanted:
                continue
            supported = op.supported_dtypes("cpu")
            op_dtypes = [d for d in dtypes if d in supported]
            if not op_dtypes and torch.int64 in supported:
                op_dtypes = [torch.int64]  # integer-only ops (bitwise_and, one_hot)
            if not op_dtypes:
                report.skipped.append((key, "no " + "/".join(
                    str(d).removeprefix("torch.") for d in dtypes) + " or int64 on CPU"))
                continue
            mapping = resolve(op)
            if mapping.fn is None:
                report.absent.append((key, mapping.path))
                continue
            if progress:
                progress(key)
            report.results.append(run_op(op, mapping, op_dtypes))
    report.seconds = time.perf_counter() - start
    return report


# ---------------------------------------------------------------- output


def format_table(report: Report) -> str:
    cols = ("samples", "ok", "wrong", "missing argument", "rejects", "both raise",
            "torch raises", "skipped")
    short = ("samples", "ok", "wrong", "missing", "rejects", "both", "t.raise", "skip")
    width = max([len(r.key) for r in report.results] + [10])
    head = f"{'op':<{width}}  " + " ".join(f"{s:>7}" for s in short) + "  nbgrad"
    lines = [head, "-" * len(head)]

    def row(name: str, counts: Counter, samples: int, where: str = "") -> str:
        vals = [samples] + [counts[c] for c in cols[1:]]
        return f"{name:<{width}}  " + " ".join(f"{v:>7}" for v in vals) + f"  {where}"

    for r in sorted(report.results, key=lambda r: r.key):
        note = f" ({r.note})" if r.note else ""
        lines.append(row(r.key, r.counts, r.samples, r.path + note))
    total = report.total()
    lines += ["-" * len(head), row("TOTAL", total, report.samples)]
    samples = max(report.samples, 1)
    per_op = sum(r.counts["missing argument"] / max(r.samples, 1) for r in report.results) \
        / max(len(report.results), 1)
    lines += [
        "",
        f"OpInfo entries mapped to nbgrad: {len(report.results)}; not in nbgrad: "
        f"{len(report.absent)}; skipped (dtype): {len(report.skipped)}",
        f"samples of mapped ops: {report.samples} (+{total['skipped']} unconvertible, skipped)",
        f"missing argument / samples: {total['missing argument']}/{report.samples} = "
        f"{100 * total['missing argument'] / samples:.2f}%",
        f"mean over mapped ops of missing argument / samples: {100 * per_op:.2f}%",
        f"wrong / samples: {total['wrong']}/{report.samples} = "
        f"{100 * total['wrong'] / samples:.2f}%",
        f"rejects / samples: {total['rejects']}/{report.samples} = "
        f"{100 * total['rejects'] / samples:.2f}%",
        f"ok / samples: {total['ok']}/{report.samples} = {100 * total['ok'] / samples:.2f}%",
        f"time: {report.seconds:.0f} s",
    ]
    return "\n".join(lines)


def format_todo(report: Report, top: int = 30) -> str:
    """The ops with the most missing-argument / wrong / rejected samples, with their forms."""
    lines = []
    for category in ("missing argument", "wrong", "rejects"):
        ranked = sorted((r for r in report.results if r.counts[category]),
                        key=lambda r: (-r.counts[category], r.key))[:top]
        lines.append(f"\nTop {len(ranked)} ops by '{category}':")
        for r in ranked:
            forms = Counter({f: n for (c, f), n in r.forms.items() if c == category})
            shown = "; ".join(f"{f} x{n}" for f, n in forms.most_common(4))
            lines.append(f"  {r.key:<40} {r.counts[category]:>4}/{r.samples:<4} {shown}")
    return "\n".join(lines)


def write_details(report: Report, path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write("# category\top\tnbgrad\tsample\terror or difference\tform\n")
        for r in sorted(report.results, key=lambda r: r.key):
            for category, desc, text, form in r.failures:
                out.write(f"{category}\t{r.key}\t{r.path}\t{desc}\t{text}\t{form}\n")
        for key, reason in report.absent:
            out.write(f"absent\t{key}\t\t\t{reason}\t\n")
        for key, reason in report.skipped:
            out.write(f"skipped-op\t{key}\t\t\t{reason}\t\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtypes", default="float32",
                        help="comma-separated torch dtype names (default float32)")
    parser.add_argument("--ops", default=None, help="comma-separated OpInfo names or keys")
    parser.add_argument("--details", default=None, help="write per-sample failures here")
    parser.add_argument("--top", type=int, default=30, help="ops listed per to-do category")
    parser.add_argument("--absent", action="store_true", help="list the OpInfo ops nbgrad lacks")
    parser.add_argument("--verbose", action="store_true", help="print each op as it runs")
    opts = parser.parse_args(argv)
    torch = _torch()
    dtypes = [getattr(torch, d.strip()) for d in opts.dtypes.split(",")]
    names = [n.strip() for n in opts.ops.split(",")] if opts.ops else None
    progress = (lambda key: print("running", key, file=sys.stderr, flush=True)) \
        if opts.verbose else None
    report = measure(names, dtypes, progress)
    print(format_table(report))
    print(format_todo(report, opts.top))
    if opts.absent:
        print(f"\nOpInfo entries not in nbgrad ({len(report.absent)}):")
        print("  " + ", ".join(key for key, _ in report.absent))
    if opts.details:
        write_details(report, opts.details)
        print(f"\nper-sample failures written to {opts.details}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
