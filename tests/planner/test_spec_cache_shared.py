"""One cache folder serves every checkout (planner.spec_cache): a write keeps the entries of other code
(another checkout's), so two checkouts used in turn both hit; it removes entries unused for
MAX_AGE_DAYS, and the least recently used ones when the folder is over MAX_BYTES; a hit refreshes its
entry's clock."""

import os
import time
from pathlib import Path

import pytest

import planner.spec_cache as sc
from planner.spec_cache import cached_spec, code_fingerprint


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOORFIRST_CACHE_DIR", str(tmp_path / "cache"))
    code_fingerprint.cache_clear()
    yield tmp_path / "cache" / "specs"
    code_fingerprint.cache_clear()


def _checkout(tmp_path: Path, name: str) -> Path:
    code = tmp_path / name
    code.mkdir()
    (code / "reader.py").write_text(f"x = '{name}'\n")
    return code


def _age(path: Path, days: float) -> None:
    t = time.time() - days * 86400
    os.utime(path, (t, t))


def test_two_checkouts_in_turn_keep_each_others_entries(cache, tmp_path):
    data = tmp_path / "h200.yaml"
    data.write_text("a: 1\n")
    a, b = _checkout(tmp_path, "a"), _checkout(tmp_path, "b")
    calls: list = []
    load = lambda code: cached_spec("hardware", data, lambda: calls.append(code.name) or "spec", code=(code,))  # noqa: E731
    for _ in range(3):
        assert load(a) == load(b) == "spec"
    assert calls == ["a", "b"], "each checkout built once, then hit its own entry"
    assert len(list(cache.glob("hardware-h200-*.pickle"))) == 2


def test_a_changed_file_replaces_only_its_own_codes_entry(cache, tmp_path):
    data = tmp_path / "h200.yaml"
    data.write_text("a: 1\n")
    a, b = _checkout(tmp_path, "a"), _checkout(tmp_path, "b")
    cached_spec("hardware", data, lambda: 1, code=(a,))
    cached_spec("hardware", data, lambda: 1, code=(b,))
    data.write_text("a: 2\n")
    cached_spec("hardware", data, lambda: 2, code=(a,))
    # a's entry for the old content went; b's (other code) stays
    assert len(list(cache.glob("hardware-h200-*.pickle"))) == 2
    calls: list = []
    data.write_text("a: 1\n")
    cached_spec("hardware", data, lambda: calls.append(1), code=(b,))
    assert calls == []


def test_old_entries_of_any_code_go_young_ones_stay(cache, tmp_path):
    data, other = tmp_path / "h200.yaml", tmp_path / "b200.yaml"
    data.write_text("a: 1\n")
    other.write_text("b: 1\n")
    a, b = _checkout(tmp_path, "a"), _checkout(tmp_path, "b")
    cached_spec("hardware", data, lambda: 1, code=(b,))
    cached_spec("hardware", other, lambda: 1, code=(b,))
    old, young = sorted(cache.glob("*.pickle"))  # b200 (old), h200 (young)
    _age(old, sc.MAX_AGE_DAYS + 1)
    _age(young, sc.MAX_AGE_DAYS - 1)
    (cache / "stray.pickle.123.tmp").write_bytes(b"x")  # a killed writer's temporary file
    _age(cache / "stray.pickle.123.tmp", sc.MAX_AGE_DAYS + 1)
    cached_spec("hardware", data, lambda: 1, code=(a,))  # a write: the sweep runs
    names = {p.name for p in cache.iterdir()}
    assert old.name not in names and young.name in names and "stray.pickle.123.tmp" not in names
    assert len(names) == 2


def test_over_the_size_bound_the_least_recently_used_go_first(cache, tmp_path, monkeypatch):
    code = _checkout(tmp_path, "a")
    files = []
    for i in range(6):
        f = tmp_path / f"gpu{i}.yaml"
        f.write_text(f"i: {i}\n")
        files.append(f)
        cached_spec("hardware", f, lambda: b"x" * 1000, code=(code,))
        _age(next(cache.glob(f"hardware-gpu{i}-*.pickle")), 10 - i)  # gpu0 the least recently used
    # a hit on gpu0 (older than REFRESH_S) makes it the most recently used
    cached_spec("hardware", files[0], lambda: pytest.fail("gpu0 is cached"), code=(code,))
    size = next(cache.glob("hardware-gpu0-*.pickle")).stat().st_size
    monkeypatch.setattr(sc, "MAX_BYTES", 5 * size)  # 6 entries now; the 7th write trims to 4
    f = tmp_path / "gpu6.yaml"
    f.write_text("i: 6\n")
    cached_spec("hardware", f, lambda: b"x" * 1000, code=(code,))
    left = sorted(p.name.split("-")[1] for p in cache.glob("*.pickle"))
    assert left == ["gpu0", "gpu4", "gpu5", "gpu6"], left


def test_prune_keeps_the_entry_just_written_and_a_small_folder_whole(cache, tmp_path, monkeypatch):
    code = _checkout(tmp_path, "a")
    f = tmp_path / "gpu.yaml"
    f.write_text("x")
    cached_spec("hardware", f, lambda: b"x" * 1000, code=(code,))
    (entry,) = cache.glob("*.pickle")
    assert sc.prune(cache) == []
    monkeypatch.setattr(sc, "MAX_BYTES", 10)
    assert sc.prune(cache, keep=entry) == [] and entry.exists()
    _age(entry, sc.MAX_AGE_DAYS + 1)
    assert sc.prune(cache, keep=entry) == [] and entry.exists()
    assert sc.prune(cache) == [entry]
