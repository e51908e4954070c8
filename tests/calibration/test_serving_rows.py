"""Serving rows priced as engines schedule them: chunked prefill (engine defaults), decode-only and
mixed or prefill-only steps weighted per output token, TPOT as benchmark tools define it, and
speculative decoding. Every weight is written out."""

import json

import numpy as np
import pytest

import planner
from calibration.artifact import PARAM_NAMES, predict_from_features, step_features
from calibration.costs import price_profile, rates_for
from calibration.loaders import load_profile
from calibration.serving import default_chunk_tokens, serving_steps
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


def test_vllm_mixes_one_prompt_into_a_fraction_of_the_steps():
    # C = 64, isl 1000, osl 500: 64·1000/500 = 128 prompt tokens admitted per step; the 8192-token
    # budget minus 64 decode tokens holds a whole prompt, so 128/1000 = 12.8 % of the steps carry one
    dec, mix = serving_steps(1000, 500, 64, 1, "vllm", 8192)
    assert (dec.batch, dec.context, dec.prefill_tokens, dec.query_tokens) == (64, 1250.0, 0.0, 1.0)
    assert dec.weight == pytest.approx(1 - 0.128)
    assert (mix.batch, mix.prefill_tokens, mix.prefill_context) == (64, 1000.0, 0.0)
    assert mix.weight == pytest.approx(0.128)


def test_sglang_runs_prefill_as_steps_of_their_own():
    # the same row on SGLang: every output token waits one decode step and 0.128 prefill steps
    dec, pre = serving_steps(1000, 500, 64, 1, "sglang", 8192)
    assert (dec.batch, dec.weight) == (64, 1.0)
    assert (pre.batch, pre.prefill_tokens, pre.weight) == (0.0, 1000.0, pytest.approx(0.128))


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
    assert dec.query_tokens == 4.0 and dec.weight == pytest.approx(1 / 2.5)
    assert pre.weight == pytest.approx(64 * 1000 * 2.5 / 500 / 1000 / 2.5)  # (ρ/s)/τ = 0.32/2.5


def test_replicas_split_the_prompt_stream():
    # 2 replicas of 4 GPUs: each group admits (64/2)·1000/500 = 64 tokens per step
    dec, pre = serving_steps(1000, 500, 64, 2, "sglang", 8192)
    assert dec.batch == 64 and pre.weight == pytest.approx(0.064)


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
    mix = planner.step_cost(dep, planner.DecodeLoad.equal(64, 1250.0), prefill_tokens=1000.0)
    assert costs.measured_s[0] == pytest.approx(0.040)
    assert costs.floor_max_s[0] == pytest.approx(0.872 * dec.floor_max_s[0] + 0.128 * mix.floor_max_s[0])
    x = np.array([TRUE[n] for n in PARAM_NAMES])
    rt = rates_for(dep.hardware)
    want = 0.872 * predict_from_features(step_features(dec, rt), x) + 0.128 * predict_from_features(step_features(mix, rt), x)
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
