"""The layout policy's capacity rule (policy.py, rule 1): when the queue's head can't be admitted,
the running set no longer fits, or its expected KV peak outgrows the current layout, price every
layout by the decode tokens per second it sustains at the batch its KV would hold, and move to the
best if it pays.

Each layout's batch: the share of the running set its pool holds at the expected peak, or all of it
plus the waiting requests its spare room admits, with the observed prefill scaled to that batch
(`sustained_rates`). Switch to the best if it beats the current layout's rate by
`min_gain_fraction` and the time saved over the dwell (at least the backlog's turnover) exceeds
`(1 + margin) ×` the move's cost; a move only the projection asks for also waits out the cooldown
and the switch-rate bound, and counts its gain over at most the payback horizon (policy.py, rule 2)
(SWITCH_PROJECTED). A move between two spread layouts (TP, CP) whose memory does not fit now may
shed KV first (`Decision.shed_kv_tokens`: the server preempts that much and admits nothing until the
commit; its recompute is in the cost). Blocked with no such move: wait for KV (STAY_KV_WAIT). If
the running set no longer fits, the best-priced layout that holds it, whatever the gain.

A pricing that found no move stands for `REPRICE_EVERY_STEPS` steps — in the caller: the decision
says so (`Decision.capacity_stands_steps`) and the server passes it back
(`PolicyState.capacity_reprice_at_step`), so `decide` stays a function of its inputs.

Does not: read the state's validity (policy.py checks it), or move anything.
"""

from __future__ import annotations

from runtime_policy.decision import Decision, PolicyState, Reason
from runtime_policy.transitions import memory_fits, plan_transition

# NOTE: pricing calls the step tables again at other batches (~10–20 µs), and the loop asks at every
# membership change; 64 is the loop's own bound on how long one answer stands
# (LoopConfig.max_run_steps), and far below a move's dwell.
REPRICE_EVERY_STEPS = 64
PRICED_NO_MOVE = object()  # `CapacityRule.decide`'s answer when a pricing found no move (the throughput rule decides)


class CapacityRule:
    """Rule 1 of one compiled policy; reads the policy's tables, knobs, pricer and dwell statistics."""

    def __init__(self, policy):
        self.p = policy

    def decide(self, state: PolicyState, cur: int, b: int, w: int, total: float, busy: list[float],
               lite: list[float], s1: float, s2: float, steps: list[float], blocked: bool, fits_now: bool,
               outgrown: bool, head: float, g_tot: float, growth: list[float], lean: bool = False):
        """A Decision; None (the throughput rule decides); or PRICED_NO_MOVE (the same, after a
        pricing that found no move: the throughput rule's answer then stands with it). `busy`,
        `lite` and `growth` are per layout [L]: its busiest and lightest owner group's KV tokens,
        and the busiest group's expected growth. `lean`: `steps` holds lower bounds for the twins
        the policy did not price (policy.py `_init_dominance`): good for the bound below, and every
        layout is priced here before the rates are compared."""
        p = self.p
        stay, stay_priced = p._stay[cur], p._stay_priced[cur]
        bpt, pool, share, ok = p._bpt, p._pool, p._share, p._ok
        gain_fraction, room_left = p.knobs.min_gain_fraction, p._max_batch - state.running
        t_cur = steps[cur]
        net_cur = p.pricer.net_share(cur, t_cur)
        must = not fits_now or (blocked and head * share[cur] * bpt > pool[cur])
        if blocked and not must and not outgrown and t_cur > 0:
            # NOTE: a bound first (`sustained_rates` NOTE): no layout holds more than the running
            # and waiting requests, at no less than its current-batch step; if none could beat the
            # current rate (its batch is the current one) by the hysteresis, wait without pricing
            most = b + min(w, room_left)
            floor = (1.0 + gain_fraction) * b / t_cur
            for i in p._others[cur]:
                if ok[i] and steps[i] > 0 and most / steps[i] > floor:
                    break
            else:
                return stay[Reason.STAY_KV_WAIT]
        step, at = state.step_index, state.capacity_reprice_at_step
        if not must and 0 <= step < at <= step + REPRICE_EVERY_STEPS:
            return stay[Reason.STAY_KV_WAIT] if blocked else None  # the caller's last pricing stands
        if lean:
            steps = p.pricer.step_times(b, s1, s2, busy, lite, state.prefill_step_fraction,
                                        state.prefill_tokens_per_step, state.prefill_context_tokens,
                                        state.prefill_owner_share)
        steps = steps[:]  # NOTE: the pricer reuses its output list, and pricing calls it again
        rates, held_t = self.sustained_rates(state, b, w, total, busy, lite, s1, s2, g_tot, growth, blocked, cur,
                                             steps, 0.0 if must else 1.0 + gain_fraction)
        best, best_rate, shed = -1, 0.0, 0.0
        busy_b = [x * bpt for x in busy]
        for i in p._layouts:
            if i == cur or not ok[i] or rates[i] <= best_rate:
                continue
            held = busy[i] * share[i] * bpt
            if not fits_now and held > pool[i] * p._headroom_keep:
                continue  # a forced move must hold the running set with headroom
            if blocked and (lite[i] + head) * share[i] * bpt > pool[i]:
                continue  # no room for the head there either
            cut = 0.0
            if not memory_fits(p.tables, cur, i, total * bpt, busy_b, b):  # in at most b groups (one request each)
                fit_tokens = p._max_fit_bytes[cur][i] / bpt
                if must or fit_tokens <= 0.0:
                    continue
                cut = total - fit_tokens  # shed this much KV first (spread layouts: the total decides)
            best, best_rate, shed = i, rates[i], cut
        r_cur = rates[cur]
        no_move = stay_priced[Reason.STAY_KV_WAIT] if blocked else PRICED_NO_MOVE
        if best < 0 or (not must and best_rate < (1.0 + gain_fraction) * r_cur):
            return no_move if not must else None
        if not must and not blocked and state.steps_since_switch < p.knobs.cooldown_steps:
            # a move found, held by the cooldown: this pricing stands until the cooldown ends
            left = min(p.knobs.cooldown_steps - state.steps_since_switch, REPRICE_EVERY_STEPS)
            return Decision(cur, False, Reason.STAY_COOLDOWN, capacity_stands_steps=left, candidate=best)
        if not must and not blocked and p._since_switch_s(state, t_cur) < p._min_gap_s:
            # the switch-rate bound holds a move only the projection asks for (policy.py)
            return Decision(cur, False, Reason.STAY_RATE_LIMIT, capacity_stands_steps=REPRICE_EVERY_STEPS,
                            candidate=best)
        if shed > 0.0:  # one-group layouts hold the total: less what is shed
            busy_b = [x - shed * bpt if p._groups[i] == 1 else x for i, x in enumerate(busy_b)]
        plan = plan_transition(p.tables, cur, best, (total - shed) * bpt, busy_b, b, t_cur, net_cur)
        if not plan.feasible:  # the shed's plan: its peak in the groups b requests allow
            return no_move if not must else None
        if shed > 0.0:
            # NOTE: the running set keeps decoding while the move runs: shed what it writes meanwhile too
            shed += b * (1.0 + plan.link_s / t_cur) if t_cur > 0 else b
            if shed >= total:
                return no_move
        cost_s = plan.cost_s + shed * p._prefill_s_per_token[best]  # the shed KV is prefilled again
        # NOTE: the pressure lasts at least as long as the work already here takes at the current
        # layout's sustained batch (the backlog's turnover: running + waiting requests × the mean
        # observed output / that batch), which for a queue is longer than the batch's own turnover
        dwell = p._dwell_steps
        b_cur = r_cur * held_t[cur]
        if b_cur > 0 and p._completed:
            backlog = (b + w) * p._mean_output / b_cur
            if backlog > dwell:
                dwell = min(backlog, p.knobs.max_dwell_steps)
        if not must and not blocked and t_cur > 0:  # a projected move repays within the horizon (policy.py)
            dwell = min(dwell, p.knobs.payback_horizon_s / t_cur)
        # the dwell's work at the current layout's sustained rate, done at the better one's
        gain_s = (dwell - plan.link_s / t_cur) * held_t[cur] * (1.0 - r_cur / best_rate) if t_cur > 0 else 0.0
        if not must and gain_s <= (1.0 + p.knobs.margin) * cost_s:
            return stay_priced[Reason.STAY_KV_WAIT if blocked else Reason.STAY_NOT_WORTH]
        reason = Reason.SWITCH_CAPACITY if blocked or must else Reason.SWITCH_PROJECTED
        return Decision(best, True, reason, gain_s, cost_s, plan, shed, candidate=best)

    def sustained_rates(self, state: PolicyState, b: int, w: int, total: float, busy: list[float],
                        lite: list[float], s1: float, s2: float, g_tot: float, growth: list[float], blocked: bool,
                        cur: int, steps: list[float], gain: float) -> tuple[list[float], list[float]]:
        """Per layout [L]: the decode tokens per second it sustains at the batch its KV holds, and
        its step seconds at that batch (0 where not usable, or where it can't beat the current
        layout's rate × `gain`).

        The batch a layout holds: if the running set's expected KV peak (current KV + the projected
        growth, per rank as the layout stores it) exceeds its pool, the share of the running set the
        pool holds at that peak; else the running set plus the waiting requests its spare room
        admits, each needing its prompt, the tables' per-request slack and the mean observed output
        (none for the current layout when its head is blocked). Its step: the current batch's mean context scaled to
        that batch, and the observed prefill scaled with it. NOTE: in steady state prefill tokens per
        step / decode tokens per step = mean prompt / mean output (each request needs both), so a
        batch k× larger needs k× the prefill to stay full; past a full chunk every step it is
        prefill-bound, and the batch it sustains is what a full chunk feeds. Rates are decode tokens
        per second: the prefill is a cost each layout pays in its step time, not output.
        NOTE: `steps` (the current batch's step times) serve a layout whose batch is the current one,
        and bound the others': a step is no faster for a larger batch with more prefill, so a
        layout whose batch / current-batch step can't beat the current rate × `gain` is not priced
        (each pricing is one step-times call, ~4 µs)."""
        p = self.p
        pre, f = float(state.prefill_tokens_per_step), float(state.prefill_step_fraction)
        if not (pre > 0.0 and f > 0.0):
            pre = f = 0.0
        f = min(f, 1.0)
        avail = min(w, p._max_batch - state.running)
        need = 0.0
        if avail > 0:
            need = float(state.waiting_tokens[:avail].sum()) / avail + p._slack + p._mean_output
        pfx, share_own = state.prefill_context_tokens, state.prefill_owner_share
        bpt, pool, groups, share, ok = p._bpt, p._pool, p._groups, p._share, p._ok
        n_layouts = len(p._layouts)
        rates, held_t = [0.0] * n_layouts, [0.0] * n_layouts
        by_batch: dict[int, list[float]] = {}
        floor = 0.0  # the rate a candidate must beat (the current layout's × gain)
        for i in (cur, *p._others[cur]):
            if not ok[i]:
                continue
            room = pool[i] / bpt  # tokens per rank
            if groups[i] > 1:  # the busiest group's peak at its share; spare: every group's room
                proj = (busy[i] + growth[i]) * share[i]
                spare = groups[i] * room / share[i] - (total + g_tot) if share[i] > 0 else 0.0
            else:  # busy: the total, with the layout's extra slack per request where it has one
                proj = (busy[i] + g_tot) * share[i]
                spare = (room - proj) / share[i] if share[i] > 0 else 0.0
            if proj > room:
                bb = b * room / proj
            elif avail > 0 and spare > 0.0 and not (blocked and i == cur):
                bb = b + min(spare / need, avail)
            else:
                bb = float(b)
            k = bb / b
            if pre * k > p.tables.max_prefill_tokens:  # prefill-bound: a full chunk every step feeds this batch
                k = p.tables.max_prefill_tokens / pre
                bb = b * k
            if k == 1.0:
                t = steps[i]
            elif i != cur and k > 1.0 and steps[i] > 0.0 and bb / steps[i] <= floor:
                continue  # its rate is below bb / steps[i]: it can't win
            else:
                n = max(int(bb + 0.5), 1)
                st = by_batch.get(n)
                if st is None:
                    st = by_batch[n] = list(p.pricer.step_times(n, s1 * k, s2 * k, [x * k for x in busy],
                                                                [x * k for x in lite], min(f * k, 1.0),
                                                                pre * k, pfx, share_own))
                t = st[i]
            if t > 0.0:
                rates[i], held_t[i] = bb / t, t
                if i == cur:
                    floor = rates[i] * gain
        return rates, held_t
