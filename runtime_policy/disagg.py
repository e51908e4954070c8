"""Disaggregated serving in the simulator (issue 29 item 4): x prefill instances and y decode
instances of one model (xPyD), each instance its own deployment, layout and engine scheduler, and a
hand-off queue between the two pools.

A request's life:
1. **Prefill pool.** The router sends it to prefill instance i mod x (round robin: SGLang's mini_lb /
   sgl-router PD mode and vLLM's disaggregated proxy example both spread by request). That instance is
   the colocated serving loop (loop.py, its engine's schedulers per owner group, chunked prefill,
   admission at its KV pool) serving the prompt with one output token: the prefill computes the first
   token (SGLang's prefill server sets max_new_tokens = 1, disaggregation/prefill.py
   `PrefillBootstrapQueue._process_req`, and sends the token with the KV,
   `process_batch_result_disagg_prefill`; vLLM's NIXL proxy sends the prefill instance max_tokens = 1,
   tests/v1/kv_connector/nixl_integration/toy_proxy_server.py `send_request_to_service`).
2. **Hand-off.** Its KV goes to decode instance i mod y over the scale-out tier, priced by the
   planner's hand-off (planner/disagg/handoff.py `plan_handoff`: the decode pool's KV record × the
   prompt, rank by rank between the two placements, the busiest NIC plus the engine's round trips).
   The part of it the prefill's chunks don't hide is exposed after the prefill (`exposed_s`: SGLang
   sends each chunk's pages as its forward ends, prefill.py `send_kv_chunk`; vLLM's decode instance
   reads all of it after the prefill, nixl_connector.py `get_num_new_matched_tokens`). The NICs are
   queues: a prefill instance's senders and a decode instance's receivers each carry one request's
   busiest-NIC time over their owner groups (the planner's NIC walls, planner/disagg/search.py) in
   hand-off order, so a burst of finished prefills waits for the link.
3. **Decode pool.** The hand-off is offered to its decode instance, which admits it when its KV pool
   has room — the same loop, its engine's admission and watermark: SGLang's decode server
   pre-allocates a request's KV in `DecodePreallocQueue` only while `_allocatable_tokens` (free pool
   less `num_reserved_decode_tokens` per running, transferring and waiting request) covers it, then
   polls it through `DecodeTransferQueue` into the waiting queue, whose `PrebuiltExtendBatch` skips the
   prefill forward and streams the first token (`process_batch_result_prebuilt`) before merging into
   the running batch (sgl-project/sglang python/sglang/srt/disaggregation/decode.py, module docstring
   "Life cycle of a request in the decode server"); vLLM's decode scheduler allocates the blocks when
   it schedules the request, pulls the KV (WAITING_FOR_REMOTE_KVS) and computes the last prompt token
   itself: its first decode step makes the first token. The loop's `handoff_recompute_tokens` hook
   (LoopConfig) says which (0 or 1); a request preempted on the decode instance recomputes its whole
   context there (vLLM's recompute; SGLang's decode retracts, offloading or recomputing).

TTFT = prefill queue + prefill + the exposed hand-off (and its NIC queue) + the hand-off queue (the
wait for decode KV room) + the decode pool's pick-up (SGLang: the running step's end; vLLM: one step
more, its first decode step). TPOT and the finish come from the decode instance.

NOTE: the order of the wait and the transfer is swapped: both engines allocate decode KV before the
bytes move, here the bytes move first and the request then waits for room; TTFT sums the same two
terms, and the decode KV the transfer would hold meanwhile is not held. SGLang's prefill server also
waits for the decode side's pre-allocation before it schedules a prompt (prefill.py
`PrefillBootstrapQueue.pop_bootstrapped`: KVPoll.WaitingForInput), and holds a prompt's KV until its
transfer reports success; here a full decode pool delays the hand-off, not the prefill, and the prefill
instance frees the prompt's KV at its end. The pools are simulated one after the other (the prefill
pool's times do not depend on the decode pool's under these two simplifications).

Does not: route by load or cache (round robin only), mix layouts inside a pool, switch layouts
(each pool runs one fixed layout), or price the hand-off's HBM reads.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from planner.disagg.handoff import BACKENDS, backend_for, exposed_s, plan_handoff
from planner.disagg.pools import prefill_pool
from planner.errors import SpecError
from runtime_policy.loop import ServingLoop
from runtime_policy.ordering import Ordering
from runtime_policy.serving_types import LoopConfig, ServeResult
from runtime_policy.tables import StepTimeTable
from runtime_policy.waiting import ABORTED, DONE

_XPYD = re.compile(r"([1-9][0-9]*)P([1-9][0-9]*)D", re.IGNORECASE)
MAX_INSTANCES = 64  # per pool: a split larger than this is a typo, not a deployment to simulate


def parse_xpyd(text: str) -> tuple[int, int]:
    """'1P3D' → (1, 3): x prefill instances and y decode instances (SpecError: one line)."""
    m = _XPYD.fullmatch(str(text).strip())
    if m is None:
        raise SpecError(f"--disagg {text!r} is not xPyD: x prefill and y decode instances, each ≥ 1 (e.g. 1P1D, 1P3D, "
                        "3P1D)")
    x, y = int(m.group(1)), int(m.group(2))
    if x > MAX_INSTANCES or y > MAX_INSTANCES:
        raise SpecError(f"--disagg {text}: at most {MAX_INSTANCES} instances per pool")
    return x, y


@dataclass(frozen=True)
class Pool:
    """One pool: its instances' deployment (one instance each), compiled tables and fixed layout."""

    role: str  # "prefill" or "decode"
    dep: object  # planner.Deployment of one instance (replicas 1)
    tables: StepTimeTable
    layout: str
    instances: int
    max_batch: int | None = None  # requests holding KV at once per instance (None: the LoopConfig's)

    @property
    def gpus(self) -> int:
        return int(self.dep.gpus) * self.instances

    def check_holds(self, need_tokens: float, watermark: float) -> None:
        """SpecError unless one instance's KV pool holds a request of `need_tokens` (one line)."""
        i = self.tables.layouts.index(self.layout)
        info = self.tables.info
        pool = float(info.kv_pool_bytes[i])
        per_rank = (need_tokens + float(self.tables.request_slack_tokens)) * self.tables.kv_bytes_per_token \
            * float(info.group_share[i])
        if pool <= 0 or per_rank > pool * watermark:
            d = self.dep
            raise SpecError(f"the {self.role} pool ({d.gpus} × {d.hardware.name}, {self.layout}) can't hold one request: "
                            f"{need_tokens:.0f} tokens need {per_rank / 2**30:.2f} GiB per rank, its KV pool is "
                            f"{pool / 2**30:.2f} GiB (more GPUs per instance, --kv-dtype fp8 or shorter requests)")


@dataclass
class HandOff:
    """Per request (arrival order): the hand-off's times, s (NaN where the prefill did not finish)."""

    prefill_done_s: np.ndarray
    transfer_s: np.ndarray  # one request's transfer alone, first byte to last
    exposed_s: np.ndarray  # what its prefill's chunks don't hide
    nic_wait_s: np.ndarray  # behind other hand-offs on its NICs
    ready_s: np.ndarray  # offered to its decode instance
    prefill_instance: np.ndarray
    decode_instance: np.ndarray


@dataclass
class DisaggResult:
    """The merged per-request record (ServeResult: arrival, first token, finish, status) and the parts."""

    result: ServeResult
    handoff: HandOff
    admitted_s: np.ndarray  # the decode instance's first admission (KV allocated), NaN if never
    prefill_results: list[ServeResult] = field(default_factory=list)
    decode_results: list[ServeResult] = field(default_factory=list)
    prefill_requests: list[int] = field(default_factory=list)  # requests each prefill instance served
    decode_requests: list[int] = field(default_factory=list)


def _run_loop(arr, inp, out, tables, layout_index, ordering, executor, config, progress) -> tuple[ServeResult, list]:
    from runtime_policy.policy import FixedPolicy

    config.check(tables)
    loop = ServingLoop(np.asarray(arr, dtype=np.float64), np.asarray(inp, dtype=np.int64),
                       np.asarray(out, dtype=np.int64), tables, FixedPolicy(layout_index), ordering, executor, config,
                       progress)
    return loop.run(), loop.admitted


def handoff_times(prefill: Pool, decode: Pool, prompt_tokens: float, pricing) -> tuple[float, float]:
    """(transfer_s, exposed_s) of one request of `prompt_tokens` from a prefill instance to a decode
    instance (planner/disagg/handoff.py; the prefill's chunks from planner/disagg/pools.py)."""
    plan = plan_handoff(prefill.dep, decode.dep, prompt_tokens)
    if not plan.supported:
        raise SpecError(f"no hand-off from {prefill.layout} to {decode.layout}: {plan.reason}")
    transfer = plan.transfer_s(pricing)
    pre = prefill_pool(prefill.dep, prompt_tokens, pricing)
    return transfer, exposed_s(transfer, pre.step_s, pre.chunk_tokens, BACKENDS[plan.engine].overlap)


def serve_disagg(arrival_s: np.ndarray, input_tokens: np.ndarray, output_tokens: np.ndarray, prefill: Pool,
                 decode: Pool, make_executor: Callable[[StepTimeTable, int], object], pricing, order: str = "fcfs",
                 boost: float = 0.0, config: LoopConfig = LoopConfig(),
                 progress: Callable[[str, int, int, int], None] | None = None) -> DisaggResult:
    """Serve the requests (sorted by arrival) on x prefill and y decode instances (module docstring).
    `make_executor(tables, instance)`: an executor for one instance (the simulator's, seeded per instance)."""
    arr = np.asarray(arrival_s, dtype=np.float64)
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    n = arr.size
    if n == 0:
        raise SpecError("the workload has no requests")
    if not np.all(np.isfinite(arr)) or np.any(np.diff(arr) < 0):
        raise SpecError("requests must be sorted by arrival_s (finite times)")
    be = backend_for(decode.dep.engine)
    watermark = 1.0 - config.admit_watermark_fraction
    prefill.check_holds(float(inp.min()), watermark)
    decode.check_holds(float((inp + out).min()), watermark)
    x, y = prefill.instances, decode.instances
    p_idx, d_idx = prefill.tables.layouts.index(prefill.layout), decode.tables.layouts.index(decode.layout)
    # 1. the prefill pool: each instance serves its prompts with one output token (the first)
    done = np.full(n, np.nan)
    status = np.full(n, DONE, dtype=np.int8)
    pre_results, pre_counts = [], []
    p_inst = np.arange(n) % x
    pre_cfg = replace(config, handoff_recompute_tokens=None, max_batch=prefill.max_batch or config.max_batch)
    for p in range(x):
        ids = np.flatnonzero(p_inst == p)
        pre_counts.append(int(ids.size))
        if ids.size == 0:
            continue
        cb = (lambda a, b, p=p: progress("prefill", p, a, b)) if progress else None
        r, _ = _run_loop(arr[ids], inp[ids], np.ones(ids.size, dtype=np.int64), prefill.tables, p_idx,
                         Ordering(order, boost), make_executor(prefill.tables, p), pre_cfg, cb)
        pre_results.append(r)
        ok = r.status == DONE
        done[ids[ok]] = r.first_token_s[ok]
        status[ids[~ok]] = ABORTED
    # 2. the hand-off: priced per prompt length, queued on the prefill senders' and decode receivers' NICs
    d_inst = np.arange(n) % y
    cache: dict[int, tuple[float, float]] = {}
    transfer, exposed = np.full(n, np.nan), np.full(n, np.nan)
    for i in np.flatnonzero(np.isfinite(done)):
        key = int(inp[i])
        if key not in cache:
            cache[key] = handoff_times(prefill, decode, float(key), pricing)
        transfer[i], exposed[i] = cache[key]
    alone = done + exposed  # the hand-off's end with the NICs to itself
    send_free, recv_free = [-math.inf] * x, [-math.inf] * y
    g_p, g_d = prefill.dep.placement.owner_groups, decode.dep.placement.owner_groups
    ready = np.full(n, np.nan)
    fin = np.flatnonzero(np.isfinite(alone))
    for i in fin[np.argsort(alone[fin], kind="stable")].tolist():
        # NOTE: a NIC queue serves one request's busiest-NIC time over its owner groups (the groups'
        # NICs in parallel), each no earlier than its own end alone
        p, d = p_inst[i], d_inst[i]
        end_p = max(send_free[p] + transfer[i] / g_p, alone[i])
        end_d = max(recv_free[d] + transfer[i] / g_d, alone[i])
        send_free[p], recv_free[d] = end_p, end_d
        ready[i] = max(end_p, end_d)
    # 3. the decode pool: each instance admits its hand-offs in the order they are ready
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    preempt = np.zeros(n, dtype=np.int64)
    admitted = np.full(n, np.nan)
    dec_results, dec_counts = [], []
    dec_cfg = replace(config, handoff_recompute_tokens=1 if be.decode_step_in_ttft else 0,
                      max_batch=decode.max_batch or config.max_batch)
    for d in range(y):
        ids = np.flatnonzero((d_inst == d) & np.isfinite(ready))
        dec_counts.append(int(ids.size))
        if ids.size == 0:
            continue
        ids = ids[np.argsort(ready[ids], kind="stable")]
        cb = (lambda a, b, d=d: progress("decode", d, a, b)) if progress else None
        r, adm = _run_loop(ready[ids], inp[ids], out[ids], decode.tables, d_idx, Ordering(order, boost),
                           make_executor(decode.tables, x + d), dec_cfg, cb)
        dec_results.append(r)
        first[ids], finish[ids], preempt[ids] = r.first_token_s, r.finish_s, r.preemptions
        admitted[ids] = np.asarray(adm)
        status[ids[r.status != DONE]] = ABORTED
    for i in np.flatnonzero(status == ABORTED):  # aborted where it stopped: its prefill's end or now
        if not np.isfinite(finish[i]):
            finish[i] = done[i] if np.isfinite(done[i]) else arr[i]
    res = ServeResult(arr, inp, out, first, finish, status, preempt)
    res.steps = sum(r.steps for r in dec_results) + sum(r.steps for r in pre_results)
    res.decode_steps = sum(r.decode_steps for r in dec_results)
    res.layout_time_s = {k: sum(r.layout_time_s[k] for r in dec_results) for k in decode.tables.layouts}
    res.timeline = dec_results[0].timeline if dec_results else {"t_s": [], "layout": [], "batch": [], "kv_used_fraction": []}
    hand = HandOff(done, transfer, exposed, ready - alone, ready, p_inst, d_inst)
    return DisaggResult(res, hand, admitted, pre_results, dec_results, pre_counts, dec_counts)


def _pcts(name: str, x: np.ndarray) -> dict:
    x = x[np.isfinite(x)]
    return {f"{name}_p{p}_s": (float(np.percentile(x, p)) if x.size else None) for p in (50, 90, 99)}


def summarize_disagg(run: DisaggResult) -> dict:
    """The colocated metrics (runtime_policy.metrics.summarize) of the merged record, plus the
    hand-off's: the wait for decode KV room (`handoff_queue_*`), the transfer alone and its exposed
    part, the NIC queue, and TTFT's parts (means over completed requests, s)."""
    from runtime_policy.metrics import summarize

    out = summarize(run.result)
    h = run.handoff
    ok = run.result.status == DONE
    wait = run.admitted_s - h.ready_s
    out.update(_pcts("handoff_queue", wait[ok]))
    out["handoff_queue_mean_s"] = float(np.nanmean(wait[ok])) if ok.any() else None
    out.update(_pcts("handoff_transfer", h.transfer_s[ok]))
    out.update(_pcts("handoff_exposed", h.exposed_s[ok]))
    out.update(_pcts("handoff_nic_queue", h.nic_wait_s[ok]))
    if ok.any():
        arr, first = run.result.arrival_s[ok], run.result.first_token_s[ok]
        parts = {"prefill_s": h.prefill_done_s[ok] - arr, "handoff_exposed_s": h.exposed_s[ok],
                 "handoff_nic_queue_s": h.nic_wait_s[ok], "handoff_queue_s": wait[ok],
                 "decode_first_step_s": first - run.admitted_s[ok]}
        out["ttft_parts_mean_s"] = {k: float(v.mean()) for k, v in parts.items()}
    else:
        out["ttft_parts_mean_s"] = None
    out["prefill_instance_requests"] = list(run.prefill_requests)
    out["decode_instance_requests"] = list(run.decode_requests)
    out["prefill_steps"] = int(sum(r.steps for r in run.prefill_results))
    return out
