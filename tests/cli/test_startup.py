"""The CLI's cheapest call stays cheap (issue 32): `floorfirst --version` answers before the commands
load, so it imports neither planner nor numpy nor pydantic (what most of a planning call's start-up
is: python -X importtime -m cli.main floor)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _imported(argv: list[str]) -> tuple[str, set[str]]:
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "cli.main", *argv], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    return run.stdout, names


def test_version_imports_no_planner_numpy_or_pydantic():
    out, names = _imported(["--version"])
    assert out.startswith("floorfirst ")
    assert not {"planner", "numpy", "pydantic", "cli.commands"} & names, sorted(names & {"planner", "numpy", "pydantic"})


def test_a_planning_call_does_import_them():
    """The check above can fail: a call that loads the commands shows them."""
    _, names = _imported(["models", "--json"])
    assert {"planner", "numpy", "pydantic"} <= names
