"""`microbench --json` and `calibrate --from-kernel-db --json` print typed documents
(floorfirst/calibration_results.py) whose schemas are written from the models: the document is its
model's, key for key and in order, every key declared, and one that strays fails its schema."""

from __future__ import annotations

import json

import jsonschema
import pytest

from floorfirst.calibration_results import KernelDbResult, MicrobenchResult
from tests.agent.contracts import MICROBENCH, closed, load_schema
from tests.cli.test_documents_from_models import cli_json, undeclared


def _strays(command: str, doc: dict, broken: list[dict]) -> None:
    validator = jsonschema.Draft202012Validator(closed(load_schema(command)))
    validator.validate(doc)
    for b in broken:
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(b)


def test_microbench_prints_its_models_document(capsys):
    doc = json.loads(cli_json(capsys, "microbench", "--from", str(MICROBENCH)))
    result = MicrobenchResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and result.document() == doc and list(result.document()) == list(doc)
    _strays("microbench", doc, [{**doc, "undeclared_s": 1.0}, {**doc, "gpus": 0},
                                {**doc, "summary": {**doc["summary"], "x_bytes_per_s": -1.0}},
                                {k: v for k, v in doc.items() if k != "device"}])


def test_calibrate_from_kernel_db_prints_its_models_document(tmp_path, monkeypatch, capsys):
    import calibration.kernel_db as kdb
    from tests.calibration.test_kernel_db import _fake_wheel

    gemm = {"gemm_dtype": ["bfloat16", "bfloat16"], "m": [8, 4096], "n": [8192, 4096], "k": [4096, 4096],
            "latency": [0.02, 0.2]}
    monkeypatch.setattr(kdb, "read_parquet", lambda data, *a: gemm if data != b"n" else {
        "op_name": ["all_gather"], "num_gpus": [8], "message_size": [64 << 20], "nccl_dtype": ["half"], "latency": [0.4]})
    doc = json.loads(cli_json(capsys, "calibrate", "--from-kernel-db", "h200_sxm", "--backend", "sglang", "--wheel",
                              str(_fake_wheel(tmp_path)), "--out", str(tmp_path / "rates.json")))
    result = KernelDbResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and all(undeclared(t) == [] for t in result.tables)
    assert result.document() == doc and list(result.document()) == list(doc)
    table = doc["tables"][0]
    _strays("calibrate_kernel_db", doc, [{**doc, "backend": "tgi"}, {**doc, "tables": [{**table, "rows_used": -1}]},
                                         {**doc, "tables": [{**table, "extra": 1}]},
                                         {k: v for k, v in doc.items() if k != "notes"}])


def test_calibrate_prints_its_models_document(tmp_path, capsys):
    from floorfirst.calibration_results import CalibrateResult
    from tests.agent.contracts import PROFILE

    doc = json.loads(cli_json(capsys, "calibrate", "--profile", str(PROFILE), "--out", str(tmp_path / "cal.json")))
    result = CalibrateResult.model_validate({k: v for k, v in doc.items() if k != "schema"})
    assert undeclared(result) == [] and result.document() == doc and list(result.document()) == list(doc)
    _strays("calibrate", doc, [{**doc, "undeclared_s": 1.0}, {**doc, "fitted": ["not_a_parameter"]},
                               {**doc, "params": {**doc["params"], "overhead_s": -1.0}},
                               {**doc, "engines": {"sglang": {**doc["params"]}}},  # shared parameters are not an engine's
                               {k: v for k, v in doc.items() if k != "origin"}])
