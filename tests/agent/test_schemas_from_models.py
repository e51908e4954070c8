"""Every command's schema is written from its document's pydantic model (schemas/from_models.py), none
kept by hand: each command the CLI registers with --json has a model, the committed files are what the
generator writes, every model field is a schema key with the model's docstring, a document declares
every key it prints, and a document that strays from its model fails its schema."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel, create_model

import floorfirst
import floorfirst.results as results
import floorfirst.served as served
from tests.agent.contracts import SCHEMAS, closed, json_commands, load_schema, run_cli


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCHEMAS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FROM_MODELS = _load("from_models")
GENERATE = _load("generate")


def test_every_json_command_the_cli_registers_has_a_model_and_no_schema_is_kept_by_hand():
    commands = json_commands()
    assert {"floor", "follow", "serve", "disagg"} <= commands  # the registry is read, not an empty set
    assert commands - set(FROM_MODELS.MODELS) == set(), "a --json command whose document has no model"
    assert GENERATE.unwritten() == [], "a schemas/ file no model writes"


def test_the_generator_refuses_a_schema_no_model_writes(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(GENERATE, "HERE", tmp_path)
    monkeypatch.setattr(GENERATE, "_from_models", lambda: FROM_MODELS)
    (tmp_path / "kept_by_hand.schema.json").write_text("{}")
    assert GENERATE.unwritten() == ["kept_by_hand.schema.json"]
    assert GENERATE.main() == 1
    assert "kept_by_hand.schema.json" in capsys.readouterr().err


@pytest.mark.parametrize("command", sorted(FROM_MODELS.MODELS))
def test_the_committed_schema_is_the_models(command):
    written = GENERATE.generate()[f"{command}.schema.json"]
    assert (SCHEMAS / f"{command}.schema.json").read_text() == written, \
        f"schemas/{command}.schema.json is not what its model writes: run python schemas/generate.py"


@pytest.mark.parametrize("command", sorted(FROM_MODELS.MODELS))
def test_every_model_field_is_a_described_key(command):
    model = FROM_MODELS.model_of(command)
    schema = load_schema(command)
    for name, field in model.model_fields.items():
        if field.exclude:  # carried by the result (SimulateResult.per_request), not a key of the document
            assert name not in schema["properties"], f"{command}: {name}"
            continue
        key = field.alias or name
        assert key in schema["properties"], f"{command}: {key}"
        assert schema["properties"][key]["description"] == " ".join(field.description.split())
        assert (key in schema["required"]) == field.is_required(), f"{command}: {key}"


def test_a_field_a_model_gains_is_in_its_schema_and_one_without_a_docstring_is_refused():
    grown = create_model("Grown", __base__=results.PlanResult, new_thing_s=(float, ...))
    with pytest.raises(ValueError, match="no docstring"):
        FROM_MODELS.model_node(grown)
    grown.model_fields["new_thing_s"].description = "A new time, seconds."
    node = FROM_MODELS.model_node(grown)
    assert node["properties"]["new_thing_s"] == {"type": "number", "description": "A new time, seconds."}
    assert "new_thing_s" in node["required"]


def test_a_document_that_strays_from_its_model_fails_its_schema():
    doc = floorfirst.plan(batch=16, context="8k").document()
    validator = jsonschema.Draft202012Validator(closed(load_schema("floor")))
    validator.validate(doc)
    for broken in ({**doc, "undeclared_s": 1.0},                                    # a key the model lacks
                   {k: v for k, v in doc.items() if k != "predicted_s"},            # a key the model requires
                   {**doc, "launch_replicas": 0},                                   # below its minimum
                   {**doc, "memory": {**doc["memory"], "fraction": "high"}}):       # a part's key, wrong type
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)
    assert json.loads(json.dumps(doc)) == doc


def _undeclared(m, path="") -> list[str]:
    """Keys a model holds that it doesn't declare, anywhere below it."""
    out = [f"{path}{k}" for k in (m.model_extra or {})]
    for name in type(m).model_fields:
        v = getattr(m, name)
        for i, x in enumerate(v if isinstance(v, list) else [v]):
            if isinstance(x, BaseModel):
                out += _undeclared(x, f"{path}{name}[{i}].")
    return out


SERVED = {  # command → (argv of a --json run with switches or pools in it, its model)
    "simulate": (["simulate", "--requests", "60", "--json"], served.SimulateResult),
    "simulate_disagg": (["simulate", "--requests", "30", "--disagg", "1P2D", "--decode-layout", "dp", "--json"],
                        served.SimulateDisaggResult),
}


@pytest.mark.parametrize("command", sorted(SERVED))
def test_a_served_document_is_its_model_and_one_that_strays_fails_its_schema(command):
    argv, model = SERVED[command]
    doc = run_cli(argv)
    typed = model.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert _undeclared(typed) == [] and typed.document() == doc
    validator = jsonschema.Draft202012Validator(closed(load_schema(command)))
    validator.validate(doc)
    first = "prefill_pool" if command == "simulate_disagg" else "layout_time_s"
    for broken in ({**doc, "undeclared_s": 1.0},
                   {k: v for k, v in doc.items() if k != "verdict"},
                   {**doc, "makespan_s": None},                                   # not nullable
                   {**doc, "ttft_p50_by_arrival_quarter_s": [1.0]},               # four quarters
                   {**doc, first: {**doc[first], "x": 1}}):                       # a part's undeclared key
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(broken)


FPM_STREAM = Path(__file__).resolve().parents[1] / "fixtures" / "fpm" / "dsv32_tp8_h200.jsonl"
LAUNCH = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
TYPED = {  # command → a --json run whose document the command assembles as a dict and types before printing
    "follow": ["follow", "--engine-args", LAUNCH, "--once", str(FPM_STREAM), "--refit-every", "64", "--window", "128"],
    "serve": ["serve", "--executor", "sim", "--requests", "12"],
    "disagg": ["disagg", "--model", "llama-3.1-70b", "--gpus", "8", "--input", "8k", "--engine", "vllm",
               "--sweep-input", "2k,16k"],
    "disagg-none": ["disagg", "--gpus", "16", "--input", "4k", "--tpot-ms", "1"],  # nothing meets the target
}


@pytest.mark.parametrize("case", sorted(TYPED))
def test_a_typed_document_declares_every_key_it_prints_and_prints_them_as_computed(case):
    command = case.split("-")[0]
    if command == "serve":
        pytest.importorskip("torch")  # serve's stack dimensions come from the torch executor's config
    doc = run_cli([*TYPED[case], "--json"])
    model = FROM_MODELS.model_of(command)
    typed = model.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert _undeclared(typed) == []
    # the same keys, in the same order, each number as printed (an integer is not turned into a float)
    assert json.dumps(typed.document(), indent=1) == json.dumps(doc, indent=1)
    validator = jsonschema.Draft202012Validator(closed(load_schema(command)))
    validator.validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validator.validate({**doc, "undeclared_s": 1.0})
