"""Render the key-by-key reference of docs/json-contracts.md from schemas/*.schema.json.

`python schemas/render_docs.py` rewrites the part of docs/json-contracts.md between the
BEGIN/END markers; tests/agent/test_docs.py fails when that part is stale. The schemas (each
written from its document's pydantic model by schemas/generate.py) hold each key's type and
description; the prose around the markers is written by hand. Stdlib only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "json-contracts.md"
BEGIN = "<!-- BEGIN GENERATED: python schemas/render_docs.py -->"
END = "<!-- END GENERATED -->"
ORDER = ["models", "hardware", "floor", "compare", "capacity", "walls", "regimes", "triage", "triage_profile",
         "calibrate", "calibrate_kernel_db", "validate", "microbench", "simulate", "simulate_disagg", "serve", "explain_launch", "follow",
         "thresholds", "disagg", "error"]


def _type(s: dict) -> str:
    t = s.get("type", "any")
    types = t if isinstance(t, list) else [t]
    base = [x for x in types if x != "null"]
    text = " \\| ".join(base) if base else "null"
    if "enum" in s:
        text += " (" + " \\| ".join(f"`{v}`" for v in s["enum"] if v is not None) + ")"
    if "const" in s:
        text = f"`{s['const']}`"
    if "pattern" in s:
        text += " matching `" + s["pattern"].replace("|", "\\|") + "`"
    for key, sym in (("minimum", "≥"), ("exclusiveMinimum", ">")):
        if key in s:
            text += f" {sym} {s[key]:g}"
    if "null" in types:
        text += " or null"
    return text


def _deref(s: dict, defs: dict) -> dict:
    if "$ref" not in s:
        return s
    target = defs[s["$ref"].rsplit("/", 1)[-1]]
    return {**target, "description": s.get("description") or target.get("description", "")}


def _types(s: dict) -> list:
    t = s.get("type")
    return t if isinstance(t, list) else [t]


def _shown(s: dict, defs: dict) -> str:
    if "array" not in _types(s) or not isinstance(s.get("items"), dict):
        return _type(s)
    item = _deref(s["items"], defs)
    inner = "object" if "object" in _types(item) else "array" if "array" in _types(item) else _type(item)
    return f"array of {inner}"


def _rows(s: dict, path: str, always: str, defs: dict, out: list) -> None:
    """One table row per key, depth first: `a.b`, `list[].key`, `map.<name>`."""
    s = _deref(s, defs)
    if path:
        out.append(f"| `{path}` | {_shown(s, defs)} | {always} | {s.get('description', '')} |")
    if "object" in _types(s):
        req = set(s.get("required", []))
        for k, sub in s.get("properties", {}).items():
            _rows(sub, f"{path}.{k}" if path else k, "yes" if k in req else "no", defs, out)
        if isinstance(s.get("additionalProperties"), dict):
            _rows(s["additionalProperties"], f"{path}.<name>", "—", defs, out)
    if "array" in _types(s) and isinstance(s.get("items"), dict):
        item = _deref(s["items"], defs)
        if "object" in _types(item):
            req = set(item.get("required", []))
            for k, sub in item.get("properties", {}).items():
                _rows(sub, f"{path}[].{k}", "yes" if k in req else "no", defs, out)
        elif "array" in _types(item):
            _rows(item, f"{path}[]", "—", defs, out)


def render() -> str:
    parts = []
    for name in ORDER:
        s = json.loads((HERE / f"{name}.schema.json").read_text())
        contract = s["properties"]["schema"]["const"]
        parts.append(f"### `{contract}` — {s['title'].removeprefix('floorfirst ')}\n\n{s['description']}\n")
        rows = ["| key | type | always | meaning |", "|---|---|---|---|"]
        _rows(s, "", "yes", s.get("$defs", {}), rows)
        parts.append("\n".join(rows) + "\n")
    return "\n".join(parts)


def updated(text: str) -> str:
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n\n{render()}\n{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(updated(DOC.read_text()))
    sys.stdout.write(f"wrote {DOC}\n")
