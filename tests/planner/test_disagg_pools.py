"""Per-role pools (planner/disagg/roles.py, pools.py), the xPyD search (search.py) and the launch
lines (launch.py), each figure with its arithmetic or its engine rule."""

from __future__ import annotations

import math
import shlex

import numpy as np
import pytest

import planner
from planner.disagg.launch import launchable, sglang_lines, vllm_lines
from planner.disagg.pools import decode_pool, prefill_pool
from planner.disagg.roles import make_role_deployment, role_memory
from planner.disagg.search import Workload, best_per_shape, search, split_shape
from planner.launch import parse_launch
from planner.step import step_cost

SMI_MIB = 143771  # H200 nvidia-smi memory.total (h200.yaml)


@pytest.fixture(scope="module")
def dsa():
    return planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")


def role(dsa, r, attn, engine="sglang", gpus=8, moe="ep", **kw):
    return make_role_deployment(*dsa, r, attn=attn, moe=moe, gpus=gpus, engine=engine, **kw)


# --- roles -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("r,attn,reserved_mib", [
    # memory_hook.py: decode activations max(512 graph bs × 1 draft, 2048) × 1.5 = 3072 + 512 + 2·512 graphs
    # + 8·1/8·1024 = 5632 → the 10 GiB floor
    ("decode", "tp", 10240),
    # + DP attention's graph padding 512 × 8 × 3 and × 1.5 (max_bs > 300): 5632 + 12288 + 6144
    ("decode", "dp", 24064),
    # prefill: 512 + 8192 × 1.5 + 1024, no decode graphs
    ("prefill", "tp", 13824),
    ("prefill", "dp", 13824),
])
def test_sglang_role_reserve_and_fraction(dsa, r, attn, reserved_mib):
    dep, mem = role(dsa, r, attn)
    assert sum(mem.reserve_terms_mib.values()) == reserved_mib
    assert dep.memory.fraction == round((SMI_MIB - reserved_mib) / SMI_MIB, 3)


def test_sglang_decode_pool_gains_what_the_chunk_reserved(dsa):
    """Colocated TP8 reserves 512 + 12288 + 1024 + 1024 = 14848 MiB (0.897); decode 10240 (0.929)."""
    colo = planner.make_deployment(*dsa, attn="tp", moe="ep", gpus=8)
    dec, _ = role(dsa, "decode", "tp")
    assert colo.memory.fraction == 0.897 and dec.memory.fraction == 0.929
    assert dec.memory.kv_pool_bytes > colo.memory.kv_pool_bytes


def test_vllm_roles_keep_the_profile_runs_reserve(dsa):
    colo = planner.make_deployment(*dsa, attn="tp", moe="ep", gpus=8, engine="vllm")
    for r in ("prefill", "decode"):
        dep, mem = role(dsa, r, "tp", engine="vllm")
        assert mem.reserve_bytes is None and dep.memory.kv_pool_bytes == colo.memory.kv_pool_bytes


def test_a_given_fraction_is_the_users(dsa):
    dep = planner.make_deployment(*dsa, attn="tp", moe="ep", gpus=8, mem_fraction=0.8)
    assert role_memory(dep, "decode").reserve_bytes is None


# --- prefill pool ----------------------------------------------------------------------------------

def test_tp_chunks_are_the_step_models_chunks(dsa):
    """One group, a prompt of two chunks: each step is the step model's chunk at its prefix."""
    dep, _ = role(dsa, "prefill", "tp")
    p = prefill_pool(dep, 16384)
    want = step_cost(dep, planner.DecodeLoad.equal(np.zeros(2), 1.0), [8192.0, 8192.0],
                     prefill_context=[0.0, 8192.0]).floor_max_s
    assert p.chunk_tokens_per_group == 8192 and np.allclose(p.step_s, want, rtol=1e-12)
    assert math.isclose(p.request_s, want.sum()) and math.isclose(p.compute_rate_requests_per_s, 1 / want.sum())


def test_packed_prompts_attend_to_themselves(dsa):
    """8 prompts of 1024 in one 8192-token step: the linear work of 8192 tokens, the attention of 8
    prompts — the TP rank's 1/8 of the heads' core and the whole indexer (planner/layouts/tp.py) — not of
    one 8192-token causal request. Compute-bound, so the floor is the compute time."""
    m, hw = dsa
    dep, _ = role(dsa, "prefill", "tp")
    v, layers = m.mixers[0]
    one, whole = (v.prefill_flops_by_component(np.array([x]), np.zeros(1)) for x in (1024.0, 8192.0))
    delta = layers * sum((8 * one[k][0] - whole[k][0]) / (8 if k == "attention_core" else 1) for k in one)
    long = step_cost(dep, planner.DecodeLoad.equal(0, 1.0), 8192.0)
    p = prefill_pool(dep, 1024)
    assert p.prompts_per_step == 8
    assert math.isclose(p.step_s[0], long.times.compute_s[0] + delta / hw.peak.bf16_flops_per_s, rel_tol=1e-9)


def test_owner_groups_each_prefill_their_own_chunk(dsa):
    """The decode-equivalent base of a DP8 step gives each owner c tokens of projections and the MoE
    all 8·c tokens: the premise of the recomposition (pools.py)."""
    dep, _ = role(dsa, "prefill", "dp")
    c = dep.engine_model.scheduler(dep).chunk_tokens_per_group
    assert c == 8192 // 8  # SGLang's chunked_prefill_size // dp_size
    base = step_cost(dep, planner.DecodeLoad.equal(8 * c, 1.0)).components["flops"]
    chunk = step_cost(dep, planner.DecodeLoad.equal(0, 1.0), float(c)).components["flops"]
    assert math.isclose(base["attention_proj"][0], chunk["attention_proj"][0])
    assert math.isclose(base["experts"][0], 8 * chunk["experts"][0])
    p = prefill_pool(dep, 1024)
    assert math.isclose(p.compute_rate_requests_per_s, 8 / p.step_s[0])
    # the step's EP dispatch/combine carry every group's tokens: the base's, not one chunk's
    linear = step_cost(dep, planner.DecodeLoad.equal(8 * c, 1.0)).times
    assert math.isclose(p.times.network_bytes_s[0], linear.network_bytes_s[0], rel_tol=1e-12)


def test_prompts_in_flight_cap_the_prefill_rate(dsa):
    dep, _ = role(dsa, "prefill", "tp")
    p = prefill_pool(dep, 32768)
    hold = 60.0  # a hand-off that keeps each prompt a minute: ~17 prompts of 32K fit a TP rank's pool
    rate, wall = p.rate_requests_per_s(hold)
    assert wall == "kv_in_flight" and math.isclose(rate, p.max_in_flight_requests / (p.request_s + hold))
    assert p.rate_requests_per_s(0.0) == (p.compute_rate_requests_per_s, p.binding)


# --- decode pool -----------------------------------------------------------------------------------

def test_decode_batch_is_the_largest_that_meets_tpot(dsa):
    dep, _ = role(dsa, "decode", "dcp")
    d = decode_pool(dep, 1024, 1024, tpot_s=0.05)
    assert d.binding.startswith("tpot:")

    def t(b):
        return step_cost(dep, planner.DecodeLoad.equal(float(b), 1536.0)).floor_max_s[0]

    assert t(d.batch) <= 0.05 < t(d.batch + 1)
    assert math.isclose(d.rate_requests_per_s, d.batch / (1024 * t(d.batch)))


def test_decode_batch_stops_at_the_kv_wall(dsa):
    from planner.capacity import max_concurrency

    dep, _ = role(dsa, "decode", "tp")
    d = decode_pool(dep, 8192, 1024, tpot_s=1.0)
    assert d.binding == "kv_capacity" and d.batch == max_concurrency(dep, 8192 + 512)[0]


def test_colocated_tpot_carries_the_batchs_share_of_prefill(dsa):
    """Colocated DCP8 at 1K/1K: each output token waits a decode step plus B·t_pp/OSL of prefill."""
    dep = planner.make_deployment(*dsa, attn="dcp", moe="ep", gpus=8)
    tpp = 1 / prefill_pool(dep, 1024).compute_rate_requests_per_s
    d = decode_pool(dep, 1024, 1024, 0.05, prefill_s_per_request=tpp)

    def tpot(b):
        return step_cost(dep, planner.DecodeLoad.equal(float(b), 1536.0)).floor_max_s[0] + b * tpp / 1024

    assert d.binding.startswith("tpot:") and tpot(d.batch) <= 0.05 < tpot(d.batch + 1)
    assert math.isclose(d.rate_requests_per_s, d.batch / (1024 * d.step_s + d.batch * tpp))


# --- the search -------------------------------------------------------------------------------------

def _share(o):
    d = o.deployment
    return d.prefill_gpus / d.gpus


def test_the_best_split_moves_toward_prefill_as_prompts_grow(dsa):
    """DeepSeek-V3.2 on 3 × 8 H200, one node per instance, TPOT ≤ 50 ms: decode-heavy at 1K prompts,
    prefill-heavy at 32K (the shape users report: sglang-omni #1760, PR #1599)."""
    short = search(*dsa, 24, Workload(1024, 1024, None, 0.05), sizes=[8])
    long = search(*dsa, 24, Workload(32768, 1024, None, 0.05), sizes=[8])
    assert split_shape(short.best) == (1, 8, 2, 8)
    assert split_shape(long.best) == (2, 8, 1, 8)
    per_gpu = {split_shape(o): o.output_tokens_per_s / o.gpus for o in best_per_shape(short.options)}
    assert per_gpu[(1, 8, 1, 8)] < per_gpu[(1, 8, 2, 8)]  # at short prompts a second decode pool pays


def test_a_rate_asks_for_the_fewest_gpus(dsa):
    r = search(*dsa, 24, Workload(4096, 1024, None, 0.05, rate_requests_per_s=5.0), sizes=[8])
    assert r.best.gpus == 16 and r.best.rate_requests_per_s >= 5.0
    c = r.colocated  # the colocated replicas it needs, not the whole budget
    assert c.rate_requests_per_s >= 5.0 and c.rate_requests_per_s - c.rate_requests_per_s / c.replicas < 5.0


def test_ttft_target_rules_splits_out(dsa):
    r = search(*dsa, 16, Workload(32768, 1024, 0.1, 0.05), sizes=[8])
    assert r.best is None and not r.options[0].feasible and "TTFT" in r.options[0].reason


def test_a_split_is_its_slowest_pool_or_nic(dsa):
    """λ = min(x·λ_p, y·λ_d, NIC walls); TTFT = prefill + exposed (+ vLLM's decode step)."""
    from dataclasses import replace as dc_replace

    from planner.disagg.search import Candidate, evaluate_split
    from planner.resources.vector import Pricing

    wl = Workload(4096, 1024, None, 0.05)
    pr = Pricing.datasheet(dsa[1])
    for engine in ("sglang", "vllm"):
        pd, pm = role(dsa, "prefill", "tp", engine=engine)
        dd, dm = role(dsa, "decode", "dp", engine=engine)
        p = Candidate(pd, pm, prefill=prefill_pool(pd, 4096, pr))
        d = Candidate(dd, dm, decode=decode_pool(dd, 4096, 1024, 0.05, pr))
        o = evaluate_split(p, d, 1, 2, wl, pr)
        assert math.isclose(o.rate_requests_per_s, min(o.prefill_instance_rate, 2 * d.decode.rate_requests_per_s,
                                                       o.nic_prefill_rate, 2 * o.nic_decode_rate))
        step = d.decode.step_s if engine == "vllm" else 0.0
        assert math.isclose(o.ttft_s, p.prefill.request_s + o.exposed_s + step)
        # TP → DP attention (MLA): prefill rank 0 sends every request, so its NIC is the wall
        assert math.isclose(o.nic_prefill_rate, 50e9 / o.handoff.busiest_send_bytes)
        # DP8 prefill → DP8 decode: each of the 8 owners sends its own requests over its own NIC
        pd8, pm8 = role(dsa, "prefill", "dp", engine=engine)
        o8 = evaluate_split(Candidate(pd8, pm8, prefill=prefill_pool(pd8, 4096, pr)), d, 1, 2, wl, pr)
        assert math.isclose(o8.nic_prefill_rate, 8 * 50e9 / o8.handoff.busiest_send_bytes)
        slow = dc_replace(pr, scaleout_bytes_per_s=1e6)
        s = evaluate_split(p, d, 1, 2, wl, slow)
        assert s.binding == "handoff:prefill nic" and math.isclose(s.rate_requests_per_s, s.nic_prefill_rate)


# --- launch lines -----------------------------------------------------------------------------------

def _read(line: str) -> dict:
    return parse_launch(line.split("   #")[0]).options


@pytest.mark.parametrize("attn", ["tp", "dp", "dptp", "dcp"])
@pytest.mark.parametrize("moe", ["ep", "tp"])
def test_launch_lines_read_back_as_the_pools(dsa, attn, moe):
    p, _ = role(dsa, "prefill", "tp", moe="ep")
    d, _ = role(dsa, "decode", attn, moe=moe)
    for lines in (sglang_lines(p, d, 1, 2), vllm_lines(p, d, 1, 2)):
        got = _read(lines[1])
        assert (got["attn"], got["moe"], got["gpus"]) == (d.attn, d.moe, d.gpus)
        assert got.get("attn_groups") == d.attn_groups
        assert "--disaggregation-mode decode" in lines[1] or "kv_consumer" in lines[1]


@pytest.mark.parametrize("attn", ["tp", "dp"])
def test_multi_node_instances_read_back(dsa, attn):
    d, _ = role(dsa, "decode", attn, gpus=16, moe="tp")
    p, _ = role(dsa, "prefill", "tp")
    for lines in (sglang_lines(p, d, 1, 1), vllm_lines(p, d, 1, 1)):
        got = _read(lines[1])
        assert (got["attn"], got["gpus"], got["nodes"]) == (attn, 16, 2)


def test_no_engine_flag_runs_dop(dsa):
    d, _ = role(dsa, "decode", "dop")
    assert launchable(d, "sglang") is None and launchable(d, "vllm") is None


def test_router_lines_name_every_instance(dsa):
    p, _ = role(dsa, "prefill", "tp")
    d, _ = role(dsa, "decode", "dp")
    router = sglang_lines(p, d, 2, 3)[-1]
    assert router.count("--prefill http") == 2 and router.count("--decode http") == 3
    toks = shlex.split(vllm_lines(p, d, 2, 3)[-1])
    assert toks[toks.index("--decoder-hosts") + 1:toks.index("--decoder-ports")] == ["${D0}", "${D1}", "${D2}"]
