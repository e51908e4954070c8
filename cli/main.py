"""Entry point. Every module in `cli.commands` that defines `register(app)` adds its commands;
a new command group is one new module there, no edit here."""

from __future__ import annotations

import gc

_GC_ON = gc.isenabled()
gc.disable()  # while typer imports; on again at the end of this module (see _imports_frozen)

import contextlib
import functools
import importlib
import json
import os
import pkgutil
import re
import sys
import time
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

import typer

from cli.fast_coercion import install as _install_fast_coercion

_install_fast_coercion()  # plain option values without a pydantic validator each (cli/fast_coercion.py)

app = typer.Typer(
    name="floorfirst",
    help="Five-resource floors, walls and layout choice for serving large MoE/MLA models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version() -> None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        v = version("floorfirst")
    except PackageNotFoundError:  # run from a checkout (python -m cli.main) without installing
        import tomllib
        from pathlib import Path

        v = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["version"]
    sys.stdout.write(f"floorfirst {v}\n")


def _version(value: bool) -> None:
    if value:
        _print_version()
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                       callback=_version),
          quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the answer and errors (no notes or warnings on stderr)."),
          verbose: bool = typer.Option(False, "--verbose", "-v", help="Also log which files were read and how long the command took.")) -> None:
    """Five-resource floors, walls and layout choice for serving large MoE/MLA models."""
    from cli.logs import configure

    configure(quiet=quiet, verbose=verbose)


def _register_all() -> None:
    """Add every command module's commands to `app`, in the modules' order (help lists them so),
    once per process. NOTE: typer keeps every registration, and each `main()` call used to register
    them all again (the 200th call in one process took 3 s: the MCP server and the tests call
    `main()` many times)."""
    import cli.commands as pkg

    names = sorted(info.name for info in pkgutil.iter_modules(pkg.__path__))
    if _REGISTERED.issuperset(names):
        return
    app.registered_commands.clear()  # one command's module registered alone comes back in its place
    app.registered_groups.clear()
    _REGISTERED.clear()
    for name in names:
        _register_module(name)


# the cli.commands modules whose register() has run on `app` (this process)
_REGISTERED: set[str] = set()


def _register_module(name: str) -> None:
    if name in _REGISTERED:
        return
    reg = getattr(importlib.import_module(f"cli.commands.{name}"), "register", None)
    if reg is not None:
        reg(app)
    _REGISTERED.add(name)


# NOTE: a command module registers its commands as `app.command("name")(...)` (cli/commands/*.py);
# tests/cli/test_startup.py checks that this reading of their sources names what register() adds.
_COMMAND_CALL = re.compile(r"""\bapp\.command\(\s*["']([\w-]+)["']""")
_ROOT_FLAGS = frozenset({"--quiet", "-q", "--verbose", "-v"})


@functools.lru_cache(maxsize=1)
def command_modules() -> Mapping[str, str]:
    """Command name -> the module of cli.commands that registers it, read from the modules' sources
    (~110 KB of text, ~1 ms) so that a call imports only its own command's module; read once per
    process (the MCP server and the tests call `main()` many times)."""
    out: dict[str, str] = {}
    for path in sorted((Path(__file__).parent / "commands").glob("*.py")):
        for name in _COMMAND_CALL.findall(path.read_text(encoding="utf-8")):
            out.setdefault(name, path.stem)
    return MappingProxyType(out)


def _register_for(args: list[str]) -> None:
    """Register only the module of the command `args` names, when it names one (root flags first);
    everything else (no command, --help, an unknown name) registers every module, as help lists them.
    NOTE: typer builds a click command for each registered command on every call, and each command
    module imports what its commands need: one module instead of all took ~60 ms off a call."""
    i = 0
    while i < len(args) and args[i] in _ROOT_FLAGS:
        i += 1
    module = command_modules().get(args[i]) if i < len(args) else None
    if module is None:
        _register_all()
    else:
        _register_module(module)


def click_exceptions() -> tuple[type, type, type]:
    """Usage-error classes of whichever click typer runs on (typer ≥ 0.2x vendors its own)."""
    try:
        from typer._click import exceptions as ce  # type: ignore[attr-defined]
    except ImportError:
        import click.exceptions as ce  # type: ignore[no-redef]
    no_args = getattr(ce, "NoArgsIsHelpError", ce.UsageError)
    return ce.UsageError, no_args, getattr(ce, "Abort", typer.Abort)


# any of these set by the user: numpy's BLAS starts as they say
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


@contextlib.contextmanager
def _one_blas_thread():
    """numpy's OpenBLAS loads with one thread when numpy is first imported inside this block, unless
    the user set its thread count; the environment is as it was afterwards (child processes and
    libraries loaded later, torch's and scipy's BLAS, see the user's settings).
    NOTE: OpenBLAS reads OPENBLAS_NUM_THREADS (else GOTO_NUM_THREADS, else OMP_NUM_THREADS) once,
    when the library loads (OpenMathLib/OpenBLAS driver/others/openblas_env.c `openblas_read_env`,
    memory.c `blas_get_cpu_number`), and with more than one it starts its thread server then
    (blas_server.c `blas_thread_init`). On this project's 2-core VM that start made `import numpy`
    ~55 ms slower (81 vs 136 ms at load 2.6) and `floor --json` ~90 ms more CPU, ~35 ms more wall time
    (benchmarks/results/cli_startup/cli_startup_2026-12-08_cli5.md), and a CLI call prices a few hundred small arrays, where OpenBLAS runs one thread anyway (its
    gemm/gemv go multi-threaded only above a size threshold: interface/gemm.c `GEMM_MULTITHREAD_THRESHOLD`)."""
    if "numpy" in sys.modules or any(v in os.environ for v in _BLAS_THREAD_VARS):
        yield
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OPENBLAS_NUM_THREADS", None)


@contextlib.contextmanager
def _imports_frozen():
    """Python's cyclic garbage collector paused while the command's modules import (and while this
    module imports typer), and what they made moved to the collector's permanent generation
    (`gc.freeze`) before the command runs with the collector on. For the process's own call only
    (`main()` without argv: one command, then the process ends); a process calling main(argv) many
    times keeps its collector as it is.
    NOTE: importing numpy, pydantic, typer and the planner makes ~300k objects, nearly none of them
    garbage; the collector ran its young generation every 700 allocations and the whole heap several
    times over them, and a collector paused but not frozen only defers that scan to the command's
    first collection. Python's docs give the same pattern for a process about to fork (gc module,
    `gc.freeze`: "disable gc early in the parent process and freeze() right before fork()")."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def main(argv: list[str] | None = None) -> None:
    """The `floorfirst` command. Called as the process's entry (no `argv`: the console script,
    `python -m cli.main`), it ends the process itself once the command has exited (`_exit_now`);
    called with `argv` (the tests, one process calling it many times) it raises SystemExit as typer
    does."""
    if argv is not None:
        return _main(argv)
    try:
        _main(None)
    except SystemExit as exc:
        _exit_now(exc.code)
        raise


def _exit_now(code: object) -> None:
    """End the process with `code` without freeing its objects, after what a normal exit would do
    that anyone can see: the atexit handlers (logging's flush, weakref finalizers, multiprocessing's
    clean-up) and the flush of stdout and stderr. Returns (the caller exits normally) when another
    thread runs, `code` isn't an int or None, or a flush fails (a closed pipe: Python's own exit
    reports it).
    NOTE: why. Freeing numpy's, pydantic's and the planner's objects at exit comes after the answer
    is printed; skipping it saved ~6 ms of a ~260 ms `floor --json` on this project's 2-core VM at
    load 2.1 (0.97, farm-bench pairwise: benchmarks/results/cli_startup/cli_startup_2026-12-08_cli5.md).
    mypy does the same at the end of a run
    (python/mypy mypy/util.py `hard_exit`: "quite a bit faster than a normal exit() since objects
    are not freed"; mypy/main.py calls it unless --no-fast-exit)."""
    import atexit
    import threading

    run_exitfuncs = getattr(atexit, "_run_exitfuncs", None)
    if run_exitfuncs is None or threading.active_count() != 1:
        return
    if code is None:
        status = 0
    elif isinstance(code, int) and not isinstance(code, bool) and 0 <= code <= 255:
        status = code
    else:
        return
    run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - e.g. BrokenPipeError: the interpreter's exit handles it as before
        return
    os._exit(status)


def _main(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if list(args) == ["--version"]:
        # NOTE: answered before the commands load: they import planner, and with it numpy and pydantic,
        # most of a planning call's start-up (python -X importtime -m cli.main floor)
        _print_version()
        sys.exit(0)
    from cli.documents import DocumentError
    from cli.errors import EXIT_USER, check_arguments, wants_json, write_error
    from planner.errors import SpecError

    usage_error, no_args, abort = click_exceptions()
    with _one_blas_thread(), (_imports_frozen() if argv is None else contextlib.nullcontext()):
        _register_for(list(args))  # the command's module imports numpy (and its BLAS) here
    as_json = wants_json(args)
    t0 = time.monotonic()
    try:
        check_arguments(args)
        rc = app(args=args, prog_name="floorfirst", standalone_mode=False)
    except SpecError as exc:
        write_error(str(exc), EXIT_USER, as_json)
        sys.exit(EXIT_USER)
    except no_args:
        # NOTE: click has printed the help already (no_args_is_help); printing it again showed it twice
        sys.exit(0)
    except usage_error as exc:
        # NOTE: click prints a multi-line usage box; a user error here is one line and exit 2.
        write_error(exc.format_message().splitlines()[0], EXIT_USER, as_json)
        sys.exit(EXIT_USER)
    except DocumentError as exc:  # the guard has printed its line (cli.documents.report)
        if as_json:
            from cli.errors import error_document

            sys.stdout.write(json.dumps(error_document(exc.message, exc.code)) + "\n")
        raise
    except abort:
        sys.stderr.write("floorfirst: aborted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    from cli.logs import logger

    command = next((a for a in args if not a.startswith("-")), "")
    logger().debug(f"floorfirst {command}: {time.monotonic() - t0:.3f} s")
    sys.exit(rc if isinstance(rc, int) else 0)


if _GC_ON:
    gc.enable()

if __name__ == "__main__":
    main()
