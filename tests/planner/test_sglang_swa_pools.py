"""SGLang's hybrid SWA pools (planner.engines.sglang.swa_pools): gpt-oss-120b on 8 × H200 under TP,
18 full-attention and 18 sliding (128-token) layers, 8 KV heads of 64 split 8 ways, bf16:
F = S = 18 layers × (K + V) 2 × 64 × 2 B = 4,608 B per token on a rank."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import planner
from planner.capacity import capacity, max_concurrency
from planner.engines.base import whole_page_tokens
from planner.engines.sglang import SWA_FULL_TOKENS_RATIO

F = S = 18 * 2 * 64 * 2


def _dep(model="gpt-oss-120b", engine="sglang", attn="tp"):
    m = planner.load_model(model) if isinstance(model, str) else model
    return planner.make_deployment(m, planner.load_hardware("h200"), attn=attn, gpus=8, engine=engine)


def test_the_profiled_tokens_are_re_split_into_a_full_and_a_sliding_pool():
    p = _dep().memory
    assert p.kv_cell_bytes_per_token == F + S == 9216
    profiled = whole_page_tokens(p.kv_budget_bytes, F + S, 1)  # rest // cell, as profile_max_num_token
    # full·F·18 + 0.8·full·S·18 = profiled·(F + S)  →  full = profiled · 2 / 1.8
    full = math.floor(profiled * (F + S) / (F + 0.8 * S))
    swa = math.floor(full * 0.8)
    assert SWA_FULL_TOKENS_RATIO == 0.8
    assert p.kv_pool_tokens == full == p.defaults["full_max_total_num_tokens"]
    assert p.defaults["swa_max_total_num_tokens"] == swa
    assert p.swa_pool_bytes == (full * F, swa * S)
    assert p.kv_pool_bytes == full * F + swa * S <= p.kv_budget_bytes  # both pools fill the budget (to a page)


def test_long_requests_are_held_by_the_full_layers_pool_alone():
    d = _dep()
    p = d.memory
    ctx = 131072.0
    most = max_concurrency(d, [ctx])[0]
    # one request holds 128K tokens in each full layer, a 128-token window in each sliding layer
    assert most == math.floor(p.swa_pool_bytes[0] / (ctx * F))
    c = capacity(d, [ctx])
    assert c.binding_memory == ("full_attention_pool",)
    assert c.distinct_tokens == p.kv_pool_tokens  # TP splits the 8 KV heads: each GPU holds 1/8 of every token
    # one shared pool (what vLLM's hybrid allocator does) would hold almost twice as many
    assert max_concurrency(_dep(engine="vllm"), [ctx])[0] > 1.7 * most
    cost = planner.step_cost(d, planner.DecodeLoad.equal(np.array([most, most + 1]), ctx))
    assert cost.kv_fits.tolist() == [True, False]


def test_short_requests_fill_the_sliding_pool_first():
    d = _dep()
    p = d.memory
    ctx = 128.0  # every layer holds the same 128 tokens: the 0.8-sized sliding pool runs out first
    most = max_concurrency(d, [ctx])[0]
    assert most == math.floor(p.swa_pool_bytes[1] / (ctx * S))
    assert capacity(d, [ctx]).binding_memory == ("sliding_window_pool",)
    cost = planner.step_cost(d, planner.DecodeLoad.equal(np.array([most, most + 1]), ctx))
    assert cost.kv_fits.tolist() == [True, False]  # the step model checks the sliding pool too


def test_architectures_sglang_does_not_split_keep_one_pool(tmp_path):
    cfg = json.loads((planner.models.loader.CARDS_DIR / "gpt-oss-120b.json").read_text())
    cfg["architectures"] = ["SomeOtherSlidingModel"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    p = _dep(str(path)).memory
    assert p.swa_pool_bytes is None and p.window_pool_bytes is None
    assert _dep(engine="vllm").memory.swa_pool_bytes is None


@pytest.mark.parametrize("model", ["gemma-4-26b-a4b", "mimo-v2-flash", "llama-4-maverick"])
def test_every_hybrid_swa_card_gets_the_split(model):
    p = _dep(model).memory
    assert p.swa_pool_bytes is not None and p.swa_pool_bytes[1] > 0
    assert p.describe()["sliding_window_pool_bytes"] == p.swa_pool_bytes[1]


def test_a_smaller_swa_full_tokens_ratio_moves_the_sliding_pool_into_the_full_one():
    d = _dep_ratio(0.5)
    p = d.memory
    profiled = whole_page_tokens(p.kv_budget_bytes, F + S, 1)
    assert profiled == 13_624_398
    # full = floor(profiled · (F + S) / (F + r·S)) = floor(13,624,398 · 9,216 / (4,608 + 0.5 · 4,608))
    #      = 13,624,398 · 4 / 3 = 18,165,864;  swa = floor(0.5 · 18,165,864) = 9,082,932
    assert p.kv_pool_tokens == 18_165_864 == p.defaults["full_max_total_num_tokens"]
    assert p.defaults["swa_max_total_num_tokens"] == 9_082_932
    assert p.defaults["swa_full_tokens_ratio"] == 0.5
    assert p.swa_pool_bytes == (18_165_864 * F, 9_082_932 * S)
    # at 128K a request's full layers bind: floor(18,165,864 / 131,072) = 138 (115 at the default 0.8)
    assert max_concurrency(d, [131072.0])[0] == 138
    assert max_concurrency(_dep(), [131072.0])[0] == 115 == math.floor(15_138_220 / 131072)


def test_capacity_rises_as_the_ratio_falls_and_the_default_is_sglangs():
    most = [max_concurrency(_dep_ratio(r), [131072.0])[0] for r in (1.0, 0.8, 0.5, 0.25, 0.1)]
    assert most == sorted(most) and len(set(most)) == len(most)
    assert most[0] == math.floor(13_624_398 / 131072) == 103  # r = 1: both pools hold the profiled tokens
    assert _dep_ratio(0.8).memory == _dep().memory  # None is SGLang's 0.8
    # short requests fill the sliding pool first: fewer of them fit at a smaller ratio
    assert max_concurrency(_dep_ratio(0.1), [128.0])[0] < max_concurrency(_dep(), [128.0])[0]


def test_the_ratio_is_carried_by_replace_deployment_and_ignored_by_single_pool_models():
    d = planner.replace_deployment(_dep_ratio(0.25), attn="dp")
    assert d.swa_full_tokens_ratio == 0.25 and d.memory.defaults["swa_full_tokens_ratio"] == 0.25
    # SGLang reads the flag only for hybrid SWA models: a one-pool model's plan does not change
    m = planner.load_model("deepseek-v3")
    assert _dep_ratio(0.25, model=m).memory == _dep(model=m).memory


@pytest.mark.parametrize("bad", [0, -1, 0.0, math.nan, math.inf, 1.5])
def test_a_bad_ratio_is_one_spec_error_naming_it(bad):
    with pytest.raises(planner.SpecError, match=r"^swa_full_tokens_ratio=.* must be in \(0, 1\]$"):
        _dep_ratio(bad)


def test_vllm_refuses_the_sglang_flag():
    with pytest.raises(planner.SpecError, match="swa_full_tokens_ratio=0.5 is SGLang's --swa-full-tokens-ratio; engine vllm"):
        _dep_ratio(0.5, engine="vllm")


def _dep_ratio(r, model="gpt-oss-120b", engine="sglang"):
    m = planner.load_model(model) if isinstance(model, str) else model
    return planner.make_deployment(m, planner.load_hardware("h200"), attn="tp", gpus=8, engine=engine,
                                   swa_full_tokens_ratio=r)


def test_mimo_v2_flash_39_sliding_layers_gain_more_from_a_smaller_ratio():
    # 39 sliding layers to 9 full ones: the sliding pool is most of the bytes, so 0.8 → 0.25 more than doubles the full pool
    most = [max_concurrency(_dep_ratio(r, model="mimo-v2-flash"), [131072.0])[0] for r in (None, 0.5, 0.25, 0.1)]
    assert most == [28, 39, 60, 88]
