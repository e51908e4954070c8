"""How a command that produced no document ends: one line on stderr, an exit code, and under
`--json` one JSON document on stdout that says the same (`floorfirst.error/1`: the line in
`error`, the exit code in `exit_code`), so a program reading stdout always gets a document.

Also the checks every command line passes before any command runs (`check_arguments`): an
integer literal past int64 is no count, size or seed any option of ours holds (planner.inputs'
INT_MAX_ABS); it is refused here in one line, before a conversion to float overflows in a
formula.

Does not: decide what is a user's error (a SpecError or a usage error is; cli.main says which).
"""

from __future__ import annotations

import json
import re
import sys

from planner.errors import SpecError

EXIT_USER = 2
ERROR_SCHEMA = "floorfirst.error/1"
_INT = re.compile(r"[+-]?\d+")


def wants_json(args: list[str]) -> bool:
    """Whether the command line asks for a JSON document (`--json` before any `--`)."""
    for a in args:
        if a == "--":
            return False
        if a == "--json":
            return True
    return False


def error_document(message: str, exit_code: int) -> dict:
    """The floorfirst.error/1 document (floorfirst.error_result.ErrorResult, whose model writes its schema)."""
    from floorfirst.error_result import ErrorResult

    return ErrorResult.model_construct(error=message, exit_code=exit_code).document()


def write_error(message: str, exit_code: int, as_json: bool, prefix: str = "floorfirst: error: ") -> None:
    """The one stderr line, and under --json the error document on stdout."""
    sys.stderr.write(f"{prefix}{message}\n")
    if as_json:
        sys.stdout.write(json.dumps(error_document(message, exit_code)) + "\n")


def _int_max_abs() -> int:
    # NOTE: imported when a literal is that long: planner.inputs imports numpy, which `floorfirst mcp`'s
    # server process (it imports this module) never needs
    from planner.inputs import INT_MAX_ABS

    return INT_MAX_ABS


def check_arguments(args: list[str]) -> None:
    """SpecError for an integer literal past int64 anywhere on the command line (its option named)."""
    prev = ""
    for a in args:
        if len(a) > 19 and _INT.fullmatch(a.strip()) and abs(int(a)) >= _int_max_abs():
            what = prev if prev.startswith("-") else "an argument"
            raise SpecError(f"{what}: an integer of {len(a.strip().lstrip('+-'))} digits is out of range "
                            f"(over 2^63)")
        prev = a
