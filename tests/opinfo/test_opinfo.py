"""PyTorch's OpInfo samples for a fixed set of common ops run in nbgrad and give torch's
values, shapes and dtypes; the full measurement over every op is tests/opinfo/opinfo_run.py.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # torch.testing._internal imports it
pytest.importorskip("torch.testing._internal.common_methods_invocations")

import nbgrad as nb  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "opinfo_run", Path(__file__).with_name("opinfo_run.py"))
opinfo_run = sys.modules.setdefault("opinfo_run", importlib.util.module_from_spec(_spec))
if not hasattr(opinfo_run, "measure"):
    _spec.loader.exec_module(opinfo_run)

COMMON = ("add", "mul", "sum", "mean", "matmul", "softmax", "nn.functional.relu", "cumsum",
          "sort", "topk", "flip", "roll", "tril", "clamp", "where")


@pytest.fixture(scope="module")
def report():
    return opinfo_run.measure(COMMON, [torch.float32])


def test_common_ops_are_all_mapped(report):
    mapped = {r.key.split(".with_")[0] for r in report.results}
    assert set(COMMON) <= mapped, (set(COMMON) - mapped, report.absent)
    assert all(r.samples > 0 for r in report.results)


@pytest.mark.parametrize("name", COMMON)
def test_samples_match_torch(report, name):
    results = [r for r in report.results if r.key == name or r.key.startswith(name + ".")]
    assert results
    for r in results:
        wrong = [(desc, text) for category, desc, text, _ in r.failures if category == "wrong"]
        assert not wrong, (r.key, wrong[:5])
        # these common forms run in nbgrad: no sample rejected or missing an argument
        failed = [(c, desc, text) for c, desc, text, _ in r.failures
                  if c in ("missing argument", "rejects")]
        assert not failed, (r.key, failed[:5])


def test_compare_sees_value_shape_and_dtype_differences():
    same = opinfo_run.compare(torch.tensor([1.0, 2.0]), nb.tensor([1.0, 2.0], dtype=nb.float32))
    assert same is None
    assert "values" in opinfo_run.compare(torch.tensor([1.0, 2.0]),
                                          nb.tensor([1.0, 2.1], dtype=nb.float32))
    assert "shape" in opinfo_run.compare(torch.zeros(2, 1), nb.zeros(2))
    assert "dtype" in opinfo_run.compare(torch.zeros(2), nb.zeros(2, dtype=nb.float64))
    pair = (torch.zeros(2), torch.tensor([0, 1]))
    assert "[1]" in opinfo_run.compare(pair, (nb.zeros(2), nb.tensor([0, 2])))


def test_classify_error_names_the_missing_argument():
    def fn(x, dim=None):
        return x
    try:
        fn(1, dim=0, dtype=None)
    except TypeError as err:
        category, form = opinfo_run.classify_error(err, fn, (), {"dim": 0, "dtype": None})
    assert (category, form) == ("missing argument", "dtype=")
    category, _ = opinfo_run.classify_error(ValueError("sum: bad shape (2, 3)"), fn, (), {})
    assert category == "rejects"
    category, _ = opinfo_run.classify_error(
        ValueError("pad: mode='circular' is not supported"), fn, (), {})
    assert category == "missing argument"


@pytest.mark.skipif(not os.environ.get("NBGRAD_OPINFO_FULL"),
                    reason="the full OpInfo run (minutes when Numba's cache is cold): "
                           "set NBGRAD_OPINFO_FULL=1 or run tests/opinfo/opinfo_run.py")
def test_all_mapped_ops_match_torch():
    full = opinfo_run.measure(None, [torch.float32])
    wrong = [(r.key, desc, text) for r in full.results
             for category, desc, text, _ in r.failures if category == "wrong"]
    assert not wrong, wrong[:10]
