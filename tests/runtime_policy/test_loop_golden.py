"""The optimized serving loop gives exactly the results of the straightforward one it replaced
(reference_loop.py), request by request, on fixed seeds: arrivals cutting runs short (chat,
bursty), the shrinking batch, KV pressure with preemption, a max-batch cap, and each ordering.

The reference predates prefix-aware chunk pricing and the policy's prefill statistics, so both run
on an executor that prices every chunk without its cached prefix on the decode-busiest owner, and
a policy that ignores prefill statistics (what the reference could say).
"""

import numpy as np
import pytest

from executor.sim import SimExecutor
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import FixedPolicy, LayoutPolicy
from runtime_policy.tables import LAYOUTS
from runtime_policy.workloads import bursty, chat, shrinking
from tests.runtime_policy import reference_loop
from tests.runtime_policy.conftest import make_policy



class ChunkAsBefore(SimExecutor):
    """Prices chunks as the reference loop's executor did: no prefix, on the decode-busiest owner."""

    def run_steps(self, batch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None):
        return super().run_steps(batch, prefill_tokens)


class DecodeOnlyPolicy(LayoutPolicy):
    """Decides as the reference's policy did: without the prefill statistics it never passed."""

    def decide(self, state):
        state.prefill_step_fraction = 0.0
        return super().decide(state)


CFG = LoopConfig(max_batch=1024, prefill_chunk_tokens=2048, max_run_steps=32)
CASES = [  # (workload, mem_fraction, policy, order, max_batch)
    (lambda: chat(300, seed=4, rate_per_s=40.0), 0.88, "dynamic", "fcfs", 1024),
    (lambda: bursty(300, seed=5, rate_per_s=40.0), 0.88, "dynamic", "boost", 1024),
    (lambda: shrinking(200, seed=6), 0.88, "dynamic", "srpt-oracle", 1024),
    (lambda: shrinking(150, seed=3), 0.7, "tp", "boost", 1024),
    (lambda: shrinking(150, seed=3), 0.7, "tp", "fcfs", 1024),
    (lambda: chat(300, seed=7, rate_per_s=80.0), 0.7, "dop", "boost", 32),
    (lambda: chat(200, seed=8, rate_per_s=50.0), 0.75, "dynamic", "fcfs", 1024),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_optimized_loop_matches_reference(case):
    make, mem, policy, order, max_batch = CASES[case]
    w = make()
    _, lp = make_policy(mem_fraction=mem)
    cfg = LoopConfig(max_batch=max_batch, prefill_chunk_tokens=2048, max_run_steps=32)
    runs = []
    for fn in (serve, reference_loop.serve):
        pol = DecodeOnlyPolicy(lp.tables, lp.knobs) if policy == "dynamic" else FixedPolicy(LAYOUTS.index(policy))
        runs.append(fn(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol, Ordering(order),
                       ChunkAsBefore(lp.tables), cfg))
    new, ref = runs
    for name in ("first_token_s", "finish_s", "status", "preemptions"):
        np.testing.assert_array_equal(getattr(new, name), getattr(ref, name), err_msg=name)
    assert (new.steps, new.decode_steps) == (ref.steps, ref.decode_steps)
    assert new.switches == ref.switches
    assert new.layout_time_s == ref.layout_time_s
    assert new.timeline == ref.timeline
