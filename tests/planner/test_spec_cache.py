"""planner.spec_cache: a built-in spec validated once is loaded from the user's cache folder by the
next process; an entry whose file or code changed is stale and rebuilt; a broken entry is rebuilt;
a cached spec is the spec the file validates to."""

import subprocess
import sys
from pathlib import Path

import pytest

from planner.spec_cache import cached_spec, code_fingerprint

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOORFIRST_CACHE_DIR", str(tmp_path / "cache"))
    code_fingerprint.cache_clear()
    yield tmp_path / "cache" / "specs"
    code_fingerprint.cache_clear()


def _counting(path: Path, calls: list):
    def build():
        calls.append(1)
        return {"text": path.read_text()}
    return build


def test_an_entry_is_reused_and_rebuilt_when_its_file_or_code_changes(cache, tmp_path):
    data, code = tmp_path / "gpu.yaml", tmp_path / "code"
    data.write_text("a: 1\n")
    code.mkdir()
    (code / "reader.py").write_text("x = 1\n")
    calls: list = []
    load = lambda: cached_spec("hardware", data, _counting(data, calls), code=(code,))  # noqa: E731

    assert load() == {"text": "a: 1\n"} and len(calls) == 1
    assert load() == {"text": "a: 1\n"} and len(calls) == 1, "the second load reads the entry"
    assert len(list(cache.glob("hardware-gpu-*.pickle"))) == 1

    data.write_text("a: 2\n")  # the file changed: stale, rebuilt, the stale entry replaced
    assert load() == {"text": "a: 2\n"} and len(calls) == 2
    assert len(list(cache.glob("hardware-gpu-*.pickle"))) == 1

    (code / "reader.py").write_text("x = 22\n")  # the code that reads it changed (a new process sees it)
    code_fingerprint.cache_clear()
    assert load() == {"text": "a: 2\n"} and len(calls) == 3
    assert load() == {"text": "a: 2\n"} and len(calls) == 3

    # the entry of the earlier code stays (another checkout's looks the same: kept until MAX_AGE_DAYS)
    entries = sorted(cache.glob("hardware-gpu-*.pickle"), key=lambda p: p.stat().st_mtime_ns)
    assert len(entries) == 2
    entry = entries[-1]  # a corrupt entry is rebuilt, not an error
    entry.write_bytes(b"not a pickle")
    assert load() == {"text": "a: 2\n"} and len(calls) == 4


def test_a_folder_that_cannot_be_written_only_costs_the_cache(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("FLOORFIRST_CACHE_DIR", str(blocker))  # a file where the folder should be
    data = tmp_path / "m.json"
    data.write_text("{}")
    calls: list = []
    assert cached_spec("model", data, _counting(data, calls)) == {"text": "{}"}
    assert cached_spec("model", data, _counting(data, calls)) == {"text": "{}"} and len(calls) == 2


def test_another_file_whose_name_starts_alike_keeps_its_entry(cache, tmp_path):
    a, b = tmp_path / "qwen3.json", tmp_path / "qwen3-moe.json"
    a.write_text("1")
    b.write_text("2")
    calls: list = []
    cached_spec("model", a, _counting(a, calls))
    cached_spec("model", b, _counting(b, calls))
    cached_spec("model", a, _counting(a, calls))
    assert len(calls) == 2 and len(list(cache.glob("*.pickle"))) == 2


def test_cached_builtin_specs_are_the_validated_ones(cache):
    from calibration.artifact import load_calibration
    from calibration.priors import PRIOR_DIR, _load
    from planner.hardware.spec import DATA_DIR, _load_cached, _parse, builtin_hardware_names
    from planner.inputs import file_stamp
    from planner.models.loader import CARDS_DIR, _load_path, _read_config

    for name in builtin_hardware_names():
        path = DATA_DIR / f"{name}.yaml"
        for _ in range(2):  # built and stored, then read back
            _load_cached.cache_clear()
            assert _load_cached(str(path), file_stamp(str(path))) == _parse(path), name
    for name in ("deepseek-v3.2", "qwen3-235b-a22b"):
        card = CARDS_DIR / f"{name}.json"
        for _ in range(2):
            _load_path.cache_clear()
            assert _load_path(str(card), name, file_stamp(str(card))) == _read_config(str(card), name, None, None)
    prior = PRIOR_DIR / "h200-sglang.json"
    for _ in range(2):
        _load.cache_clear()
        assert _load(str(prior)) == load_calibration(prior)
    assert len(list(cache.glob("hardware-*.pickle"))) == len(builtin_hardware_names())


def test_a_process_that_reads_cached_specs_builds_no_validator(tmp_path):
    """The point of the cache: the second CLI-like process validates nothing (the models are
    defer_build, so pydantic builds a model's validator only when one validates)."""
    code = ("from planner.hardware.spec import HardwareSpec, load_hardware; from planner.models import load_model; "
            "from planner.models.spec import ModelSpec; from calibration.priors import prior_for; "
            "from calibration.artifact import Calibration; "
            "load_hardware('h200'); load_model('deepseek-v3.2'); prior_for('h200', 'sglang'); "
            "print(HardwareSpec.__pydantic_complete__, ModelSpec.__pydantic_complete__, Calibration.__pydantic_complete__)")
    env = {"FLOORFIRST_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    runs = [subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env, timeout=120)
            for _ in range(2)]
    assert [r.stdout.split() for r in runs] == [["True"] * 3, ["False"] * 3], [r.stderr[-1000:] for r in runs]


def test_a_call_confined_to_a_root_neither_reads_nor_writes_the_cache(cache, tmp_path):
    """The MCP server's workers touch no file outside their root (docs/mcp-security.md): no cache."""
    from planner.path_policy import Root, confined

    data = tmp_path / "root" / "gpu.yaml"
    data.parent.mkdir()
    data.write_text("a: 1\n")
    calls: list = []
    cached_spec("hardware", data, _counting(data, calls))  # unconfined: stored
    assert len(list(cache.glob("*.pickle"))) == 1
    with confined(Root(str(tmp_path / "root"))):
        cached_spec("hardware", data, _counting(data, calls))
        cached_spec("hardware", data, _counting(data, calls))
    assert len(calls) == 3  # built each time, the stored entry not read
