"""Regimes name ties as ties (layouts within a stated margin of the best step time) and carry the
runner-up's margin per cell; capacity's title says the KV dtype."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from planner.regimes import TIE_MARGIN, regimes
from tests.agent.contracts import run_cli, validate

B = np.array([1.0, 8.0, 64.0])
C = np.array([1024.0, 16384.0, 262144.0])


@pytest.fixture(scope="module")
def deps():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    return [planner.make_deployment(m, hw, attn=a, moe=e, gpus=8) for a in ("tp", "dp", "dcp", "dop") for e in ("tp", "ep")]


def test_ties_and_margins_follow_the_step_times(deps):
    reg = regimes(deps, B, C)
    for i in range(B.size):
        for j in range(C.size):
            t = reg.times_s[:, i, j]
            fits = np.sort(t[np.isfinite(t)])
            tied = reg.tie_labels(i, j)
            if fits.size == 0:
                assert tied == [] and np.isnan(reg.runner_up_margin[i, j])
                continue
            assert tied[0] == reg.best_label(i, j)
            assert set(tied) == {reg.labels[k] for k in range(len(deps)) if t[k] <= fits[0] * (1 + TIE_MARGIN)}
            want = fits[1] / fits[0] - 1 if fits.size > 1 else np.inf
            assert reg.runner_up_margin[i, j] == pytest.approx(want)
            assert (len(tied) > 1) == (reg.runner_up_margin[i, j] <= TIE_MARGIN)


def test_dcp_and_dop_tie_where_they_move_the_same_bytes_and_tp_wins_alone_at_batch_1(deps):
    reg = regimes(deps, B, C)
    # B = 8 at 16k: DOP and DCP read the same HBM bytes (TP-sharded weights, 1/T of the KV): a tie,
    # not a DOP stripe
    assert set(reg.tie_labels(1, 1)) >= {"dop/tp", "dcp/tp"} and reg.runner_up_margin[1, 1] == pytest.approx(0.0)
    # B = 1 at 1k: TP reads a request's KV on every rank but nothing replicated: 37 % ahead of the next
    assert reg.tie_labels(0, 0) == ["tp/tp"] and reg.runner_up_margin[0, 0] == pytest.approx(0.369, abs=0.001)


def test_the_margin_is_a_knob(deps):
    exact = regimes(deps, B, C, tie_margin=0.0)
    wide = regimes(deps, B, C, tie_margin=0.5)
    assert exact.tied.sum() <= regimes(deps, B, C).tied.sum() < wide.tied.sum()
    assert set(exact.tie_labels(1, 1)) >= {"dop/tp", "dcp/tp"}  # equal times tie at a zero margin
    assert wide.tie_labels(0, 0)[:2] == ["tp/tp", exact.labels[int(np.argsort(exact.times_s[:, 0, 0])[1])]]
    with pytest.raises(planner.SpecError, match=r"tie_margin=1.5 must be a fraction in \[0, 1\)"):
        regimes(deps, B, C, tie_margin=1.5)


def test_regimes_json_and_table_show_ties(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    doc = run_cli(["regimes", "--json", "--batch-range", "1:64:3", "--context-range", "1k:256k:3"])
    validate(doc, "regimes")
    assert doc["tie_margin_fraction"] == TIE_MARGIN
    assert doc["tied"][1][1][:2] == ["dop/tp", "dcp/tp"] and doc["runner_up_margin_fraction"][1][1] == 0.0
    assert doc["tied"][2][2] == [] and doc["runner_up_margin_fraction"][2][2] is None
    from cli.main import main

    with pytest.raises(SystemExit):
        main(["regimes", "--batch-range", "1:64:3", "--context-range", "1k:256k:3"])
    out = capsys.readouterr().out
    assert "≈dcp/tp" in out and "+37%" in out and "≈ = a tie: also within 1 % of the best" in out


def test_capacity_title_names_the_kv_dtype(capsys, monkeypatch):
    from cli.main import main

    monkeypatch.setenv("COLUMNS", "200")  # the title on one line
    with pytest.raises(SystemExit):
        main(["capacity", "--model", "qwen3-235b-a22b", "--kv-dtype", "fp8_e4m3", "--engine", "vllm"])
    assert "[fp8 KV, bf16 weights]" in capsys.readouterr().out
