"""The serving loop's side of a layout switch: filling the policy's state and asking it (once per
turn, runtime_policy/loop.py), starting the switch it decides (shedding KV first when the decision
says so), and settling it at a batch boundary — committed when due and ready, or recorded as an
abort with the old layout kept. Functions over a `ServingLoop`'s state, as admission.py and
preemption.py are.

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
    loop.ready_s = t + loop.executor.start_switch(d.plan)
    if loop.ready_s <= t or d.shed_kv_tokens > 0:
        loop.skip_admit = d.shed_kv_tokens > 0
        return True
    return False


def settle_switch(loop: "ServingLoop") -> None:
    """Commit the switch in flight at this boundary if it is due and ready; record an abort."""
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
