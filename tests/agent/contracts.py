"""Helpers for the agent-interface tests: run a command in-process, load its JSON Schema, and
validate a document strictly (every key it emits must be documented in the schema).

The schema files stay open (extra keys allowed) so that additive changes don't break consumers;
the tests close them, so a key the CLI emits but the contract doesn't document fails here.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
from pathlib import Path

import pytest

from cli.main import main

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
PROFILE = ROOT / "calibration" / "data" / "h200x2_step_profile.jsonl"
MICROBENCH = ROOT / "calibration" / "data" / "h200_microbench.json"


def run_cli(argv: list[str]) -> dict:
    """`floorfirst <argv>` in-process; the one JSON document it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 0, f"floorfirst {' '.join(argv)} exited {exc.value.code}: {err.getvalue()}"
    return json.loads(out.getvalue())


def json_commands() -> set[str]:
    """Commands registered on the CLI that take --json, by the name their document carries."""
    import inspect

    from cli.main import _register_all, app

    _register_all()
    names = set()
    for info in app.registered_commands:
        if "json_out" in inspect.signature(info.callback).parameters:
            names.add((info.name or info.callback.__name__).replace("-", "_"))
    return names


def schema_name(doc: dict) -> str:
    """'floorfirst.triage_profile/1' -> 'triage_profile'."""
    name = doc["schema"]
    assert name.startswith("floorfirst.") and "/" in name, name
    return name[len("floorfirst."):].rsplit("/", 1)[0]


def load_schema(name: str) -> dict:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def closed(schema):
    """The schema with every object that lists its properties closed to undocumented keys."""
    s = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node and "patternProperties" not in node:
                node["additionalProperties"] = False
            for k, v in node.items():
                if k != "if":  # a condition, not a shape: closing it would change which branch applies
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(s)
    return s


def validate(doc: dict, name: str | None = None, strict: bool = True) -> None:
    """Raise jsonschema.ValidationError unless `doc` meets its command's schema."""
    import jsonschema

    schema = load_schema(name or schema_name(doc))
    jsonschema.Draft202012Validator(closed(schema) if strict else schema,
                                    format_checker=jsonschema.FormatChecker()).validate(doc)
