"""The host KV tier: host-link rates by granularity, misses, page amplification, the two capacity
walls, and the sixth timed resource in the floors. Golden values show their arithmetic."""

from __future__ import annotations

import math

import numpy as np
import pytest

import planner
from planner.capacity import capacity, max_concurrency
from planner.errors import SpecError
from planner.hardware.host_link import HostLinkSpec
from planner.host_tier import (HostTierSpec, access_pattern, fetched_bytes, host_fraction, page_amplification,
                               working_set_rows)
from planner.resources.vector import TIMED_RESOURCES
from planner.walls import walls
from tests.planner.factories import deployment

CTX = 131072.0
LAYERS = 61  # DeepSeek-V3.2
ROW = 1152.0  # bf16 MLA latent (512 + 64) x 2: the tiered component ('kv')
INDEXER = 132.0  # 128 fp8 + fp32 scale: stays resident


def tiered(attn="dp", **kw):
    return deployment(attn=attn, host_tier=HostTierSpec(**kw))


def test_timed_resources_carry_the_host_link():
    assert TIMED_RESOURCES[-1] == "host_link" and len(TIMED_RESOURCES) == 5
    assert planner.RESOURCES == TIMED_RESOURCES + ("kv_capacity",)


def test_host_link_rate_by_granularity():
    hl = HostLinkSpec()
    assert hl.rate_bytes_per_s(132) == 6.96e9  # the gather kernel's measured 132-B row
    assert hl.rate_bytes_per_s(1152) == 50.9e9
    assert hl.rate_bytes_per_s(10.0) == 6.96e9  # clamped below the measured range
    # between 584 B (27.2) and 656 B (30.4), linear in log(bytes): w = ln(620/584)/ln(656/584)
    w = math.log(620 / 584) / math.log(656 / 584)
    assert hl.rate_bytes_per_s(620) == pytest.approx(27.2e9 + w * 3.2e9)
    # 2 MB blocks: copy per block 51.0 beats the kernel's 51.2? no: the kernel's last point (74 KB) holds 51.2
    assert hl.rate_bytes_per_s(2097152) == 51.2e9
    assert hl.granularity_factor(1152) == pytest.approx(55.3 / 50.9)


def test_page_amplification_formula():
    assert page_amplification(16, 64) == pytest.approx((16 + 64 - 1) / 16)  # 4.9375: the executor measured 4.9x
    assert page_amplification(64, 64) == pytest.approx(127 / 64)  # 1.98: measured 2.0x
    assert page_amplification(16, 1) == 1.0
    assert page_amplification(128, 64, block_tokens=128) == 1.0  # whole blocks the page divides


def test_misses_follow_one_minus_locality_times_host_fraction():
    assert host_fraction(CTX, 4096) == pytest.approx(1 - 4096 / CTX)
    assert host_fraction(2048, 4096) == 0.0  # all of a short request sits in its budget
    # 2048 selected entries of 1152 B, r = 0.9, f = 0.9, 64-row pages of runs of 16
    b = fetched_bytes(2048 * ROW, 0.9, 0.9, page_amplification(16, 64))
    assert b == pytest.approx(2048 * ROW * 0.1 * 0.9 * 4.9375)


def test_step_host_link_bytes_dp_128k():
    """64 requests at 128K on 8 x H200 DP-attention: the busiest owner holds 8; each misses
    2048 * (1 - 0.8) * (1 - 4096/131072) = 396.8 entries per layer."""
    d = tiered("dp")
    c = planner.step_cost(d, planner.DecodeLoad.equal(64, CTX))
    per_req_layer = 2048 * 0.2 * (1 - 4096 / CTX)
    entries = 8 * LAYERS * per_req_layer
    assert c.host_tier.miss_entries[0] == pytest.approx(entries)
    assert c.host_tier.host_link_bytes[0] == pytest.approx(entries * ROW)
    assert c.times.host_link_s[0] == pytest.approx(entries * ROW * (55.3 / 50.9) / 64e9)
    assert c.components["host_link_bytes"]["kv_misses"][0] == pytest.approx(entries * ROW)


def test_host_link_enters_both_floors_and_only_there():
    d = tiered("dp", page_rows=64, hbm_budget_tokens=16384)
    base = planner.replace_deployment(d, host_tier=None)
    load = planner.DecodeLoad.equal([8, 64], CTX)
    a, b = planner.step_cost(d, load), planner.step_cost(base, load)
    np.testing.assert_array_equal(b.times.host_link_s, 0.0)
    for r in ("hbm_s", "compute_s", "network_bytes_s", "network_messages_s"):
        np.testing.assert_allclose(getattr(a.times, r), getattr(b.times, r))
    np.testing.assert_allclose(a.floor_sum_s - b.floor_sum_s, a.times.host_link_s)
    assert np.all(a.floor_max_s >= a.times.host_link_s)


def test_two_capacity_walls_dp_128k():
    d = tiered("dp")
    pool = d.memory.kv_pool_bytes
    hbm_per_req = LAYERS * (INDEXER * CTX + ROW * 4096)  # resident indexer + the fixed 4096-slot budget
    host_per_req = LAYERS * ROW * CTX  # every latent of the request, in host memory
    full_per_req = LAYERS * (ROW + INDEXER) * CTX
    w = capacity(d, [CTX]).host_tier
    assert w.hbm_wall[0] == 8 * math.floor(pool / hbm_per_req)
    assert w.host_wall[0] == 8 * math.floor(250e9 / host_per_req) == 216
    assert w.hbm_only[0] == 8 * math.floor(pool / full_per_req)
    assert w.held[0] == min(w.hbm_wall[0], w.host_wall[0])
    assert str(w.binding[0]) == ("host_memory" if w.host_wall[0] < w.hbm_wall[0] else "hbm_budget")
    assert max_concurrency(d, [CTX])[0] == w.held[0]


def test_tp_keeps_a_host_copy_per_rank():
    """MLA's single latent can't split by heads: under TP every rank stores (and fetches) every
    request, so the host wall is one GPU's host memory over one request's latents."""
    w = capacity(tiered("tp"), [CTX]).host_tier
    assert w.host_wall[0] == math.floor(250e9 / (LAYERS * ROW * CTX)) == 27


def test_step_kv_fits_agrees_with_the_walls():
    d = tiered("dp")
    held = capacity(d, [CTX]).max_concurrency[0]
    c = planner.step_cost(d, planner.DecodeLoad.equal([held, held + 8], CTX))
    assert c.kv_fits.tolist() == [True, False]
    assert c.binding[1] == "kv_capacity"


def test_working_set_rule_refuses_what_the_executor_could_not_run():
    # 64K, f = 0.9: 103 64-row pages (6592 slots) vs 2048 * 4.9375 = 10112 touched rows
    assert working_set_rows(2048, HostTierSpec(hbm_budget_tokens=103 * 64, page_rows=64, run_tokens=16)) == pytest.approx(10112)
    with pytest.raises(SpecError, match="cannot hold one step"):
        tiered("dp", hbm_budget_tokens=103 * 64, page_rows=64)
    tiered("dp", hbm_budget_tokens=205 * 64, page_rows=64)  # 13120 slots hold it (128K, f = 0.9 ran)


def test_dense_attention_has_no_tier():
    m = planner.load_model("deepseek-v3")
    with pytest.raises(SpecError, match="needs sparse attention"):
        access_pattern(m.attention)


def test_walls_see_the_host_link_bind():
    """TP fetches every request's misses on every rank: in 64-row pages the host link binds
    before HBM as the batch grows at 128K."""
    d = tiered("tp", page_rows=64, hbm_budget_tokens=16384)
    w = walls(d, "batch", CTX, 1, 64)
    assert w.walls["host_link"] is not None
    assert "host_link" in w.times_s


def test_a_prefilling_request_holds_one_budget():
    """A step with only a prefill chunk (65,536 cached + 8,192 new tokens) on its DP owner: HBM holds
    the request's indexer keys and one 4,096-slot budget, host memory its latents."""
    d = tiered("dp")
    c = planner.step_cost(d, planner.DecodeLoad.equal(0, 1), prefill_tokens=8192, prefill_context=65536)
    tokens = 65536 + 8192
    assert c.host_tier.hbm_kv_resident_bytes[0] == pytest.approx(LAYERS * (INDEXER * tokens + ROW * 4096))
    assert c.host_tier.host_kv_resident_bytes[0] == pytest.approx(LAYERS * ROW * tokens)
    assert c.host_tier.host_link_bytes[0] == 0.0  # prefill fetches nothing (HiSparse is decode-side)
    assert bool(c.kv_fits[0])
