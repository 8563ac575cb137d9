"""kernels/gemm_search.py: the candidates, the choice by timing (with a scripted clock),
the record on disk, and when a search runs. That every candidate gives the same bits is
tests/kernels/test_tiles.py's."""

import json

import pytest

from nbgrad.kernels import gemm_search as gs
from nbgrad.kernels import matmul
from nbgrad.runtime import host

GUESS = gs.Blocking(2048, 128 << 10, False)


def test_candidates_around_the_guess():
    pool = gs.candidates(GUESS)
    assert pool[0] == GUESS
    assert len(pool) == len(set(pool)) == 3 * 3 * 2
    assert {c.depth_bytes for c in pool} == {1024, 2048, 4096}
    assert {c.span for c in pool} == {32 << 10, 128 << 10, 512 << 10}
    assert {c.pack_t for c in pool} == {False, True}


def test_candidates_stay_within_the_depth_limits():
    pool = gs.candidates(gs.Blocking(host.GEMM_DEPTH_MAX, 1 << 20, True))
    assert max(c.depth_bytes for c in pool) == host.GEMM_DEPTH_MAX
    assert {c.depth_bytes for c in pool} == {host.GEMM_DEPTH_MAX // 2, host.GEMM_DEPTH_MAX}


def _scripted(monkeypatch, cost):
    """Products that only note the blocking they ran with, and a clock that charges
    ``cost(blocking)`` for it."""
    ran = []
    monkeypatch.setattr(gs, "_timed_products",
                        lambda threads, product: [ran.append, ran.append])

    def clock(fn):
        fn()
        return cost(ran[-1])
    return clock


def test_search_takes_the_fastest(monkeypatch):
    fast = gs.Blocking(1024, 32 << 10, True)
    clock = _scripted(monkeypatch, lambda c: 1.0 if c == fast else 2.0)
    found = gs.search(2, matmul.product, GUESS, clock)
    assert found.chosen == fast and found.guess == GUESS
    assert set(found.speed) == set(gs.candidates(GUESS))
    assert found.speed[fast] == 1.0 and found.speed[GUESS] == pytest.approx(0.5)


def test_search_keeps_the_guess_within_the_margin(monkeypatch):
    near = gs.Blocking(4096, 128 << 10, False)
    clock = _scripted(monkeypatch, lambda c: 0.99 if c == near else 1.0)
    assert gs.search(2, matmul.product, GUESS, clock).chosen == GUESS


def test_search_times_every_candidate_every_round(monkeypatch):
    seen = []
    clock = _scripted(monkeypatch, lambda c: seen.append(c) or 1.0)
    gs.search(2, matmul.product, GUESS, clock)
    pool = gs.candidates(GUESS)
    # two products per candidate and round, the rounds in the candidates' order
    assert seen == [c for _ in range(gs.ROUNDS) for c in pool for _ in range(2)]


def test_search_with_real_products(monkeypatch):
    """The search runs the GEMM itself (small products here) and reports rates."""
    monkeypatch.setattr(gs, "PRODUCTS", ((1, 64, False), (3, 96, True)))
    found = gs.search(1, matmul.product, GUESS)
    assert found.chosen in found.speed and max(found.speed.values()) <= 1.0
    assert all(0 < speed <= 1 for speed in found.speed.values())


def test_record_round_trip(tmp_path):
    path = tmp_path / gs.FILE_NAME
    found = gs.SearchResult(gs.Blocking(1024, 32 << 10, True), GUESS,
                            {gs.Blocking(1024, 32 << 10, True): 1.0, GUESS: 0.8}, "search")
    gs.save(found, 2, path)
    gs.save(gs.SearchResult(GUESS, GUESS, {GUESS: 100.0}, "search"), 1, path)
    loaded = gs.load(2, path, GUESS)
    assert loaded.chosen == found.chosen and loaded.speed == found.speed
    assert loaded.source == f"file {path}"
    assert gs.load(1, path, GUESS).chosen == GUESS
    assert gs.load(3, path, GUESS) is None
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("text", ["", "{not json", "[1, 2]", '{"key": {"span": 1}}'])
def test_damaged_record_is_no_record(tmp_path, text):
    path = tmp_path / gs.FILE_NAME
    path.write_text(text)
    assert gs.load(2, path, GUESS) is None
    gs.save(gs.SearchResult(GUESS, GUESS, {GUESS: 1.0}, "search"), 2, path)
    assert gs.load(2, path, GUESS).chosen == GUESS
    assert isinstance(json.loads(path.read_text()), dict)


@pytest.fixture
def fresh_state(monkeypatch, tmp_path):
    """No result in this process and an empty record file in tmp_path."""
    monkeypatch.setattr(gs, "_chosen", {})
    monkeypatch.setattr(gs, "_read", set())
    monkeypatch.setattr(gs, "record_path", lambda: tmp_path / gs.FILE_NAME)
    return tmp_path / gs.FILE_NAME


def _searching(monkeypatch, chosen):
    calls = []

    def fake_search(threads, product, start):
        calls.append(threads)
        return gs.SearchResult(chosen, start, {chosen: 1.0}, "search")
    monkeypatch.setattr(gs, "search", fake_search)
    return calls


def test_small_products_do_not_search(monkeypatch, fresh_state):
    monkeypatch.setenv("NBGRAD_GEMM_SEARCH", "1")
    calls = _searching(monkeypatch, gs.Blocking(1024, 1 << 20, True))
    assert gs.blocking(gs.SEARCH_MIN_WORK - 1, 2, matmul.product, GUESS) == GUESS
    assert calls == []


def test_first_large_product_searches_once_and_stores(monkeypatch, fresh_state, capsys):
    monkeypatch.setenv("NBGRAD_GEMM_SEARCH", "1")
    chosen = gs.Blocking(1024, 1 << 20, True)
    calls = _searching(monkeypatch, chosen)
    assert gs.blocking(gs.SEARCH_MIN_WORK, 2, matmul.product, GUESS) == chosen
    assert gs.blocking(gs.SEARCH_MIN_WORK, 2, matmul.product, GUESS) == chosen
    assert calls == [2]
    assert "timing GEMM block sizes" in capsys.readouterr().err
    assert gs.load(2, fresh_state, GUESS).chosen == chosen
    # a new process reads the record instead of searching
    gs._chosen.clear()
    gs._read.clear()
    assert gs.blocking(gs.SEARCH_MIN_WORK, 2, matmul.product, GUESS) == chosen
    assert calls == [2]


def test_search_off(monkeypatch, fresh_state):
    monkeypatch.setenv("NBGRAD_GEMM_SEARCH", "0")
    calls = _searching(monkeypatch, gs.Blocking(1024, 1 << 20, True))
    found = gs.result(2, matmul.product, GUESS)
    assert found.chosen == GUESS and "NBGRAD_GEMM_SEARCH=0" in found.source
    assert calls == []


def test_product_uses_the_chosen_blocking(monkeypatch, fresh_state):
    """``product`` without explicit blocking passes the chosen one to the kernel."""
    chosen = gs.Blocking(1024, 1 << 20, True)
    monkeypatch.setattr(gs, "_chosen", {1: gs.SearchResult(chosen, chosen, {}, "search")})
    assert matmul._blocking(10, 1, None, None, None) == (1024, 1 << 20, True)
    assert matmul._blocking(10, 1, 4096, None, False) == (4096, 1 << 20, False)


def test_guess_follows_the_caches():
    guess = matmul.guessed_blocking()
    assert guess == gs.Blocking(host.gemm_depth(), int(matmul.IN_PLACE_SPAN), matmul.PACK_T)


def test_record_path_is_beside_the_kernel_cache():
    path = gs.record_path()
    assert path is None or (path.name == gs.FILE_NAME and path.parent.is_dir())
