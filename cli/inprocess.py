"""Run floorfirst commands without a subprocess per call and hand back the JSON document `--json`
prints: `CommandRunner` in this process, `WorkerPool` in worker processes with limits.

The MCP server (cli/mcp_server.py) answers every tool through a `WorkerPool`, so a tool's answer
is the document `floorfirst <command> … --json` prints: same option parsing, defaults, spec
validation and code path. A user error is a `CommandError` carrying the one line the CLI would
print; so is a call stopped at its limit, and an internal error.

NOTE: why worker processes. A command prints its document on sys.stdout, a process-wide stream,
so one process runs one command at a time; and a thread can't be stopped when its call runs past
its deadline. A pool of processes runs calls side by side, a deadline kills the one worker that
ran past it (the next call starts a fresh one), a memory limit per worker bounds what one call
may take, and no lock is held while a call runs: the pool's lock only guards its list of idle
workers. A worker is a fresh interpreter (`python -m cli.inprocess`) speaking one JSON line per
request and reply; idle ones are reused, and a spare is kept started so no call waits for one.

Does not: know any command's options (callers pass argv), compute anything, or print.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import json
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import typer

from planner.errors import SpecError
from planner.path_policy import Root, confined

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MCP_COMMAND_MODULES = ("specs", "floor", "walls", "triage", "calibration", "simulate", "launch")  # cli.mcp_server's tools
WARM_COMMANDS = ("compare",)  # a worker registers these commands' module before it says it is ready


class CommandError(Exception):
    """A call that produced no document: one line, as the CLI would print it."""


class Cancelled(Exception):
    """The caller gave up on a call (an MCP client's cancellation, or its going away)."""


CANCEL_POLL_S = 0.05  # how often a waiting call looks at its cancel flag


def _module(name: str) -> str:
    return name if "." in name else f"cli.commands.{name}"


class CommandRunner:
    """The given command modules (`cli.commands.<name>`, or a dotted path) registered on a private
    app; `run(command, args)` → doc. A module that is not there (a command group not yet written)
    is left out; `commands` says which commands exist.

    `lazy`: a module of cli.commands is imported and registered when one of its commands is first
    run (which module registers which command is read from their sources, cli.main.command_modules),
    so a worker is ready before it has imported what only other commands need."""

    def __init__(self, modules: Iterable[str], lazy: bool = False):
        from cli.main import click_exceptions

        self._app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
        self._pending: dict[str, str] = {}  # command -> module not registered yet (lazy)
        if lazy:
            from cli.main import command_modules

            wanted = set(modules)
            self._pending = {c: m for c, m in command_modules().items() if m in wanted}
            modules = [m for m in modules if "." in m]  # a dotted module (a test's stub) is registered now
        for name in modules:
            self._register(name)
        self._lazy = lazy
        self._group = self._build() if not lazy or self._app.registered_commands else None
        self._usage_error = click_exceptions()[0]
        # NOTE: commands print their document on sys.stdout; capturing it means redirecting a
        # process-wide stream, so one command runs at a time in one process (WorkerPool runs more).
        self._lock = threading.Lock()

    def _register(self, name: str) -> None:
        try:
            if importlib.util.find_spec(_module(name)) is None:
                return
        except ModuleNotFoundError:
            return
        importlib.import_module(_module(name)).register(self._app)

    def prepare(self, command: str) -> None:
        """Register `command`'s module now, if it is still pending (imports what its commands need)."""
        module = self._pending.get(command)
        if module is None:
            return
        self._register(module)
        self._pending = {c: m for c, m in self._pending.items() if m != module}
        self._group = self._build()

    def _build(self):
        # NOTE: lazily, the app may hold one command so far: a group all the same (typer makes a
        # one-command app that command alone, which would read the command's name as an argument)
        return typer.main.get_group(self._app) if self._lazy else typer.main.get_command(self._app)

    @property
    def commands(self) -> set[str]:
        return set(getattr(self._group, "commands", {})) | set(self._pending)

    @property
    def group(self):
        """The registered click group (its commands' options are the MCP tools' inputs)."""
        return self._group

    def run_text(self, command: str, args: list[str]) -> str:
        """`floorfirst <command> <args> --json`, in-process: the document's text."""
        if command not in self.commands:
            raise CommandError(f"no command {command!r} here")
        self.prepare(command)
        from cli.errors import check_arguments

        out = io.StringIO()
        with self._lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
                self._as_command_errors():
            check_arguments(args)
            self._group.main(args=[command, "--json", *args], prog_name="floorfirst", standalone_mode=False)
        return out.getvalue()

    @contextlib.contextmanager
    def _as_command_errors(self):
        """A command's refusal (a spec error, a usage error, a document error) as one CommandError line."""
        from cli.documents import DocumentError

        try:
            yield
        except SpecError as exc:
            raise CommandError(str(exc)) from None
        except self._usage_error as exc:
            raise CommandError(exc.format_message().splitlines()[0]) from None
        except DocumentError as exc:
            raise CommandError(exc.message) from None

    def run(self, command: str, args: list[str]) -> dict[str, Any]:
        return json.loads(self.run_text(command, args))

    def call_text(self, command: str, values: dict[str, Any]) -> str:
        """`floorfirst <command> … --json` with its options given as values by parameter name (what a
        command line's parser hands over: a string, a list of them for a repeated option, True for a
        flag; cli.tool_options.parameter_values), in this process: no command line is built or
        parsed. Each of the command's parameters takes its value (or its default) and converts and
        checks it as it does on the command line, then the command function runs; the answer, and
        every error line, is the one the same options on the command line give."""
        from cli.errors import check_arguments

        if command not in self.commands:
            raise CommandError(f"no command {command!r} here")
        self.prepare(command)
        cmd = self._group.commands[command]
        params = cmd.params
        unknown = sorted(set(values) - {p.name for p in params})
        if unknown:
            raise CommandError(f"{command}: no option {unknown[0]!r}")
        json_param = next(p.name for p in params if "--json" in getattr(p, "opts", ()))
        texts = [v for x in values.values() for v in (x if isinstance(x, list) else [x]) if isinstance(v, str)]
        out = io.StringIO()
        with self._lock, contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()), \
                self._as_command_errors():
            check_arguments(texts)
            ctx = cmd.context_class(cmd, info_name=command,
                                    parent=self._group.context_class(self._group, info_name="floorfirst"))
            with ctx.scope(cleanup=False):
                # NOTE: what a command's parse_args does once the parser has split a command line
                opts = {**values, json_param: True}
                for param in _iter_params_for_processing([], cmd.get_params(ctx)):
                    param.handle_parse_result(ctx, opts, [])
            with ctx:
                cmd.invoke(ctx)
        return out.getvalue()

    def call(self, command: str, values: dict[str, Any]) -> dict[str, Any]:
        return json.loads(self.call_text(command, values))


def _iter_params_for_processing(order, params):
    try:
        from typer._click.core import iter_params_for_processing  # type: ignore[attr-defined]
    except ImportError:  # a typer on the stand-alone click
        from click.core import iter_params_for_processing  # type: ignore[no-redef]
    return iter_params_for_processing(order, params)


@dataclass(frozen=True)
class Limits:
    """What one call may use. NOTE: defaults far above any real call (a 10,000-request simulate
    takes seconds and tens of MiB) and far below what would stall or starve the server."""

    time_s: float = 300.0  # wall clock, from the call's start to its answer
    args_bytes: int = 64 * KiB  # the command line the arguments become
    output_bytes: int = 32 * MiB  # the JSON document
    memory_bytes: int | None = 8 * GiB  # address space of the worker (RLIMIT_AS); None: no limit


def _worker_main(modules: tuple[str, ...], memory_bytes: int | None) -> None:
    """A worker process (`python -m cli.inprocess`): answer one JSON request line at a time —
    {command, args, cwd, output_bytes} → {status, payload, fatal} — until its stdin closes."""
    # NOTE: the replies travel on a private copy of fd 1; fd 1 and 2 then point at /dev/null, so
    # nothing a command (or a C library) prints can corrupt a reply.
    channel = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    if memory_bytes:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    runner = CommandRunner(modules, lazy=True)
    # NOTE: warm-up before the worker says it is ready: the planning commands' module (numpy, the
    # planner, typer's parameters) — what most first calls need; a spare worker starts while the
    # server is still importing the MCP SDK. Other command modules load on their first call. (It
    # used to import every module and run `models`: the first call of a new server waited ~1 s for it.)
    for command in WARM_COMMANDS:
        runner.prepare(command)
    channel.write(json.dumps({"status": "ready", "payload": "", "fatal": False}) + "\n")
    channel.flush()
    for line in sys.stdin:
        req = json.loads(line)
        command, fatal = req["command"], False
        try:
            os.chdir(req["cwd"])
            root = req.get("root")
            with confined(Root(root, overwrite=bool(req.get("overwrite")))) if root else contextlib.nullcontext():
                text = (runner.call_text(command, req["values"]) if "values" in req
                        else runner.run_text(command, req["args"]))
            if len(text) > req["output_bytes"]:
                reply = ("error", f"{command}: the answer is {len(text) / MiB:.1f} MiB, over the "
                                  f"{req['output_bytes'] / MiB:.0f} MiB limit per call; ask for less "
                                  "(fewer requests, a smaller grid)")
            else:
                reply = ("ok", text)
        except CommandError as exc:
            reply = ("error", str(exc))
        except MemoryError:
            limit = f"the {memory_bytes / GiB:.0f} GiB limit per call" if memory_bytes else "this machine has"
            reply, fatal = ("error", f"{command}: needed more memory than {limit}"), True
        except BaseException as exc:  # a bug: one line for the caller, and a fresh worker next time
            first = (str(exc).splitlines() or [""])[0][:200]
            reply, fatal = ("error", f"internal error in {command}: {type(exc).__name__}: {first}"), True
        channel.write(json.dumps({"status": reply[0], "payload": reply[1], "fatal": fatal}) + "\n")
        channel.flush()
        if fatal:
            return


class _Worker:
    """One worker process and the read side of its reply channel."""

    def __init__(self, modules: tuple[str, ...], memory_bytes: int | None, module: str = "cli.inprocess"):
        root = str(Path(__file__).resolve().parent.parent)  # where the cli package lives
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
        # NOTE: a fresh interpreter, not a fork: the server process runs threads (the MCP event
        # loop, its tool threads), and a fork of a threaded process can inherit a held lock.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, json.dumps({"modules": modules, "memory_bytes": memory_bytes})],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        self._buf = b""
        self.ready = False

    def wait_ready(self, deadline: float, cancel: threading.Event | None = None) -> bool:
        """Until the worker has started and said so (False at the deadline). EOFError if it ended."""
        if not self.ready:
            self.ready = self.receive(deadline, MiB, cancel) is not None
        return self.ready

    def send(self, request: dict) -> None:
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()

    def receive(self, deadline: float, limit_bytes: int, cancel: threading.Event | None = None) -> dict | None:
        """The next reply, or None at the deadline. EOFError if the worker ended; Cancelled once
        `cancel` is set (looked at every CANCEL_POLL_S while waiting)."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if cancel is not None and cancel.is_set():
                raise Cancelled
            if left <= 0:
                return None
            if not select.select([fd], [], [], min(left, CANCEL_POLL_S))[0]:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise EOFError
            self._buf += chunk
            if len(self._buf) > limit_bytes:
                raise EOFError
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        return self.proc.returncode


class WorkerPool:
    """`run(command, args)` → doc, each call in a worker process under `Limits`; at most `workers`
    calls run at once (a call that finds every worker busy waits, within its own time limit), and
    `spare` idle workers are kept started so a call does not wait for an interpreter to start."""

    def __init__(self, modules: Iterable[str], workers: int = 4, limits: Limits = Limits(), spare: int = 1,
                 root: str | None = None, worker_module: str = "cli.inprocess"):
        self.modules = tuple(modules)
        self.worker_module = worker_module  # NOTE: what a worker runs (`python -m`); tests/fuzz audits its file access
        # NOTE: every call runs confined to `root` (planner.path_policy), with it as working directory
        self.root = None if root is None else os.path.realpath(root)
        self.limits = limits
        self.workers = max(1, int(workers))
        self.spare = max(0, min(int(spare), self.workers))
        self._local_runner: CommandRunner | None = None  # the commands' options (MCP tool schemas), read on first use
        self._names: set[str] | None = None  # the commands, read from the modules' sources
        self._idle: list[_Worker] = []
        self._live = 0  # started and not stopped: idle, busy or starting
        self._closed = False
        self._cond = threading.Condition(threading.Lock())

    @property
    def _local(self) -> CommandRunner:
        """Every command registered here, built on first use: a pool can start its workers (warm)
        before the server has read a single option."""
        if self._local_runner is None:
            self._local_runner = CommandRunner(self.modules)
        return self._local_runner

    @property
    def commands(self) -> set[str]:
        """The commands the pool answers. NOTE: read from the modules' sources (a lazy runner) until
        the options are needed: a call checks its command without importing every command module here."""
        if self._local_runner is not None:
            return self._local_runner.commands
        if self._names is None:
            self._names = CommandRunner(self.modules, lazy=True).commands
        return self._names

    @property
    def group(self):
        return self._local.group

    @property
    def idle(self) -> int:
        with self._cond:
            return len(self._idle)

    def warm(self) -> None:
        """Start the spare workers now, in the background."""
        threading.Thread(target=self._refill, daemon=True, name="floorfirst-pool-refill").start()

    def run(self, command: str, args: list[str], overwrite: bool = False,
            cancel: threading.Event | None = None) -> dict[str, Any]:
        """`floorfirst <command> <args> --json` in a worker → its document. `overwrite`: a write may
        replace an existing file inside the root. `cancel`: once set, the call's worker is stopped
        within CANCEL_POLL_S and CommandError says the call was cancelled."""
        return self._request(command, {"args": list(args)}, list(args), overwrite, cancel)

    def call(self, command: str, values: dict[str, Any], overwrite: bool = False,
             cancel: threading.Event | None = None) -> dict[str, Any]:
        """The command function run in a worker with these parameter values (CommandRunner.call_text;
        what the MCP tools send) → its document; limits, `overwrite` and `cancel` as `run`'s."""
        texts = [v for x in values.values() for v in (x if isinstance(x, list) else [x]) if isinstance(v, str)]
        return self._request(command, {"values": dict(values)}, texts + list(values), overwrite, cancel)

    def _request(self, command: str, payload: dict[str, Any], texts: list[str], overwrite: bool,
                 cancel: threading.Event | None) -> dict[str, Any]:
        lim = self.limits
        if command not in self.commands:
            raise CommandError(f"no command {command!r} here")
        size = sum(len(a.encode("utf-8", errors="replace")) + 1 for a in texts)
        if size > lim.args_bytes:
            raise CommandError(f"{command}: the arguments are {size / KiB:.0f} KiB, over the "
                               f"{lim.args_bytes / KiB:.0f} KiB limit per call")
        deadline = time.monotonic() + lim.time_s
        w = self._take(deadline, cancel)
        self.warm()
        try:
            w.send({"command": command, **payload, "cwd": self.root or os.getcwd(), "root": self.root,
                    "overwrite": bool(overwrite), "output_bytes": lim.output_bytes})
            reply = (w.receive(deadline, 2 * lim.output_bytes + MiB, cancel) if w.wait_ready(deadline, cancel)
                     else None)
        except Cancelled:
            self._stop(w)
            raise CommandError(f"{command} was cancelled by the client and stopped") from None
        except (EOFError, OSError, ValueError):
            code = self._stop(w)
            raise CommandError(f"internal error: the worker running {command} ended (exit code {code})") from None
        if reply is None:
            self._stop(w)
            raise CommandError(f"{command} ran past the {lim.time_s:g} s limit per call and was stopped")
        if reply["fatal"]:  # the worker exits after an internal error: its state is not trusted again
            self._stop(w)
        else:
            self._give_back(w)
        if reply["status"] != "ok":
            raise CommandError(reply["payload"])
        return json.loads(reply["payload"])

    def close(self) -> None:
        """Stop every idle worker; busy ones stop when their call returns."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
        for w in idle:
            self._stop(w)

    # ---- the only critical sections: counting, taking and returning workers ---------------------
    def _take(self, deadline: float, cancel: threading.Event | None = None) -> _Worker:
        with self._cond:
            while not self._idle and self._live >= self.workers:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise CommandError(f"the server is busy: {self.workers} calls are running; try again")
                if cancel is not None and cancel.is_set():
                    raise CommandError("the call was cancelled by the client before it started")
                self._cond.wait(min(left, CANCEL_POLL_S) if cancel is not None else left)
            if self._idle:
                return self._idle.pop()
            self._live += 1
        return self._start()

    def _start(self) -> _Worker:
        try:
            return _Worker(self.modules, self.limits.memory_bytes, self.worker_module)
        except BaseException:
            with self._cond:
                self._live -= 1
                self._cond.notify()
            raise

    def _refill(self) -> None:
        while True:
            with self._cond:
                if self._closed or len(self._idle) >= self.spare or self._live >= self.workers:
                    return
                self._live += 1
            try:
                w = self._start()
            except OSError:
                return
            try:  # a spare counts as idle once it is ready, not when its interpreter was launched
                ready = w.wait_ready(time.monotonic() + max(60.0, self.limits.time_s))
            except (EOFError, OSError, ValueError):
                ready = False
            if not ready:
                self._stop(w)
                return
            self._give_back(w)

    def _give_back(self, w: _Worker) -> None:
        with self._cond:
            if not self._closed and w.proc.poll() is None:
                self._idle.append(w)
                self._cond.notify()
                return
        self._stop(w)

    def _stop(self, w: _Worker) -> int | None:
        code = w.stop()
        with self._cond:
            self._live -= 1
            self._cond.notify()
        return code


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


if __name__ == "__main__":
    _cfg = json.loads(sys.argv[1])
    _worker_main(tuple(_cfg["modules"]), _cfg["memory_bytes"])
