"""`floorfirst follow --once FILE` end to end: the recorded stream's document meets its contract,
each taken refit is written to --out (a calibration the other commands load), bad input is one
line and exit 2; and none of the integrations' optional libraries load with the CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from calibration.artifact import load_calibration
from tests.agent.contracts import run_cli, validate
from tests.integrations.conftest import LINE, STREAM


def test_once_meets_its_contract_and_writes_each_refit(tmp_path):
    out = tmp_path / "cal.json"
    doc = run_cli(["follow", "--engine-args", LINE, "--once", str(STREAM), "--refit-every", "64", "--window", "128",
                   "--out", str(out), "--json"])
    validate(doc, "follow")
    assert doc["records"]["accepted"] == 160 and doc["records"]["dropped"] == {"malformed": 3}
    assert [r["taken"] for r in doc["refits"]] == [True, True]
    assert doc["served"]["source"] == "refit" and doc["tables"]["state"] == "current"
    cal = load_calibration(out)
    assert cal.params.overhead_s == pytest.approx(doc["served"]["params"]["overhead_s"])
    assert cal.sources[0].kind == "sglang_fpm" and cal.sources[0].rows == 128
    # the refit calibration is one the rest of floorfirst reads
    validate(run_cli(["floor", "--calibration", str(out), "--json"]), "floor")


def test_a_loaded_calibration_and_no_tables(tmp_path):
    from tests.integrations.conftest import CAL

    doc = run_cli(["follow", "--engine-args", LINE, "--once", str(STREAM), "--calibration", str(CAL),
                   "--refit-every", "1000", "--no-tables", "--json"])
    validate(doc, "follow")
    assert doc["served"]["source"] == "loaded" and doc["refits"] == [] and doc["tables"]["state"] == "off"
    assert doc["residual_by_resource_since_refit"]  # residuals against the loaded calibration


@pytest.mark.parametrize("argv, message", [
    (["--engine-args", LINE], "give --endpoint (live) or --once FILE"),
    (["--engine-args", LINE, "--once", "/nonexistent.jsonl"], "/nonexistent.jsonl"),
    (["--engine-args", LINE, "--once", str(STREAM), "--window", "4"], "window=4"),
    (["--engine-args", LINE, "--once", str(STREAM), "--margin", "-1"], "margin=-1"),
    (["--engine-args", "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8", "--once", str(STREAM)], "SGLang launch line"),
    (["--engine-args", LINE, "--once", str(STREAM), "--out", "/nonexistent/c.json"], "--out"),
    (["--engine-args", LINE, "--once", str(STREAM), "--calibration", str(STREAM)], "calibration"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["follow", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err


def test_the_cli_and_the_libraries_load_none_of_the_optional_stacks():
    code = ("import sys, cli.main as m; m._register_all(); "
            "import integrations.follow, integrations.thresholds, integrations.predictor, integrations.fpm_stream; "
            "heavy = [x for x in ('zmq', 'msgspec', 'starlette', 'uvicorn', 'httpx', 'torch', 'scipy', 'matplotlib') "
            "if x in sys.modules]; print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
