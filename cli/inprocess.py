"""Run floorfirst commands in-process and hand back the JSON document `--json` prints.

The MCP server (cli/mcp_server.py) answers every tool through this, so a tool's answer is the
document `floorfirst <command> … --json` prints: same option parsing, defaults, spec validation
and code path, and no subprocess. A user error is a `CommandError` carrying the one line the
CLI would print.

Does not: know any command's options (callers pass argv), compute anything, or print.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import threading
from typing import Any, Iterable

import typer

from planner.errors import SpecError


class CommandError(Exception):
    """A user error in a command's input: one line, as the CLI would print it (exit code 2)."""


class CommandRunner:
    """The given `cli.commands` modules registered on a private app; `run(command, args)` → doc.

    A module that is not there (a command group not yet written) is left out; `commands` says
    which commands exist.
    """

    def __init__(self, modules: Iterable[str]):
        from cli.main import click_exceptions

        app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        for name in modules:
            if importlib.util.find_spec(f"cli.commands.{name}") is None:
                continue
            importlib.import_module(f"cli.commands.{name}").register(app)
        self._group = typer.main.get_command(app)
        self._usage_error = click_exceptions()[0]
        # NOTE: commands print their document on sys.stdout; capturing it means redirecting a
        # process-wide stream, so one command runs at a time.
        self._lock = threading.Lock()

    @property
    def commands(self) -> set[str]:
        return set(getattr(self._group, "commands", {}))

    def run(self, command: str, args: list[str]) -> dict[str, Any]:
        """`floorfirst <command> <args> --json`, in-process: the parsed document."""
        if command not in self.commands:
            raise CommandError(f"no command {command!r} here")
        out = io.StringIO()
        with self._lock, contextlib.redirect_stdout(out):
            try:
                self._group.main(args=[command, *args, "--json"], prog_name="floorfirst", standalone_mode=False)
            except SpecError as exc:
                raise CommandError(str(exc)) from None
            except self._usage_error as exc:
                raise CommandError(exc.format_message().splitlines()[0]) from None
        return json.loads(out.getvalue())


def option_args(options: dict[str, Any], rename: dict[str, str] | None = None) -> list[str]:
    """{'measured_ms': 30, 'layouts': None, 'profile': ['a', 'b']} → ['--measured-ms', '30', '--profile', 'a', '--profile', 'b'].

    None leaves the option out (the CLI default applies); a list repeats it; True is a bare flag.
    """
    argv: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = (rename or {}).get(key, "--" + key.replace("_", "-"))
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for v in value:
                argv += [flag, str(v)]
        else:
            argv += [flag, str(value)]
    return argv
