"""The serving loop's side of a layout switch: filling the policy's state and asking it (once per
turn, runtime_policy/loop.py), starting the switch it decides (shedding KV first when the decision
says so), and settling it at a batch boundary — committed when due and ready, or recorded as an
abort with the old layout kept. Functions over a `ServingLoop`'s state, as admission.py and
preemption.py are.

Incremental moves (transitions.py, Issue 27): a plan of n > 1 groups lands its groups one after
another, group k at 1/n of the link time each; the ledger accounts each rank as the plan does
(kv_ledger.KvLedger.move_held_per_rank: the rest of the old + the landed groups in the new + the
group in flight in both), recorded per switch in `loop.moves` at its start and at every batch
boundary while it runs, with the groups' members (transitions.move_members, the executor's rule).
While such a move runs, nothing new is admitted (admission.py): it was planned for the running set,
with one group of headroom.
How a move ends early, keeping every request's KV whole in exactly one layout:
- nothing landed yet (a fault, or the destination filling): aborted, the old layout keeps serving,
  untouched (the group in flight is dropped; its source pages were never freed);
- a fault after a group landed: the executor drops the group in flight and moves it again (the
  torch executor's transitions.py); it reports ABORTED only with nothing landed;
- the destination's pool filling after a group landed (preemption.kv_wall): `finish_move` — the
  move commits with what has landed, and the running requests the destination lacks are preempted
  (the engine's victim rule orders them; they keep their tokens and are prefilled again, in the new
  layout). NOTE: not a rollback: a landed group's source pages were freed and reused (the next
  groups' destination pages, the new tokens), so taking it back needs room the ledger never
  reserved and a copy back; finishing allocates nothing (the landed requests are where they serve),
  so it always fits, and the ledger's new layout holds exactly the executor's pages. An engine does
  the same: a request handed over is the receiver's (SGLang PD disaggregation, decode.py
  `DecodeTransferQueue.pop_transferred`), and one that can't run is retracted
  (schedule_batch.py `retract_decode`).

Does not: decide (the policy), price or move anything (the executor).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime_policy.decision import Reason
from runtime_policy.executor import SwitchStatus
from runtime_policy.preemption import shed
from runtime_policy.projection import HorizonLoad, project_growth
from runtime_policy.serving_types import SwitchRecord
from runtime_policy.transitions import kv_recv_per_rank, move_members

if TYPE_CHECKING:
    from runtime_policy.loop import ServingLoop

_CANT = Reason.CANT_DECIDE
_NO_WAITING = np.zeros(0)  # the policy's waiting_tokens while none waits (read, never written)


def consult_policy(loop: "ServingLoop", total: float) -> bool:
    """Fill the policy's state, ask, and start the switch it decides. True: decide again (a
    switch started that sheds KV or is ready at once)."""
    state, dec, prefill_q, waiting, capped = loop.state, loop.dec, loop.prefill_q, loop.waiting, loop.capped
    b = dec.b
    s2 = dec.s2
    s1 = (dec.capped_sum(dec.dsteps) if capped else s2) if b else 0.0
    loop.s1_now = s1  # the run's first step reads it too, unless a preemption changes it
    running = b + len(prefill_q)
    if running > b:
        # NOTE: prefilling requests count as the batch they are about to join
        s2 += loop.pq_s2
        s1 = s1 + loop.pq_s1 if capped else s2
    state.context_sum_tokens, state.context_capped_sum_tokens = s2, s1
    state.context_requests = state.running = running
    pos = waiting.pos
    queued = pos < len(waiting.ids)
    if waiting.version != loop.wt_version or pos != loop.wt_pos:  # the queue changed
        loop.wt_version, loop.wt_pos = waiting.version, pos
        state.waiting_tokens = waiting.needs()[pos:] if queued else _NO_WAITING
    tok = loop.ema_tok
    state.prefill_step_fraction = loop.ema_steps
    state.prefill_tokens_per_step = tok
    if tok > 0:
        state.prefill_context_tokens, state.prefill_owner_share = loop.ema_tok_pfx / tok, loop.ema_own / tok
    else:
        state.prefill_context_tokens, state.prefill_owner_share = 0.0, 1.0
    state.owner_kv_tokens = loop.okv
    state.owner_requests = loop.kv.requests
    layout = loop.layout
    if queued:  # NOTE: only the queue's head reads it (PolicyState): stale while none waits
        state.free_kv_bytes = loop.kv.free_bytes_per_rank(layout)
    if loop.project and b and dec.dsteps >= loop.proj_at:
        project_growth(loop, total)
    hz = getattr(loop, "horizon_load", None)  # a slot of ServingLoop, set on the first consultation
    if hz is None:
        hz = loop.horizon_load = HorizonLoad.for_loop(loop)  # False: the policy reads no horizon load
    if hz:
        hz.average(loop, running, s2, s1)
        if dec.dsteps >= hz.next_at or hz.queued is not queued:
            hz.refresh(loop, state.waiting_tokens if queued else _NO_WAITING)
    step = state.step_index = loop.steps
    d = loop.policy.decide(state)
    if d.capacity_stands_steps:
        state.capacity_reprice_at_step = step + d.capacity_stands_steps
    if d.reason is _CANT:
        loop.cant_decide += 1
    if not d.switch or loop.inflight is not None or d.layout == layout or d.plan is None:
        return False
    t = loop.t
    loop.inflight, loop.started_s = d, t
    state.switch_in_flight = True
    if d.shed_kv_tokens > 0:
        shed(loop, d.shed_kv_tokens)
    loop.hand_off_s = loop.ready_s = t + loop.executor.start_switch(d.plan)
    if d.plan.move_groups > 1:
        begin_move(loop, d)
    if loop.ready_s <= t or d.shed_kv_tokens > 0:
        loop.skip_admit = d.shed_kv_tokens > 0
        return True
    return False


def begin_move(loop: "ServingLoop", d) -> None:
    """An incremental move starts: the ledger's peak over its groups at the running set now (what
    the plan read), kept with the plan's in `loop.moves`."""
    kv, src, dst, n = loop.kv, loop.layout, d.layout, d.plan.move_groups
    recv = kv_recv_per_rank(loop.tables, kv, src, dst)
    peak = max(kv.move_held_per_rank(src, dst, recv, n, 0, peak=True))
    ids, c0, _ = loop.dec.arrays()
    lens = dict(zip((int(q) for q in ids), (int(c) for c in c0 + loop.dec.dsteps)))
    loop.moves.append({"src": src, "dst": dst, "groups": n, "plan_peak_kv_bytes": d.plan.peak_kv_bytes_per_rank,
                       "members": move_members(lens, n, d.plan.move_order), "finished_early": None, "boundaries": 0,
                       "ledger_peak_kv_bytes": peak, "held_max_kv_bytes": 0.0, "landed": 0,
                       "budget_kv_bytes": d.plan.memory_budget_bytes - (d.plan.memory_needed_bytes
                                                                      - d.plan.peak_kv_bytes_per_rank)})
    account_move(loop)


def account_move(loop: "ServingLoop") -> None:
    """The groups landed by now (each 1/n of the link time, and at most one a batch boundary since
    the move began) and what the ledger holds at this boundary, rank by rank, in `loop.moves[-1]`.
    NOTE: a group lands at a step boundary, after the steps that carried its chunks (the torch
    executor's transitions.py `_land` in `before_step`, agreed on every rank), so n groups take n
    boundaries however short the link time: a move of 4 one-chunk groups commits 4 steps after it
    began there, not after one (tests/executor/test_executor_serving.py, the measured tables)."""
    m = loop.moves[-1]
    span = loop.ready_s - loop.started_s
    n = m["groups"]
    done = n if span <= 0 else min(int((loop.t - loop.started_s) / span * n), n - 1)
    if done > m["boundaries"]:
        done = m["boundaries"]
    recv = kv_recv_per_rank(loop.tables, loop.kv, m["src"], m["dst"])
    held = max(loop.kv.move_held_per_rank(m["src"], m["dst"], recv, n, done))
    m["landed"] = done
    # the run stops where the next group lands: each group hands off at a batch boundary
    loop.hand_off_s = loop.ready_s if span <= 0 else loop.started_s + span * (done + 1) / n
    if held > m["held_max_kv_bytes"]:
        m["held_max_kv_bytes"] = held


def settle_switch(loop: "ServingLoop") -> None:
    """Commit the switch in flight at this boundary if it is due and ready (an incremental move:
    each of its groups landed, one a boundary: `account_move`); record an abort."""
    landing = True
    if loop.inflight.plan.move_groups > 1:
        m = loop.moves[-1]
        m["boundaries"] += 1
        landing = m["boundaries"] >= m["groups"]  # the last group lands at this boundary
        if loop.t < loop.ready_s or not landing:
            account_move(loop)
    status = loop.executor.poll_switch()
    if status == SwitchStatus.ABORTED:
        end_switch(loop, aborted=getattr(loop.executor, "abort_reason", "") or "aborted by the executor")
    elif loop.t >= loop.ready_s and status == SwitchStatus.READY and landing:
        end_switch(loop)


def unmoved_requests(loop: "ServingLoop") -> list[int] | None:
    """The running requests the destination of the move in flight lacks, once a group of it has
    landed (and a landed request still runs); None while the move can still be aborted with the old
    layout whole. The executor's own account where it keeps one (`Executor.unmoved_requests`: the
    torch executor lands groups as its copies finish), else the loop's: the groups landed by the
    clock (`account_move`), their members as the move started; a request that started decoding
    during the move was written to both layouts and is in neither list (as in the torch executor)."""
    ask = getattr(loop.executor, "unmoved_requests", None)
    if ask is not None:
        out = ask()
        return None if out is None else [int(q) for q in out]
    if not loop.moves or loop.inflight is None or loop.inflight.plan.move_groups <= 1:
        return None
    m = loop.moves[-1]
    slot, members = loop.dec.slot, m["members"]
    done = m["landed"] * len(members) // m["groups"]  # NOTE: fewer members than groups: the plan's n capped
    if not any(slot[q] >= 0 for g in members[:done] for q in g):
        return None
    return [q for g in members[done:] for q in g if slot[q] >= 0]


def finish_move(loop: "ServingLoop", reason: str) -> bool:
    """End the move in flight with what has landed (module docstring): preempt the running
    requests the destination lacks, in the order of the engine's victim rule, and commit. False
    (nothing done) when nothing landed: the caller aborts instead."""
    from runtime_policy.preemption import preempt, victim, write_back_contexts

    rest = unmoved_requests(loop)
    if rest is None:
        return False
    m = loop.moves[-1]
    write_back_contexts(loop)
    left = list(rest)
    while left:
        v = left.pop(victim(loop, left))
        preempt(loop, v)
    m["finished_early"] = {"reason": reason, "preempted": len(rest), "kept": loop.dec.b + len(loop.prefill_q),
                           "at_s": loop.t}
    end_switch(loop, finished=True)
    return True


def end_switch(loop: "ServingLoop", aborted: str = "", finished: bool = False) -> None:
    """The switch in flight ends: committed (the executor's stall, the new layout), finished with
    what has landed (`finish_move`: committed, by the executor's `finish_switch` where it has one)
    or aborted (the old layout stays); either way it is recorded and the throughput rule's cooldown
    restarts."""
    d, state = loop.inflight, loop.state
    plan = d.plan
    if aborted:
        stall = 0.0
    elif finished and hasattr(loop.executor, "finish_switch"):
        stall = loop.executor.finish_switch(plan)
    else:
        stall = loop.executor.commit_switch(plan)
    loop.t += stall
    names = loop.tables.layouts
    rec = SwitchRecord(names[loop.layout], names[d.layout], loop.started_s, loop.t, plan.link_s, plan.cost_s,
                       d.reason.name.lower(), stall, aborted)
    (loop.aborted if aborted else loop.switches).append(rec)
    if not aborted:
        loop.layout = d.layout
        if loop.dec.groups != loop.groups[d.layout]:
            loop.dec.regroup(loop.groups[d.layout])  # each group's clock: the new layout's owner groups
        state.capacity_reprice_at_step = -1  # the memo was the old layout's
        loop.ordering.prefill_s_per_token = loop.prefill_price[loop.layout]
    loop.inflight = None
    state.steps_since_switch = 0  # NOTE: an abort too: the throughput rule's cooldown holds off a retry
    state.layout, state.switch_in_flight = loop.layout, False
