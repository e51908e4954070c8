"""Calibration inputs checked at the edge: an artifact outside the fit's ranges is refused at load
(it would make step times NaN and `simulate` loop forever); `calibrate --out` is checked before
the fit and replaces only a calibration (or with --force); a microbench YAML always loads next
time; a CSV profile with a BOM keeps its own model column."""

from __future__ import annotations

import copy
import json
import time

import pytest

import planner
from calibration import artifact, fit
from calibration.artifact import load_calibration
from calibration.loaders import load_profile
from calibration.microbench.results import calibrated_hardware_yaml, load_result
from cli.main import main
from tests.agent.contracts import MICROBENCH, PROFILE, ROOT

VALID = json.loads((ROOT / "calibration" / "data" / "h200-probe-calibration.json").read_text())


def _write(tmp_path, doc, name="c.json"):
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


def _mutated(path: str, value):
    d = copy.deepcopy(VALID)
    *head, last = path.split(".")
    node = d
    for k in head:
        node = node[k]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return d


@pytest.mark.parametrize("path, value, message", [
    ("params.hbm_kv_efficiency", 1e-320, "field 'params.hbm_kv_efficiency'=1e-320: Input should be greater than or equal to 0.001"),
    ("params.network_efficiency", 0.0, "greater than or equal to 0.001"),
    ("params.message_latency_s", 0.05, "field 'params.message_latency_s'=0.05: Input should be less than or equal to 0.01"),
    ("params.overhead_s", 11.0, "less than or equal to 10"),
    ("rates.flops_per_s.bf16", 0.0, "field 'rates.flops_per_s.bf16'=0.0: Input should be greater than or equal to 1"),
    ("rates.flops_per_s.bf16", ..., "needs a 'bf16' rate"),
    ("rates.hbm_bytes_per_s", 1e-310, "greater than or equal to 1"),
])
def test_an_artifact_outside_the_fits_ranges_is_refused_at_load(tmp_path, path, value, message):
    with pytest.raises(planner.SpecError) as exc:
        load_calibration(_write(tmp_path, _mutated(path, value)))
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_an_infinite_latency_is_refused_at_load(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps(_mutated("params.message_latency_s", 1.0)).replace('"message_latency_s": 1.0', '"message_latency_s": 1e400'))
    with pytest.raises(planner.SpecError, match=r"field 'params.message_latency_s'=inf is not a finite number"):
        load_calibration(p)
    assert load_calibration(_write(tmp_path, VALID)).params == artifact.FittedParams(**VALID["params"])


def test_simulate_on_a_subnormal_efficiency_ends_at_once(tmp_path, capsys):
    p = _write(tmp_path, _mutated("params.hbm_kv_efficiency", 1e-320))
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "-n", "20", "--calibration", str(p), "--json"])
    assert exc.value.code == 2 and time.monotonic() - t0 < 30
    assert "hbm_kv_efficiency" in capsys.readouterr().err


def test_calibrate_out_is_checked_before_the_fit(monkeypatch, tmp_path, capsys):
    def no_fit(*a, **k):
        raise AssertionError("the fit ran before --out was checked")

    monkeypatch.setattr(fit, "fit_calibration", no_fit)
    config = tmp_path / "config.json"
    config.write_text('{"hidden_size": 1}')
    for out, message in [("/nonexistent/c.json", "--out /nonexistent/c.json: folder /nonexistent does not exist"),
                         (str(tmp_path / "c.txt"), "use a .json file name"),
                         (str(config), "exists and is not a floorfirst calibration; pass --force to replace it")]:
        with pytest.raises(SystemExit) as exc:
            main(["calibrate", "--profile", str(PROFILE), "--out", out, "--json"])
        assert exc.value.code == 2 and message in capsys.readouterr().err
    assert config.read_text() == '{"hidden_size": 1}'


def test_calibrate_replaces_a_calibration_and_with_force_anything(tmp_path, capsys):
    out = tmp_path / "c.json"
    out.write_text(json.dumps(VALID))
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--profile", str(PROFILE), "--out", str(out), "--json"])
    assert exc.value.code == 0 and load_calibration(out).created_utc != VALID["created_utc"]
    out.write_text("not json")
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--profile", str(PROFILE), "--out", str(out), "--force", "--json"])
    assert exc.value.code == 0 and load_calibration(out).kind == "floorfirst.calibration"
    capsys.readouterr()


def test_a_microbench_yaml_always_loads_next_time(tmp_path):
    doc, _ = load_result(MICROBENCH)
    weird = 'mb\\u"x: #.json'  # a backslash escape, a quote, a colon and a hash: each breaks hand-quoted YAML
    p = tmp_path / "h.yaml"
    p.write_text(calibrated_hardware_yaml(doc["summary"], planner.load_hardware("h200"), weird))
    hw = planner.load_hardware(str(p))
    assert weird in hw.sources["efficiency"] and hw.peak == planner.load_hardware("h200").peak
    with pytest.raises(ValueError, match=r"measured hbm 2.08e-16 of the datasheet peak of h200: below 0.001"):
        calibrated_hardware_yaml({"hbm_copy_bytes_per_s": 1e-3}, planner.load_hardware("h200"), "x")


def test_a_microbench_summary_must_hold_positive_numbers(tmp_path):
    doc = json.loads(MICROBENCH.read_text())
    doc["summary"]["hbm_copy_bytes_per_s"] = "fast"
    with pytest.raises(planner.SpecError, match=r"summary field 'hbm_copy_bytes_per_s'='fast' must be a positive number$"):
        load_result(_write(tmp_path, doc, "m.json"))


def test_a_bom_csv_profile_keeps_its_model_column_over_set(tmp_path):
    p = tmp_path / "p.csv"
    p.write_bytes(b"\xef\xbb\xbfmodel,hardware,gpus,attn,moe,batch,context,step_ms\ndeepseek-v3,h200,8,dp,ep,32,8192,40.0\n")
    prof = load_profile(p, defaults={"model": "llama-3.1-70b"})
    assert [r.row.model for r in prof.rows] == ["deepseek-v3"] and not prof.notes  # no '\ufeffmodel' column ignored
    assert prof.sources[0]["sha256"] == __import__("hashlib").sha256(p.read_bytes()).hexdigest()
