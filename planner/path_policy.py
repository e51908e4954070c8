"""Where a command may read and write: one root folder, for callers that are not the machine's
user (the MCP server's clients). The CLI runs unconfined: its user names their own files.

`confined(Root(...))` is a context: while it is active, planner.inputs (every reader and writer
of a file a user names) asks this module about each path before touching it:
- a path is resolved first, symlinks included (`os.path.realpath`; a relative path is relative to
  the working directory, which the MCP worker sets to the root), and only then compared with the
  root; `..`, an absolute path, or a link pointing out of the root all end outside it;
- a read outside the root is a missing file: the reader raises the same line it raises for a
  name no file has ("model config not found: x"), and probes (`path_kind`, `is_file`) answer
  "missing", so an error never tells whether a path outside the root exists;
- floorfirst's own data (the built-in model cards, GPU files and shipped priors) stay readable;
- a write must land inside the root, and only on a name no file holds unless the call allows
  overwriting (`Root.overwrite`); a file is replaced by a rename (planner.inputs.write_bytes_file),
  which replaces a link at the name, never the file it points to;
- error lines quote no value read from a file (`quote_values()` is False): planner.inputs.shown
  describes such a value by its type and size instead.

NOTE: one small module with no knowledge of any command's options or of the argv they are
parsed from, so any dispatch (argv today, direct calls to the command functions later) confines a
call by entering `confined(root)` around it. The active root is a ContextVar: a thread or task
that enters it confines only itself.

Does not: stop a hard link inside the root that names a file outside it (a link made by the
machine's user is their choice), or confine code that opens files without planner.inputs (none of
the commands served over MCP does: tests/fuzz checks every read and write against the root).
"""

from __future__ import annotations

import contextlib
import os
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from planner.errors import SpecError

_HERE = Path(__file__).resolve().parent
# floorfirst's own data files: readable under any root (planner.models.loader, planner.hardware.spec,
# and the shipped step-model priors every default tokens/s figure reads: calibration/priors)
BUILTIN_DATA = (_HERE / "models" / "cards", _HERE / "models" / "card_sources.json", _HERE / "hardware" / "data",
                _HERE.parent / "calibration" / "priors")


def _real(path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


@dataclass(frozen=True)
class Root:
    """A folder a caller's reads and writes stay inside (see the module docstring)."""

    folder: str
    overwrite: bool = False  # a write may replace an existing file inside the root
    readable: tuple[str, ...] = field(default_factory=lambda: tuple(_real(p) for p in BUILTIN_DATA))

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", _real(self.folder))

    def readable_path(self, path) -> str | None:
        """The resolved path if it may be read, else None (the caller says "not found")."""
        try:
            real = _real(path)
        except (OSError, ValueError):
            return None
        if _under(real, self.folder) or any(_under(real, r) for r in self.readable):
            return real
        return None

    def writable_path(self, path, what: str) -> str:
        """The resolved path a write goes to, or one SpecError line: outside the root, or an
        existing name without overwrite. The same words whether or not the name exists outside."""
        given = os.fspath(path)
        try:
            real = _real(given)
        except (OSError, ValueError):
            real = ""
        if not real or not _under(real, self.folder) or real == self.folder:
            raise SpecError(f"{what} {given}: not inside the server's root folder; give a path under it")
        if not self.overwrite and os.path.lexists(given):
            raise SpecError(f"{what} {given}: a file of that name exists; this call writes only new files "
                            "(pass overwrite to replace it)")
        return real


_ACTIVE: ContextVar[Root | None] = ContextVar("floorfirst_root", default=None)


def active() -> Root | None:
    """The root this call is confined to, or None (the CLI: unconfined)."""
    return _ACTIVE.get()


def quote_values() -> bool:
    """Whether an error line may quote a value read from a file (not while confined)."""
    return _ACTIVE.get() is None


@contextlib.contextmanager
def confined(root: Root) -> Iterator[Root]:
    token = _ACTIVE.set(root)
    try:
        yield root
    finally:
        _ACTIVE.reset(token)
