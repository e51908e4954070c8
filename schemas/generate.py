"""Write schemas/*.schema.json: every command's document schema from its pydantic model
(schemas/from_models.py MODELS: the documents of floorfirst/results.py, served.py,
calibration_results.py, follow_result.py, disagg_result.py and error_result.py), with the parts
that come from the planner's registries filled in. No schema is kept by hand: a schemas/ file that no
model writes is refused here, and tests/agent/test_schemas_from_models.py fails when a command that
takes --json (the CLI's registry of commands) has no model, or a committed file differs from what
this writes.

A schema names a registry where its choices come from one, and this script writes the choices:
- `"x-registry": "attention_layouts"` on a string key: its `enum` is the registry's names (a
  `null` the schema allows is kept);
- `"x-pattern-template": "^({attention_layouts})/({moe_splits})$"` on a string key: its `pattern`
  with each `{registry}` replaced by the registry's names as alternatives;
- `"x-registry-keys": "attention_layouts"` on an object: one property per name, each
  `"x-template"` with `{name}` in its description filled, all of them required.
The registries are cli.registry_options.REGISTRIES (attention layouts, MoE splits, engines, the
simulate/serve policies, attention and MLP variants), so a new layout or variant module needs no
schema edit: `python schemas/generate.py` rewrites the files (and tests/agent/test_docs.py fails
when a test's toy layout is missing from them).

A schema is written whole from its model (keys, types, nulls, descriptions, keywords; the free-form
dicts' contracts from schemas/parts/); docs/json-contracts.md's reference is rendered from the
result (schemas/render_docs.py).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def _registries() -> dict:
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from cli.registry_options import REGISTRIES

    return {k: tuple(f()) for k, f in REGISTRIES.items()}


def _from_models():
    import importlib.util

    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("schemas_from_models", HERE / "from_models.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _fill(node, names: dict) -> None:
    if isinstance(node, list):
        for x in node:
            _fill(x, names)
        return
    if not isinstance(node, dict):
        return
    if "x-registry" in node:
        nullable = None in node.get("enum", ()) or "null" in (node.get("type") or ())
        node["enum"] = list(names[node["x-registry"]]) + ([None] if nullable and None in node.get("enum", ()) else [])
    if "x-pattern-template" in node:  # "{registry}" placeholders → the registry's names as alternatives
        pat = node["x-pattern-template"]
        for reg, values in names.items():
            pat = pat.replace("{" + reg + "}", "|".join(str(v).replace("+", "\\+") for v in values))
        node["pattern"] = pat
    if "x-registry-keys" in node:
        tmpl = node["x-template"]
        props = {}
        for n in names[node["x-registry-keys"]]:
            p = copy.deepcopy(tmpl)
            p["description"] = p.get("description", "").replace("{name}", n)
            props[n] = p
        node["properties"] = props
        node["required"] = list(names[node["x-registry-keys"]])
    for k, v in node.items():
        if k != "x-template":
            _fill(v, names)


def generate(names: dict | None = None) -> dict[str, str]:
    """{file name: text} of every schema with its registry parts filled from `names` (default: the
    registries as they are now)."""
    names = names or _registries()
    from_models = _from_models()
    out = {}
    for command in sorted(from_models.MODELS):
        schema = from_models.schema_of(command)
        _fill(schema, names)
        out[f"{command}.schema.json"] = json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
    return out


def unwritten() -> list[str]:
    """schemas/ files no model writes (a hand-kept schema, or one whose command is gone)."""
    return sorted(p.name for p in HERE.glob("*.schema.json")
                  if p.name.removesuffix(".schema.json") not in _from_models().MODELS)


def main() -> int:
    stray = unwritten()
    if stray:
        print(f"no model writes {', '.join(stray)}: add the document's model to schemas/from_models.py MODELS "
              "(or remove the file)", file=sys.stderr)
        return 1
    changed = 0
    for name, text in generate().items():
        path = HERE / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed += 1
            print(f"rewrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
