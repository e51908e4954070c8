"""Where the free-switch oracle's gain comes from (issue 27): how often its per-step best layout
changes, and which layouts win prefill steps against decode-only steps, on the sweep's rows whose
oracle gains most over the dynamic policy (chat, reasoning).

The oracle (executor/oracle.py `per_step_best`) reprices every recorded step in every layout and
takes the fastest, with free, instant switches. This script records the oracle's trajectory (the
fixed layout `layout_dynamic_sweep.py` reports as `oracle_trajectory`), picks the fastest layout per
step the same way (KV feasibility left out: an upper count of changes), and counts the changes.

Usage: python benchmarks/oracle_alternation.py [--out DIR]   (writes oracle_alternation.json; one
JSON document printed last; ~1 min on one core)
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layout_dynamic_sweep as S  # noqa: E402
from executor.oracle import RecordingExecutor  # noqa: E402
from executor.sim import SimExecutor, engine_chunk_tokens  # noqa: E402
from runtime_policy.executor import StepBatch  # noqa: E402
from runtime_policy.loop import LoopConfig, serve  # noqa: E402
from runtime_policy.ordering import Ordering  # noqa: E402
from runtime_policy.policy import FixedPolicy, LayoutPolicy, PolicyKnobs  # noqa: E402
from runtime_policy.tables import datasheet_model  # noqa: E402
from runtime_policy.workloads import make_workload  # noqa: E402

CASES = (("deepseek-v3.2", "h200", "chat", "dop"), ("deepseek-v3.2", "h200", "reasoning", "dop"),
         ("glm-5", "b200", "chat", "tp"), ("glm-5", "b200", "reasoning", "tp"))


def case(model: str, hw: str, wl: str, traj: str) -> dict:
    dep = S.deployment(model, hw)
    w = make_workload(wl, dict(S.WORKLOADS)[wl], S.SEED)
    cfg = LoopConfig()
    lp = LayoutPolicy.compile(dep, datasheet_model(), PolicyKnobs(), max_prefill_tokens=engine_chunk_tokens(dep, cfg))
    t = lp.tables
    names = list(t.layouts)
    rec = RecordingExecutor(SimExecutor(t))
    serve(w.arrival_s, w.input_tokens, w.output_tokens, t, FixedPolicy(names.index(traj)), Ordering("fcfs"), rec, cfg)
    sim = SimExecutor(t)
    usable = [i for i in range(len(names)) if t.info.kv_pool_bytes[i] > 0]
    seq, has_prefill = [], []
    for r in rec.runs:
        times = np.array([np.asarray(sim.run_steps(StepBatch(i, r.context_tokens, r.owners, np.arange(r.owners.size)),
                                                   r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
                          for i in usable])
        seq += list(np.array(usable)[times.argmin(axis=0)])
        has_prefill += list(r.prefill_tokens > 0)
    seq, pf = np.array(seq), np.array(has_prefill)
    return {"model": model, "hardware": hw, "workload": wl, "trajectory": traj, "steps": int(seq.size),
            "prefill_steps": int(pf.sum()), "oracle_layout_changes": int((seq[1:] != seq[:-1]).sum()),
            "best_on_prefill_steps": {names[i]: int(((seq == i) & pf).sum()) for i in usable if ((seq == i) & pf).any()},
            "best_on_decode_only_steps": {names[i]: int(((seq == i) & ~pf).sum()) for i in usable if ((seq == i) & ~pf).any()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for oracle_alternation.json (default: a temporary one)")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="oracle_alternation_")
    os.makedirs(out, exist_ok=True)
    rows = []
    for c in CASES:
        print(f"{c[0]} {c[2]} ...", file=sys.stderr, flush=True)
        rows.append(case(*c))
        r = rows[-1]
        print(f"  {r['steps']} steps ({r['prefill_steps']} with prefill), {r['oracle_layout_changes']} changes; "
              f"prefill steps best in {r['best_on_prefill_steps']}, decode-only in {r['best_on_decode_only_steps']}",
              file=sys.stderr, flush=True)
    doc = {"benchmark": "oracle_alternation", "step_model": "datasheet", "seed": S.SEED, "rows": rows}
    with open(os.path.join(out, "oracle_alternation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
