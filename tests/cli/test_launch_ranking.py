"""The recommendation of `compare` and `floor` (issue 32 item 2): the ★ is the fastest feasible layout
the deployment's engine launches (any with --all-layouts), ranked by the step model where one prices
the deployment and by floor_max where none does, and each recommendation prints the line that runs it."""

from __future__ import annotations

import pytest

from planner.launch import parse_launch
from tests.cli.test_planning_cli import run, run_json


def _fastest(rows, key, launchable_only=True):
    ok = [r for r in rows if r["feasible"] and (r["launchable"] or not launchable_only)]
    return min(ok, key=lambda r: (r[key], r["floor_max_s"]))


def test_the_star_skips_layouts_no_engine_flag_runs(capsys):
    c = run_json(capsys, "compare")  # DeepSeek-V3.2 on 8 x H200, SGLang, B=32 at 32K
    rows, rec = c["layouts"], c["recommended"]
    assert c["ranked_by"] == {"key": "predicted_s", "step_model": c["step_model"], "launchable_only": True}
    assert c["step_model"].startswith("prior: h200 × sglang")
    best = _fastest(rows, "predicted_s")
    assert (rec["attn"], rec["moe"]) == (best["attn"], best["moe"]) and rec["launchable"]
    # the fastest of all needs a switching runtime: the ★ passed it by
    top = _fastest(rows, "predicted_s", launchable_only=False)
    assert not top["launchable"] and "needs a switching runtime" in top["launch_reason"]
    assert (top["attn"], top["moe"]) != (rec["attn"], rec["moe"])
    # the line runs the recommendation: read back, it is the same layout
    opts = parse_launch(rec["launch_line"]).options
    assert (opts["attn"], opts["moe"], opts["gpus"]) == (rec["attn"], rec["moe"], 8)
    # --all-layouts lets it take the ★
    a = run_json(capsys, "compare", "--all-layouts")
    assert a["ranked_by"]["launchable_only"] is False
    assert (a["recommended"]["attn"], a["recommended"]["moe"]) == (top["attn"], top["moe"])
    assert a["recommended"]["launch_line"] is None


def test_the_step_model_ranks_where_it_prices_the_table(capsys):
    c = run_json(capsys, "compare")
    rows, rec = c["layouts"], c["recommended"]
    by_floor = _fastest(rows, "floor_max_s")
    # the floors and the prior disagree here: the prior's pick, not the floors', is the ★
    assert (rec["attn"], rec["moe"]) != (by_floor["attn"], by_floor["moe"])
    assert rec["attn"] == _fastest(rows, "predicted_s")["attn"]


def test_the_floors_rank_where_no_model_prices_the_table(capsys):
    # no shipped prior for H20: the datasheet midpoint prices the tokens/s column, the floors rank
    c = run_json(capsys, "compare", "--hardware", "h20", "--model", "qwen3-235b-a22b", "--batch", "16", "--context", "8k")
    assert c["ranked_by"] == {"key": "floor_max_s", "step_model": None, "launchable_only": True}
    best = _fastest(c["layouts"], "floor_max_s")
    assert (c["recommended"]["attn"], c["recommended"]["moe"]) == (best["attn"], best["moe"])
    assert best["attn"] != _fastest(c["layouts"], "predicted_s")["attn"]  # the midpoint would pick another


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_floor_picks_the_star_and_prints_its_line(capsys, engine):
    c = run_json(capsys, "compare", "--engine", engine)
    d = run_json(capsys, "floor", "--engine", engine)
    assert (d["attn"], d["moe"]) == (c["recommended"]["attn"], c["recommended"]["moe"]) and d["launchable"]
    assert d["launch_line"] == c["recommended"]["launch_line"]
    code, out, _ = run(capsys, "floor", "--engine", engine)
    assert code == 0 and f"launch ({engine}):" in out
    # printed so that it pastes: whole, or broken with shell continuations at 100 columns
    assert d["launch_line"].splitlines()[-1] in out.replace(" \\\n  ", " ")
    assert all(len(line) <= 100 for line in out.splitlines() if line.startswith(("python", "vllm", "trtllm", "  --")))


def test_compare_marks_what_it_cannot_launch(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    code, out, _ = run(capsys, "compare")
    flat = " ".join(out.split())  # the table wraps at the terminal's width
    assert code == 0 and "dop/ep †" in flat and "★" in flat and "launch (sglang):" in out
    dagger = [line for line in flat.split("† ")[1:] if line.startswith("dop/")]
    assert dagger and "sglang can't launch it:" in dagger[0] and "needs a switching runtime" in dagger[0]
