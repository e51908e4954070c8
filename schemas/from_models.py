"""The JSON Schemas of the commands whose documents are typed (floorfirst/results.py,
floorfirst/served.py, floorfirst/calibration_results.py, floorfirst/error_result.py), written from those pydantic models: every key, its type, whether it may be
null, whether it is always there, and its description (the field's docstring) come from the model,
so a document, its model and its schema can't disagree.

How a model field becomes a schema node:
- `int`, `float`, `str`, `bool` → integer, number, string, boolean; `Literal[...]` → an enum;
  `int | float` (results.Number) → number; `X | None` without a default → X or null, always present; `= None` → X, present only when set
  (Document.document() leaves unset keys out); `list[X]` → array of X; `dict[str, X]` → object
  whose values are X; a model → object with its fields as properties, the required ones listed.
- `Field(json_schema_extra={...})` on a field (or in its `Annotated` type) adds schema keywords:
  `minimum`, `minItems`, `x-registry` (the enum is the registry's names, filled by generate.py), …
  and `x-part`: the node is schemas/parts/<x-part>.json. A part is the key-by-key contract of a
  free-form dict the model keeps as a dict (an engine's memory plan, a step's components): written
  by hand, in one file, and used by every command that carries it.

A field's `x-keep-null` keeps null in a key that is present only sometimes (walls' kv_wall_requests);
a model's `json_schema_extra` config adds keywords to its object (walls' if/then/else, validate's
patternProperties).

Does not: write the schemas of the commands without typed documents (generate.py keeps those
files, filling their registry parts), or validate documents (tests/agent does).
"""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PARTS = HERE / "parts"
SCHEMA_KEY = ("Contract name and major version: /N bumps when a key is removed, renamed or changes type or "
              "meaning.")
# command → (the model of its document, {model class name: $defs name} for parts shared inside one schema)
MODELS = {
    "floor": ("PlanResult", {}),
    "compare": ("CompareResult", {"PricedLayout": "point"}),
    "capacity": ("CapacityResult", {}),
    "simulate": ("SimulateResult", {}),
    "simulate_disagg": ("SimulateDisaggResult", {"DisaggPool": "pool"}),
    "error": ("ErrorResult", {}),
    "triage": ("TriageResult", {}),
    "explain_launch": ("ExplainLaunchResult", {}),
    "hardware": ("HardwareResult", {}),
    "models": ("ModelsResult", {}),
    "regimes": ("RegimesResult", {}),
    "triage_profile": ("TriageProfileResult", {}),
    "thresholds": ("ThresholdsResult", {"Crossover": "crossover"}),
    "walls": ("WallsResult", {}),
    "validate": ("ValidateResult", {}),
    "microbench": ("MicrobenchResult", {}),
    "calibrate": ("CalibrateResult", {}),
    "calibrate_kernel_db": ("KernelDbResult", {}),
    "follow": ("FollowResult", {}),
    "serve": ("ServeResult", {}),
    "disagg": ("DisaggResult", {"Colocated": "colocated"}),
}
# where the documents' models live
DOCUMENT_MODULES = ("floorfirst.results", "floorfirst.served", "floorfirst.calibration_results",
                    "floorfirst.error_result", "floorfirst.follow_result", "floorfirst.disagg_result")
# command → its schema's title, where the command line is not `floorfirst <command> --json`
TITLES = {"simulate_disagg": "floorfirst simulate --disagg xPyD --json",
          "error": "floorfirst <command> --json, when the command produced no document",
          "triage": "floorfirst triage --measured-ms --json", "explain_launch": "floorfirst explain-launch --json",
          "triage_profile": "floorfirst triage --profile --json",
          "calibrate_kernel_db": "floorfirst calibrate --from-kernel-db --json"}
_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _extras(metadata) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in metadata:
        extra = getattr(m, "json_schema_extra", None)
        if isinstance(extra, dict):
            out.update(extra)
    return out


def _with_null(node: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in node:  # a shared part that may be null (disagg's best)
        return {"anyOf": [node, {"type": "null"}]}
    t = node.get("type")
    if t is None:
        return node
    node["type"] = [*(t if isinstance(t, list) else [t]), "null"]
    return node


def _type_node(tp, defs: dict[str, str], used: dict[str, dict], extras: dict[str, Any]) -> dict[str, Any]:
    """The schema node of a type annotation (its Annotated metadata's extras merged into `extras`)."""
    from pydantic import BaseModel

    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        base, *meta = typing.get_args(tp)
        extras.update(_extras(meta))
        return _type_node(base, defs, used, extras)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if set(args) == {int, float}:  # results.Number: a JSON number, an integer kept as one
            node = {"type": "number"}
            return _with_null(node) if len(args) < len(typing.get_args(tp)) else node
        if len(args) != 1:
            raise TypeError(f"{tp}: a union other than X | None has no schema here")
        return _with_null(_type_node(args[0], defs, used, extras))
    if origin is typing.Literal:
        values = list(typing.get_args(tp))
        return {"type": _SCALARS[type(values[0])], "enum": values}
    if origin is list:
        (item,) = typing.get_args(tp)
        inner: dict[str, Any] = {}
        node = _type_node(item, defs, used, inner)
        return {"type": "array", "items": {**node, **inner}}
    if origin is dict:
        _, value = typing.get_args(tp)
        if value is Any:
            return {"type": "object"}
        inner = {}
        node = _type_node(value, defs, used, inner)
        return {"type": "object", "additionalProperties": {**node, **inner}}
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp.__name__ in defs:
            name = defs[tp.__name__]
            if name not in used:
                used[name] = {}  # NOTE: reserved before the walk: a model that holds itself refers to it
                used[name] = model_node(tp, defs, used)
            return {"$ref": f"#/$defs/{name}"}
        return model_node(tp, defs, used)
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    raise TypeError(f"{tp!r}: no schema for this type")


def _part(name: str) -> dict[str, Any]:
    return json.loads((PARTS / f"{name}.json").read_text())


def field_node(field, defs: dict[str, str], used: dict[str, dict]) -> tuple[dict[str, Any], bool]:
    """(the schema node of one model field, whether the key is always present)."""
    extras = dict(field.json_schema_extra or {}) if isinstance(field.json_schema_extra, dict) else {}
    extras.update(_extras(field.metadata))
    required = field.is_required()
    node = _type_node(field.annotation, defs, used, extras)
    keep_null = extras.pop("x-keep-null", False)  # a key present only sometimes, and then maybe null
    if not required and field.default is None and isinstance(node.get("type"), list) and not keep_null:
        node["type"] = [t for t in node["type"] if t != "null"]  # absent rather than null
        if len(node["type"]) == 1:
            node["type"] = node["type"][0]
    if "x-registry-keys" in extras:  # one key per registry name (generate.py writes them): no other key
        node.pop("additionalProperties", None)
    part = extras.pop("x-part", None)
    if part is not None:
        node = {"type": node.get("type", "object"), **_part(part)}
    if not field.description:
        raise ValueError(f"a field of a document has no docstring: {field!r}")
    description = " ".join(field.description.split())
    node.pop("description", None)  # a model's own docstring: the field's says what it is here
    if "$ref" in node:
        return {"description": description, **node, **extras}, required
    head = {"type": node.pop("type")} if "type" in node else {}
    return {**head, "description": description, **node, **extras}, required


def model_node(cls, defs: dict[str, str] | None = None, used: dict[str, dict] | None = None) -> dict[str, Any]:
    """The object schema of a pydantic model: its fields (by their JSON names), the required ones listed."""
    defs = {} if defs is None else defs
    used = {} if used is None else used
    props, required = {}, []
    for name, field in cls.model_fields.items():
        if field.exclude:  # carried by the result, not a key of the document (SimulateResult.timeline)
            continue
        key = field.alias or name
        props[key], always = field_node(field, defs, used)
        if always:
            required.append(key)
    own = cls.__dict__.get("__doc__")
    head = {"description": " ".join(own.split())} if own else {}
    extra = cls.model_config.get("json_schema_extra")  # keywords of the object itself (patternProperties)
    return {"type": "object", **head, "properties": props, "required": required,
            **(extra if isinstance(extra, dict) else {})}


def model_of(command: str):
    """The model class of `command`'s document (found in DOCUMENT_MODULES)."""
    import importlib

    name = MODELS[command][0]
    for module in DOCUMENT_MODULES:
        cls = getattr(importlib.import_module(module), name, None)
        if cls is not None:
            return cls
    raise LookupError(f"{command}: no model {name} in {', '.join(DOCUMENT_MODULES)}")


def schema_of(command: str) -> dict[str, Any]:
    """The JSON Schema of `command`'s document, from its model (MODELS)."""
    import inspect

    from floorfirst.contracts import schema_name

    cls = model_of(command)
    defs = MODELS[command][1]
    used: dict[str, dict] = {}
    body = model_node(cls, defs, used)
    out = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": TITLES.get(command, f"floorfirst {command} --json"),
        "description": " ".join(inspect.cleandoc(cls.__doc__ or "").split()),
        "type": "object",
        "properties": {"schema": {"const": schema_name(command), "description": SCHEMA_KEY}, **body["properties"]},
        "required": ["schema", *body["required"]],
    }
    conditions = cls.model_config.get("json_schema_extra")  # keywords of the whole document (walls' if/then/else)
    if isinstance(conditions, dict):
        out.update(conditions)
    if cls.model_config.get("extra") == "forbid":  # a closed document (the error): no other key
        out["additionalProperties"] = False
    if used:
        out["$defs"] = used
    return out
