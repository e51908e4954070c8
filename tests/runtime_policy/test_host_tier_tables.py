"""The serving loop's view of a host KV tier (runtime_policy/host_tier_tables.py): the host-link
term per request, the KV walls as tokens, moves that carry host pages, and a simulated run that
holds more requests with the tier. Golden values show their arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

import planner
from executor.sim import simulate
from planner.host_tier import HostTierSpec
from planner.resources.vector import TIMED_RESOURCES
from planner.host_capacity import tier_walls
from runtime_policy.kv_ledger import ledger_admits
from runtime_policy.loop import LoopConfig
from runtime_policy.tables import compile_tables
from runtime_policy.transitions import plan_transition
from runtime_policy.workloads import Workload

HOST = TIMED_RESOURCES.index("host_link")
LAYERS, ROW, INDEXER, CTX = 61, 1152.0, 132.0, 131072.0


@pytest.fixture(scope="module")
def pair():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="dp", gpus=8)
    t = planner.replace_deployment(d, host_tier=HostTierSpec())
    return d, t, compile_tables(d, max_batch=256, max_prefill_tokens=1024), compile_tables(t, max_batch=256, max_prefill_tokens=1024)


def test_without_a_tier_nothing_crosses_the_host_link(pair):
    _, _, plain, _ = pair
    assert np.all(plain.c1_s[:, HOST] == 0) and np.all(plain.c2_s[:, HOST] == 0)
    assert np.all(plain.base_s[:, :, HOST] == 0)
    assert plain.host_kv_fraction == 0.0


def test_host_link_seconds_per_request_at_f_one(pair):
    """A decode request past its budget misses 2048 · (1 − 0.8) entries per layer: 61 layers of
    1152-B rows at the gather kernel's 50.9 GB/s shape of the 64 GB/s peak (× 55.3/50.9)."""
    _, _, _, tiered = pair
    per_request_s = 2048 * 0.2 * LAYERS * ROW * (55.3 / 50.9) / 64e9
    for name in ("tp", "dp", "dop"):  # every rank (TP) or the owner fetches the request's misses
        i = tiered.layouts.index(name)
        assert tiered.c1_s[i, HOST] * 2048 == pytest.approx(per_request_s, rel=1e-9)
    for name in ("cp", "dcp"):  # each rank holds 1/8 of every request's tokens
        i = tiered.layouts.index(name)
        assert tiered.c1_s[i, HOST] * 2048 == pytest.approx(per_request_s / 8, rel=1e-9)


def test_kv_walls_as_tokens_at_the_reference_context(pair):
    d, _, plain, tiered = pair
    i = tiered.layouts.index("dp")
    pool = d.memory.kv_pool_bytes
    hbm_per_req = LAYERS * (INDEXER * CTX + ROW * 4096)
    host_per_req = LAYERS * ROW * CTX
    held = min(pool / hbm_per_req, 250e9 / host_per_req)  # requests of 128K one owner holds
    assert tiered.request_slack_tokens == 64  # one page: DSA has no windows or states
    # the ledger's bytes of `held` requests: context + slack each
    assert tiered.info.kv_pool_bytes[i] / tiered.kv_bytes_per_token == pytest.approx(held * (CTX + 64), rel=1e-9)
    assert plain.info.kv_pool_bytes[i] / plain.kv_bytes_per_token == pytest.approx(pool / (LAYERS * (ROW + INDEXER)), rel=1e-9)
    assert tiered.host_kv_fraction == pytest.approx(ROW / (ROW + INDEXER))
    # TP keeps every request on every rank, in host memory too: its host wall binds, 27.1 requests
    i = tiered.layouts.index("tp")
    assert tiered.info.kv_pool_bytes[i] / tiered.kv_bytes_per_token == pytest.approx(250e9 / host_per_req * (CTX + 64), rel=1e-9)


@pytest.fixture(scope="module")
def dsv4_tiered():
    m, hw = planner.load_model("deepseek-v4-flash"), planner.load_hardware("h200")
    out = {}
    for attn in ("dp", "tp", "cp", "dop"):
        d = planner.make_deployment(m, hw, attn=attn, gpus=8, host_tier=HostTierSpec(reference_context_tokens=103488))
        out[attn] = d, compile_tables(d, max_batch=16, max_prefill_tokens=64)
    return out


@pytest.mark.parametrize("attn", ["dp", "tp", "cp", "dop"])
def test_the_tiered_ledger_holds_the_planners_tier_walls(dsv4_tiered, attn):
    """DeepSeek-V4-Flash at the reference context (103,488 tokens): the tiered ledger admits what
    planner.host_capacity's walls hold, compressor rings in the HBM wall (12.2 MB a request; left
    out, DP held 5,168 for 4,744, +9 %; CP 5,375 for 3,324)."""
    d, t = dsv4_tiered[attn]
    k = t.layouts.index(attn)
    want = tier_walls(d, [103488.0]).held[0]
    assert ledger_admits(t, k, 103488.0) == want
    assert want == {"dp": 4744, "tp": 761, "cp": 3324, "dop": 6088}[attn]


def test_the_far_probes_host_fraction_counts_c4_entries(dsv4_tiered):
    """The host-link c1 prices a decode at f = 1: the far probe's host seconds over top-k · f,
    with f = 1 − b/(L/4) for V4's C4 layers (b = 4,096 entries, L = 64 b = 262,144 tokens: f =
    1 − 4096/65536 = 0.9375; in tokens it was 1 − 1/64 = 0.984, 5 % cheap)."""
    d, t = dsv4_tiered["dp"]
    k = t.layouts.index("dp")
    far = 64.0 * 4096
    cost = planner.step_cost(d, planner.DecodeLoad.equal(1.0, far))
    host_s = float(cost.times.stacked()[HOST, 0])
    assert t.c1_s[k, HOST] * min(far, t.topk) * (1 - 4096 / (far / 4)) == pytest.approx(host_s, rel=1e-12)
    # of the ledger's 3,850.25 B per token, 21 C4 layers × 146 B live in host memory
    assert t.host_kv_fraction == pytest.approx(21 * 146 / 3850.25)


def test_a_move_carries_host_pages_over_the_host_link(pair):
    _, _, plain, tiered = pair
    src, dst = tiered.layouts.index("dp"), tiered.layouts.index("cp")  # owners hand 7/8 of each request away
    kv = 8 * CTX * tiered.kv_bytes_per_token
    a = plan_transition(plain, src, dst, kv, kv / 8)
    b = plan_transition(tiered, src, dst, kv, kv / 8)
    recv = b.kv_recv_bytes_per_rank
    assert recv > 0
    host = recv * ROW / (ROW + INDEXER)
    # NOTE (Issue 27): a move is split into the fewest groups that fit each table's budget, one KV
    # message per layer more per group past the first: the two may differ there
    groups_s = (b.move_groups - a.move_groups) * tiered.message_latency_s * tiered.num_layers
    assert b.link_s - a.link_s - groups_s == pytest.approx(host / 64e9 - host / tiered.link_bytes_per_s, rel=1e-9)


def test_the_tier_holds_more_requests_in_the_simulator():
    """24 requests of 100K tokens at t = 0 on 8 x H200 DP-attention: all in HBM an owner holds one
    (173,056 tokens of pool), so at most 8 run; with the tier an owner holds 10 of 128K, so all 24
    are admitted, each step pays their misses (a slower TPOT) and the batch ends sooner."""
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="dp", gpus=8)
    n = 24
    w = Workload("t", np.zeros(n), np.full(n, 100_000, dtype=np.int64), np.full(n, 1024, dtype=np.int64))
    cfg = LoopConfig(max_batch=64)
    plain = simulate(d, w, "dp", config=cfg)
    tiered = simulate(planner.replace_deployment(d, host_tier=HostTierSpec()), w, "dp", config=cfg)
    assert tiered["completed"] == plain["completed"] == n
    assert max(plain["timeline"]["batch"]) == 8
    assert max(tiered["timeline"]["batch"]) == n
    assert tiered["tpot_p50_s"] > plain["tpot_p50_s"]
    assert tiered["makespan_s"] < plain["makespan_s"]
