"""The fixed-layout burst (benchmarks/fixed_layouts.py, issue 25): 16 requests arriving together
on 8 GPUs, every layout held fixed, each engine's scheduler. What the published fixed-layout runs
report (shared reference published.md, SPLASH 2026: DeepSeek-V3.2 on 8 × H200, GLM-5.3 on 8 ×
B200) and what the engines' schedulers imply, as orderings:
- DP-attention is the fastest or second-fastest of the four published layouts (TP, CP, DP, DOP) at
  32K–64K prompts and not the slowest at 16K (before issue 25 the loop prefilled one owner at a
  time and made it the slowest at 16K–64K);
- TP is among the two slowest at 64K (the DSA indexer and the latent projections run whole on
  every TP rank: shared reference dsa-in-engines.md §1);
- under SGLang, whose chunk is divided over the DP ranks (8192 // 8), DP-attention's prefill time at
  64K is CP's within 5 % (both split the burst's prefill work 8 ways at chunk // 8 tokens a rank
  per step); vLLM's and TRT-LLM's DP ranks each take a whole budget per step, so theirs is shorter."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from planner.engines.base import engine_names

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("fixed_layouts", ROOT / "benchmarks" / "fixed_layouts.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


@pytest.fixture(scope="module", params=[(c, e) for c in BENCH.CASES for e in engine_names()],
                ids=lambda p: f"{p[0][0]}-{p[1]}")
def case(request):
    (_, model, hw, kv), engine = request.param
    saved = BENCH.INPUTS
    BENCH.INPUTS = [16384, 32768, 65536]
    try:
        return BENCH.run_case(model, hw, kv, engine, lambda s: None)
    finally:
        BENCH.INPUTS = saved


def _at(case, isl):
    return {r["layout"]: r for r in case["rows"] if r["input_tokens"] == isl}


def test_every_layout_serves_the_burst_to_the_end(case):
    for r in case["rows"]:
        assert r["served"], r
        assert r["prefill_steps_s"] > 0 and r["decode_steps_s"] > 0
        assert r["makespan_s"] == pytest.approx(r["prefill_steps_s"] + r["decode_steps_s"], rel=1e-6)


PUBLISHED = ("tp", "cp", "dp", "dop")  # the four layouts the published runs compare


@pytest.mark.parametrize("isl", [16384, 32768, 65536])
def test_dp_attention_is_first_or_second_on_long_bursts(case, isl):
    rows = _at(case, isl)
    order = sorted(PUBLISHED, key=lambda n: rows[n]["makespan_s"])
    if isl == 16384:
        # NOTE: at 16K the four sit within a few % under the shipped priors (GLM-5 on SGLang: DOP,
        # TP, DP within 5 %, DP third): held to not being the slowest, as it was before issue 25
        assert order.index("dp") <= 2, order
    else:
        assert order.index("dp") <= 1, order


def test_tp_is_among_the_two_slowest_at_64k(case):
    rows = _at(case, 65536)
    assert rows["tp"]["rank_by_makespan"] >= len(rows) - 1


def test_dp_prefills_a_64k_burst_as_fast_as_cp_splits_it(case):
    rows = _at(case, 65536)
    ratio = rows["dp"]["prefill_steps_s"] / rows["cp"]["prefill_steps_s"]
    if case["engine"] == "sglang":
        # chunked_prefill_size // 8 a DP rank per step (H200: 8192 // 8 = 1,024; B200: 16384 // 8)
        # against CP's whole chunk over 8 ranks
        lay = {x["layout"]: x for x in case["layouts"]}
        assert lay["dp"]["chunk_tokens_per_group"] * 8 == lay["cp"]["chunk_tokens_per_group"]
        assert rows["dp"]["busiest_group_chunk_tokens_per_step"] == pytest.approx(lay["dp"]["chunk_tokens_per_group"])
        assert ratio == pytest.approx(1.0, abs=0.05)
    else:
        # each engine core's own budget: several times CP's tokens per rank per step, fewer steps
        assert rows["dp"]["busiest_group_chunk_tokens_per_step"] > 4 * 1024
        assert ratio < 1.0


def test_the_script_writes_to_the_folder_it_is_given(tmp_path, monkeypatch):
    monkeypatch.setattr(BENCH, "INPUTS", [1024])
    monkeypatch.setattr(BENCH, "CASES", BENCH.CASES[:1])
    assert BENCH.main(["--out", str(tmp_path), "--engine", "sglang"]) == 0
    assert {p.name for p in tmp_path.iterdir()} == {"fixed_layouts.json", "fixed_layouts.txt"}
