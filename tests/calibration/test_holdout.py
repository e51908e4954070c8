"""Hold-out by group (model, gpus, layout) beside k-fold, and triage against a calibration."""

import json

import numpy as np
import pytest

from calibration.costs import price_profile
from calibration.fit import fit_calibration
from calibration.loaders import load_profile
from calibration.triage import triage_calibrated, triage_profile
from calibration.validate import holdout_predictions, validate
from cli.main import main
from tests.calibration.conftest import synthetic_rows, write_jsonl


@pytest.fixture(scope="module")
def costs(tmp_path_factory):
    p = write_jsonl(tmp_path_factory.mktemp("h") / "p.jsonl", synthetic_rows(noise=0.02, seed=3))
    prof = load_profile(p)
    return prof, price_profile(prof)


def test_holdout_by_layout_predicts_each_group_from_the_others(costs):
    prof, c = costs
    cal = fit_calibration(c, prof.sources)
    h = holdout_predictions(c, cal.priors, "layout")
    assert [g["group"] for g in h.groups] == ["dp/ep", "dp/tp", "tp/ep"]
    assert all(g["rows"] + g["trained_on_rows"] == c.size for g in h.groups)
    assert np.all(np.isfinite(h.predicted_s))
    # the synthetic rows come from one parameter vector: a held-out layout is still predicted well
    assert h.to_json()["median_abs_pct_error"] < 5.0


def test_a_single_group_is_reported_not_raised(costs):
    prof, c = costs
    cal = fit_calibration(c, prof.sources)
    h = holdout_predictions(c, cal.priors, "model")
    (g,) = h.groups
    assert "one model group" in g["skipped"] and np.all(np.isnan(h.predicted_s)) and h.to_json()["median_abs_pct_error"] is None


def test_validate_reports_kfold_and_holdout_side_by_side(costs):
    prof, c = costs
    cal = fit_calibration(c, prof.sources)
    rep = validate(cal, c, folds=3, holdout=("layout", "gpus")).to_json()
    assert rep["cv_median_abs_pct_error"] is not None and [h["by"] for h in rep["holdout"]] == ["layout", "gpus"]
    assert "holdout_layout_predicted_s" in rep["residuals"][0]


def test_calibrated_triage_reads_the_residual_against_the_prediction():
    terms = np.array([[1.0, 1.0, 1.0], [3.0, 0.1, 0.1], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    t = triage_calibrated([1.5, 1.05, 0.5], [1.0, 1.0, 1.0], terms, 0.15)
    # +50 %: worse than expected, profile the largest calibrated term; +5 %: as predicted; −50 %: the
    # calibration doesn't describe the row
    assert t.verdict.tolist() == ["above_prediction", "as_predicted", "below_prediction"]
    assert t.profile.tolist() == [True, False, False] and t.profile_resource[0] == "compute"
    assert t.residual_fraction.tolist() == pytest.approx([0.5, 0.05, -0.5])


def test_triage_profile_with_a_calibration(tmp_path, costs):
    prof, c = costs
    cal = fit_calibration(c, prof.sources)
    from calibration.artifact import save_calibration

    cal_path = tmp_path / "cal.json"
    save_calibration(cal, cal_path)
    res = triage_profile(prof.sources[0]["path"], calibration=cal, calibration_path=str(cal_path))
    counts = res.counts()
    # the rows the fit came from sit near their predictions: most "as predicted", none above the floor sum reason
    assert counts["as_predicted"] >= 0.9 * counts["rows"]
    assert all("calibrated" in r for r in res.rows)


def test_validate_cli_holdout_and_bad_value(tmp_path, costs, capsys):
    prof, c = costs
    cal = fit_calibration(c, prof.sources)
    from calibration.artifact import save_calibration

    cal_path = tmp_path / "cal.json"
    save_calibration(cal, cal_path)
    src = prof.sources[0]["path"]
    with pytest.raises(SystemExit) as ok:
        main(["validate", "--calibration", str(cal_path), "--profile", src, "--folds", "3", "--holdout", "layout", "--json"])
    assert ok.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["holdout"][0]["by"] == "layout"
    with pytest.raises(SystemExit) as bad:
        main(["validate", "--calibration", str(cal_path), "--profile", src, "--holdout", "tokenizer"])
    assert bad.value.code == 2 and "--holdout 'tokenizer'" in capsys.readouterr().err
