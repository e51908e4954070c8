"""Golden cases of the engines' schedulers in the serving loop (planner.engines.scheduling,
runtime_policy/group_prefill.py, admission.py), each with its arithmetic written out: per-group
chunks under DP attention, SGLang's separate prefill against vLLM's and TRT-LLM's mixed steps, each
engine's routing, a queue forming at the KV pool's wall and at the running-request cap, and SGLang's
retraction order."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import planner
from executor.sim import SimExecutor
from runtime_policy.loop import LoopConfig, ServingLoop, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import FixedPolicy
from runtime_policy.tables import compile_tables

H200 = planner.load_hardware("h200")
DSV32 = planner.load_model("deepseek-v3.2")


def _tables(attn: str, engine: str, **kw):
    dep = planner.make_deployment(DSV32, H200, attn=attn, gpus=8, engine=engine, **kw)
    chunk = dep.engine_model.scheduler(dep).engine_chunk_tokens
    return dep, compile_tables(dep, max_batch=64, max_prefill_tokens=chunk)


class Recording(SimExecutor):
    """The simulator, recording each run's steps: decoders, prompt tokens, the busiest group's chunk."""

    def __init__(self, tables):
        super().__init__(tables)
        self.runs = []

    def run_steps(self, batch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None):
        b = batch.owners.shape[0] if batch.active_decoders < 0 else batch.active_decoders
        own = None if chunk_owner is None else [float(x) for x in chunk_owner[1]]
        self.runs.append((b, [float(x) for x in prefill_tokens], own))
        return super().run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner)


def _serve(tables, layout, arr, inp, out, config=LoopConfig(max_batch=64), order="fcfs", ex=None):
    ex = ex or Recording(tables)
    res = serve(np.asarray(arr, float), np.asarray(inp), np.asarray(out), tables,
                FixedPolicy(tables.layouts.index(layout)), Ordering(order), ex, config)
    return res, ex


def test_sglang_dp8_prefills_every_owner_at_once_with_its_eighth_of_the_chunk():
    """SGLang DP attention on 8 × H200: chunked_prefill_size 8192 // dp 8 = 1,024 tokens per DP
    rank per step. 16 prompts of 4,096 arrive together, dispatched round robin: 2 per rank. Every
    rank prefills its first prompt in 4,096 / 1,024 = 4 steps of 8 × 1,024 = 8,192 tokens (the
    busiest rank's chunk: 1,024), with nothing decoding; then its second prompt in 4 more, while
    the first ones, prefilled, wait (separate prefill: a rank's decodes sit out its prefill steps)."""
    dep, t = _tables("dp", "sglang")
    assert dep.engine_model.scheduler(dep).chunk_tokens_per_group == 1024
    res, ex = _serve(t, "dp", np.zeros(16), np.full(16, 4096), np.full(16, 8))
    (b0, p0, own0), (b1, p1, own1) = ex.runs[0], ex.runs[1]
    assert (b0, p0, own0) == (0, [8192.0] * 4, [1024.0] * 4)
    assert (b1, p1, own1) == (0, [8192.0] * 4, [1024.0] * 4)
    assert ex.runs[2][0] == 16 and not any(ex.runs[2][1])  # then all 16 decode together
    assert np.all(res.status == 4)
    # each first prompt has its first token after 4 steps, each second after 8
    firsts = np.sort(res.first_token_s)
    assert firsts[0] == firsts[7] < firsts[8] == firsts[15]


def test_vllm_dp8_gives_every_engine_core_its_own_whole_budget_next_to_its_decodes():
    """vLLM DP8: one engine core per DP rank, each with max_num_batched_tokens 8,192, decodes
    first. 16 prompts of 4,096, two per core (least loaded: waiting·4 + running): each core packs
    both prompts (8,192 tokens) into its first step: 8 × 8,192 = 65,536 tokens in one step."""
    dep, t = _tables("dp", "vllm")
    assert dep.engine_model.scheduler(dep).chunk_tokens_per_group == 8192
    res, ex = _serve(t, "dp", np.zeros(16), np.full(16, 4096), np.full(16, 8))
    assert ex.runs[0] == (0, [65536.0], [8192.0])
    assert np.all(res.first_token_s == res.first_token_s[0])  # every prompt done in that one step


def test_the_same_long_prompts_take_eight_times_the_steps_on_one_tp_scheduler():
    """SGLang TP8: one scheduler, 8,192 tokens a step over 16 × 4,096 = 65,536 prompt tokens:
    8 prefill steps, two prompts each, the same tokens per step as DP8's eight schedulers."""
    _, t = _tables("tp", "sglang")
    res, ex = _serve(t, "tp", np.zeros(16), np.full(16, 4096), np.full(16, 8))
    prefill_steps = [p for b, ps, _ in ex.runs for p in ps if p > 0]
    assert prefill_steps == [8192.0] * 8


def test_vllm_tp_mixes_a_chunk_into_the_decodes_budget():
    """vLLM TP: a chunk next to the running decodes, in one budget: with 8 decoding, a new prompt
    of 10,000 gets 8,192 − 8 = 8,184 tokens of its first step; SGLang would run it alone."""
    _, t = _tables("tp", "vllm")
    arr = np.r_[np.zeros(8), 0.5]
    res, ex = _serve(t, "tp", arr, np.r_[np.full(8, 100), 10_000], np.r_[np.full(8, 400), 8])
    mixed = [(b, ps) for b, ps, _ in ex.runs if b == 8 and any(ps)]
    assert mixed and mixed[0][1][0] == 8192 - 8


def test_sglang_tp_decodes_wait_while_a_prompt_prefills():
    """SGLang TP: the same arrival runs as prefill-only steps (no decoder in them)."""
    _, t = _tables("tp", "sglang")
    arr = np.r_[np.zeros(8), 0.5]
    res, ex = _serve(t, "tp", arr, np.r_[np.full(8, 100), 10_000], np.r_[np.full(8, 400), 8])
    late = [(b, ps) for b, ps, _ in ex.runs if any(p > 1000 for p in ps)]
    assert late and all(b == 0 for b, _ in late)  # 8 running, none advanced in those steps


def test_routing_follows_each_engines_router():
    """Four prompts on dptp's two groups (ranks 0–3, 4–7): SGLang round robin alternates groups
    whatever their load; TRT-LLM gives each, at admission, to the group with the fewest active
    prompt tokens (8,000 on group 0 first, then 100, 100 to group 1, then group 1 again: 200 < 8,000)."""
    arr, inp, out = np.zeros(4), np.array([8000, 100, 100, 100]), np.full(4, 64)
    _, t = _tables("dptp", "sglang", attn_groups=2)
    loop = ServingLoop(arr, inp, out, t, FixedPolicy(t.layouts.index("dptp")), Ordering("fcfs"), SimExecutor(t),
                       LoopConfig(max_batch=64), None)
    loop.run()
    assert [loop.owner[i] // 4 for i in range(4)] == [0, 1, 0, 1]
    _, t = _tables("dptp", "trtllm", attn_groups=2)
    loop = ServingLoop(arr, inp, out, t, FixedPolicy(t.layouts.index("dptp")), Ordering("fcfs"), SimExecutor(t),
                       LoopConfig(max_batch=64), None)
    loop.run()
    assert [loop.owner[i] // 4 for i in range(4)] == [0, 1, 1, 1]
    # a fifth request after the two short ones finished (groups 0 and 1 run 2 and 0): SGLang's
    # round robin sends it to group 0 (its counter: 4 % 2); vLLM's router to the least loaded,
    # group 1 (score waiting·4 + running: 2 against 0)
    arr, inp, out = np.r_[np.zeros(4), 1.0], np.full(5, 100), np.array([400, 4, 400, 4, 64])  # 400 tokens: ~1.6 s
    for engine, want in (("sglang", 0), ("vllm", 1)):
        _, t = _tables("dptp", engine, attn_groups=2)
        loop = ServingLoop(arr, inp, out, t, FixedPolicy(t.layouts.index("dptp")), Ordering("fcfs"), SimExecutor(t),
                           LoopConfig(max_batch=64), None)
        loop.run()
        assert [loop.owner[i] // 4 for i in range(4)] == [0, 1, 0, 1] and loop.owner[4] // 4 == want, engine


def test_a_queue_forms_at_the_running_cap():
    """A scheduler capped at 4 running requests per group (SGLang's --max-running-requests 32 at
    dp 8): 48 requests arriving together run 32 at a time; the other 16 wait, their first token
    after a first request finishes."""
    dep, t = _tables("dp", "sglang")
    scheds = tuple(None if s is None else dataclasses.replace(s, running_cap_per_group=4.0) for s in t.info.schedulers)
    t = dataclasses.replace(t, info=dataclasses.replace(t.info, schedulers=scheds))
    res, ex = _serve(t, "dp", np.zeros(48), np.full(48, 512), np.full(48, 32))
    assert max(b for b, _, _ in ex.runs) == 32
    order = np.argsort(res.first_token_s)
    assert res.first_token_s[order[32]] > res.finish_s[order[:32]].min()


def test_a_queue_forms_at_the_kv_pools_wall_and_ttft_absorbs_the_wait():
    """The KV pool holds what it holds (what admission lets in at the prompt's context): of 3× that
    many requests arriving together, the rest wait for room, and their TTFT includes the wait."""
    dep, t = _tables("tp", "sglang", mem_fraction=0.8)
    k = t.layouts.index("tp")
    # admission: (held + prompt + slack) · share · rate ≤ 0.99 × pool (the loop's 1 % watermark)
    per = (32768 + t.request_slack_tokens) * float(t.info.group_share[k]) * t.kv_bytes_per_token
    fit = int(0.99 * float(t.info.kv_pool_bytes[k]) // per)
    n = 3 * fit
    res, ex = _serve(t, "tp", np.zeros(n), np.full(n, 32768), np.full(n, 64), LoopConfig(max_batch=64))
    assert 0 < max(b for b, _, _ in ex.runs) <= fit
    assert np.all(res.status == 4)
    ttft = np.sort(res.first_token_s)
    assert ttft[-1] > 2 * ttft[fit - 1]  # the last waited for two turnovers of the pool


def test_sglang_retracts_the_request_with_the_fewest_output_tokens():
    """At the KV wall under FCFS, SGLang's retract_decode (managers/schedule_batch.py) takes the
    fewest output tokens, ties the longest prompt: of (prompt, generated) = (1000, 50), (3000, 10),
    (2000, 10) the victim is the 3,000-token prompt with 10 generated."""
    from runtime_policy.preemption import victim_of

    _, t = _tables("tp", "sglang")
    loop = ServingLoop(np.zeros(3), np.array([1000, 3000, 2000]), np.full(3, 100), t, FixedPolicy(0),
                       Ordering("fcfs"), SimExecutor(t), LoopConfig(max_batch=64), None)
    loop.ctxf[:] = [1050.0, 3010.0, 2010.0]
    assert victim_of(loop, np.array([0, 1, 2])) == 1
    _, tv = _tables("tp", "vllm")
    loop = ServingLoop(np.array([0.0, 1.0, 2.0]), np.array([1000, 3000, 2000]), np.full(3, 100), tv, FixedPolicy(0),
                       Ordering("fcfs"), SimExecutor(tv), LoopConfig(max_batch=64), None)
    loop.ctxf[:] = [1050.0, 3010.0, 2010.0]
    assert victim_of(loop, np.array([0, 1, 2])) == 2  # vLLM: the newest


@pytest.mark.parametrize("engine", ["sglang", "vllm", "trtllm"])
def test_every_engine_serves_every_layout_it_can_run(engine):
    """A short mixed workload completes in every registered layout under each engine's scheduler."""
    from runtime_policy.workloads import chat

    dep = planner.make_deployment(DSV32, H200, attn="tp", gpus=8, engine=engine)
    t = compile_tables(dep, max_batch=64, max_prefill_tokens=dep.engine_model.scheduler(dep).engine_chunk_tokens)
    w = chat(40, seed=3, rate_per_s=20.0)
    for i, name in enumerate(t.layouts):
        if t.info.kv_pool_bytes[i] <= 0:
            continue
        res = serve(w.arrival_s, w.input_tokens, w.output_tokens, t, FixedPolicy(i), Ordering("fcfs"), SimExecutor(t),
                    LoopConfig(max_batch=64))
        assert np.all(res.status == 4), (engine, name)
