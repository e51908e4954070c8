"""Where the free-switch oracle's gain comes from (issue 27): how often its per-step best layout
changes, and which layouts win prefill steps against decode-only steps, on the sweep's rows whose
oracle gains most over the dynamic policy (chat, reasoning).

The oracle (executor/oracle.py `per_step_best`) reprices every recorded step in every layout and
takes the fastest, with free, instant switches. This script records the oracle's trajectory (the
fixed layout `layout_dynamic_sweep.py` reports as `oracle_trajectory`), picks the fastest layout per
step the same way (KV feasibility left out: an upper count of changes), and counts the changes.

NOTE: a count of per-step changes, not what they are worth. Since both oracles are replayed
against the arrivals (executor/oracle.py), the gain these changes are worth on chat and reasoning is
0.1-3.1 % over the best fixed layout (benchmarks/results/layout_dynamic_workloads.txt and
layout_dynamic_prior/): the 6-23 % these rows read before came from repricing a slower layout's
backlog as if its requests had arrived sooner.

`--batches` also serves, for each row, the trajectory the priced oracle's largest bound came from
and the dynamic policy's, and counts their steps and mean decode batch (`trajectory_batches`): a
slower layout queues the open arrivals and runs them in fewer, larger batches.

Usage: python benchmarks/oracle_alternation.py [--out DIR] [--batches]   (writes
oracle_alternation.json; one JSON document printed last; ~1 min on one core, ~2 more with --batches)
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
        ctx_run, own_run = r.decoding(t.ranks)  # the decoders that ran (executor/oracle.py)
        times = np.array([np.asarray(sim.run_steps(StepBatch(i, ctx_run, own_run, np.arange(own_run.size)),
                                                   r.prefill_tokens, r.prefill_context_tokens, r.chunk_owner))
                          for i in usable])
        seq += list(np.array(usable)[times.argmin(axis=0)])
        has_prefill += list(r.prefill_tokens > 0)
    seq, pf = np.array(seq), np.array(has_prefill)
    return {"model": model, "hardware": hw, "workload": wl, "trajectory": traj, "steps": int(seq.size),
            "prefill_steps": int(pf.sum()), "oracle_layout_changes": int((seq[1:] != seq[:-1]).sum()),
            "best_on_prefill_steps": {names[i]: int(((seq == i) & pf).sum()) for i in usable if ((seq == i) & pf).any()},
            "best_on_decode_only_steps": {names[i]: int(((seq == i) & ~pf).sum()) for i in usable if ((seq == i) & ~pf).any()}}


# (model, hardware, workload, the trajectory the sweep's priced oracle took its largest bound from)
BATCH_CASES = (("deepseek-v3.2", "h200", "reasoning", "cp"), ("deepseek-v3.2", "h200", "chat", "dop"),
               ("glm-5", "b200", "reasoning", "cp"), ("glm-5", "b200", "chat", "cp"))


def trajectory_batches(model: str, hw: str, wl: str, other: str) -> dict:
    """Steps, mean decode batch (step-weighted) and makespan of `other`'s fixed-layout run and of the
    dynamic policy's run on one row."""
    dep = S.deployment(model, hw)
    w = make_workload(wl, dict(S.WORKLOADS)[wl], S.SEED)
    cfg = LoopConfig()
    lp = LayoutPolicy.compile(dep, datasheet_model(), PolicyKnobs(), max_prefill_tokens=engine_chunk_tokens(dep, cfg))
    t = lp.tables
    out = {"model": model, "hardware": hw, "workload": wl}
    for name in (other, "dynamic"):
        pol = LayoutPolicy(t, lp.knobs) if name == "dynamic" else FixedPolicy(t.layouts.index(name))
        rec = RecordingExecutor(SimExecutor(t))
        res = serve(w.arrival_s, w.input_tokens, w.output_tokens, t, pol, Ordering("fcfs"), rec, cfg)
        k = np.array([len(r.durations_s) for r in rec.runs])
        b = np.array([len(r.context_tokens) for r in rec.runs])
        out[name] = {"steps": int(k.sum()), "mean_decode_batch": float((k * b).sum() / k.sum()),
                     "makespan_s": float(res.finish_s.max() - res.arrival_s.min())}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for oracle_alternation.json (default: a temporary one)")
    ap.add_argument("--batches", action="store_true", help="also count each row's trajectories' steps and batches")
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
    if a.batches:
        doc["trajectory_batches"] = []
        for c in BATCH_CASES:
            x = trajectory_batches(*c)
            doc["trajectory_batches"].append(x)
            print(f"{c[0]} {c[2]}: " + "; ".join(f"{k} {v['steps']} steps, mean batch {v['mean_decode_batch']:.1f}, "
                                                 f"makespan {v['makespan_s']:.0f} s" for k, v in x.items()
                                                 if isinstance(v, dict)), file=sys.stderr, flush=True)
    with open(os.path.join(out, "oracle_alternation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print(json.dumps(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
