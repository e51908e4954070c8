"""When does switching layouts pay? Every built-in load shape, on both deployments, in the simulator
(FCFS): each fixed layout, the dynamic policy, the free-switch oracle, the priced oracle, and the
policy's share of each oracle's gain over the best fixed layout (issue 27).

- Step model (`--step-model`): `prior` (the default, the corrected model issue 27 asks for): each
  deployment's shipped (GPU, engine) prior, the engine's kernels from per-kernel tables
  (runtime_policy.tables.default_step_model, what `floorfirst simulate` prices by); `datasheet`:
  the datasheet midpoints every result before the third session of 2026-12-07 used.

- Deployments: DeepSeek-V3.2 on 8 x H200 and GLM-5 on 8 x B200, EP MoE, KV pools as SGLang sizes
  them (as benchmarks/layout_dynamic.py).
- Workloads (runtime_policy/workloads.py, library defaults fixed before any result was seen):
  `rollout` (512: a GRPO step, 64 prompts x 8 samples at t = 0, long-tailed responses to 32K),
  `reasoning` (512 at 2/s: short questions, long chains of thought), `agentic` (256 turns of
  multi-turn sessions starting within 2 s), `shrinking` (2,000 at t = 0), `longprompt` (400 at
  1/s, 16K-64K prompts) and `chat` (2,000 at 20/s). `--requests-scale` scales every count.
- The oracle (executor/oracle.py): every recorded step repriced in the best layout whose KV holds
  its batch, switches free and instant, over each recorded trajectory, replayed against the
  workload's arrivals (a step starts no earlier than the requests it prefills arrive); the largest
  bound.
- The priced oracle (executor/priced_oracle.py): on the same step traces, the best layout schedule
  when every change pays the switch as the policy prices it and the simulator charges it (its KV
  moves for the planner's link time while the steps go on in the old layout, then cost_s =
  interference + commit stall at the commit; a move whose memory does not fit is not made), found
  exactly by a Viterbi recursion over steps x layouts; the largest over the trajectories. It is
  checked here, on every row, to lie between the best fixed layout and the free oracle.
- Share of an oracle's gain: (dynamic - best fixed) / (oracle - best fixed), where the oracle
  gains at least 0.5 % (else none: nothing to share). A row misses the 3 % target (issue 27) where
  dynamic < 0.97 x the priced oracle. `dyn/prc-own`: the dynamic policy over the priced oracle on
  its own trajectory (the same batches; the largest bound may come from another layout's).

`--shape-grid` runs the earlier sweep instead: the shrinking batch's output median, spread and cap
over a 27-point grid per deployment (`shrinking_shape`); it writes layout_dynamic_sweep.json, .txt
(one line a point) and .png (a heat map per deployment and cap, `plot_shape_grid`).

Writes to `--out` (a temporary folder by default): layout_dynamic_sweep.json, .txt and
layout_dynamic_rollout.png — one DeepSeek-V3.2 rollout run, the dynamic policy's layout over time
above its decode throughput (tokens/s in 5 s windows) next to the best fixed layout's. Progress on
stderr; the table, then one JSON document as the last line, on stdout.

Run: python benchmarks/layout_dynamic_sweep.py [--out DIR] [--workloads rollout,reasoning,...]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import tempfile
import time

import numpy as np

import planner
from conditions import cpu_name, git_commit
from layout_dynamic import run_case
from runtime_policy.policy import PolicyKnobs, planned_knobs
from runtime_policy.tables import datasheet_model, default_step_model
from runtime_policy.workloads import Workload, make_workload

DEPLOYMENTS = (("deepseek-v3.2", "h200"), ("glm-5", "b200"))
WORKLOADS = (("rollout", 512), ("reasoning", 512), ("agentic", 256), ("shrinking", 2000), ("longprompt", 400),
             ("chat", 2000))
MIN_ORACLE_GAIN = 0.005  # below this the oracle's gain is noise: no share is reported
PLOT_WINDOW_S = 5.0
MEDIANS = (500, 1500, 4000)
SIGMAS = (0.6, 1.2, 1.8)
CAPS = (16384, 65536, 131072)
SEED = 0


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


STEP_MODELS = ("prior", "datasheet")


def step_model(dep, kind: str):
    """The step model the sweep prices by (--step-model `kind`)."""
    return default_step_model(dep) if kind == "prior" else datasheet_model()


def deployment(model: str, hw_name: str):
    return planner.make_deployment(planner.load_model(model), planner.load_hardware(hw_name), attn="tp", moe="ep",
                                   gpus=8)


def shrinking_shape(n: int, median: int, sigma: float, cap: int, seed: int) -> Workload:
    rng = np.random.default_rng(seed)
    inp = np.clip(np.rint(512 * np.exp(0.5 * rng.standard_normal(n))), 1, 65536).astype(np.int64)
    out = np.clip(np.rint(median * np.exp(sigma * rng.standard_normal(n))), 1, cap).astype(np.int64)
    return Workload("shrinking-sweep", np.zeros(n), inp, out,
                    {"output_median_tokens": median, "output_sigma": sigma, "output_cap_tokens": cap})


def oracle_share(dyn: float, best: float, oracle: float) -> float | None:
    """The dynamic policy's share of the oracle's gain over the best fixed layout (None: the
    oracle gains less than MIN_ORACLE_GAIN, so there is no gain to share)."""
    if oracle < best * (1.0 + MIN_ORACLE_GAIN):
        return None
    return (dyn - best) / (oracle - best)


MISS_FRACTION = 0.03  # issue 27: the dynamic policy within 3 % of the (priced) oracle on every row


def priced_bound(tables, rec, summary, bound, makespan_s, span_s, arrival_s=None) -> dict:
    """The priced oracle over one trajectory (`layout_dynamic.run_case`'s hook): its throughput, as
    the free oracle's: its schedule replayed against the arrivals (each step no earlier than the
    requests it prefills), else its busy time in place of the recorded one."""
    from executor.priced_oracle import priced_best

    sched = priced_best(tables, rec, arrival_s)
    if bound.released_makespan_s is not None:
        mk = max(sched.busy_s, span_s)  # the schedule's makespan (executor/priced_oracle.py)
    else:
        mk = max(makespan_s - bound.busy_actual_s - bound.commit_stall_s + sched.busy_s, span_s)
    return {"priced_oracle_tokens_per_s": summary["output_tokens"] / mk if mk > 0 else 0.0,
            "priced_oracle_makespan_s": mk, "priced_busy_s": sched.busy_s, "priced_switches": sched.switches,
            "priced_switch_cost_s": sched.switch_cost_s, "priced_start_layout": tables.layouts[sched.start_layout],
            "priced_layout_steps": dict(zip(tables.layouts, sched.layout_steps))}


def workload_row(model: str, hw_name: str, dep, name: str, n: int, kind: str) -> dict:
    w = make_workload(name, n, SEED)
    t0 = time.perf_counter()
    # the dynamic policy starts on the layout planned for the load the workload states (its rate and
    # mean lengths; PolicyKnobs.planned_*), as the best fixed layout is chosen knowing the workload
    knobs = planned_knobs(PolicyKnobs(), w)
    c = run_case(dep, step_model(dep, kind), w, knobs=knobs, on_trajectory=priced_bound)
    rows = c["rows"]
    fixed = {p: r["throughput_tokens_per_s"] for p, r in rows.items() if p != "dynamic"}
    best, dyn, oracle = c["best_fixed_tokens_per_s"], c["dynamic_tokens_per_s"], c["oracle_tokens_per_s"]
    return {"model": model, "hardware": hw_name, "gpus": 8, "kv_dtype": dep.kv_dtype, "workload": name,
            "requests": n, "workload_params": w.params,
            "planned_load": {k: getattr(knobs, k) for k in ("planned_rate_per_s", "planned_input_tokens",
                                                             "planned_output_tokens")}, "fixed_tokens_per_s": fixed, "best_fixed": c["best_fixed"],
            "best_fixed_tokens_per_s": best, "dynamic_tokens_per_s": dyn, "oracle_tokens_per_s": oracle,
            "oracle_trajectory": c["oracle_trajectory"], "dynamic_over_best_fixed": dyn / best,
            "oracle_over_best_fixed": oracle / best, "dynamic_over_oracle": dyn / oracle if oracle else None,
            "share_of_oracle_gain": oracle_share(dyn, best, oracle),
            **priced_columns(c, dyn, best, oracle),
            "switches": rows["dynamic"]["switches"], "switch_log": rows["dynamic"]["switch_log"],
            "decisions": rows["dynamic"]["decisions"],
            "preemptions": {p: r["preemptions"] for p, r in rows.items()},
            "wall_s": time.perf_counter() - t0}


def priced_columns(c: dict, dyn: float, best: float, oracle: float) -> dict:
    """The priced oracle's figures of a row: the largest over the trajectories, its schedule's
    switches, the dynamic policy's share of its gain, whether the row misses 3 % of it, and the
    check best fixed <= priced <= free (within rounding)."""
    by = c["oracle_by_trajectory"]
    frm = max(by, key=lambda p: by[p]["priced_oracle_tokens_per_s"])
    priced = by[frm]["priced_oracle_tokens_per_s"]
    own = by["dynamic"]["priced_oracle_tokens_per_s"]
    return {"priced_oracle_tokens_per_s": priced, "priced_oracle_trajectory": frm,
            "priced_oracle_on_dynamic_trajectory_tokens_per_s": own,
            "dynamic_over_priced_oracle_on_own_trajectory": dyn / own,
            "priced_oracle_switches": by[frm]["priced_switches"],
            "priced_oracle_layout_steps": by[frm]["priced_layout_steps"],
            "priced_oracle_over_best_fixed": priced / best, "dynamic_over_priced_oracle": dyn / priced,
            "share_of_priced_oracle_gain": oracle_share(dyn, best, priced),
            "misses_priced_oracle_by_3pct": bool(dyn < (1.0 - MISS_FRACTION) * priced),
            "priced_oracle_between_best_fixed_and_free": bool(best * (1 - 1e-9) <= priced <= oracle * (1 + 1e-9)),
            "priced_by_trajectory": {p: {k: v for k, v in b.items() if k.startswith("priced_")} for p, b in by.items()}}


def print_table(out: list[dict]) -> str:
    layouts = sorted({p for r in out for p in r["fixed_tokens_per_s"]},
                     key=lambda p: list(out[0]["fixed_tokens_per_s"]).index(p) if p in out[0]["fixed_tokens_per_s"] else 99)
    head = (f"{'deployment':<20} {'workload':<11} " + " ".join(f"{p:>7}" for p in layouts)
            + f" {'dynamic':>8} {'oracle':>8} {'best':>5} {'dyn/best':>8} {'orc/best':>8} {'dyn/orc':>7} "
              f"{'share':>6} {'sw':>3}   {'priced':>8} {'from':>7} {'dyn/prc':>7} {'p-share':>7} {'p-sw':>4} {'miss3%':>6} "
              f"{'dyn/prc-own':>11}")
    lines = [head]
    for r in out:
        f = r["fixed_tokens_per_s"]
        share, pshare = r["share_of_oracle_gain"], r["share_of_priced_oracle_gain"]
        lines.append(f"{r['model'] + ' 8x' + r['hardware']:<20} {r['workload']:<11} "
                     + " ".join(f"{f[p]:>7.0f}" if p in f else f"{'-':>7}" for p in layouts)
                     + f" {r['dynamic_tokens_per_s']:>8.0f} {r['oracle_tokens_per_s']:>8.0f} {r['best_fixed']:>5} "
                       f"{r['dynamic_over_best_fixed']:>8.3f} {r['oracle_over_best_fixed']:>8.3f} "
                       f"{r['dynamic_over_oracle']:>7.3f} {'-' if share is None else f'{share:.2f}':>6} "
                       f"{r['switches']:>3}   {r['priced_oracle_tokens_per_s']:>8.0f} {r['priced_oracle_trajectory']:>7} "
                       f"{r['dynamic_over_priced_oracle']:>7.3f} {'-' if pshare is None else f'{pshare:.2f}':>7} "
                       f"{r['priced_oracle_switches']:>4} {'MISS' if r['misses_priced_oracle_by_3pct'] else '':>6} "
                       f"{r['dynamic_over_priced_oracle_on_own_trajectory']:>11.3f}")
    text = "\n".join(lines)
    print(text)
    return text


def rollout_timeline(dep, best_fixed: str, n: int, kind: str) -> dict:
    """One rollout run of the dynamic policy and of the best fixed layout, recorded run by run: each
    run's layout, and decode tokens / seconds in PLOT_WINDOW_S windows of busy time."""
    from executor.oracle import RecordingExecutor
    from executor.sim import SimExecutor, engine_chunk_tokens
    from runtime_policy.loop import LoopConfig, serve
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy, LayoutPolicy

    w = make_workload("rollout", n, SEED)
    config = LoopConfig()
    lp = LayoutPolicy.compile(dep, step_model(dep, kind), PolicyKnobs(), max_prefill_tokens=engine_chunk_tokens(dep, config))
    names = lp.tables.layouts
    out = {"layouts": list(names)}
    for label, pol in (("dynamic", LayoutPolicy(lp.tables, lp.knobs)), (best_fixed, FixedPolicy(names.index(best_fixed)))):
        rec = RecordingExecutor(SimExecutor(lp.tables))
        serve(w.arrival_s, w.input_tokens, w.output_tokens, lp.tables, pol, Ordering("fcfs"), rec, config)
        t_end = np.cumsum([float(np.sum(r.durations_s)) for r in rec.runs]) if rec.runs else np.zeros(0)
        tokens = np.array([float(len(r.context_tokens) * len(r.durations_s)) for r in rec.runs])
        edges = np.arange(0.0, (t_end[-1] if t_end.size else 0.0) + PLOT_WINDOW_S, PLOT_WINDOW_S)
        idx = np.searchsorted(edges, t_end, side="left") - 1
        per = np.bincount(np.clip(idx, 0, None), weights=tokens, minlength=edges.size)[: edges.size]
        out[label] = {"run_end_s": t_end.tolist(), "run_layout": [int(r.layout) for r in rec.runs],
                      "window_start_s": edges.tolist(), "decode_tokens_per_s": (per / PLOT_WINDOW_S).tolist()}
    return out


def plot_rollout(tl: dict, best_fixed: str, title: str, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax0, ax1) = plt.subplots(2, 1, figsize=(9, 5.2), sharex=True, height_ratios=(1, 2.2), constrained_layout=True)
    dyn = tl["dynamic"]
    ax0.step(dyn["run_end_s"], dyn["run_layout"], where="pre", color="C0")
    ax0.set_yticks(range(len(tl["layouts"])), tl["layouts"])
    ax0.set_ylabel("layout")
    ax0.set_title(title, fontsize=10)
    for label, color in (("dynamic", "C0"), (best_fixed, "C1")):
        d = tl[label]
        ax1.plot(d["window_start_s"], d["decode_tokens_per_s"], color=color, lw=1.2,
                 label="dynamic policy" if label == "dynamic" else f"fixed {label} (best fixed)")
    ax1.set_xlabel("busy time (s)")
    ax1.set_ylabel(f"decode tokens/s ({PLOT_WINDOW_S:.0f} s windows)")
    ax1.legend(loc="upper right")
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_shape_grid(results: list[dict], title: str, path: str) -> None:
    """One heat map per deployment and output cap: the oracle over the best fixed layout per output
    median x spread, the dynamic policy's in brackets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    deps = list(dict.fromkeys((r["model"], r["hardware"]) for r in results))
    fig, axes = plt.subplots(len(deps), len(CAPS), figsize=(4.6 * len(CAPS), 3.9 * len(deps)), squeeze=False,
                             constrained_layout=True)
    im = None
    for row, (model, hw_name) in enumerate(deps):
        for col, cap in enumerate(CAPS):
            ax = axes[row][col]
            cell = {(r["output_sigma"], r["output_median_tokens"]): r for r in results
                    if r["model"] == model and r["hardware"] == hw_name and r["output_cap_tokens"] == cap}
            grid = np.array([[cell[(s, m)]["oracle_over_best_fixed"] if (s, m) in cell else np.nan for m in MEDIANS]
                             for s in SIGMAS])
            im = ax.imshow(grid, origin="lower", vmin=1.0, vmax=1.4, cmap="viridis", aspect="auto")
            for i, s in enumerate(SIGMAS):
                for j, m in enumerate(MEDIANS):
                    if (s, m) in cell:
                        r = cell[(s, m)]
                        ax.text(j, i, f"{r['oracle_over_best_fixed']:.2f}\n({r['dynamic_over_best_fixed']:.2f})",
                                ha="center", va="center", color="w", fontsize=8)
            ax.set_xticks(range(len(MEDIANS)), [str(m) for m in MEDIANS])
            ax.set_yticks(range(len(SIGMAS)), [str(s) for s in SIGMAS])
            ax.set_xlabel("output median (tokens)")
            ax.set_ylabel("output sigma")
            ax.set_title(f"{model}, 8x{hw_name}, cap {cap // 1024}K", fontsize=9)
    fig.colorbar(im, ax=axes, shrink=0.6, label="oracle / best fixed (dynamic in brackets)")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def run_shape_grid(args) -> list[dict]:
    out = []
    for model, hw_name in DEPLOYMENTS:
        dep = deployment(model, hw_name)
        for med, sig, cap in itertools.product(MEDIANS, SIGMAS, CAPS):
            w = shrinking_shape(args.requests, med, sig, cap, SEED)
            c = run_case(dep, step_model(dep, args.step_model), w)
            out.append({"model": model, "hardware": hw_name, "output_median_tokens": med, "output_sigma": sig,
                        "output_cap_tokens": cap, "best_fixed": c["best_fixed"],
                        "dynamic_over_best_fixed": c["dynamic_over_best_fixed"],
                        "oracle_over_best_fixed": c["oracle_over_best_fixed"],
                        "switches": c["rows"]["dynamic"]["switches"]})
            log(f"{model} median {med} sigma {sig} cap {cap}: dyn/best {c['dynamic_over_best_fixed']:.3f} "
                f"oracle/best {c['oracle_over_best_fixed']:.3f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="folder for the results and the plot (default: a temporary one)")
    ap.add_argument("--workloads", default=",".join(w for w, _ in WORKLOADS),
                    help="comma-separated, of: " + ", ".join(w for w, _ in WORKLOADS))
    ap.add_argument("--requests-scale", type=float, default=1.0, help="scale every workload's request count")
    ap.add_argument("--shape-grid", action="store_true", help="the shrinking batch's shape grid instead")
    ap.add_argument("--requests", type=int, default=1000, help="requests per point of --shape-grid")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--step-model", choices=STEP_MODELS, default="prior",
                    help="prior: each deployment's shipped (GPU, engine) prior (the default); datasheet: the midpoints")
    args = ap.parse_args()
    known = dict(WORKLOADS)
    chosen = [x.strip() for x in args.workloads.split(",") if x.strip()]
    bad = [x for x in chosen if x not in known]
    if bad or not chosen or not args.requests_scale > 0:
        print(f"error: --workloads must name some of {', '.join(known)} and --requests-scale be > 0 "
              f"(got {args.workloads!r}, {args.requests_scale})", file=sys.stderr)
        return 2
    out_dir = args.out or tempfile.mkdtemp(prefix="layout_dynamic_sweep_")
    os.makedirs(out_dir, exist_ok=True)
    t0 = time.perf_counter()
    doc = {"benchmark": "layout_dynamic_sweep", "order": "fcfs", "step_model": args.step_model, "seed": SEED,
           "policy_knobs": PolicyKnobs().__dict__, "git_commit": git_commit(), "cpu": cpu_name(),
           "cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version(),
           "numpy": np.__version__}
    if args.shape_grid:
        doc.update(mode="shape_grid", requests=args.requests, results=run_shape_grid(args))
        lines = [f"{r['model']:<14} median {r['output_median_tokens']:>5} sigma {r['output_sigma']:.1f} cap "
                 f"{r['output_cap_tokens']:>6} best {r['best_fixed']:<5} dyn/best {r['dynamic_over_best_fixed']:.3f} "
                 f"oracle/best {r['oracle_over_best_fixed']:.3f} switches {r['switches']}" for r in doc["results"]]
        with open(os.path.join(out_dir, "layout_dynamic_sweep.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        if not args.no_plot:
            path = os.path.join(out_dir, "layout_dynamic_sweep.png")
            plot_shape_grid(doc["results"], f"shrinking batch of {args.requests} requests at t = 0, "
                            f"{args.step_model} step model", path)
            doc["plot"] = path
    else:
        out = []
        for model, hw_name in DEPLOYMENTS:
            dep = deployment(model, hw_name)
            for name in chosen:
                n = max(8, int(round(known[name] * args.requests_scale)))
                log(f"[{time.perf_counter() - t0:6.0f} s] {model} on 8 x {hw_name}: {name} ({n} requests) ...")
                r = workload_row(model, hw_name, dep, name, n, args.step_model)
                log(f"    dynamic / best fixed ({r['best_fixed']}) {r['dynamic_over_best_fixed']:.3f}, oracle / best "
                    f"{r['oracle_over_best_fixed']:.3f}, priced oracle / best {r['priced_oracle_over_best_fixed']:.3f} "
                    f"({r['priced_oracle_switches']} switches), {r['switches']} switches, {r['wall_s']:.0f} s")
                if not r["priced_oracle_between_best_fixed_and_free"]:
                    log(f"    CHECK FAILED: priced oracle {r['priced_oracle_tokens_per_s']:.1f} not within best fixed "
                        f"{r['best_fixed_tokens_per_s']:.1f} and free oracle {r['oracle_tokens_per_s']:.1f}")
                out.append(r)
        text = print_table(out)
        with open(os.path.join(out_dir, "layout_dynamic_sweep.txt"), "w") as f:
            f.write(text + "\n")
        doc.update(mode="workloads", requests_scale=args.requests_scale, results=out,
                   rows_missing_3pct_of_priced_oracle=[f"{r['model']} {r['workload']}" for r in out
                                                       if r["misses_priced_oracle_by_3pct"]],
                   priced_oracle_check_failed=[f"{r['model']} {r['workload']}" for r in out
                                               if not r["priced_oracle_between_best_fixed_and_free"]])
        if not args.no_plot and "rollout" in chosen:
            model, hw_name = DEPLOYMENTS[0]
            row = next(r for r in out if r["model"] == model and r["workload"] == "rollout")
            log("plotting one rollout run ...")
            tl = rollout_timeline(deployment(model, hw_name), row["best_fixed"], row["requests"], args.step_model)
            path = os.path.join(out_dir, "layout_dynamic_rollout.png")
            plot_rollout(tl, row["best_fixed"], f"{model} on 8 x {hw_name}, rollout ({row['requests']} requests, seed "
                         f"{SEED}): dynamic {row['dynamic_over_best_fixed']:.3f}x the best fixed layout", path)
            doc["plot"] = path
            log(f"plot: {path}")
    doc["wall_s"] = time.perf_counter() - t0
    with open(os.path.join(out_dir, "layout_dynamic_sweep.json"), "w") as f:
        json.dump(doc, f, indent=1, default=list)
    log(f"wrote {out_dir}/layout_dynamic_sweep.json ({doc['wall_s']:.0f} s)")
    print(json.dumps(doc, default=list))
    return 0


if __name__ == "__main__":
    sys.exit(main())
