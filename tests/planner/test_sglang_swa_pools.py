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
