"""The --json document guard (cli/documents.py): no NaN or infinity outside the contract's nullable
fields, no negative time/size/capacity, floor_max ≤ floor_sum; a violation is an internal error
(one line, exit 70), never a printed document."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cli.common import emit_json
from cli.documents import EXIT_INTERNAL, NULLABLE, DocumentError, checked_document

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def _nullable_paths(schema: dict, path: str = "", root: dict | None = None) -> set[str]:
    """Paths (list items as '[]', free-form keys as '*') whose schema admits null and a number."""
    root = root or schema
    if "$ref" in schema:
        node = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = {**node, **{k: v for k, v in schema.items() if k != "$ref"}}
    out: set[str] = set()
    types = schema.get("type")
    alts = [a.get("type") for a in schema.get("anyOf", schema.get("oneOf", [])) if isinstance(a, dict)]
    flat = set(types if isinstance(types, list) else [types]) | {t for a in alts for t in (a if isinstance(a, list) else [a])}
    if "null" in flat and flat & {"number", "integer"}:
        out.add(path)
    for k, v in schema.get("properties", {}).items():
        out |= _nullable_paths(v, f"{path}.{k}" if path else k, root)
    if isinstance(schema.get("items"), dict):
        out |= _nullable_paths(schema["items"], path + "[]", root)
    if isinstance(schema.get("additionalProperties"), dict):
        out |= _nullable_paths(schema["additionalProperties"], f"{path}.*" if path else "*", root)
    for a in schema.get("anyOf", schema.get("oneOf", [])):
        if isinstance(a, dict):
            out |= {p for p in _nullable_paths(a, path, root) if p != path}
    return out


def _matches(path: str, patterns) -> bool:
    from fnmatch import fnmatchcase

    return any(fnmatchcase(path.replace("[]", "#"), p.replace("[]", "#")) for p in patterns)


@pytest.mark.parametrize("schema", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name.split(".")[0])
def test_nullable_fields_are_the_contracts(schema):
    """Every field a contract lets be null is nullable in the guard, and the guard allows no more."""
    command = schema.name.split(".")[0]
    want = _nullable_paths(json.loads(schema.read_text()))
    have = NULLABLE.get(command, ())
    assert all(_matches(p, have) for p in want), (command, sorted(want), have)
    for pattern in have:
        assert any(_matches(p, [pattern]) for p in want), f"{command}: {pattern} is nullable in no schema"


def test_a_nan_where_the_contract_allows_null_is_null():
    doc = checked_document("triage", {"overlap_quality": float("nan"), "residual_fraction": np.float64(0.2),
                                      "floor_max_s": np.float32(1.0), "floor_sum_s": 2.0, "profile": np.bool_(True)})
    assert doc == {"overlap_quality": None, "residual_fraction": pytest.approx(0.2), "floor_max_s": 1.0,
                   "floor_sum_s": 2.0, "profile": True}
    grid = checked_document("regimes", {"step_time_s": {"tp/ep": np.array([[1e-3, np.inf]])}})
    assert grid == {"step_time_s": {"tp/ep": [[1e-3, None]]}}


@pytest.mark.parametrize("command, doc, message", [
    ("floor", {"floor_max_s": float("nan"), "floor_sum_s": 1.0}, "floor_max_s=nan (a number that is not finite) at 'floor_max_s'"),
    ("floor", {"floor_max_s": 0.0024, "floor_sum_s": -0.097}, "floor_sum_s=-0.097 (a negative time, size, capacity or count)"),
    ("compare", {"layouts": [{"resources": {"hbm": {"bytes": -5.0}}}]}, "bytes=-5 (a negative time, size, capacity or count) at 'layouts[].resources.hbm.bytes'"),
    ("walls", {"layouts": [{"floor_max_s": [1.0, 3.0], "floor_sum_s": [2.0, 2.5]}]}, "floor_max_s=3 above floor_sum_s=2.5"),
    ("simulate", {"makespan_s": float("inf")}, "makespan_s=inf (a number that is not finite)"),
])
def test_a_violation_is_an_internal_error(command, doc, message):
    with pytest.raises(DocumentError) as exc:
        checked_document(command, doc)
    assert exc.value.code == EXIT_INTERNAL and message in exc.value.message
    assert exc.value.message.startswith(f"internal error: the {command} document has ")


def test_signed_quantities_may_be_negative():
    doc = {"residuals": [{"error_pct": -8.2, "cv_error_pct": -7.9}], "cv_median_abs_pct_error": 3.0}
    assert checked_document("validate", doc) == doc
    assert checked_document("triage", {"residual_fraction": -0.1, "overlap_quality": -0.5})["overlap_quality"] == -0.5


def test_emit_json_prints_nothing_and_exits_70_on_a_violation(capsys):
    with pytest.raises(SystemExit) as exc:
        emit_json("floor", {"floor_max_s": 0.0024, "floor_sum_s": -0.097})
    out = capsys.readouterr()
    assert exc.value.code == 70 and out.out == ""
    assert out.err.startswith("floorfirst: internal error: the floor document has floor_sum_s=-0.097") and out.err.count("\n") == 1
    emit_json("floor", {"floor_max_s": np.float64(0.0024), "floor_sum_s": 0.0031})
    assert json.loads(capsys.readouterr().out) == {"schema": "floorfirst.floor/1", "floor_max_s": 0.0024, "floor_sum_s": 0.0031}
