"""The host KV tier over a stack of several attention groups (DeepSeek-V4: window-only, C4/CSA and
C128/HCA layers) and the access patterns the variants declare. Golden values show their arithmetic.

DeepSeek-V4-Flash (43 layers: 2 window-only, 21 C4, 20 C128; fp8 records): an entry is 584 B, an
indexer key 132 B; a C4 layer holds L/4 compressed entries and selects index_topk = 512 of them.
At L = 131,072 a C4 layer holds E = 32,768 entries, so a budget of 4,096 entry slots leaves
f = 1 − 4096/32768 = 0.875 of them only in host memory."""

from __future__ import annotations

import math

import numpy as np
import pytest

import planner
from planner.capacity import capacity
from planner.errors import SpecError
from planner.host_capacity import decode_tier
from planner.host_tier import (HostTierSpec, access_pattern, check_tier, host_fraction, tiered_groups, tiered_kinds,
                               tiered_kv_fraction)
from planner.models.attention.base import TOKEN
from planner.models.loader import builtin_model_names
from tests.planner.factories import deployment

CTX = 131072.0
ENTRY, INDEXER_KEY, WINDOW = 584.0, 132.0, 128
C4, C128, SWA, LAYERS = 21, 20, 2, 43
ENTRIES = CTX / 4  # 32,768 compressed entries per C4 layer
STATE = 12206080.0  # compressor rings per request, all layers (dsv4.py's worked numbers)

TIERED_PER_REQ = C4 * ENTRIES * ENTRY  # 401,866,752 B: every C4 compressed entry, in host memory
RESIDENT_PER_REQ = (LAYERS * WINDOW * ENTRY  # 3,214,336: every layer's 128-token window
                    + C4 * ENTRIES * INDEXER_KEY  # 90,832,896: C4 indexer keys (scanned every step)
                    + C128 * (CTX / 128) * ENTRY)  # 11,960,320: C128 entries (attended densely)
BUDGET_PER_REQ = C4 * 4096 * ENTRY  # 50,233,344: 4,096 entry slots per C4 layer


def flash(attn="dp", **kw):
    return deployment(model="deepseek-v4-flash", attn=attn, host_tier=HostTierSpec(**kw))


def test_the_flash_stack_tiers_only_its_c4_layers():
    m = planner.load_model("deepseek-v4-flash")
    groups = tiered_groups(m)
    assert [(v.describe(), n) for v, n, _ in groups] == [("dsv4(c4)", C4)]
    pat = groups[0][2]
    assert pat.tiered == ("compressed",) and pat.tokens_per_entry == 4.0 and pat.selected_entries == 512.0
    assert host_fraction(CTX, 4096, 4.0) == pytest.approx(0.875)  # in entries, not 1 − 4096/131072


def test_flash_bytes_per_request_tiered_and_resident_dp_128k():
    """DP-attention, 8 requests of 128K: the busiest owner holds one."""
    t = decode_tier(flash("dp"), planner.DecodeLoad.equal(8, CTX))
    assert TIERED_PER_REQ == 401866752.0 and RESIDENT_PER_REQ == 106007552.0
    assert t.host_kv_resident_bytes[0] == pytest.approx(TIERED_PER_REQ)
    assert t.hbm_kv_resident_bytes[0] == pytest.approx(RESIDENT_PER_REQ + BUDGET_PER_REQ)  # 156,240,896 B
    assert t.tiered_layers == C4 and t.tiered_groups == ("dsv4(c4)×21",) and t.unit_bytes == ENTRY
    # without the tier the same request holds 507,874,304 B of pages in HBM (+ its 12.2 MB of rings)
    base = planner.replace_deployment(flash("dp"), host_tier=None)
    kv, state, _ = planner.step.decode_resident_bytes(base, planner.DecodeLoad.equal(8, CTX))
    assert kv[0] == pytest.approx(TIERED_PER_REQ + RESIDENT_PER_REQ) and state[0] == pytest.approx(STATE)


def test_flash_host_link_bytes_per_step_dp_128k():
    """B = 64 on 8 owners: 8 requests on the busiest; each C4 layer misses 512 · (1 − 0.8) · 0.875 =
    89.6 entries per request; C128 and window layers fetch nothing."""
    c = planner.step_cost(flash("dp"), planner.DecodeLoad.equal(64, CTX))
    entries = 8 * C4 * 512 * 0.2 * 0.875  # 15,052.8
    assert c.host_tier.miss_entries[0] == pytest.approx(entries)
    assert c.host_tier.host_link_bytes[0] == pytest.approx(entries * ENTRY)  # 8,790,835.2 B
    # 584-B rows move at the gather kernel's 27.2 GB/s: 55.3/27.2 contiguous-equivalent bytes each
    assert c.times.host_link_s[0] == pytest.approx(entries * ENTRY * (55.3 / 27.2) / 64e9)  # 0.279 ms
    assert c.components["host_link_bytes"]["kv_misses"][0] == pytest.approx(entries * ENTRY)


def test_flash_two_walls_dp_128k():
    d = flash("dp")
    pool = d.memory.kv_pool_bytes
    assert d.memory.state_wall_bytes is None  # the rings share the KV pool (sglang here)
    w = capacity(d, [CTX]).host_tier
    assert w.hbm_wall[0] == 8 * math.floor(pool / (RESIDENT_PER_REQ + BUDGET_PER_REQ + STATE)) == 4136
    assert w.host_wall[0] == 8 * math.floor(250e9 / TIERED_PER_REQ) == 4976
    assert w.hbm_only[0] == 8 * math.floor(pool / (TIERED_PER_REQ + RESIDENT_PER_REQ + STATE)) == 1336
    assert w.held[0] == 4136 and str(w.binding[0]) == "hbm_budget"


def test_flash_tp_keeps_a_host_copy_per_rank():
    """V4's single latent replicates under TP: every rank stores every request's C4 entries."""
    w = capacity(flash("tp"), [CTX]).host_tier
    assert w.host_wall[0] == math.floor(250e9 / TIERED_PER_REQ) == 622
    assert w.held[0] == min(w.hbm_wall[0], w.host_wall[0]) == 622


def test_untiered_groups_keep_their_kv_and_fetch_nothing():
    """The tier's HBM saving is the C4 group's alone: all-in-HBM bytes − tiered bytes + budget."""
    d = flash("dop")
    load = planner.DecodeLoad.equal([64, 512], [CTX, 2 * CTX])
    kv, _, _ = planner.step.decode_resident_bytes(planner.replace_deployment(d, host_tier=None), load)
    t = decode_tier(d, load)
    np.testing.assert_allclose(kv - t.hbm_kv_resident_bytes, t.host_kv_resident_bytes
                               - t.host_kv_resident_bytes * 4096 / (load.lengths[:, 0] / 4))
    # misses of the 21 C4 layers only: 8 and 64 requests on the busiest DOP owner, f = 0.875 at 128K
    # (32,768 entries) and 1 − 4096/65536 = 0.9375 at 256K
    np.testing.assert_allclose(t.miss_entries, [8 * C4 * 512 * 0.2 * 0.875, 64 * C4 * 512 * 0.2 * 0.9375])


def test_a_budget_below_the_c4_top_k_is_refused():
    with pytest.raises(SpecError, match="dsv4\\(c4\\) selects 512 entries"):
        flash("dp", hbm_budget_tokens=511)
    flash("dp", hbm_budget_tokens=512)


def test_no_tierable_group_is_one_line():
    m = planner.load_model("deepseek-v3")
    with pytest.raises(SpecError, match="needs sparse attention; deepseek-v3 has no layer group") as e:
        check_tier(m, HostTierSpec())
    assert "\n" not in str(e.value) and "dsv4" in str(e.value)


def test_the_tiered_fraction_of_a_token_is_layer_weighted():
    """Of `kv_bytes_per_token` (below every window), the tiered part: DSV3.2 bf16 61·1152 / 61·1284;
    Flash: 21 C4 layers × 584/4 = 3,066 B of 2·584 + 21·(584 + 146 + 33) + 20·(584 + 584/128) = 28,962.25 B."""
    assert tiered_kv_fraction(planner.load_model("deepseek-v3.2"), "bf16") == pytest.approx(1152 / 1284)
    m = planner.load_model("deepseek-v4-flash")
    assert m.kv_bytes_per_token("fp8") == pytest.approx(28962.25)
    assert tiered_kv_fraction(m, "fp8") == pytest.approx(3066 / 28962.25)
    assert tiered_kv_fraction(planner.load_model("deepseek-v3"), "bf16") == 0.0


def test_pro_tiers_its_c4_layers_on_8_h200():
    """DeepSeek-V4-Pro (30 C4 with index_topk 1024, 31 C128) fits 8 × H200 under DOP/TP layouts."""
    d = deployment(model="deepseek-v4-pro", attn="dop", host_tier=HostTierSpec())
    t = decode_tier(d, planner.DecodeLoad.equal(8, CTX))
    assert t.tiered_groups == ("dsv4(c4)×30",)
    assert t.host_kv_resident_bytes[0] == pytest.approx(30 * ENTRIES * ENTRY)
    w = capacity(d, [CTX]).host_tier
    assert w.held[0] > w.hbm_only[0] > 0


def test_block_sparse_tiers_its_sparse_layers_and_counts_its_blocks():
    """MiniMax-M3: 57 block-sparse layers tier; 3 GQA layers stay resident. A query reads
    (top-k + fixed) blocks of 128 token rows: the working set counts those rows, not the blocks."""
    m = planner.load_model("minimax-m3")
    (v, n, pat), = tiered_groups(m)
    assert v.kind == "block_sparse" and n == 57
    assert pat.selected_entries == (v.topk_blocks + v.fixed_blocks) * v.block_tokens
    with pytest.raises(SpecError, match="cannot hold one step"):
        check_tier(m, HostTierSpec(hbm_budget_tokens=int(pat.selected_entries) - 1))


CARDS = builtin_model_names()


@pytest.mark.parametrize("card", CARDS)
def test_declared_patterns_name_the_variants_components(card):
    """Conformance: a declared pattern's tiered and resident names are its kv_stored_bytes
    components, each exactly once, the tiered ones of 'token' kind (they grow with L)."""
    for v, _ in planner.load_model(card).mixers:
        pat = v.host_access() if v is not None else None
        if pat is None:
            continue
        kv_dtype = v.supported_kv_dtypes()[-1]
        comps = set(v.kv_stored_bytes(np.ones(1), kv_dtype))
        assert set(pat.tiered) | set(pat.resident) == comps and not set(pat.tiered) & set(pat.resident)
        assert all(v.memory_kind(k) == TOKEN for k in pat.tiered)
        assert pat.tokens_per_entry >= 1 and pat.selected_entries >= 1 and pat.block_entries >= 1 and pat.source
        if v.topk_tokens() is not None:
            assert access_pattern(v) == pat


def test_every_kind_that_declares_a_pattern_is_checked():
    """The registry's kinds whose module declares a pattern (no central list) all reach the check
    above through some card."""
    seen = {v.kind for c in CARDS for v, _ in planner.load_model(c).mixers if v is not None and v.host_access()}
    assert set(tiered_kinds()) == seen == {"dsa", "dsv4", "block_sparse"}


@pytest.mark.parametrize("attn", ["dp", "dop", "tp"])
def test_step_cost_prices_every_group_as_the_walls_do(attn):
    """step_cost sums the groups on its chosen candidate rank: its resident bytes are the walls'
    decode_tier, and its kv_fits flips exactly at the walls' count."""
    d = flash(attn)
    held = capacity(d, [CTX]).max_concurrency[0]
    load = planner.DecodeLoad.equal([held, held + 8], CTX)
    c = planner.step_cost(d, load)
    np.testing.assert_allclose(c.kv_resident_bytes, decode_tier(d, load).hbm_kv_resident_bytes)
    assert c.kv_fits.tolist() == [True, False]


def test_cp_ranks_keep_whole_windows_and_a_slice_of_the_entries():
    """CP splits each request's tokens over the 8 ranks but every rank keeps a whole 128-token window:
    the rank's tiered bytes are its slice of the C4 entries, 16,384 tokens → 4,096 entries per C4
    layer and request, not the whole-request tiered fraction of its bytes (which would count
    window bytes as tiered)."""
    t = decode_tier(flash("cp"), planner.DecodeLoad.equal(8, CTX))
    assert t.host_kv_resident_bytes[0] == pytest.approx(8 * C4 * (CTX / 8 / 4) * ENTRY)  # 8 × 50,233,344 B
