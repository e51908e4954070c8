"""The CLI's log: what a command says besides its answer (how a launch line was read, a context
past the model's window, files read), on stderr, at a level set by `--quiet` / `--verbose`.

Levels: the default shows INFO and above (the notes a command has always printed); `--quiet`
shows errors only (a refused input's one line is not a log record: it is always printed);
`--verbose` adds DEBUG (which files were read, each command's wall time).

NOTE: the handler writes to whatever `sys.stderr` is when a record is emitted, not the stream at
set-up: the in-process runner and the tests redirect stderr per call.
Does not: format errors (cli.errors) or print documents.
"""

from __future__ import annotations

import logging
import sys

LOGGER = "floorfirst"


class _CurrentStderr(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - a log line must never end a command
            self.handleError(record)


def logger(name: str = "") -> logging.Logger:
    return logging.getLogger(f"{LOGGER}.{name}" if name else LOGGER)


def configure(quiet: bool = False, verbose: bool = False) -> None:
    """Set the level (quiet wins over verbose) and install the stderr handler once per process."""
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h, _CurrentStderr) for h in log.handlers):
        h = _CurrentStderr()
        h.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(h)
        log.propagate = False
    log.setLevel(logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO)
