"""The README is a first page that stays true: at most 15 KB, its test command is the one .ci/run
runs, and its worked example prints what the README shows (issue 32 item 5)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

from tests.agent.contracts import ROOT

README = ROOT / "README.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"^```{kind}\n(.*?)^```", README.read_text(), re.S | re.M)


def test_readme_is_a_first_page():
    assert README.stat().st_size <= 15_000, f"README.md is {README.stat().st_size} bytes: move detail to docs/"


def test_ci_runs_the_readme_test_command():
    """.ci/run's command is the README's, up to pip's -q."""
    readme = [b.strip() for b in _blocks("bash") if "pytest" in b]
    assert len(readme) == 1, readme
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if "pytest" in line and not line.startswith("#")]
    assert len(ci) == 1, ci
    # the README's line creates and activates the venv; .ci/run does that on lines of its own
    readme_tail = readme[0].split("&& ", 2)[2]
    assert ci[0].replace("pip install -q ", "pip install ") == readme_tail


def test_worked_example_prints_what_the_readme_shows():
    text = README.read_text()
    section = text.split("## Worked example", 1)[1].split("\n## ", 1)[0]
    bash = re.search(r"```bash\n(.*?)```\n", section, re.S)
    words = shlex.split(bash.group(1).replace("\\\n", " "))
    assert words[0] == "floorfirst"
    shown = re.findall(r"^```\n(.*?)^```", section[bash.end():], re.S | re.M)
    assert len(shown) == 2, "the example shows how the flags were read, then the answer"
    env = {**os.environ, "COLUMNS": "100"}
    run = subprocess.run([sys.executable, "-m", "cli.main", *words[1:]], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr

    def lines(s: str) -> list[str]:
        return [line.rstrip() for line in s.strip("\n").splitlines()]

    assert lines(run.stderr) == lines(shown[0])
    assert lines(run.stdout) == lines(shown[1])
