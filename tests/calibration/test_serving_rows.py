"""Serving rows priced as engines schedule them: chunked prefill (engine defaults), decode-only and
mixed or prefill-only steps weighted per output token, TPOT as benchmark tools define it, and
speculative decoding. Every weight is written out."""

import json
import math

import numpy as np
import pytest

import planner
from calibration.artifact import PARAM_NAMES, predict_from_features, step_features
from calibration.costs import price_profile, rates_for
from calibration.loaders import load_profile
from calibration.serving import default_chunk_tokens, row_queue, serving_steps
from tests.calibration.conftest import TRUE

GiB = float(1 << 30)
ROW = dict(model="deepseek-v3", hardware="h200", gpus=8, attn="tp", moe="ep")


def _dep(hw="h200", attn="tp", engine="sglang", **hw_changes):
    h = planner.load_hardware(hw)
    if hw_changes:
        h = h.model_copy(update=hw_changes)
    return planner.make_deployment(planner.load_model("deepseek-v3"), h, attn=attn, gpus=8, engine=engine)


def test_engine_default_chunks():
    # SGLang: 8192 below 160 GiB of nvidia-smi memory (H200: 143,771 MiB), 16384 at or above
    # (B200: 183,359 MiB), // dp_size under DP-attention (8192 // 8 = 1024)
    assert default_chunk_tokens("sglang", _dep()) == 8192
    assert default_chunk_tokens("sglang", _dep("b200")) == 16384
    assert default_chunk_tokens("sglang", _dep(attn="dp")) == 1024
    # vLLM's API server: 8192 on ≥ 70 GiB GPUs other than Ampere, else 2048 (the engine model's rule,
    # read whatever engine sized the deployment's memory)
    assert default_chunk_tokens("vllm", _dep(attn="dp")) == 8192
    assert default_chunk_tokens("vllm", _dep("h100", arch="ampere")) == 2048
    assert default_chunk_tokens("vllm", _dep("h100", engine="vllm",
                                             memory=planner.load_hardware("h100").memory.model_copy(
                                                 update={"usable_hbm_bytes": 48 * GiB}))) == 2048
    assert default_chunk_tokens("trtllm", _dep()) == 8192


# λ = 64·1000/500/1000 = 0.128 prompts re-arrive per step (closed loop); a share 1 − e^−0.128 of
# the steps find one or more waiting, 1000·0.128/(1 − e^−0.128) tokens of them on average
F128 = 1 - math.exp(-0.128)
S128 = 1000 * 0.128 / F128


def test_vllm_mixes_one_prompt_into_a_fraction_of_the_steps():
    # C = 64, isl 1000, osl 500: 64·1000/500 = 128 prompt tokens admitted per step; the 8192-token
    # budget minus 64 decode tokens holds them: 1 − e^−0.128 = 12.0 % of the steps carry a chunk
    # of 1065 tokens (1.065 prompts on average), 128 tokens per step in all
    dec, mix = serving_steps(1000, 500, 64, 1, "vllm", 8192)
    assert (dec.batch, dec.context, dec.prefill_tokens, dec.query_tokens) == (64, 1250.0, 0.0, 1.0)
    assert F128 == pytest.approx(0.12015, abs=1e-5) and S128 == pytest.approx(1065.3, abs=0.1)
    assert dec.weight == pytest.approx(1 - F128)
    assert (mix.batch, mix.prefill_context) == (64, 0.0) and mix.prefill_tokens == pytest.approx(S128)
    assert mix.weight == pytest.approx(F128)
    assert mix.weight * mix.prefill_tokens == pytest.approx(128.0)


def test_sglang_runs_prefill_as_steps_of_their_own():
    # the same row on SGLang: every output token waits one decode step and 0.128 prefill steps
    dec, pre = serving_steps(1000, 500, 64, 1, "sglang", 8192)
    assert (dec.batch, dec.weight) == (64, 1.0)
    assert (pre.batch, pre.prefill_tokens, pre.weight) == (0.0, pytest.approx(S128), pytest.approx(F128))


def test_long_prompts_are_cut_into_chunks_that_attend_to_the_earlier_ones():
    # SGLang DP-attention on 8 × H200: 8192 // 8 = 1024-token chunks; a 4000-token prompt is 3.9 of
    # them, mean prefix (4000 − 1024)/2 = 1488; 32·4000/400 = 320 tokens per step → 320/1024 chunk steps
    dec, pre = serving_steps(4000, 400, 32, 1, "sglang", 1024)
    assert (pre.prefill_tokens, pre.prefill_context) == (1024.0, 1488.0)
    assert pre.weight == pytest.approx(320 / 1024)


def test_many_short_prompts_per_step_share_one_chunk():
    # 512 in flight, isl 100, osl 10: 512·100/10 = 5120 tokens per step, more than one prompt:
    # one chunk of 5120 tokens in every step (vLLM budget 8192 − 512 = 7680 holds it)
    kinds = serving_steps(100, 10, 512, 1, "vllm", 8192)
    assert [k.prefill_tokens for k in kinds] == [5120.0] and kinds[0].weight == pytest.approx(1.0)


def test_a_prefill_bound_row_prices_every_step_with_a_full_chunk():
    # 256 · 8000 / 100 = 20480 tokens per step > the 8192 − 256 budget: f capped at 1
    (mix,) = serving_steps(8000, 100, 256, 1, "vllm", 8192)
    assert mix.prefill_tokens == 8192 - 256 and mix.weight == 1.0


def test_speculative_decoding_verifies_k_plus_1_and_divides_by_accepted():
    # k = 3 drafts, τ = 2.5 accepted per step: steps verify 4 query tokens per request; a request's
    # decode is osl/τ steps, so TPOT = step/τ and prompts arrive τ times faster per step
    dec, pre = serving_steps(1000, 500, 64, 1, "sglang", 8192, spec_tokens=3, accept_len=2.5)
    # λ = 64·2.5/500 = 0.32 prompts per step: a prefill step follows 1 − e^−0.32 of the decode steps
    assert dec.query_tokens == 4.0 and dec.weight == pytest.approx(1 / 2.5)
    assert pre.weight == pytest.approx((1 - math.exp(-0.32)) / 2.5)


def test_replicas_split_the_prompt_stream():
    # 2 replicas of 4 GPUs: each group admits (64/2)·1000/500 = 64 tokens per step
    dec, pre = serving_steps(1000, 500, 64, 2, "sglang", 8192)
    assert dec.batch == 64 and pre.weight == pytest.approx(1 - math.exp(-0.064))


def _write(tmp_path, rows, name="serving.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_a_serving_row_is_priced_as_the_weighted_sum_of_its_steps(tmp_path):
    row = {**ROW, "isl": 1000, "osl": 500, "concurrency": 64, "tpot_ms": 40.0, "engine": "vllm"}
    costs = price_profile(load_profile(_write(tmp_path, [row])))
    # the row ran on vLLM: its steps are priced with vLLM's kernels (issue 26)
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn="tp", gpus=8,
                                  engine="vllm")
    dec = planner.step_cost(dep, planner.DecodeLoad.equal(64, 1250.0))
    mix = planner.step_cost(dep, planner.DecodeLoad.equal(64, 1250.0), prefill_tokens=S128)
    assert costs.measured_s[0] == pytest.approx(0.040)
    assert costs.floor_max_s[0] == pytest.approx((1 - F128) * dec.floor_max_s[0] + F128 * mix.floor_max_s[0])
    x = np.array([TRUE[n] for n in PARAM_NAMES])
    rt = rates_for(dep.hardware)
    want = ((1 - F128) * predict_from_features(step_features(dec, rt), x)
            + F128 * predict_from_features(step_features(mix, rt), x))
    assert costs.features.predict(x)[0] == pytest.approx(want[0])


def test_decode_only_steps_stream_fewer_expert_bytes_per_token_than_a_spread_prefill():
    # the old reading put 64·1000/500 = 128 prefill tokens in every step, so every step touched the
    # experts of 192 tokens; engines run most steps with the 64 decodes alone
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn="dp", gpus=8)
    spread = planner.step_cost(dep, planner.DecodeLoad.equal(64, 1250.0), prefill_tokens=128.0)
    per_token = sum(k.weight * planner.step_cost(dep, planner.DecodeLoad.equal(k.batch, k.context), k.prefill_tokens,
                                                 prefill_context=k.prefill_context).components["hbm_bytes"]["experts_weights"][0]
                    for k in serving_steps(1000, 500, 64, 1, "vllm", 8192))
    assert per_token < spread.components["hbm_bytes"]["experts_weights"][0]


def test_engine_comes_from_the_benchmark_backend(tmp_path):
    line = {"backend": "sglang", "completed": 10, "total_input_tokens": 10000, "total_output_tokens": 5000,
            "max_concurrency": 8, "median_tpot_ms": 20.0, **ROW}
    prof = load_profile(_write(tmp_path, [line]))
    assert prof.rows[0].serving.engine == "sglang"
    line["backend"] = "openai-chat"  # not an engine: left to the default
    prof = load_profile(_write(tmp_path, [line], "b.jsonl"))
    assert prof.rows[0].serving.engine is None


@pytest.mark.parametrize("extra,match", [({"spec_tokens": 3}, "needs accept_len"),
                                         ({"spec_tokens": 1, "accept_len": 2.5}, "exceeds spec_tokens"),
                                         ({"engine": "tgi"}, "engine")])
def test_bad_speculative_or_engine_fields_are_row_issues(tmp_path, extra, match):
    row = {**ROW, "isl": 1000, "osl": 500, "concurrency": 64, "tpot_ms": 40.0, **extra}
    prof = load_profile(_write(tmp_path, [row]))
    assert not prof.rows and match in prof.issues[0].message


def test_dp_attention_groups_prefill_independently():
    # SGLang DP8, C = 64, isl 1000, osl 500, chunk 1024 per group: each group runs 8 requests and
    # admits ρ = 8·1000/500 = 16 tokens per step, λ = 0.016 prompts; s = 1000·λ/(1 − e^−λ), f = ρ/s;
    # separate prefill: p = f/(1 + f) of a group's steps prefill; a step has no chunk with
    # probability (1 − p)^8, else 8p/(1 − (1 − p)^8) groups run one; while they do, their own
    # decodes wait: the step runs 64·(8 − k̄)/8 decodes; a token comes every group decode step
    lam = 0.016
    f = 1 - math.exp(-lam)
    p = f / (1 + f)
    none = (1 - p) ** 8
    k = 8 * p / (1 - none)
    dec, pre = serving_steps(1000, 500, 64, 1, "sglang", 1024, groups=8)
    assert pre.prefill_tokens == pytest.approx(1000 * lam / f)
    assert pre.prefill_groups == pytest.approx(k) and 1.0 < k < 1.1
    assert dec.weight == pytest.approx(none / (1 - p))
    assert pre.weight == pytest.approx((1 - none) / (1 - p))
    assert pre.batch == pytest.approx(64 * (8 - k) / 8)
    # vLLM's eight engine cores mix theirs into the step: nobody waits
    dec, mix = serving_steps(1000, 500, 64, 1, "vllm", 8192, groups=8)
    assert mix.batch == 64 and dec.weight + mix.weight == pytest.approx(1.0)


def test_a_step_prices_every_groups_chunk_on_the_mlp_side_and_one_on_the_busiest_rank():
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn="dp", gpus=8)
    load = planner.DecodeLoad.equal(32, 2000.0)
    one = planner.step_cost(dep, load, prefill_tokens=1024.0)
    three = planner.step_cost(dep, load, prefill_tokens=1024.0, prefill_groups=3.0)
    f1, f3 = one.components["flops"], three.components["flops"]
    # the experts (EP over all 8 ranks) run the 32 decodes and every group's chunk: 32 + 3·1024
    # tokens against 32 + 1024; the busiest rank's attention runs its own chunk either way
    assert f3["experts"][0] / f1["experts"][0] == pytest.approx((32 + 3 * 1024) / (32 + 1024))
    for name in ("attention_proj", "attention_core"):
        assert f3[name][0] == pytest.approx(f1[name][0])
    with pytest.raises(planner.SpecError, match="owner groups"):
        planner.step_cost(dep, load, prefill_tokens=1024.0, prefill_groups=9.0)


def test_requests_beyond_the_pool_or_the_cap_wait_instead_of_running():
    # 512 requests of 32,000 + 400/2 tokens on TP8 × H200 (MLA's KV on every rank): the pool holds
    # a few dozen; the rest wait in the queue and the step runs the pool's batch, not 512
    q = row_queue(512, 1, pool_requests=20.0, running_cap=2048.0)
    assert (q.running, q.queued) == (20.0, 492.0)
    q = row_queue(4096, 2, pool_requests=5000.0, running_cap=1024.0)  # per group: 2048 in flight, cap 1024
    assert (q.concurrency, q.running, q.queued) == (2048.0, 1024.0, 1024.0)
    dec, _ = serving_steps(32000, 400, 512, 1, "sglang", 8192, running=20.0)
    assert dec.batch == 20.0
    # TTFT absorbs the wait: 20 running at 50 ms per token finish 20/(400·0.05) = 1 request per
    # second, so a request behind 492 others waits 492 s before its prefill
    assert row_queue(512, 1, pool_requests=20.0).queue_wait_s(0.05, 400) == pytest.approx(492.0)
    assert row_queue(16, 1, pool_requests=20.0).queue_wait_s(0.05, 400) == 0.0


def test_a_row_is_priced_at_the_batch_its_pool_holds(tmp_path):
    from calibration.costs import row_queue_of
    from planner.capacity import max_concurrency

    row = {**ROW, "isl": 32000, "osl": 400, "concurrency": 512, "tpot_ms": 50.0, "engine": "sglang"}
    prof = load_profile(_write(tmp_path, [row]))
    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn="tp", gpus=8,
                                  engine="sglang")
    pool = float(max_concurrency(dep, [32200.0])[0])
    q = row_queue_of(prof.rows[0], dep)
    assert q.running == pytest.approx(pool) and 1 < pool < 100 and q.queued == pytest.approx(512 - pool)
    costs = price_profile(prof)
    kinds = serving_steps(32000, 400, 512, 1, "sglang", 8192, running=pool)
    want = sum(k.weight * planner.step_cost(dep, planner.DecodeLoad.equal(round(k.batch), k.context), k.prefill_tokens,
                                            prefill_context=k.prefill_context).floor_max_s[0] for k in kinds)
    assert costs.floor_max_s[0] == pytest.approx(want)


# the serving loop (runtime_policy/loop.py) runs the engine's scheduler step by step; the row's
# steady-state reading must give the loop's TPOT on the same closed-loop workload: C slots, a queue
# that never empties, output lengths spread around the mean (so finishes are staggered)
CLOSED_LOOP = [(1000, 200, 32), (4000, 400, 64), (200, 100, 128)]


def _combine(model, cost):
    from planner.resources.vector import TIMED_RESOURCES

    t = model.terms_s(cost)[:, 0].copy()
    t[TIMED_RESOURCES.index("compute")] -= np.ravel(cost.fixed_latency_s)[0]
    return model.overhead_s + t.max() + model.alpha * (t.sum() - t.max())


def _closed_loop_tpots(attn, engine, isl, osl, c, n=600):
    from executor.sim import SimExecutor
    from runtime_policy.loop import LoopConfig, serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy
    from runtime_policy.tables import compile_tables, datasheet_model

    dep = planner.make_deployment(planner.load_model("deepseek-v3"), planner.load_hardware("h200"), attn=attn, gpus=8,
                                  engine=engine)
    spec = dep.engine_model.scheduler(dep)
    model = datasheet_model()
    tables = compile_tables(dep, model, max_batch=max(c, 64), max_prefill_tokens=spec.engine_chunk_tokens)
    out = np.random.default_rng(0).integers(osl // 2, osl * 3 // 2 + 1, n)
    res = serve(np.zeros(n), np.full(n, isl), out, tables, FixedPolicy(tables.layouts.index(attn)), Ordering("fcfs"),
                SimExecutor(tables), LoopConfig(max_batch=c))
    tpot = (res.finish_s - res.first_token_s) / (out - 1)
    loop = float(np.mean(tpot[n // 4: 3 * n // 4]))  # past the first wave, before the drain
    kinds = serving_steps(isl, float(np.mean(out)), c, 1, engine, spec.chunk_tokens_per_group,
                          groups=spec.owner_groups, mode=spec.prefill_mode)
    row = sum(k.weight * _combine(model, planner.step_cost(dep, planner.DecodeLoad.equal(round(k.batch), k.context),
                                                           k.prefill_tokens, prefill_context=k.prefill_context,
                                                           prefill_groups=k.prefill_groups)) for k in kinds)
    return loop, row


@pytest.mark.parametrize("engine", sorted(planner.engines.base.engines()))
@pytest.mark.parametrize("attn", ["tp", "dp"])
def test_a_rows_steady_state_gives_the_serving_loops_tpot(engine, attn):
    for isl, osl, c in CLOSED_LOOP:
        loop, row = _closed_loop_tpots(attn, engine, isl, osl, c)
        assert row == pytest.approx(loop, rel=0.06), (isl, osl, c)
