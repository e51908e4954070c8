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
    """Add every command module's commands to `app`, once per process. NOTE: typer keeps every
    registration, and each `main()` call used to register them all again (the 200th call in one
    process took 3 s: the MCP server and the tests call `main()` many times)."""
    if app.registered_commands or app.registered_groups:
        return
    import cli.commands as pkg

    if app.registered_commands:  # NOTE: once per process: main() run in-process (tests, fuzz) must not re-add them
        return

    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        mod = importlib.import_module(f"cli.commands.{info.name}")
        reg = getattr(mod, "register", None)
        if reg is not None:
            reg(app)


def click_exceptions() -> tuple[type, type, type]:
    """Usage-error classes of whichever click typer runs on (typer ≥ 0.2x vendors its own)."""
    try:
        from typer._click import exceptions as ce  # type: ignore[attr-defined]
    except ImportError:
        import click.exceptions as ce  # type: ignore[no-redef]
    no_args = getattr(ce, "NoArgsIsHelpError", ce.UsageError)
    return ce.UsageError, no_args, getattr(ce, "Abort", typer.Abort)


def main(argv: list[str] | None = None) -> None:
    usage_error, no_args, abort = click_exceptions()
    _register_all()
    args = sys.argv[1:] if argv is None else argv
    try:
        rc = app(args=args, prog_name="floorfirst", standalone_mode=False)
    except SpecError as exc:
        sys.stderr.write(f"floorfirst: error: {exc}\n")
        sys.exit(2)
    except no_args:
        app(args=["--help"], prog_name="floorfirst", standalone_mode=False)
        sys.exit(0)
    except usage_error as exc:
        # NOTE: click prints a multi-line usage box; a user error here is one line and exit 2.
        sys.stderr.write(f"floorfirst: error: {exc.format_message().splitlines()[0]}\n")
        sys.exit(2)
    except abort:
        sys.stderr.write("floorfirst: aborted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
