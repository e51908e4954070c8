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
    assert set(d["resources"]) == set(planner.RESOURCES)  # every resource of the registry, the host link too


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
    assert len(m["models"]) == len(planner.builtin_model_names())
    h = run_json(capsys, "hardware")
    h200 = next(x for x in h["hardware"] if x["name"] == "h200")
    assert h200["ridge_flops_per_byte"]["bf16"] == pytest.approx(989 / 4.8)


@pytest.mark.parametrize("args", [
    ["floor", "--model", "nope"], ["floor", "--gpus", "0"], ["floor", "--gpus", "3"], ["floor", "--batch", "-2"],
    ["floor", "--context", "nan"], ["floor", "--context", "0"], ["floor", "--attn", "xx"], ["floor", "--batch", "x"],
    ["floor", "--mem-fraction", "2"], ["floor", "--kv-dtype", "fp9"], ["floor", "--model", "llama-3.1-70b", "--moe", "ep"],
    ["floor", "--model", "deepseek-v3", "--kv-dtype", "fp8_ds_mla"], ["floor", "--engine", "tensorrt"],
    ["floor", "--gpus", "16", "--nodes", "1"], ["floor", "--mem-fraction", "0.9", "--reserve-gib", "10"],
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
    assert len(w["layouts"][0]["predicted_s"]) == len(w["layouts"][0]["loads_requests"])
    r = run_json(capsys, "regimes", "--calibration", CAL, "--batch-range", "1:64:3", "--context-range", "1k:8k:2")
    assert set(r["predicted_s"]) == set(r["layouts"])


def test_calibration_for_other_hardware_is_refused(capsys):
    code, _, err = run(capsys, "floor", "--calibration", CAL, "--hardware", "b200")
    assert code == 2 and "h200" in err


def test_infeasible_is_an_answer_not_a_number(capsys):
    # DeepSeek-V3.2 on 4 × H200: ~171 GB of weights per GPU; exit 0, words, no tokens/s, no negative pool
    d = run_json(capsys, "floor", "--gpus", "4", "--attn", "tp")
    assert d["feasible"] is False and "weights" in d["infeasible_reason"]
    assert d["decode_tokens_per_s_at_max"] is None and d["decode_tokens_per_s_at_sum"] is None
    assert d["resources"]["kv_capacity"]["pool_bytes"] == 0 and d["weights_fit"] is False
    code, out, _ = run(capsys, "floor", "--gpus", "4", "--attn", "tp")
    assert code == 0 and "not feasible" in out and "tokens/s" not in out.split("not feasible")[0]
    auto = run_json(capsys, "floor", "--gpus", "4")
    n = len(planner.ATTN_LAYOUTS) * len(planner.MOE_SPLITS)  # every layout the registries hold
    assert auto["feasible"] is False and auto["layout_choice"].startswith(f"none of the {n} layouts fits")


def test_floor_without_attn_picks_a_feasible_layout(capsys):
    d = run_json(capsys, "floor", "--batch", "32", "--context", "32k")
    c = run_json(capsys, "compare", "--batch", "32", "--context", "32k")
    assert d["feasible"] and (d["attn"], d["moe"]) == (c["recommended"]["attn"], c["recommended"]["moe"])
    assert d["launchable"] and d["ranked_by"] == c["ranked_by"]


def test_compare_ranks_feasible_layouts_first_and_says_why_the_others_are_out(capsys):

    c = run_json(capsys, "compare", "--batch", "64", "--context", "32k")
    flags = [x["feasible"] for x in c["layouts"]]
    assert flags == sorted(flags, reverse=True) and not all(flags)
    key = c["ranked_by"]["key"]  # launchable ones first, each group fastest first by the ranking's time
    ok = [(not x["launchable"], x[key]) for x in c["layouts"] if x["feasible"]]
    assert ok == sorted(ok)
    assert {(o["attn"], o["moe"]) for o in c["out"]} == {(x["attn"], x["moe"]) for x in c["layouts"] if not x["feasible"]}
    assert all("exceeds its pool" in o["reason"] for o in c["out"])
    # at 64 x 32K no layout SGLang launches fits DeepSeek-V3.2 on 8 x H200: no ★, and the reason why
    assert c["recommended"] is None and c["best_by_max"] is not None
    code, out, _ = run(capsys, "compare", "--batch", "64", "--context", "32k")
    assert code == 0 and "out: tp/ep: KV" in out


def test_capacity_reports_usable_and_datasheet_bytes_and_the_engine(capsys):
    d = run_json(capsys, "capacity", "--context", "32k")
    assert d["usable_hbm_bytes_per_gpu"] == 150_109_880_320 and d["datasheet_hbm_bytes_per_gpu"] == 141e9
    tp = next(x for x in d["layouts"] if (x["attn"], x["moe"]) == ("tp", "ep"))
    assert tp["mem_fraction"] == 0.897 and tp["memory"]["engine"] == "sglang"
    assert tp["memory"]["reserve_terms"]["chunked_prefill_activations_mib"] == 12288
    v = run_json(capsys, "capacity", "--context", "32k", "--engine", "vllm")
    assert v["engine"] == "vllm" and all(x["mem_fraction"] == 0.9 for x in v["layouts"])


def test_two_node_deployments_are_answered(capsys):
    for cmd in (["compare", "--batch", "64", "--context", "8k"], ["capacity", "--context", "8k"],
                ["walls", "--context", "8k", "--layouts", "tp/ep,dp/ep", "--range", "1:256"],
                ["regimes", "--batch-range", "1:256:3", "--context-range", "4k:32k:2"],
                ["triage", "--measured-ms", "30", "--attn", "dp", "--batch", "64", "--context", "8k"]):
        d = run_json(capsys, *cmd, "--model", "deepseek-v3.2", "--hardware", "h20", "--gpus", "16")
        assert d.get("nodes", 2) == 2
    tp16 = run_json(capsys, "floor", "--hardware", "h20", "--gpus", "16", "--attn", "tp", "--context", "8k")
    assert tp16["nodes_per_group"] == 2 and tp16["resources"]["network_bytes"]["bytes_by_tier"]["scaleout"] > 0
    assert tp16["resources"]["network_messages"]["count_by_tier"]["scaleout"] == 123
    d = run_json(capsys, "floor", "--gpus", "8", "--nodes", "2", "--attn", "tp")
    assert d["nodes_per_group"] == 2


def test_kv_dtype_fp8_on_a_dsa_model_is_the_dsa_record(capsys):
    d = run_json(capsys, "capacity", "--kv-dtype", "fp8", "--context", "32k")
    assert all(x["kv_dtype"] == "fp8_dsa" and x["kv_bytes_per_token"] == (656 + 132) * 61 for x in d["layouts"])


def test_regimes_break_a_floor_max_tie_as_compare_does():
    """DCP and DOP tie on floor_max at 64 requests of 32k (the same HBM bytes); compare ranks DOP
    first by floor_sum, and regimes picks the same layout (argmin alone took the first registered)."""
    from tests.agent.contracts import run_cli

    reg = run_cli(["regimes", "--batch-range", "32:64:2", "--context-range", "16k:32k:2", "--json"])
    cmp = run_cli(["compare", "--batch", "64", "--context", "32k", "--json"])
    t = reg["step_time_s"]
    i, j = reg["batch"].index(64), reg["context_tokens"].index(32768.0)
    assert t["dcp/tp"][i][j] == t["dop/tp"][i][j]
    assert reg["best"][i][j] == f"{cmp['best_by_max']['attn']}/{cmp['best_by_max']['moe']}" == "dop/tp"
