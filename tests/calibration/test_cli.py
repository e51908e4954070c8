"""CLI: calibrate → validate round trip, triage --profile, and bad input as one line with exit 2."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from cli.main import _register_all, app

_register_all()
runner = CliRunner()


def run(*args):
    return runner.invoke(app, list(args), catch_exceptions=True)


def test_calibrate_then_validate_json(tmp_path, synthetic_profile):
    out = tmp_path / "cal.json"
    r = run("calibrate", "--profile", str(synthetic_profile), "--out", str(out), "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["schema"] == "floorfirst.calibrate/1" and doc["rows"] == 90
    r = run("validate", "--calibration", str(out), "--profile", str(synthetic_profile), "--json", "--folds", "3")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)
    assert v["cv_median_abs_pct_error"] < 1.0 and v["rows_below_floor"] == []


def test_triage_profile_function(synthetic_profile):
    from calibration.triage import triage_profile

    res = triage_profile(str(synthetic_profile), 0.15)
    c = res.counts()
    assert c["rows"] == 90 and c["below_floor"] == 0 and c["rejected"] == 0
    assert c["inside"] + c["above_sum"] == 90
    assert all(r["profile"] == (r["verdict"] == "above_sum" and r["residual_fraction"] > 0.15) for r in res.rows)


def test_triage_profile_via_cli(synthetic_profile):
    r = run("triage", "--profile", str(synthetic_profile), "--json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["counts"]["rows"] == 90


@pytest.mark.parametrize("args,match", [
    (["calibrate", "--profile", "/nonexistent.csv"], "profile file not found"),
    (["validate", "--calibration", "/nonexistent.json", "--profile", "x.csv"], "calibration file not found"),
    (["microbench", "--from", "/nonexistent.json"], "microbench file not found"),
    (["calibrate", "--profile", "x.csv", "--loss", "l3"], "loss="),
])
def test_bad_input_is_one_line_exit_2(args, match):
    p = subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True)
    assert p.returncode == 2
    assert match in p.stderr and len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_microbench_refuses_without_cuda():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    p = subprocess.run([sys.executable, "-m", "cli.main", "microbench", "--out", "/tmp/x.json"], capture_output=True, text=True)
    assert p.returncode == 2 and "needs a CUDA GPU" in p.stderr


def test_validate_a_prior_that_holds_every_parameter():
    """A shipped prior holds every parameter fixed, so the folds' refits have nothing free: each fold
    predicts with the prior (cross-validated error = in-sample error), not an IndexError on an empty
    index (it was a traceback)."""
    r = run("validate", "--calibration", "calibration/priors/h200-sglang.json", "--profile",
            "calibration/data/h200x2_step_profile.jsonl", "--json", "--folds", "3")
    assert r.exit_code == 0, r.output
    v = json.loads(r.stdout)
    assert v["rows"] > 0
    assert v["cv_median_abs_pct_error"] == pytest.approx(v["median_abs_pct_error"])
