"""The fuzz suite over the adversarial corpus (tests/fuzz/corpus, made by make_corpus.py).

Default run (well under a minute): every corpus file once, with the command that reads it, plus
issue 19's named cases (output paths checked before work, FIFOs, links to /dev/zero, a model
nothing can serve), and two real subprocesses for the blocking files. Every run must end in a
clean document (exit 0) or one line (exit 2): no traceback, no hang, no NaN, infinity, null
outside the contract or negative time/size/capacity.

`-m fuzz` (the long run): every file with every command that reads its kind, and the same plan
through the MCP server's worker pool confined to the workspace as its root, every worker's file
access audited; it prints its counts. Issue 31 adds ReDoS patterns, 10^6-layer/expert/head
configs, engine benchmark files with Infinity rates, a 10^5-row trace read to -n, zip bombs, the
inputs that ended in exit 70, and MCP calls that try to escape the root (run by default too).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.fuzz.harness import ROOT, Tally, Workspace, invoke
from tests.fuzz.plan import corpus_runs, edge_runs


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("fuzz"))


def _run(plan, timeout_s: float) -> Tally:
    tally = Tally()
    wrong = []
    for argv, expect in plan:
        o = tally.add(invoke(argv, timeout_s))
        if o.kind not in ("ok", "user_error"):
            continue
        if (expect == "ok" and o.kind != "ok") or (expect == "error" and o.kind != "user_error"):
            wrong.append(f"expected {expect}, got {o}")
    assert not tally.failures, tally.summary() + "\n" + "\n".join(map(str, tally.failures))
    assert not wrong, "\n".join(wrong)
    return tally


def test_every_corpus_file_is_refused_in_one_line_or_read(ws):
    tally = _run(corpus_runs(ws, every_reader=False), timeout_s=20)
    assert tally.counts["user_error"] > 100  # the corpus is mostly refusals


def test_issue_19_edge_cases(ws):
    _run(edge_runs(ws), timeout_s=20)


@pytest.mark.parametrize("argv", [
    ["floor", "--calibration", "calibrations/fifo.json", "--json"],
    ["simulate", "-w", "traces/dev_zero.csv", "-n", "5", "--json"],
])
def test_a_fifo_or_dev_zero_in_a_real_process_ends_at_once_in_one_line(ws, argv):
    argv = [ws.path(a) if "/" in a else a for a in argv]
    p = subprocess.run([sys.executable, "-m", "cli.main", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "not a regular file" in p.stderr


@pytest.mark.fuzz
def test_long_run_every_reader_of_every_file(ws):
    tally = _run(corpus_runs(ws, every_reader=True) + edge_runs(ws), timeout_s=30)
    print("\nCLI long run:", tally.summary())


def _audited_pool(ws, monkeypatch, time_s: float, workers: int = 2):
    """A worker pool confined to the workspace (the MCP server's root), its workers recording every
    file they open, write, rename or remove (tests/fuzz/audited_worker.py)."""
    from cli.inprocess import Limits, WorkerPool
    from cli.mcp_server import COMMAND_MODULES

    log = ws.outside.parent / f"{ws.root.name}-audit.jsonl"
    monkeypatch.setenv("FLOORFIRST_FUZZ_AUDIT", str(log))
    monkeypatch.setenv("MPLCONFIGDIR", str(ws.root / "mplconfig"))  # matplotlib's caches inside the root
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    pool = WorkerPool(COMMAND_MODULES, workers=workers, limits=Limits(time_s=time_s), root=str(ws.root),
                      worker_module="tests.fuzz.audited_worker")
    return pool, log


def _outside_snapshot(ws) -> dict:
    return {p.name: p.read_bytes() for p in ws.outside.iterdir()}


def test_mcp_calls_never_reach_outside_the_root(ws, monkeypatch):
    """Issue 31: every MCP escape — a path outside, `..`, links inside that point out, launch lines
    naming outside folders, writes over existing files — is one line, reads as missing, quotes nothing
    it read, and no file outside the root is read or written (audited in the worker); the same calls
    kept inside the root work, and a write replaces a file only with overwrite."""
    import anyio
    from mcp import Client

    from cli.mcp_server import build_server
    from tests.fuzz.audited_worker import outside
    from tests.fuzz.plan import mcp_escape_runs

    before = _outside_snapshot(ws)
    pool, log = _audited_pool(ws, monkeypatch, time_s=30)
    plan = mcp_escape_runs(ws)
    try:
        async def main():
            async with Client(build_server(pool)) as c:
                return [await c.call_tool(tool, args) for tool, args, _ in plan]

        results = anyio.run(main)
    finally:
        pool.close()
    wrong = []
    for (tool, args, expect), r in zip(plan, results):
        text = r.content[0].text
        if (expect != "either" and r.is_error != (expect == "error")) or (r.is_error and "\n" in text.strip()) or "planted-secret" in text:
            wrong.append(f"{tool} {args}: expected {expect}, got {text[:120]!r}")
    assert not wrong, "\n".join(wrong)
    assert _outside_snapshot(ws) == before
    assert outside(str(log), str(ws.root)) == []


@pytest.mark.fuzz
def test_long_run_through_the_mcp_worker_pool(ws, monkeypatch):
    """The same invocations as MCP calls, confined to the workspace as the server's root: each ends
    in a document or a one-line error within 30 s, and no file outside the root is read or written."""
    from cli.inprocess import CommandError
    from tests.fuzz.audited_worker import outside
    from tests.fuzz.harness import PROFILE

    before = _outside_snapshot(ws)
    pool, log = _audited_pool(ws, monkeypatch, time_s=30)
    counts = {"calls": 0, "documents": 0, "one_line_errors": 0, "tracebacks": 0, "hangs_over_30_s": 0,
              "internal_errors": 0}
    bad = []
    try:
        for argv, _ in corpus_runs(ws, every_reader=True) + edge_runs(ws):
            counts["calls"] += 1
            args = ["profile.jsonl" if a == str(PROFILE) else a for a in argv[1:] if a != "--json"]
            try:
                pool.run(argv[0], args)
                counts["documents"] += 1
            except CommandError as exc:
                msg = str(exc)
                kind = ("hangs_over_30_s" if "ran past" in msg else "internal_errors" if "internal error" in msg
                        else "tracebacks" if "\n" in msg or "Traceback" in msg else "one_line_errors")
                counts[kind] += 1
                if kind != "one_line_errors":
                    bad.append(f"{argv}: {msg}")
    finally:
        pool.close()
    counts["reads_or_writes_outside_the_root"] = len(outside(str(log), str(ws.root)))
    counts["outside_folder_changed"] = int(_outside_snapshot(ws) != before)
    print("\nMCP long run:", counts)
    assert not bad, "\n".join(bad)
    assert counts["reads_or_writes_outside_the_root"] == 0 and not counts["outside_folder_changed"]
