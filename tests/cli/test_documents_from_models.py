"""Documents whose schemas are written from pydantic models but which the CLI still builds as dicts
(to start without importing every document's model: floorfirst.results costs a call ~50 ms): the
document a command prints is its model's document, key for key and in order, every key declared
(none left in model_extra), so the document, the model and the schema generated from it can't drift."""

import json

import pytest
from pydantic import BaseModel

from cli.main import main
from floorfirst.error_result import ErrorResult
from floorfirst.results import TriageResult

PRIOR = "calibration/priors/h200-sglang.json"


def cli_json(capsys, *args, code=0):
    with pytest.raises(SystemExit) as exc:
        main([*args, "--json"])
    out = capsys.readouterr()
    assert exc.value.code == code, out.err
    return out.out


def undeclared(m, path="") -> list[str]:
    out = [f"{path}{k}" for k in (m.model_extra or {})]
    for name in type(m).model_fields:
        v = getattr(m, name)
        if isinstance(v, BaseModel):
            out += undeclared(v, f"{path}{name}.")
    return out


@pytest.mark.parametrize("args", [
    ["--measured-ms", "30", "--attn", "dp", "--batch", "32", "--context", "8k"],  # above the sum
    ["--measured-ms", "1", "--attn", "tp", "--batch", "64", "--context", "32k"],  # below the floor
    ["--measured-ms", "12", "--attn", "dp", "--batch", "64", "--context", "32k", "--prefill-tokens", "2048",
     "--prefill-context", "8k"],
    ["--measured-ms", "30", "--attn", "dp", "--batch", "32", "--context", "8k", "--calibration", PRIOR],
], ids=["above", "below", "prefill", "calibrated"])
def test_triage_prints_its_models_document(capsys, args):
    text = cli_json(capsys, "triage", *args)
    doc = json.loads(text)
    result = TriageResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == []
    assert result.document() == doc
    assert list(result.document()) == list(doc)  # the same keys in the same order
    assert ("calibrated" in doc) == ("--calibration" in args)


@pytest.mark.parametrize("args,code", [(["floor", "--gpus", "0"], 2), (["floor", "--model", "no-such-model"], 2)])
def test_an_error_prints_its_models_document(capsys, args, code):
    doc = json.loads(cli_json(capsys, *args, code=code))
    assert ErrorResult.model_validate({k: v for k, v in doc.items() if k != "schema"}).document() == doc


LAUNCHES = [
    "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention "
    "--mem-fraction-static 0.85 --kv-cache-dtype fp8_e4m3 --chunked-prefill-size 8192 --port 30000",
    "vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 8 --enable-expert-parallel --max-model-len 32768 --block-size 64",
    "vllm serve nvidia/DeepSeek-V3.2-NVFP4 -tp 4",
]


@pytest.mark.parametrize("launch", LAUNCHES, ids=range(len(LAUNCHES)))
def test_explain_launch_prints_its_models_document(capsys, launch):
    from floorfirst.results import ExplainLaunchResult

    doc = json.loads(cli_json(capsys, "explain-launch", launch))
    result = ExplainLaunchResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == []
    assert result.document() == doc and list(result.document()) == list(doc)


@pytest.mark.parametrize("args", [[], ["--hardware", "h200"], ["--hardware", "mi355x"]], ids=["all", "h200", "amd"])
def test_hardware_prints_its_models_document(capsys, args):
    from floorfirst.results import HardwareResult
    from planner import builtin_hardware_names

    if args and args[1] not in builtin_hardware_names():
        pytest.skip(f"no built-in {args[1]}")
    doc = json.loads(cli_json(capsys, "hardware", *args))
    result = HardwareResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert [undeclared(g) for g in result.hardware] == [[] for _ in result.hardware]
    assert result.document() == doc and list(result.document()) == list(doc)
    assert [list(g) for g in result.document()["hardware"]] == [list(g) for g in doc["hardware"]]


@pytest.mark.parametrize("args", [[], ["--model", "qwen3.5-35b-a3b"]], ids=["all", "hybrid"])
def test_models_prints_its_models_document(capsys, args):
    from floorfirst.results import ModelsResult

    doc = json.loads(cli_json(capsys, "models", *args))
    result = ModelsResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert [undeclared(m) for m in result.models] == [[] for _ in result.models]
    assert result.document() == doc
    assert [list(m) for m in result.document()["models"]] == [list(m) for m in doc["models"]]


@pytest.mark.parametrize("args", [
    ["--batch-range", "1:256:3", "--context-range", "4k:64k:3"],
    ["--batch-range", "8:4096:3", "--context-range", "32k:256k:2", "--calibration", PRIOR, "--layouts", "dp/ep,tp/ep"],
], ids=["grid", "calibrated"])
def test_regimes_prints_its_models_document(capsys, args):
    from floorfirst.results import RegimesResult

    doc = json.loads(cli_json(capsys, "regimes", *args))
    result = RegimesResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == []
    assert result.document() == doc and list(result.document()) == list(doc)
    assert ("predicted_s" in doc) == ("--calibration" in args)


@pytest.mark.parametrize("args", [[], ["--calibration", PRIOR], ["--threshold", "0.05"]],
                         ids=["floors", "calibrated", "threshold"])
def test_triage_profile_prints_its_models_document(capsys, args):
    from floorfirst.results import TriageProfileResult
    from tests.agent.contracts import PROFILE

    doc = json.loads(cli_json(capsys, "triage", "--profile", str(PROFILE), *args))
    result = TriageProfileResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and [undeclared(r) for r in result.rows] == [[] for _ in result.rows]
    assert result.document() == doc and list(result.document()) == list(doc)
    assert result.rows and ("calibrated" in doc["rows"][0]) == ("--calibration" in args)


SGLANG_TP = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"


@pytest.mark.parametrize("args", [[], ["--batch", "16", "--prefix", "32k"], ["--calibration", PRIOR]],
                         ids=["floors", "batch-prefix", "calibrated"])
def test_thresholds_prints_its_models_document(capsys, args):
    from floorfirst.results import ThresholdsResult

    doc = json.loads(cli_json(capsys, "thresholds", "--engine-args", SGLANG_TP, *args))
    result = ThresholdsResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and [undeclared(c) for c in result.crossovers] == [[], []]
    assert result.document() == doc and list(result.document()) == list(doc)


@pytest.mark.parametrize("args", [
    ["--context", "32k", "--range", "1:512"],
    ["--along", "context", "--batch", "16", "--layouts", "dp/ep,dop/ep"],
    ["--context", "8k", "--calibration", PRIOR],
    ["--context", "32k", "--host-tier", "--model", "deepseek-v3.2"],
], ids=["batch", "context", "calibrated", "host-tier"])
def test_walls_prints_its_models_document(capsys, args):
    from floorfirst.results import WallsResult

    doc = json.loads(cli_json(capsys, "walls", *args))
    result = WallsResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and [undeclared(x) for x in result.layouts] == [[] for _ in result.layouts]
    assert result.document() == doc and list(result.document()) == list(doc)
    assert [list(x) for x in result.document()["layouts"]] == [list(x) for x in doc["layouts"]]


@pytest.mark.parametrize("args", [[], ["--holdout", "layout", "--folds", "3"]], ids=["cv", "holdout"])
def test_validate_prints_its_models_document(capsys, tmp_path, args):
    import re

    from floorfirst.results import ValidateResult
    from tests.agent.contracts import PROFILE

    cal = tmp_path / "cal.json"
    cli_json(capsys, "calibrate", "--profile", str(PROFILE), "--out", str(cal))
    doc = json.loads(cli_json(capsys, "validate", "--calibration", str(cal), "--profile", str(PROFILE), *args))
    result = ValidateResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    held = re.compile(r"^holdout_(model|gpus|layout)_predicted_s$")  # the schema's patternProperties
    assert undeclared(result) == []
    assert [[k for k in (r.model_extra or {}) if not held.match(k)] for r in result.residuals] == \
        [[] for _ in result.residuals]
    assert result.document() == doc and list(result.document()) == list(doc)
    assert result.residuals and bool(result.holdout) == ("--holdout" in args)
