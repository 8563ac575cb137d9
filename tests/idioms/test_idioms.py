"""Does a PyTorch script port unchanged? Each idiom of ``tensor_idioms.py`` (125) and
``module_idioms.py`` (49) runs as the same code twice: with PyTorch's names (``torch``,
``F = torch.nn.functional``, ``nn = torch.nn``) and with nbgrad's (``nbgrad``,
``nbgrad.nn.functional``, ``nbgrad.nn``), and the two ``out`` must agree: the same nesting
of tuples, lists and dicts, the same Python scalar types, tensors of the same shape and
dtype and, unless the idiom is marked ``"structure"``, the same values (allclose).

Idioms nbgrad does not yet run are listed in ``KNOWN_GAPS`` with the reason; they are strict
xfails, so the one that starts passing must leave the list. The issue's bar: at least 120 of
the tensor idioms and 45 of the module idioms pass.
"""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from idioms.module_idioms import MODULE_IDIOMS, PRELUDE  # noqa: E402
from idioms.tensor_idioms import STRUCTURE, TENSOR_IDIOMS, VALUE  # noqa: E402

import nbgrad as nb  # noqa: E402
import nbgrad.nn.functional as nb_functional  # noqa: E402
import nbgrad.utils.data  # noqa: E402, F401  (a script's `from torch.utils.data import ...`)

KNOWN_GAPS: dict[str, str] = {
    # tensor idioms
    # module idioms
}

# allclose tolerances by dtype (float32's are the issue's)
TOLERANCES = {np.dtype(np.float32): (1e-5, 1e-6), np.dtype(np.float64): (1e-9, 1e-12)}


class IdiomMismatch(AssertionError):
    """nbgrad's run of an idiom raised, or its ``out`` differs from PyTorch's."""


def _data() -> dict[str, np.ndarray]:
    """The fixed arrays the idioms read (fresh copies per run: idioms write into tensors)."""
    rng = np.random.default_rng(0)
    return {
        "a": rng.standard_normal((4, 5)).astype(np.float32),
        "b": rng.standard_normal((5, 3)).astype(np.float32),
        "img": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
        "seq": rng.standard_normal((2, 6, 8)).astype(np.float32),
        "labels": rng.integers(0, 5, size=4),
    }


def _run(lib: str, code: str, tmp_path) -> object:
    """Run ``code`` with ``lib``'s names (both RNGs seeded first) and return its ``out``."""
    if lib == "torch":
        names = {"torch": torch, "F": torch.nn.functional, "nn": torch.nn}
    else:
        names = {"torch": nb, "F": nb_functional, "nn": nb.nn}
    names.update(np=np, path=str(tmp_path / f"{lib}.ckpt"), **_data())
    torch.manual_seed(0)
    nb.manual_seed(0)
    exec(code, names)  # noqa: S102  (the idioms of this folder)
    return names["out"]


def _plain(value: object) -> object:
    """``value`` with tensors as ``("tensor", ndarray)``, dtypes and devices as their
    names, sequences as lists, dict values converted: comparable across the libraries."""
    if isinstance(value, (torch.Tensor, nb.Tensor)):
        return ("tensor", np.array(value.detach().numpy()))
    if isinstance(value, np.ndarray):
        return ("array", value.copy())
    if isinstance(value, (torch.dtype, nb.dtype)):
        return ("dtype", str(value).rsplit(".", 1)[-1])
    if isinstance(value, (torch.device, nb.device)):
        return ("device", str(value))
    if isinstance(value, dict):
        return {key: _plain(v) for key, v in value.items()}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    return value


def _compare(want: object, got: object, structure: bool, where: str = "out") -> None:
    """Raise IdiomMismatch where ``got`` (nbgrad's) differs from ``want`` (PyTorch's)."""
    def fail(what: str) -> None:
        raise IdiomMismatch(f"{where}: {what}")

    if isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            fail(f"dict keys {list(want)} expected, got {got!r:.200}")
        for key in want:
            _compare(want[key], got[key], structure, f"{where}[{key!r}]")
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            fail(f"a sequence of {len(want)} expected, got {got!r:.200}")
        for i, (w, g) in enumerate(zip(want, got)):
            _compare(w, g, structure, f"{where}[{i}]")
    elif isinstance(want, tuple) and want[0] in ("tensor", "array"):
        (kind, w), g = want, got
        if not (isinstance(got, tuple) and got[0] == kind):
            fail(f"a {kind} expected, got {got!r:.200}")
        g = got[1]
        if w.shape != g.shape or w.dtype != g.dtype:
            fail(f"{kind} {w.shape} {w.dtype} expected, got {g.shape} {g.dtype}")
        if structure:
            return
        if w.dtype in TOLERANCES:
            rtol, atol = TOLERANCES[w.dtype]
            same = np.allclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        else:  # integers and bools: exactly
            same = np.array_equal(g, w)
        if not same:
            diff = np.max(np.abs(g.astype(np.float64) - w), initial=0.0)
            fail(f"values differ: max |diff| {diff}\nexpected {w!r:.300}\ngot {g!r:.300}")
    elif isinstance(want, tuple):  # ("dtype", name) or ("device", name)
        if want != got:
            fail(f"{want} expected, got {got!r:.200}")
    else:  # Python scalars, strings, None
        if isinstance(want, bool) != isinstance(got, bool) or not isinstance(got, type(want)):
            fail(f"a {type(want).__name__} expected, got {type(got).__name__} {got!r:.100}")
        if structure or want is None:
            return
        if isinstance(want, float):
            if not np.isclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True):
                fail(f"{want!r} expected, got {got!r}")
        elif got != want:
            fail(f"{want!r} expected, got {got!r}")


def _check(code: str, mode: str, tmp_path) -> None:
    want = _plain(_run("torch", code, tmp_path))
    try:
        got = _plain(_run("nbgrad", code, tmp_path))
    except Exception as error:  # noqa: BLE001  (any failure of the port is a mismatch)
        raise IdiomMismatch(f"nbgrad raised {type(error).__name__}: {error}") from error
    _compare(want, got, structure=mode == STRUCTURE)


def _params(idioms: list[tuple[str, str, str]], prelude: str = "") -> list:
    params = []
    for name, code, mode in idioms:
        marks = ()
        if name in KNOWN_GAPS:
            marks = pytest.mark.xfail(strict=True, raises=IdiomMismatch, reason=KNOWN_GAPS[name])
        params.append(pytest.param(prelude + code, mode, id=name, marks=marks))
    return params


@pytest.mark.parametrize(("code", "mode"), _params(TENSOR_IDIOMS))
def test_tensor_idiom(code, mode, tmp_path):
    _check(code, mode, tmp_path)


@pytest.mark.parametrize(("code", "mode"), _params(MODULE_IDIOMS, PRELUDE))
def test_module_idiom(code, mode, tmp_path):
    _check(code, mode, tmp_path)


def test_the_issue_bar_of_idioms_that_port_unchanged():
    tensor_names = [name for name, _, _ in TENSOR_IDIOMS]
    module_names = [name for name, _, _ in MODULE_IDIOMS]
    assert len(TENSOR_IDIOMS) == 125 and len(MODULE_IDIOMS) == 49
    assert len(set(tensor_names + module_names)) == 125 + 49
    assert set(KNOWN_GAPS) <= set(tensor_names + module_names)
    assert all(mode in (VALUE, STRUCTURE) for _, _, mode in TENSOR_IDIOMS + MODULE_IDIOMS)
    tensor_gaps = sorted(set(KNOWN_GAPS) & set(tensor_names))
    module_gaps = sorted(set(KNOWN_GAPS) & set(module_names))
    assert 125 - len(tensor_gaps) >= 120, f"tensor idioms that do not port: {tensor_gaps}"
    assert 49 - len(module_gaps) >= 45, f"module idioms that do not port: {module_gaps}"
