"""The planning commands end to end, in-process (CliRunner-like via cli.main.main) and one
subprocess run for the import-time budget."""

import json
import subprocess
import sys

import pytest

import planner

from cli.main import main


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def run_json(capsys, *args):
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_floor_json_has_units_in_keys(capsys):
    d = run_json(capsys, "floor", "--batch", "16", "--context", "8k")
    assert d["schema"] == "floorfirst.floor/1"
    for key in ("floor_max_s", "floor_sum_s", "binding", "kv_pool_gib_per_gpu", "decode_tokens_per_s_at_max"):
        assert key in d
    assert d["floor_max_s"] <= d["floor_sum_s"]
    assert set(d["resources"]) == {"hbm", "compute", "network_bytes", "network_messages", "kv_capacity"}


def test_floor_accepts_lists_and_histograms(capsys):
    d = run_json(capsys, "floor", "--attn", "dp", "--context", "4k,4k,64k")
    assert d["batch"] == 3
    h = run_json(capsys, "floor", "--attn", "dp", "--context", "4k*60,64k*4")
    assert h["batch"] == 64


def test_compare_lists_every_layout(capsys):
    d = run_json(capsys, "compare", "--batch", "64", "--context", "8k")
    assert {(x["attn"], x["moe"]) for x in d["layouts"]} == {(a, m) for a in planner.ATTN_LAYOUTS for m in ("ep", "tp")}
    assert d["best_by_max"] is not None
    dense = run_json(capsys, "compare", "--model", "llama-3.1-70b", "--batch", "8", "--context", "8k")
    assert all(x["moe"] == "tp" for x in dense["layouts"]) and len(dense["skipped"]) == len(planner.ATTN_LAYOUTS)


def test_capacity_keys(capsys):
    d = run_json(capsys, "capacity", "--context", "32k")
    by = {(x["attn"], x["moe"]): x for x in d["layouts"]}
    assert by[("dop", "ep")]["distinct_tokens"] > by[("tp", "ep")]["distinct_tokens"]
    assert all("kv_pool_gib_per_gpu" in x and "max_concurrency" in x for x in d["layouts"])


def test_walls_and_regimes_with_plots(capsys, tmp_path):
    w = run_json(capsys, "walls", "--context", "32k", "--plot", str(tmp_path / "w.png"))
    assert (tmp_path / "w.png").stat().st_size > 10_000
    assert all("first_wall" in x and "order" in x for x in w["layouts"])
    r = run_json(capsys, "regimes", "--batch-range", "1:256:5", "--context-range", "1k:128k:4",
                 "--plot", str(tmp_path / "r.png"))
    assert len(r["best"]) == 5 and len(r["best"][0]) == 4
    assert (tmp_path / "r.png").stat().st_size > 10_000


def test_triage_json(capsys):
    d = run_json(capsys, "triage", "--measured-ms", "40", "--attn", "dp", "--batch", "32", "--context", "8k")
    assert d["verdict"] == "above_sum" and d["profile"] is True and d["profile_resource"] == "hbm"


def test_models_and_hardware_json(capsys):
    m = run_json(capsys, "models")
    assert len(m["models"]) == 7
    h = run_json(capsys, "hardware")
    h200 = next(x for x in h["hardware"] if x["name"] == "h200")
    assert h200["ridge_flops_per_byte"]["bf16"] == pytest.approx(989 / 4.8)


@pytest.mark.parametrize("args", [
    ["floor", "--model", "nope"], ["floor", "--gpus", "0"], ["floor", "--gpus", "3"], ["floor", "--batch", "-2"],
    ["floor", "--context", "nan"], ["floor", "--context", "0"], ["floor", "--attn", "xx"], ["floor", "--batch", "x"],
    ["floor", "--mem-fraction", "2"], ["floor", "--kv-dtype", "fp8"], ["floor", "--model", "llama-3.1-70b", "--moe", "ep"],
    ["floor", "--hardware", "/no/such.yaml"], ["walls", "--range", "10:5"], ["regimes", "--batch-range", "1:2:999"],
    ["triage"], ["triage", "--measured-ms", "-3"], ["floor", "--prefill-tokens", "-5"], ["nope"],
    ["floor", "--context", "4k*x"], ["walls", "--plot", "/no/such/dir/w.png"],
])
def test_bad_input_is_one_line_and_exit_2(capsys, args):
    code, out, err = run(capsys, *args)
    assert code == 2
    assert err.startswith("floorfirst: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_malformed_config_json_is_exit_2(capsys, tmp_path):
    p = tmp_path / "config.json"
    p.write_text('{"hidden_size": 1024,')
    code, _, err = run(capsys, "floor", "--model", str(p))
    assert code == 2 and "malformed JSON" in err


def test_import_planner_pulls_no_heavy_modules():
    code = ("import sys, planner, planner.capacity, planner.walls, planner.regimes, planner.triage; "
            "heavy = [m for m in ('torch', 'scipy', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


CAL = "calibration/data/h200-probe-calibration.json"


def test_calibration_adds_predicted_s(capsys):
    f = run_json(capsys, "floor", "--calibration", CAL, "--batch", "8", "--context", "4k")
    # the fitted model adds overhead and imperfect overlap: it never predicts below the max floor
    assert f["predicted_s"] >= f["floor_max_s"]
    c = run_json(capsys, "compare", "--calibration", CAL, "--batch", "8", "--context", "4k")
    assert all("predicted_s" in x for x in c["layouts"])
    w = run_json(capsys, "walls", "--calibration", CAL, "--layouts", "tp/ep")
    assert len(w["layouts"][0]["predicted_s"]) == len(w["layouts"][0]["loads"])
    r = run_json(capsys, "regimes", "--calibration", CAL, "--batch-range", "1:64:3", "--context-range", "1k:8k:2")
    assert set(r["predicted_s"]) == set(r["layouts"])


def test_calibration_for_other_hardware_is_refused(capsys):
    code, _, err = run(capsys, "floor", "--calibration", CAL, "--hardware", "b200")
    assert code == 2 and "h200" in err
