"""Disaggregated serving in the simulator (runtime_policy/disagg.py): TTFT carries the hand-off, a
full decode pool makes hand-offs wait, xPyD runs exactly x + y instances, the colocated loop is
untouched by the hand-off hook, and xPyD input errors are one line."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from planner.errors import SpecError
from runtime_policy.disagg import Pool, parse_xpyd, serve_disagg, summarize_disagg
from runtime_policy.waiting import DONE

MODEL, GPUS = "llama-3.1-70b", 4  # GQA: 80 layers × K and V × 8 KV heads × 128 × 2 bytes (bf16) per token


def _pool(role, mem_fraction=None):
    from executor.sim import engine_chunk_tokens
    from floorfirst.disagg_serving import role_deployment
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.points import load_specs
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.serving_types import LoopConfig
    from runtime_policy.tables import default_step_model

    spec = DeploymentSpec.of(model=MODEL, hardware="h200", gpus=GPUS, mem_fraction=mem_fraction)
    m, hw = load_specs(MODEL, "h200")
    dep, _ = role_deployment(spec, m, hw, role, "tp", GPUS)
    lp = LayoutPolicy.compile(dep, default_step_model(dep), PolicyKnobs(),
                              max_prefill_tokens=engine_chunk_tokens(dep, LoopConfig()))
    return Pool(role, dep, lp.tables, "tp", 1)


@pytest.fixture(scope="module")
def pools():
    from executor.sim import engine_chunk_tokens
    from floorfirst.disagg_serving import role_deployment
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.points import load_specs
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.serving_types import LoopConfig
    from runtime_policy.tables import default_step_model

    spec = DeploymentSpec.of(model=MODEL, hardware="h200", gpus=GPUS)
    m, hw = load_specs(MODEL, "h200")
    out = {}
    for role in ("prefill", "decode"):
        dep, _ = role_deployment(spec, m, hw, role, "tp", GPUS)
        lp = LayoutPolicy.compile(dep, default_step_model(dep), PolicyKnobs(),
                                  max_prefill_tokens=engine_chunk_tokens(dep, LoopConfig()))
        out[role] = Pool(role, dep, lp.tables, "tp", 1)
    return out


def _executors(log=None):
    from executor.sim import SimExecutor

    def make(tables, k):
        if log is not None:
            log.append((k, tables.ranks))
        return SimExecutor(tables, 0.0, k)

    return make


def _pricing(pool):
    from planner.resources.vector import Pricing

    return Pricing.datasheet(pool.dep.hardware)


def _prefill_alone_s(pool, prompt):
    """The colocated loop serving the prompt alone with one output token: the prefill's own time."""
    from runtime_policy.loop import serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy

    r = serve(np.zeros(1), np.array([prompt]), np.array([1]), pool.tables, FixedPolicy(0), Ordering("fcfs"),
              _executors()(pool.tables, 0))
    return float(r.first_token_s[0])


def test_ttft_is_prefill_plus_the_hand_off_by_hand(pools):
    p, d = pools["prefill"], pools["decode"]
    prompt = 1000
    run = serve_disagg(np.zeros(1), np.array([prompt]), np.array([8]), p, d, _executors(), _pricing(p))
    assert run.result.status[0] == DONE
    # the hand-off by hand: 327,680 B/token × 1,000 tokens (page 1) = 327.68 MB; TP4 → TP4 splits the 8 KV
    # heads 2 per rank, so each prefill rank sends its decode twin 81.92 MB: 81.92e6 / 50e9 B/s (one
    # 400 Gb/s NIC per H200) = 1.6384 ms, + 1 round trip (one chunk, one destination) × 46 µs = 1.6844 ms;
    # one chunk hides none of it (SGLang sends the chunk's pages after its forward)
    assert d.dep.page_tokens == 1 and _pricing(p).scaleout_link_bytes_per_s == 50e9
    assert _pricing(p).scaleout_message_latency_s == pytest.approx(46e-6)
    transfer = 327_680 * 1000 / 4 / 50e9 + 46e-6
    assert run.handoff.transfer_s[0] == pytest.approx(transfer, rel=1e-9)
    assert run.handoff.exposed_s[0] == pytest.approx(transfer, rel=1e-9)
    prefill = _prefill_alone_s(p, prompt)
    # SGLang's decode server streams the prefill's first token with its prebuilt batch: an idle decode
    # instance takes it the moment it is ready
    assert run.result.first_token_s[0] == pytest.approx(prefill + transfer, rel=1e-12)
    s = summarize_disagg(run)
    assert s["ttft_p50_s"] == pytest.approx(prefill + transfer, rel=1e-12)
    assert s["ttft_parts_mean_s"]["handoff_exposed_s"] == pytest.approx(transfer, rel=1e-9)
    assert s["handoff_queue_p50_s"] == 0.0


def test_vllm_first_token_is_one_decode_step_after_the_hand_off(pools):
    """vLLM's decode instance recomputes the last prompt token: its first output token is a decode
    step (a one-token chunk over the 999-token prefix) after the KV arrives."""
    p, d = pools["prefill"], pools["decode"]
    # NOTE: the tables stay SGLang's (the step prices); the engine name picks the transfer backend
    pv = replace(p, dep=replace_deployment_engine(p.dep))
    dv = replace(d, dep=replace_deployment_engine(d.dep))
    run = serve_disagg(np.zeros(1), np.array([1000]), np.array([8]), pv, dv, _executors(), _pricing(p))
    step = float(d.tables.step_s(0, 0, np.array([1.0]), np.zeros(1), np.zeros(1), prefill_context=np.array([999.0]))[0])
    assert run.result.first_token_s[0] - run.handoff.ready_s[0] == pytest.approx(step, rel=1e-9)
    assert run.handoff.exposed_s[0] == run.handoff.transfer_s[0]  # NIXL reads after the prefill: all exposed


def replace_deployment_engine(dep):
    from planner.deployment import replace_deployment

    return replace_deployment(dep, engine="vllm")


def test_a_full_decode_pool_makes_hand_offs_wait(pools):
    p, d = pools["prefill"], _pool("decode", mem_fraction=0.28)  # ~6 GiB of KV per rank: ~80K tokens
    info = d.tables.info
    # a prompt of 60 % of the decode instance's KV pool: two never fit at once
    per_token = d.tables.kv_bytes_per_token * float(info.group_share[0])
    prompt = int(0.6 * float(info.kv_pool_bytes[0]) / per_token)
    assert float(p.tables.info.kv_pool_bytes[0]) / (p.tables.kv_bytes_per_token * float(p.tables.info.group_share[0])) \
        > 2.2 * prompt  # the prefill pool (no decode graphs) holds both: only the decode pool is full
    run = serve_disagg(np.zeros(2), np.array([prompt, prompt]), np.array([2000, 2000]), p, d, _executors(), _pricing(p))
    assert (run.result.status == DONE).all()
    first, second = np.argsort(run.handoff.ready_s)
    # the second hand-off is ready while the first decodes, and is admitted only when the first ends
    assert run.handoff.ready_s[second] < run.result.finish_s[first]
    assert run.admitted_s[second] >= run.result.finish_s[first]
    s = summarize_disagg(run)
    wait = run.admitted_s[second] - run.handoff.ready_s[second]
    assert wait > 0 and s["handoff_queue_p99_s"] > 0
    assert run.result.first_token_s[second] >= run.handoff.ready_s[second] + wait


@pytest.mark.parametrize("split", ["1P1D", "1P3D", "3P1D", "2P2D"])
def test_xpyd_runs_exactly_x_plus_y_instances(pools, split):
    x, y = parse_xpyd(split)
    p, d = replace(pools["prefill"], instances=x), replace(pools["decode"], instances=y)
    log = []
    n = 12
    rng = np.random.default_rng(0)
    arr = np.sort(rng.uniform(0, 2, n))
    run = serve_disagg(arr, rng.integers(100, 2000, n), rng.integers(2, 40, n), p, d, _executors(log), _pricing(p))
    assert sorted(k for k, _ in log) == list(range(x + y))  # one executor per instance, seeded apart
    assert sum(r for _, r in log) == x * GPUS + y * GPUS == p.gpus + d.gpus
    assert run.prefill_requests == [len(range(i, n, x)) for i in range(x)]
    assert run.decode_requests == [len(range(i, n, y)) for i in range(y)]
    assert (run.handoff.prefill_instance == np.arange(n) % x).all()
    assert (run.result.status == DONE).all()


def test_the_hand_off_hook_leaves_the_colocated_loop_unchanged(pools):
    """A decode loop that recomputes at least the whole prompt is the colocated loop, bit for bit
    (the colocated results themselves are pinned by tests/runtime_policy/test_loop_golden.py)."""
    from runtime_policy.loop import serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy
    from runtime_policy.serving_types import LoopConfig

    d = pools["decode"]
    rng = np.random.default_rng(3)
    n = 40
    arr, inp, out = np.sort(rng.uniform(0, 3, n)), rng.integers(50, 3000, n), rng.integers(1, 200, n)
    a = serve(arr, inp, out, d.tables, FixedPolicy(0), Ordering("fcfs"), _executors()(d.tables, 0), LoopConfig())
    b = serve(arr, inp, out, d.tables, FixedPolicy(0), Ordering("fcfs"), _executors()(d.tables, 0),
              LoopConfig(handoff_recompute_tokens=10**9))
    assert np.array_equal(a.first_token_s, b.first_token_s) and np.array_equal(a.finish_s, b.finish_s)
    assert a.steps == b.steps
    c = serve(arr, inp, out, d.tables, FixedPolicy(0), Ordering("fcfs"), _executors()(d.tables, 0),
              LoopConfig(handoff_recompute_tokens=0))
    assert (c.first_token_s < a.first_token_s).all()  # handed-off prompts skip the prefill


@pytest.mark.parametrize("text", ["1X1D", "0P1D", "1P0D", "P1D", "1P", "1.5P1D", "-1P2D", "1P1D1P", "", "65P1D"])
def test_bad_xpyd_is_one_spec_error(text):
    with pytest.raises(SpecError) as exc:
        parse_xpyd(text)
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("text,xy", [("1P1D", (1, 1)), ("1p3d", (1, 3)), ("3P1D", (3, 1)), (" 12P4D ", (12, 4))])
def test_xpyd_parses(text, xy):
    assert parse_xpyd(text) == xy


def test_a_pool_that_cannot_hold_one_request_says_so(pools):
    p, d = pools["prefill"], pools["decode"]
    info = d.tables.info
    big = int(1.2 * float(info.kv_pool_bytes[0]) / (d.tables.kv_bytes_per_token * float(info.group_share[0])))
    with pytest.raises(SpecError, match="decode pool .* can't hold one request"):
        serve_disagg(np.zeros(1), np.array([big // 2]), np.array([big]), p, d, _executors(), _pricing(p))


@pytest.mark.parametrize("split", ["1P2D", "2P1D"])
def test_hand_offs_queue_on_the_nics(pools, split):
    """Two prompts finish their prefill together; one sending instance's NICs (1P2D: one prefill
    instance, two decode) or one receiving instance's (2P1D) carry their hand-offs one after the other:
    the second is ready one transfer (1.6844 ms) after the first."""
    x, y = parse_xpyd(split)
    p, d = replace(pools["prefill"], instances=x), replace(pools["decode"], instances=y)
    run = serve_disagg(np.zeros(2), np.array([1000, 1000]), np.array([4, 4]), p, d, _executors(), _pricing(p))
    assert run.handoff.prefill_done_s[0] == run.handoff.prefill_done_s[1]
    transfer = 327_680 * 1000 / 4 / 50e9 + 46e-6
    a, b = np.sort(run.handoff.ready_s)
    assert b - a == pytest.approx(transfer, rel=1e-9)
    assert sorted(run.handoff.nic_wait_s.tolist()) == pytest.approx([0.0, transfer], rel=1e-9, abs=1e-15)
