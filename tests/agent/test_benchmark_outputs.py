"""Benchmarks write to the folder they are given (a temporary one by default), never over committed
results unless asked: calibration_report.py, run as the README says in a copy of the tracked files,
changes nothing `git status` sees; and what it writes to `--out` agrees with the committed report
to a relative 1e-5 (a different machine's BLAS moves the fit in the 8th digit, not the 5th)."""

from __future__ import annotations

import json
import math
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
    out = tmp_path.parent / f"{tmp_path.name}-out"
    r = subprocess.run([sys.executable, "benchmarks/calibration_report.py", "--out", str(out)], cwd=tmp_path,
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _git(tmp_path, "status", "--porcelain") == ""
    new = json.loads((out / "calibration_report.json").read_text())
    old = json.loads((ROOT / "benchmarks/results/calibration_report.json").read_text())
    assert new["profiles"].keys() == old["profiles"].keys()
    for name, doc in old["profiles"].items():
        for k, v in doc["params"].items():
            assert math.isclose(new["profiles"][name]["params"][k], v, rel_tol=1e-5), (name, k)
        for k in ("median_abs_pct_error", "p90_abs_pct_error", "rows", "rows_below_floor"):
            assert math.isclose(new["profiles"][name][k], doc[k], rel_tol=1e-3), (name, k)


def test_calibration_report_writes_to_a_temporary_folder_by_default(tmp_path):
    """Without --out nothing lands in the checkout (the folder it wrote is named on stderr)."""
    before = _git(ROOT, "status", "--porcelain")
    r = subprocess.run([sys.executable, "benchmarks/calibration_report.py", "--only", "h200_probe", "--folds", "2"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "writing under" in r.stderr and str(ROOT / "benchmarks") not in r.stderr
    assert _git(ROOT, "status", "--porcelain") == before
