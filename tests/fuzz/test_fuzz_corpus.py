"""The fuzz suite over the adversarial corpus (tests/fuzz/corpus, made by make_corpus.py).

Default run (well under a minute): every corpus file once, with the command that reads it, plus
issue 19's named cases (output paths checked before work, FIFOs, links to /dev/zero, a model
nothing can serve), and two real subprocesses for the blocking files. Every run must end in a
clean document (exit 0) or one line (exit 2): no traceback, no hang, no NaN, infinity, null
outside the contract or negative time/size/capacity.

`-m fuzz` (the long run): every file with every command that reads its kind, and the same plan
through the MCP server's worker pool; it prints its counts.
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


@pytest.mark.fuzz
def test_long_run_through_the_mcp_worker_pool(ws):
    """The same invocations as MCP calls: each ends in a document or a one-line error."""
    from cli.inprocess import CommandError, Limits, WorkerPool
    from cli.mcp_server import COMMAND_MODULES

    pool = WorkerPool(COMMAND_MODULES, workers=2, limits=Limits(time_s=60))
    counts = {"calls": 0, "documents": 0, "one_line_errors": 0, "bad": 0}
    bad = []
    try:
        for argv, _ in corpus_runs(ws, every_reader=True) + edge_runs(ws):
            counts["calls"] += 1
            try:
                pool.run(argv[0], [a for a in argv[1:] if a != "--json"])
                counts["documents"] += 1
            except CommandError as exc:
                msg = str(exc)
                if "\n" in msg or msg.startswith("internal error") or "ran past" in msg:
                    counts["bad"] += 1
                    bad.append(f"{argv}: {msg}")
                else:
                    counts["one_line_errors"] += 1
    finally:
        pool.close()
    print("\nMCP long run:", counts)
    assert not bad, "\n".join(bad)
