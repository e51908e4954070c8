"""`floorfirst thresholds`: SGLang's runtime TP/CP/DCP crossovers for DeepSeek-V3.2 on 8 × H200
are where `floorfirst regimes` puts them (the decode crossover, on regimes' own grid and floors),
the prefill crossover is where a prefill-only step flips from TP to CP, and the command prints them
as PR #36191's flags."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from integrations.thresholds import DECODE_FLAG, PREFILL_FLAG, thresholds
from tests.agent.contracts import run_cli, validate
from tests.integrations.conftest import CAL, LINE


@pytest.fixture(scope="module", params=["max", "sum"])
def by_floor(request, launched):
    return request.param, thresholds(launched, request.param, batches=(1, 2, 4, 8, 16, 64))


def test_decode_crossovers_are_where_regimes_puts_them(by_floor):
    floor, th = by_floor
    grid = "512:512k:30"
    checked = 0
    for c in th.decode_by_batch:
        doc = run_cli(["regimes", "--engine-args", LINE, "--layouts", "tp/tp,dcp/tp", "--floor", floor,
                       "--batch-range", f"{c.batch}:{c.batch + 1}:2", "--context-range", grid, "--json"])
        ctx = np.array(doc["context_tokens"])
        best = np.array(doc["best"][0])
        tp_fits = np.array([t is not None for t in doc["step_time_s"]["tp/tp"][0]])
        checked += tp_fits.sum()
        if c.status == "never":
            assert (best[tp_fits] == "tp/tp").all()
            continue
        # where TP's KV still fits, regimes picks DCP exactly from the crossover on
        want = np.where(ctx >= c.tokens, "dcp/tp", "tp/tp")
        assert (best[tp_fits] == want[tp_fits]).all(), (floor, c.batch, c.tokens, list(zip(ctx, best)))
    assert checked > 100  # cells where both layouts run


def test_the_decode_crossover_flips_at_its_token(launched, by_floor):
    floor, th = by_floor
    tp = planner.replace_deployment(launched.deployment, attn="tp")
    dcp = planner.replace_deployment(launched.deployment, attn="dcp")
    for c in th.decode_by_batch:
        if c.status != "crossover":
            continue
        ctx = np.array([c.tokens - 1, c.tokens])
        load = planner.DecodeLoad.equal(np.full(2, float(c.batch)), ctx)
        t_tp = getattr(planner.step_cost(tp, load), f"floor_{floor}_s")
        t_dcp = getattr(planner.step_cost(dcp, load), f"floor_{floor}_s")
        assert t_dcp[0] >= t_tp[0] and t_dcp[1] < t_tp[1]


def test_the_prefill_crossover_flips_at_its_token(launched, by_floor):
    floor, th = by_floor
    c = th.prefill
    assert c.status == "crossover" and 1000 < c.tokens < 8192  # inside SGLang's 8K prefill chunk
    tp = planner.replace_deployment(launched.deployment, attn="tp")
    cp = planner.replace_deployment(launched.deployment, attn="cp")
    p = np.array([c.tokens - 1, c.tokens, 2 * c.tokens, 64 * c.tokens])
    load = planner.DecodeLoad.equal(np.zeros(4), 1.0)
    t_tp = getattr(planner.step_cost(tp, load, prefill_tokens=p), f"floor_{floor}_s")
    t_cp = getattr(planner.step_cost(cp, load, prefill_tokens=p), f"floor_{floor}_s")
    assert t_cp[0] >= t_tp[0] and (t_cp[1:] < t_tp[1:]).all()
    assert c.margin_above_fraction == pytest.approx((t_tp[2] - t_cp[2]) / t_cp[2])
    lo, hi = c.band_tokens
    assert lo <= c.tokens <= hi


def test_dsv32_on_8_h200_as_printed(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["thresholds", "--engine-args", LINE])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    th = run_cli(["thresholds", "--engine-args", LINE, "--json"])
    validate(th, "thresholds")
    pre, dec = th["crossovers"]
    assert th["flags"] == [PREFILL_FLAG, str(int(pre["tokens"])), DECODE_FLAG, str(int(dec["tokens"]))]
    assert f"{PREFILL_FLAG} {int(pre['tokens'])}" in " ".join(out.split())
    assert f"{int(dec['tokens']):,}" in out
    # DeepSeek-V3.2 on 8 × H200 by floor_max: CP from 2,457 prefill tokens, DCP from 136,025 tokens of
    # context for one request (and for every context from 8 requests on)
    assert (pre["tokens"], dec["tokens"]) == (2457, 136025)
    assert [b["status"] for b in th["decode_by_batch"]][3:] == ["always"] * (len(th["decode_by_batch"]) - 3)


def test_calibrated_ranking_and_a_plot(tmp_path):
    doc = run_cli(["thresholds", "--engine-args", LINE, "--calibration", str(CAL), "--plot", str(tmp_path / "t.png"),
                   "--batch", "16", "--json"])
    validate(doc, "thresholds")
    assert doc["ranking"] == "calibrated" and doc["crossovers"][1]["batch"] == 16
    assert (tmp_path / "t.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, message", [
    (["--engine-args", "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8"], "flags are SGLang's"),
    (["--engine-args", LINE, "--batch", "0"], "batch=0 must be ≥ 1"),
    (["--engine-args", LINE, "--prefix", "-5"], "--prefix"),
    (["--engine-args", "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --bogus 1"], "--bogus"),
    (["--engine-args", LINE, "--plot", "/nonexistent/t.png"], "--plot"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["thresholds", *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err
