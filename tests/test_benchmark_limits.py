"""benchmarks/limits.py and the "of bound" column of benchmarks/harness.py: the bound
arithmetic, the formatting, and a tiny-size run of measure_limits (no timing asserted)."""

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from benchmarks.harness import Row, format_fraction, print_table  # noqa: E402
from benchmarks.limits import (  # noqa: E402
    Limits,
    cpu_model_name,
    format_limits,
    measure_limits,
    numba_cpu_name,
)


def _limits(**overrides):
    values = dict(threads=2, sgemm_1=60.0, sgemm_n=100.0, dgemm_1=30.0, dgemm_n=50.0,
                  copy_gbs=20.0, triad_gbs=10.0, triad_parallel_gbs=16.0,
                  blas_control="threadpoolctl", cpu="Test CPU", numba_cpu="testlake")
    values.update(overrides)
    return Limits(**values)


def test_flops_bound_uses_sgemm_for_float32_and_dgemm_for_float64():
    limits = _limits()
    row = Row("gemm", nbgrad_s=0.02, torch_s=0.01, flops=1e9)
    # 1 GFLOP at 100 GFLOP/s is 10 ms; nbgrad took 20 ms
    assert row.bound_s(limits) == pytest.approx(0.01)
    assert row.of_bound(limits) == pytest.approx(0.5)
    row64 = Row("gemm", nbgrad_s=0.04, torch_s=None, flops=1e9, dtype="float64")
    assert row64.bound_s(limits) == pytest.approx(0.02)
    assert row64.of_bound(limits) == pytest.approx(0.5)


def test_flops_bound_takes_the_one_thread_peak_where_it_measured_higher():
    limits = _limits(sgemm_1=200.0)
    row = Row("gemm", nbgrad_s=0.01, torch_s=None, flops=1e9)
    assert row.of_bound(limits) == pytest.approx(0.5)


def test_bytes_bound_uses_the_best_bandwidth():
    limits = _limits()
    assert limits.bandwidth_gbs == 20.0
    row = Row("stream", nbgrad_s=0.004, torch_s=None, bytes=20e6)
    # 20 MB at 20 GB/s is 1 ms; nbgrad took 4 ms
    assert row.bound_s(limits) == pytest.approx(0.001)
    assert row.of_bound(limits) == pytest.approx(0.25)
    assert _limits(triad_parallel_gbs=40.0).bandwidth_gbs == 40.0


def test_no_bound_or_no_limits_gives_none_and_a_dash():
    row = Row("overhead", nbgrad_s=1e-5, torch_s=1e-5)
    assert row.bound_s(_limits()) is None
    assert row.of_bound(_limits()) is None
    assert Row("gemm", 0.01, None, flops=1e9).of_bound(None) is None
    assert format_fraction(None) == "-"


def test_format_fraction():
    assert format_fraction(0.5) == "50%"
    assert format_fraction(1.234) == "123%"
    assert format_fraction(0.0345) == "3.5%"


def test_print_table_has_the_of_bound_column(capsys):
    rows = [Row("gemm", 0.02, 0.01, "<=1.2x", flops=1e9),
            Row("stream", 0.004, None, bytes=20e6),
            Row("overhead", 1e-5, 2e-5)]
    print_table(rows, _limits())
    lines = capsys.readouterr().out.splitlines()
    assert "of bound" in lines[0] and "ratio" in lines[0]
    assert "2.00x" in lines[2] and "50%" in lines[2]
    assert "25%" in lines[3]
    assert lines[4].split()[-1] == "-"  # overhead: no bound
    print_table(rows)  # without limits every fraction is "-"
    lines = capsys.readouterr().out.splitlines()
    assert "%" not in "".join(lines[2:])


def test_format_limits_names_the_host_and_the_numbers():
    text = format_limits(_limits())
    assert "Test CPU" in text and "testlake" in text
    assert "100.0" in text and "50.0" in text  # multi-thread sgemm, dgemm
    assert "20.0 GB/s" in text and "16.0 GB/s" in text
    assert "threadpoolctl" in text
    text = format_limits(_limits(blas_control="not settable: BLAS runs at its own count"))
    assert "same count" in text
    assert "busy" not in format_limits(_limits())
    assert "busy" in format_limits(_limits(sgemm_1=120.0))


def test_host_names_are_strings():
    assert cpu_model_name()
    assert numba_cpu_name()


def test_measure_limits_at_a_tiny_size_returns_positive_numbers():
    limits = measure_limits(2, gemm_n=64, copy_bytes=2**20, triad_bytes=2**20, repeats=1)
    for value in (limits.sgemm_1, limits.sgemm_n, limits.dgemm_1, limits.dgemm_n,
                  limits.copy_gbs, limits.triad_gbs, limits.triad_parallel_gbs):
        assert value > 0
    assert limits.threads == 2
    assert limits.blas_control
    assert "GFLOP/s" in format_limits(limits)


# --- the bandwidth at a row's own working set -------------------------------------------

from benchmarks.limits import bandwidth_at, format_sized  # noqa: E402


def test_working_set_row_bound_uses_the_bandwidth_measured_at_its_size():
    # main memory's best is 20 GB/s; 64 MB measured at 50 GB/s (as from a large cache)
    limits = _limits(sized_gbs={64_000_000: 50.0})
    row = Row("tanh", nbgrad_s=0.004, torch_s=None, bytes=80e6,
              working_set=64e6)
    # 80 MB at 50 GB/s is 1.6 ms; nbgrad took 4 ms
    assert limits.bandwidth_for(64e6) == 50.0
    assert row.bound_s(limits) == pytest.approx(0.0016)
    assert row.of_bound(limits) == pytest.approx(0.4)
    # the same row without a working set keeps the main-memory bound: 80 MB at 20 GB/s
    plain = Row("tanh", nbgrad_s=0.004, torch_s=None, bytes=80e6)
    assert plain.bound_s(limits) == pytest.approx(0.004)


def test_working_set_bound_is_never_looser_than_main_memory():
    # a size measured slower than main memory's best (a busy moment) keeps main memory's
    limits = _limits(sized_gbs={512_000_000: 12.0})
    assert limits.bandwidth_for(512e6) == 20.0
    row = Row("big", nbgrad_s=0.05, torch_s=None, bytes=1e9, working_set=512e6)
    assert row.of_bound(limits) == pytest.approx(1.0)


def test_working_set_row_with_flops_or_without_limits():
    limits = _limits(sized_gbs={1000: 99.0})
    gemm = Row("gemm", nbgrad_s=0.02, torch_s=None, flops=1e9, bytes=1e6,
               working_set=1000)
    assert gemm.bound_s(limits) == pytest.approx(0.01)  # the sgemm peak, not bytes
    assert Row("s", 0.01, None, bytes=1e6, working_set=1000).of_bound(None) is None
    no_bytes = Row("overhead", 1e-5, None, working_set=1000)
    assert no_bytes.bound_s(limits) is None


def test_bandwidth_for_measures_an_unmeasured_size_and_then_keeps_the_best():
    size = 3 * 2**20 + 8  # a size no other test measures
    limits = _limits(copy_gbs=1e-9, triad_gbs=1e-9, triad_parallel_gbs=1e-9)
    got = limits.bandwidth_for(size)
    assert got > 0
    assert list(limits.sized_gbs) == [size]
    assert limits.bandwidth_for(size) == got  # not measured again
    # bandwidth_at measures on every call and returns the best so far, which the next
    # bound takes up
    again = bandwidth_at(size, limits.threads, repeats=2)
    assert again >= got
    assert limits.bandwidth_for(size) == again
    assert bandwidth_at(size, limits.threads, repeats=1) >= again


def test_bandwidth_at_tiny_sizes_runs():
    # smaller than one element per array: still one element each, a positive rate
    assert bandwidth_at(8, 1, repeats=1) > 0
    assert bandwidth_at(48 * 1024, 2, repeats=2) > 0


def test_format_sized_and_format_limits_list_the_sizes():
    limits = _limits(sized_gbs={64 * 2**20: 55.5, 2**20: 160.0})
    line = format_sized(limits)
    assert "160.0 GB/s at 1 MiB" in line and "55.5 GB/s at 64 MiB" in line
    assert line.index("1 MiB") < line.index("64 MiB")
    assert "2 threads" in line
    assert line in format_limits(limits)
    assert "working-set" not in format_limits(_limits())
