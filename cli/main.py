"""Entry point. Every module in `cli.commands` that defines `register(app)` adds its commands;
a new command group is one new module there, no edit here."""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from planner.errors import SpecError

app = typer.Typer(
    name="floorfirst",
    help="Five-resource floors, walls and layout choice for serving large MoE/MLA models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_all() -> None:
    import cli.commands as pkg

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        mod = importlib.import_module(f"cli.commands.{info.name}")
        reg = getattr(mod, "register", None)
        if reg is not None:
            reg(app)


def fail(message: str) -> "typer.Exit":
    """One line on stderr and exit code 2 (bad input a user can cause)."""
    sys.stderr.write(f"floorfirst: error: {message}\n")
    return typer.Exit(code=2)


def main() -> None:
    _register_all()
    try:
        app(standalone_mode=True)
    except SpecError as exc:
        sys.stderr.write(f"floorfirst: error: {exc}\n")
        sys.exit(2)


if __name__ == "__main__":
    main()
