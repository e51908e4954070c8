"""Two kinds of memory: per-token KV pages and per-request state slots, as SGLang and vLLM size
them for a hybrid model (Qwen3.5-397B-A17B on 8 × H200: 15 full-attention layers, 45 Gated
DeltaNet layers of 4,268,032 B of state each)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import planner
from planner.capacity import capacity
from planner.engines.sglang import MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO, MAMBA_FULL_MEMORY_RATIO
from planner.engines.vllm import hybrid_block_tokens

STATE_PER_LAYER = 12_288 * 3 * 2 + 64 * 128 * 128 * 4  # conv (bf16) + ssm (fp32) = 4,268,032 B


def _dep(attn="tp", engine="sglang", **kw):
    return planner.make_deployment(planner.load_model("qwen3.5-397b-a17b"), planner.load_hardware("h200"), attn=attn,
                                   moe="ep", gpus=8, engine=engine, **kw)


def test_sglang_mamba_pool_takes_r_over_1_plus_r_of_what_weights_leave():
    d = _dep()
    p = d.memory
    state = 45 * STATE_PER_LAYER / 8  # TP8 splits the 16 key heads (and their states) 8 ways
    assert p.state_bytes_per_request == state
    rest = p.fraction * p.total_bytes - p.weights_bytes
    slots = math.floor(rest * 0.9 / 1.9 / state)  # handle_max_mamba_cache, mamba_full_memory_ratio 0.9
    assert MAMBA_FULL_MEMORY_RATIO == 0.9 and p.defaults["max_mamba_cache_size"] == slots
    assert p.state_pool_bytes == slots * state and p.kv_budget_bytes == pytest.approx(rest - slots * state)
    assert p.max_running_requests == slots // MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO == slots // 3
    # the KV cell counts the 15 full-attention layers only: 15 × 2 KV heads / 2-way split × 512 × 2 B
    assert p.kv_cell_bytes_per_token == 15 * 1 * 512 * 2 == 15_360


def test_the_wall_is_whichever_memory_runs_out_first():
    tp = capacity(_dep(), [8192.0, 131072.0])
    assert tp.binding_memory == ("kv_pages", "kv_pages")
    dop = _dep("dop")
    c = capacity(dop, [8192.0, 131072.0])
    # DOP: each GPU keeps its own requests' whole states, 183.2 MiB each; at 8K the slots // 3 cap binds
    assert c.binding_memory == ("state_slots", "kv_pages")
    assert c.max_concurrency[0] == 8 * dop.memory.max_running_requests
    step = planner.step_cost(dop, planner.DecodeLoad.equal(c.max_concurrency + 8, np.array([8192.0, 131072.0])))
    assert not step.kv_fits.any()


def test_vllm_aligns_the_attention_block_to_the_state_page():
    m = planner.load_model("qwen3.5-397b-a17b")
    # TP8: 533,504 B of state per layer on a rank, 1 KV head × 256 × 2 × 2 B = 1,024 B per token:
    # block = 16 · ⌈533,504 / (16 · 1,024)⌉ = 16 · 33 = 528 tokens (reference §0)
    assert hybrid_block_tokens(m, 8, 16) == 16 * math.ceil(STATE_PER_LAYER / 8 / (16 * 1024)) == 528
    assert _dep(engine="vllm").page_tokens == 528
    assert _dep("dp", engine="vllm").page_tokens == 16 * math.ceil(STATE_PER_LAYER / (16 * 2048)) == 2096
    assert hybrid_block_tokens(planner.load_model("llama-3.1-70b"), 8, 16) == 16  # no recurrent layers
    c = capacity(_dep(engine="vllm"), [131072.0])
    assert c.binding_memory == ("shared_pool",) and c.state_pool_bytes_per_gpu is None


def test_owner_layouts_balance_every_layer_group_by_the_same_request_bytes():
    """One long and fifteen short requests on 8 DOP owners: the busiest owner holds the 128K
    request alone (its KV outweighs two short ones), and the GDN group names the same owner: one
    request's state, not the two a count-balanced assignment would put there."""
    d = _dep("dop")
    load = planner.DecodeLoad.from_lengths([131072.0] + [1024.0] * 15)
    c = planner.step_cost(d, load)
    assert c.kv_resident_bytes[0] == 15 * 2 * 512 * 2 * 131072  # the long request's 15 attention layers
    assert c.state_resident_bytes[0] == 45 * STATE_PER_LAYER  # and its 45 states: one request
