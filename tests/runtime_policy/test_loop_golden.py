"""The serving loop's results, request by request, pinned on fixed seeds: arrivals cutting runs
short (chat, bursty), the shrinking batch, KV pressure with preemption, a max-batch cap, and each
ordering. An optimization must leave them unchanged; a deliberate behaviour change regenerates
the golden file and says why in its commit:

    python -m tests.runtime_policy.test_loop_golden --regenerate
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from executor.sim import SimExecutor
from runtime_policy.loop import LoopConfig, serve
from runtime_policy.ordering import Ordering
from runtime_policy.policy import FixedPolicy
from runtime_policy.tables import LAYOUTS
from runtime_policy.workloads import bursty, chat, shrinking
from tests.runtime_policy.conftest import make_policy

GOLDEN = Path(__file__).parent / "golden" / "loop_cases.json"
CASES = [  # (workload, mem_fraction, policy, order, max_batch)
    (lambda: chat(300, seed=4, rate_per_s=40.0), 0.88, "dynamic", "fcfs", 1024),
    (lambda: bursty(300, seed=5, rate_per_s=40.0), 0.88, "dynamic", "boost", 1024),
    (lambda: shrinking(200, seed=6), 0.88, "dynamic", "srpt-oracle", 1024),
    (lambda: shrinking(150, seed=3), 0.7, "tp", "boost", 1024),
    (lambda: shrinking(150, seed=3), 0.7, "tp", "fcfs", 1024),
    (lambda: chat(300, seed=7, rate_per_s=80.0), 0.7, "dop", "boost", 32),
    (lambda: chat(200, seed=8, rate_per_s=50.0), 0.75, "dynamic", "fcfs", 1024),
]


def run_case(case: int) -> dict:
    make, mem, policy, order, max_batch = CASES[case]
    w = make()
    _, lp = make_policy(mem_fraction=mem)
    cfg = LoopConfig(max_batch=max_batch, prefill_chunk_tokens=2048, max_run_steps=32)
    pol = lp if policy == "dynamic" else FixedPolicy(LAYOUTS.index(policy))
    r = serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol, Ordering(order), SimExecutor(lp.tables), cfg)
    return {
        "first_token_s": r.first_token_s.tolist(), "finish_s": r.finish_s.tolist(),
        "status": [str(x) for x in r.status.tolist()], "preemptions": r.preemptions.tolist(),
        "steps": r.steps, "decode_steps": r.decode_steps,
        "switches": [dataclasses.asdict(s) for s in r.switches],
        "layout_time_s": r.layout_time_s,
        "timeline_points": len(r.timeline.get("t_s", [])),
    }


@pytest.mark.parametrize("case", range(len(CASES)))
def test_loop_matches_golden(case):
    want = json.loads(GOLDEN.read_text())[case]
    got = run_case(case)
    for name in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(np.array(got[name], dtype=float), np.array(want[name], dtype=float),
                                   rtol=1e-12, atol=0, equal_nan=True, err_msg=name)
    for name in ("status", "preemptions", "steps", "decode_steps", "timeline_points"):
        assert got[name] == want[name], name
    assert [(s["from_layout"], s["to_layout"], s["reason"]) for s in got["switches"]] == \
        [(s["from_layout"], s["to_layout"], s["reason"]) for s in want["switches"]]
    for s, t in zip(got["switches"], want["switches"]):
        assert s["at_s"] == pytest.approx(t["at_s"], rel=1e-12)
    assert got["layout_time_s"] == pytest.approx(want["layout_time_s"], rel=1e-12)


if __name__ == "__main__" and "--regenerate" in sys.argv:
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps([run_case(i) for i in range(len(CASES))]) + "\n")
    print(f"wrote {GOLDEN}")
