"""Every `--json` command's output validates against its schemas/<command>.schema.json, the
schemas are valid draft 2020-12 and not permissive, and every `--json` command has one."""

from __future__ import annotations

import json

import jsonschema
import pytest

from cli.common import SCHEMA_VERSION, SCHEMA_VERSIONS
from tests.agent.contracts import MICROBENCH, PROFILE, SCHEMAS, closed, json_commands, load_schema, run_cli, validate

LAUNCH = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
FPM_STREAM = SCHEMAS.parent / "tests" / "fixtures" / "fpm" / "dsv32_tp8_h200.jsonl"  # SGLang forward-pass records

# One or more invocations per contract; several where an option changes the document's shape.
CASES = {
    "models": [["models"], ["models", "--model", "llama-3.1-70b"]],
    "hardware": [["hardware"], ["hardware", "--hardware", "h20"]],
    "floor": [["floor"], ["floor", "--attn", "dp", "--context", "4k*60,64k*4", "--prefill-tokens", "2048"],
              ["floor", "--model", "llama-3.1-70b", "--attn", "tp", "--pricing", "achieved"],
              ["floor", "--gpus", "4"],  # no layout fits: feasible false, tokens/s null
              ["floor", "--hardware", "h20", "--gpus", "16", "--attn", "tp", "--engine", "vllm"]],  # two nodes
    "compare": [["compare", "--batch", "64", "--context", "32k"],
                ["compare", "--model", "llama-3.1-70b", "--batch", "8", "--context", "8k"],
                ["compare", "--batch", "4096", "--context", "128k"],  # nothing fits: best_by_* null
                ["compare", "--hardware", "h20", "--gpus", "16", "--batch", "64", "--context", "8k"]],
    "capacity": [["capacity", "--context", "32k"], ["capacity", "--context", "4k*60,64k*4"], ["capacity", "--model", "qwen3-235b-a22b", "--context", "8k"],
                 ["capacity", "--hardware", "h20", "--gpus", "16", "--context", "8k"],  # dp/ep: weights don't fit
                 ["capacity", "--engine", "vllm", "--gpus", "4", "--context", "8k"]],  # nothing fits
    "walls": [["walls", "--context", "32k"], ["walls", "--along", "context", "--batch", "16", "--layouts", "tp/ep,dop/ep"],
              ["walls", "--hardware", "h20", "--gpus", "16", "--layouts", "tp/ep,dp/ep", "--range", "1:256"]],
    "regimes": [["regimes", "--batch-range", "1:1024:4", "--context-range", "1k:256k:4"],
                ["regimes", "--floor", "sum", "--batch-range", "1:64:3", "--context-range", "4k:64k:3", "--layouts", "dp/ep,dop/ep"]],
    "triage": [["triage", "--measured-ms", "30", "--attn", "dp", "--batch", "32", "--context", "8k"],    # above_sum
               ["triage", "--measured-ms", "16", "--attn", "dp", "--batch", "32", "--context", "8k"],    # inside
               ["triage", "--measured-ms", "1", "--attn", "dp", "--batch", "32", "--context", "8k"]],    # below_floor
    "triage_profile": [["triage", "--profile", str(PROFILE)]],
    "microbench": [["microbench", "--from", str(MICROBENCH)]],
    "simulate": [["simulate", "--requests", "40"], ["simulate", "--requests", "60", "--workload", "shrinking", "--policy", "tp"]],
    "simulate_disagg": [["simulate", "--requests", "30", "--disagg", "1P2D", "--decode-layout", "dp"],
                        ["simulate", "--model", "llama-3.1-70b", "--gpus", "4", "--requests", "20", "--disagg", "2P1D"]],
    "serve": [["serve", "--executor", "sim", "--requests", "12"]],  # the torch executor: tests/cli/test_serve_cli.py
    "follow": [["follow", "--engine-args", LAUNCH, "--once", str(FPM_STREAM), "--refit-every", "64", "--window", "128"]],
    "thresholds": [["thresholds", "--engine-args", LAUNCH], ["thresholds", "--engine-args", LAUNCH, "--floor", "sum", "--batch", "16"]],
    "disagg": [["disagg", "--gpus", "16", "--input", "4k", "--tpot-ms", "50"],
               ["disagg", "--model", "llama-3.1-70b", "--gpus", "8", "--input", "8k", "--engine", "vllm",
                "--sweep-input", "2k,16k"],
               ["disagg", "--gpus", "16", "--input", "4k", "--tpot-ms", "1"]],  # nothing meets the target: nulls
    "explain_launch": [["explain-launch", "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 "
                                          "--dp 8 --enable-dp-attention --port 30000"],
                       ["explain-launch", "vllm serve -tp 8 --max-model-len 65536"]],  # no model named: null
}


@pytest.fixture(scope="module")
def calibration_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cal") / "cal.json")


def _cases():
    for name, runs in CASES.items():
        for i, argv in enumerate(runs):
            yield pytest.param(name, argv, id=f"{name}-{i}")


@pytest.mark.parametrize("name,argv", list(_cases()))
def test_json_output_meets_its_schema(name, argv):
    doc = run_cli([*argv, "--json"])
    assert doc["schema"] == f"floorfirst.{name}/{SCHEMA_VERSIONS.get(name, SCHEMA_VERSION)}"
    validate(doc, name)


def test_calibrate_then_validate_meet_their_schemas(calibration_file):
    cal = run_cli(["calibrate", "--profile", str(PROFILE), "--out", calibration_file, "--json"])
    validate(cal, "calibrate")
    rep = run_cli(["validate", "--calibration", calibration_file, "--profile", str(PROFILE), "--folds", "3",
                           "--json"])
    validate(rep, "validate")
    # the calibrated model adds optional keys; they are part of the contract too
    validate(run_cli(["floor", "--calibration", calibration_file, "--json"]), "floor")
    validate(run_cli(["walls", "--calibration", calibration_file, "--layouts", "dp/ep", "--json"]), "walls")


def test_plot_paths_are_reported(tmp_path):
    w = run_cli(["walls", "--layouts", "dp/ep", "--plot", str(tmp_path / "w.png"), "--json"])
    validate(w, "walls")
    assert w["plot"] == str(tmp_path / "w.png")


def test_every_json_command_has_a_schema_and_a_case():
    schemas = {p.name.removesuffix(".schema.json") for p in SCHEMAS.glob("*.schema.json")}
    commands = json_commands()
    assert commands <= schemas, f"no schema for {commands - schemas}"
    assert "triage_profile" in schemas  # triage --profile prints a second document
    # calibrate_kernel_db: exercised on a fake wheel by tests/calibration/test_kernel_db.py
    # the error document is every command's under --json when it refuses: tests/cli/test_unchecked_inputs.py
    assert schemas <= set(CASES) | {"calibrate", "validate", "calibrate_kernel_db", "error"}, "a schema no test exercises"


@pytest.mark.parametrize("path", sorted(SCHEMAS.glob("*.schema.json")), ids=lambda p: p.name)
def test_schema_is_valid_2020_12_and_describes_every_key(path):
    schema = json.loads(path.read_text())
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)
    name = path.name.removesuffix(".schema.json")
    version = SCHEMA_VERSIONS.get(name, SCHEMA_VERSION)  # capacity/2: its mem_fraction changed meaning (issue 12)
    assert schema["properties"]["schema"] == {"const": f"floorfirst.{name}/{version}", "description": schema["properties"]["schema"]["description"]}
    assert "schema" in schema["required"]

    def walk(node, where):
        if isinstance(node, dict):
            for key, sub in node.get("properties", {}).items():
                if key != "schema":
                    assert sub.get("description") or "$ref" in sub, f"{path.name}: {where}.{key} has no description"
            for k, v in node.items():
                if k != "if":  # a condition on a documented key, not a new key
                    walk(v, f"{where}.{k}" if k not in ("properties", "items") else where)
        elif isinstance(node, list):
            for v in node:
                walk(v, where)

    walk(schema, name)


def test_floor_and_compare_share_one_point_contract():
    floor, compare = load_schema("floor"), load_schema("compare")
    point = compare["$defs"]["point"]
    top = ("schema", "model", "hardware", "layout_choice", "ranked_by")  # how floor picked its one layout
    own = {k: v for k, v in floor["properties"].items() if k not in top}
    assert own == point["properties"]
    assert set(floor["required"]) - set(top) == set(point["required"])


def test_schemas_reject_a_broken_document():
    """The contracts bite: a missing key, a renamed key, a wrong type and a wrong version fail."""
    doc = run_cli(["floor", "--json"])
    validate(doc, "floor")
    broken = [
        {k: v for k, v in doc.items() if k != "floor_max_s"},                               # removed
        {**{k: v for k, v in doc.items() if k != "floor_sum_s"}, "floor_sum_ms": 1.0},      # renamed
        {**doc, "binding": "disk"},                                                          # not a resource
        {**doc, "resources": {**doc["resources"], "hbm": {"bytes": "a lot", "time_s": 0.1}}},  # wrong type
        {**doc, "schema": "floorfirst.floor/2"},                                             # other version
    ]
    for b in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate(b, "floor")
    # open schemas let a consumer accept additive changes; closed ones catch undocumented keys
    extra = {**doc, "new_key_s": 1.0}
    validate(extra, "floor", strict=False)
    with pytest.raises(jsonschema.ValidationError):
        validate(extra, "floor")


def test_closing_a_schema_only_closes_declared_objects():
    s = {"type": "object", "properties": {"a": {"type": "object", "additionalProperties": {"type": "number"}}}}
    c = closed(s)
    assert c["additionalProperties"] is False and c["properties"]["a"]["additionalProperties"] == {"type": "number"}
