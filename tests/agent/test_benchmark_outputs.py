"""Benchmarks write under benchmarks/results/ only, and a re-run on an unchanged checkout leaves
it clean: calibration_report.py, run as the README says in a copy of the tracked files, changes
nothing `git status` sees (its artifacts name their sources relative to the checkout and are
rewritten only when the fit changed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.agent.contracts import ROOT


def _git(cwd, *args) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def test_calibration_report_leaves_a_copy_clean(tmp_path):
    files = _git(ROOT, "ls-files", "-z").split("\0")
    for f in filter(None, files):
        if f.startswith("tests/fuzz/corpus") or not (ROOT / f).is_file():
            continue
        dst = tmp_path / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / f, dst)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "copy")
    r = subprocess.run([sys.executable, "benchmarks/calibration_report.py"], cwd=tmp_path, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _git(tmp_path, "status", "--porcelain") == ""
