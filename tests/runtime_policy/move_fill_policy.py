"""A test policy that starts an incremental move whose destination fills before its last group
lands (Issue 27 item 1): the simulator's test (test_move_fill_sim.py) and the torch executor's
(tests/executor/move_fill_scenarios.py) drive the same one. Torch-free."""

from __future__ import annotations


class FillMove:
    """Serves `src` and, once every request decodes and the destination holds the running set for at
    most `room` more steps, switches to `dst` in `groups` groups (the plan the tables give): a move
    whose destination fills before its last group lands. Reads the loop (`self.loop`)."""

    reads_kv_growth = False

    def __init__(self, tables, src: str, dst: str, groups: int, requests: int, room: int):
        self.t, self.src, self.dst = tables, tables.layouts.index(src), tables.layouts.index(dst)
        self.groups, self.requests, self.room = groups, requests, room
        self.loop, self.plan = None, None

    def initial_layout(self, waiting):
        return self.src

    def usable_layouts(self):
        return [self.src, self.dst]

    def observe_completion(self, x):
        return None

    def decide(self, state):
        from dataclasses import replace

        from runtime_policy.decision import Decision, Reason
        from runtime_policy.preemption import kv_steps
        from runtime_policy.transitions import plan_transition

        loop = self.loop
        if (self.plan is None and state.layout == self.src and not state.switch_in_flight
                and loop.dec.b == self.requests and not loop.prefill_q
                and kv_steps(loop, loop.kv.total, self.dst) <= self.room):
            bpt = self.t.kv_bytes_per_token
            kv = loop.kv
            p = plan_transition(self.t, self.src, self.dst, kv.total * bpt,
                                [kv.busiest(i) * bpt for i in range(len(self.t.layouts))], state.running)
            self.plan = replace(p, move_groups=self.groups, move_order="longest")
            return Decision(self.dst, True, Reason.SWITCH_CAPACITY, 0.0, p.cost_s, self.plan)
        return Decision(state.layout, False, Reason.STAY_FIXED)
