"""`--host-tier` on capacity, compare and walls: the documents carry the tier's walls and its
host-link term; bad tier options are one line and exit code 2."""

from __future__ import annotations

import json

import pytest

from cli.main import main


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


DSV32 = ("-m", "deepseek-v3.2", "-hw", "h200", "-g", "8", "-c", "128k")


def test_capacity_host_tier_json(capsys):
    code, out, _ = run(capsys, "capacity", *DSV32, "--host-tier", "--json")
    assert code == 0
    doc = json.loads(out)
    dp = next(d for d in doc["layouts"] if d["attn"] == "dp" and d["moe"] == "ep")
    h = dp["host_tier"]
    assert h["requests_held_hbm_only"] == 8 and h["host_wall_requests"] == 216
    assert h["requests_held_tiered"] == min(h["hbm_wall_requests"], h["host_wall_requests"]) == dp["max_concurrency"]


def test_compare_host_tier_json(capsys):
    code, out, _ = run(capsys, "compare", *DSV32, "-b", "64", "--host-tier", "--json")
    assert code == 0
    doc = json.loads(out)
    for d in doc["layouts"]:
        assert d["resources"]["host_link"]["time_s"] > 0
        assert d["host_tier"]["requests_held_tiered"] >= d["host_tier"]["requests_held_hbm_only"]
    assert doc["best_by_max"] is not None


def test_compare_without_the_tier_prices_no_host_link(capsys):
    code, out, _ = run(capsys, "compare", *DSV32, "-b", "4", "--json")
    assert code == 0
    assert all(d["resources"]["host_link"]["time_s"] == 0 and "host_tier" not in d for d in json.loads(out)["layouts"])


@pytest.mark.parametrize("args, field", [(("--locality", "1.5"), "locality"), (("--hbm-budget-tokens", "0"), "hbm_budget_tokens")])
def test_bad_tier_options_are_one_line(capsys, args, field):
    code, _, err = run(capsys, "capacity", *DSV32, "--host-tier", *args)
    assert code == 2 and field in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_dense_attention_refuses_the_tier(capsys):
    code, _, err = run(capsys, "capacity", "-m", "deepseek-v3", "-hw", "h200", "-g", "8", "--host-tier")
    assert code == 2 and "needs sparse attention" in err


def test_walls_host_tier_plot(capsys, tmp_path):
    png = tmp_path / "w.png"
    code, out, _ = run(capsys, "walls", *DSV32, "--range", "1:256", "--layouts", "tp/ep", "--host-tier",
                       "--host-page-rows", "64", "--hbm-budget-tokens", "16384", "--plot", str(png), "--json")
    assert code == 0 and png.stat().st_size > 0
    doc = json.loads(out)
    tiered = next(d for d in doc["layouts"] if d["host_tier"])
    assert tiered["walls_requests"]["host_link"] is not None  # PCIe binds for TP in 64-row pages


def test_deepseek_v4_host_tier_tiers_its_c4_layers(capsys):
    """DeepSeek-V4 stacks CSA, HCA and window layers; the tier is priced per group (only the 21 C4
    layers tier) instead of being refused (tests/planner/test_host_tier_groups.py pins the numbers)."""
    code, out, err = run(capsys, "capacity", "-m", "tests/fixtures/hf_configs/deepseek-ai--DeepSeek-V4-Flash/config.json",
                         "-hw", "h200", "-g", "8", "-c", "128k", "--host-tier", "--json")
    assert code == 0, err
    dp = next(d for d in json.loads(out)["layouts"] if d["attn"] == "dp" and d["moe"] == "ep")
    h = dp["host_tier"]
    assert h["requests_held_hbm_only"] == 1336 and h["host_wall_requests"] == 4976
    assert h["requests_held_tiered"] == h["hbm_wall_requests"] == 4136


def test_deepseek_v4_budget_below_its_top_k_is_one_line(capsys):
    code, _, err = run(capsys, "capacity", "-m", "deepseek-v4-flash", "-hw", "h200", "-g", "8", "-c", "128k", "--host-tier",
                       "--hbm-budget-tokens", "256")
    assert code == 2 and "hbm_budget_tokens=256" in err and len(err.strip().splitlines()) == 1


def test_simulate_host_tier_admits_more(capsys):
    args = ("simulate", "-m", "deepseek-v3.2", "-hw", "h200", "-g", "8", "-w", "longprompt", "-n", "24", "--rate", "2",
            "--policy", "dp", "--json")
    code, out, _ = run(capsys, *args)
    assert code == 0
    plain = json.loads(out)
    code, out, _ = run(capsys, *args, "--host-tier")
    assert code == 0
    tiered = json.loads(out)
    assert tiered["completed"] == plain["completed"] == 24
    assert tiered["preemptions"] <= plain["preemptions"]


def test_deepseek_v4_compare_names_the_tiered_groups(capsys):
    code, out, _ = run(capsys, "compare", "-m", "deepseek-v4-flash", "-hw", "h200", "-g", "8", "-c", "128k", "-b", "2048",
                       "--host-tier", "--json")
    assert code == 0
    dp = next(d for d in json.loads(out)["layouts"] if d["attn"] == "dp" and d["moe"] == "ep")
    h = dp["host_tier"]
    assert h["tiered_groups"] == ["dsv4(c4)×21"] and h["tiered_layers_count"] == 21 and h["unit_bytes"] == 584
    assert dp["feasible"] and h["requests_held_hbm_only"] < 2048 <= h["requests_held_tiered"]


def test_simulate_deepseek_v4_with_the_tier_runs(capsys):
    args = ("simulate", "-m", "deepseek-v4-flash", "-hw", "h200", "-g", "8", "-w", "longprompt", "-n", "12", "--rate", "2",
            "--policy", "dp", "--json")
    code, out, err = run(capsys, *args, "--host-tier")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["completed"] == 12 and doc["preemptions"] == 0
