"""runtime/host.py: the host's facts read from /sys and /proc (here fake directories),
the fallback when they cannot be read, and the GEMM blocking chosen from them."""

import pytest

from nbgrad.kernels import matmul
from nbgrad.runtime import host


def _fake_cache(root, entries):
    for i, (level, kind, size) in enumerate(entries):
        d = root / f"index{i}"
        d.mkdir(parents=True)
        (d / "level").write_text(f"{level}\n")
        (d / "type").write_text(f"{kind}\n")
        (d / "size").write_text(f"{size}\n")
    return root


@pytest.mark.parametrize("text, size", [("48K", 48 << 10), ("2048K", 2 << 20), ("32M", 32 << 20),
                                        ("1024", 1024), ("512 KiB", 512 << 10), ("1G", 1 << 30)])
def test_parse_size(text, size):
    assert host.parse_size(text) == size


def test_parse_size_rejects_garbage():
    with pytest.raises(ValueError):
        host.parse_size("lots")


def test_read_caches_from_fake_sys(tmp_path):
    root = _fake_cache(tmp_path / "cache", [(1, "Data", "48K"), (1, "Instruction", "32K"),
                                            (2, "Unified", "2048K"), (3, "Unified", "480M")])
    assert host.read_caches(root) == {"L1d": 48 << 10, "L2": 2 << 20, "L3": 480 << 20}


def test_unreadable_entries_are_skipped(tmp_path):
    root = _fake_cache(tmp_path / "cache", [(1, "Data", "32K"), (2, "Unified", "??")])
    (root / "index2").mkdir()  # no files at all
    assert host.read_caches(root) == {"L1d": 32 << 10}


def test_facts_from_fake_sys_and_cpuinfo(tmp_path):
    root = _fake_cache(tmp_path / "cache", [(1, "Data", "32K"), (2, "Unified", "1024K")])
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\n"
                       "model name\t: AMD EPYC 9654 96-Core Processor\nflags\t: fpu\n")
    facts = host.host_facts(root, cpuinfo, vector_bytes=64)
    assert facts.cpu_model == "AMD EPYC 9654 96-Core Processor"
    assert facts.vector_bytes == 64
    assert facts.caches == {"L1d": 32 << 10, "L2": 1 << 20}
    assert facts.caches_from == str(root)


def test_fallback_when_sys_is_missing(tmp_path):
    facts = host.host_facts(tmp_path / "absent", tmp_path / "no-cpuinfo", vector_bytes=32)
    assert facts.caches_from == "fallback"
    assert facts.caches == {"L1d": 32 << 10, "L2": 1 << 20}
    assert facts.cpu_model  # platform's name, or "unknown"


def test_partial_sys_is_completed_by_the_fallback(tmp_path):
    root = _fake_cache(tmp_path / "cache", [(1, "Data", "64K")])
    facts = host.host_facts(root, tmp_path / "no-cpuinfo", vector_bytes=64)
    assert facts.caches == {"L1d": 64 << 10, "L2": 1 << 20}
    assert facts.caches_from == "fallback"


@pytest.mark.parametrize("l1d, l2, depth", [
    (32 << 10, 1 << 20, 2048),    # fallback: 2048 x 256 = 512 KiB of L2, 8 KiB of L1d
    (48 << 10, 2 << 20, 2048),    # L1d limits: 4 x 4096 > 12 KiB
    (64 << 10, 2 << 20, 4096),    # 4096 x 256 = 1 MiB, 16 KiB of L1d
    (32 << 10, 512 << 10, 1024),  # Zen 2/3: 1024 x 256 = 256 KiB
    (16 << 10, 256 << 10, 1024),  # tiny caches: the floor
    (1 << 20, 64 << 20, 8192),    # huge caches: the ceiling
])
def test_gemm_depth(l1d, l2, depth):
    assert host.gemm_depth_bytes({"L1d": l1d, "L2": l2}) == depth


def test_block_cols_agree_with_the_kernel():
    assert host.GEMM_BLOCK_COLS == matmul.NC


def test_this_host():
    facts = host.facts()
    assert facts.vector_bytes in (16, 32, 64)
    assert {"L1d", "L2"} <= set(facts.caches)
    assert host.GEMM_DEPTH_MIN <= host.gemm_depth() <= host.GEMM_DEPTH_MAX


def test_info_command(capsys):
    from nbgrad.__main__ import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for label in ("cpu", "vectors", "caches", "numba target", "gemm tile", "gemm block",
                  "gemm rate"):
        assert f"\n{label} " in f"\n{out}"
    assert f"guessed from the caches: {host.gemm_depth()} bytes of k" in out
