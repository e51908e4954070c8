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


def test_command_index_names_what_each_module_registers():
    """cli.main reads which module registers a command from the modules' sources, so that a call imports
    only its own module: that reading must name exactly what each module's register() adds (a module
    spelled otherwise would send its command to the wrong module or to the slow path of all)."""
    import importlib
    import pkgutil

    import typer

    import cli.commands as pkg
    from cli.main import command_modules

    registered = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        probe = typer.Typer()
        reg = getattr(importlib.import_module(f"cli.commands.{info.name}"), "register", None)
        if reg is not None:
            reg(probe)
        for c in probe.registered_commands:
            registered[c.name] = info.name
        assert not probe.registered_groups, f"cli.commands.{info.name} adds a group: cli.main's index reads commands only"
    assert command_modules() == registered


def test_a_call_registers_only_its_command_module():
    code = ("import sys; import cli.main as m\n"
            "try:\n    m.main(['models', '--json'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m._REGISTERED), [c.name for c in m.app.registered_commands], file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.stderr.strip().splitlines()[-1] == "['specs'] ['models', 'hardware']", run.stderr[-2000:]


def test_commands_called_one_after_another_in_one_process_all_run():
    """In one process (the tests, the MCP server's worker) a second command's module is added to the
    first's, and help then lists every command in the modules' order."""
    import cli.main as m

    for argv in (["models", "--json"], ["hardware", "--json"], ["capacity", "--json"]):
        try:
            m.main(argv)
        except SystemExit as exc:
            assert exc.code == 0, argv
    m._register_all()
    names = [c.name for c in m.app.registered_commands]
    assert names.index("calibrate") < names.index("floor") < names.index("models"), names
    assert len(names) == len(set(names))
