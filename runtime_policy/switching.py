"""The serving loop's side of a layout switch: filling the policy's state and asking it (once per
turn, runtime_policy/loop.py), starting the switch it decides (shedding KV first when the decision
says so), and settling it at a batch boundary — committed when due and ready, or recorded as an
abort with the old layout kept. Functions over a `ServingLoop`'s state, as admission.py and
preemption.py are.

Incremental moves (transitions.py, Issue 27): a plan of n > 1 groups lands its groups one after
another, group k at 1/n of the link time each; the ledger accounts each rank as the plan does
(kv_ledger.KvLedger.move_held_per_rank: the rest of the old + the landed groups in the new + the
group in flight in both), recorded per switch in `loop.moves` at its start and at every batch
boundary while it runs. While such a move runs, nothing new is admitted (admission.py): it was
planned for the running set, with one group of headroom. An abort (a fault, the destination
filling) keeps every request whole in one layout: the executor drops the group in flight (its
source pages were never freed) and brings back the groups already landed (executor.sim: nothing
to move back; executor/torch_executor: see its transitions.py), so the old layout serves them all.

Does not: decide (the policy), price or move anything (the executor).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runtime_policy.decision import Reason
from runtime_policy.executor import SwitchStatus
from runtime_policy.preemption import shed
from runtime_policy.projection import project_growth
from runtime_policy.serving_types import SwitchRecord
from runtime_policy.transitions import kv_recv_per_rank

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
    loop.moves.append({"src": src, "dst": dst, "groups": n, "plan_peak_kv_bytes": d.plan.peak_kv_bytes_per_rank,
                       "ledger_peak_kv_bytes": peak, "held_max_kv_bytes": 0.0, "landed": 0,
                       "budget_kv_bytes": d.plan.memory_budget_bytes - (d.plan.memory_needed_bytes
                                                                      - d.plan.peak_kv_bytes_per_rank)})
    account_move(loop)


def account_move(loop: "ServingLoop") -> None:
    """The groups landed by now (each 1/n of the link time) and what the ledger holds at this
    boundary, rank by rank, in `loop.moves[-1]`."""
    m = loop.moves[-1]
    span = loop.ready_s - loop.started_s
    n = m["groups"]
    done = n if span <= 0 else min(int((loop.t - loop.started_s) / span * n), n - 1)
    recv = kv_recv_per_rank(loop.tables, loop.kv, m["src"], m["dst"])
    held = max(loop.kv.move_held_per_rank(m["src"], m["dst"], recv, n, done))
    m["landed"] = done
    # the run stops where the next group lands: each group hands off at a batch boundary
    loop.hand_off_s = loop.ready_s if span <= 0 else loop.started_s + span * (done + 1) / n
    if held > m["held_max_kv_bytes"]:
        m["held_max_kv_bytes"] = held


def settle_switch(loop: "ServingLoop") -> None:
    """Commit the switch in flight at this boundary if it is due and ready; record an abort."""
    if loop.inflight.plan.move_groups > 1 and loop.t < loop.ready_s:
        account_move(loop)
    status = loop.executor.poll_switch()
    if status == SwitchStatus.ABORTED:
        end_switch(loop, aborted=getattr(loop.executor, "abort_reason", "") or "aborted by the executor")
    elif loop.t >= loop.ready_s and status == SwitchStatus.READY:
        end_switch(loop)


def end_switch(loop: "ServingLoop", aborted: str = "") -> None:
    """The switch in flight ends: committed (the executor's stall, the new layout) or aborted (the
    old layout stays); either way it is recorded and the throughput rule's cooldown restarts."""
    d, state = loop.inflight, loop.state
    plan = d.plan
    stall = 0.0 if aborted else loop.executor.commit_switch(plan)
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
