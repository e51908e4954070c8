"""`floorfirst simulate`: serve a workload on a deployment with the simulated executor under a
fixed layout or the dynamic layout policy, and one request ordering; report throughput, TTFT /
TPOT / time-to-last-token percentiles, offered against served load, the queue, whether the load is
overloaded (runtime_policy.metrics states the rule) and the switches made (table, `--json`,
`--plot`, and `--requests-csv` for one row per request)."""

from __future__ import annotations

import math
import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

import planner
from cli.common import (DEFAULTS, GpusOpt, HardwareOpt, JsonOpt, KvDtypeOpt, MemFractionOpt, ModelOpt,
                        MoeOpt, PlotOpt, ReplicasOpt, console, deployment, emit_json, load_specs)
from cli.host_tier_options import BudgetOpt, HostPageOpt, HostTierOpt, LocalityOpt, host_tier_spec
from cli.launch import planning
from cli.registry_options import POLICIES, live
from planner.errors import SpecError


# the layouts from the planner's registry, and the dynamic policy (choices made at registration)
PolicyOpt = Annotated[str, typer.Option("--policy", help="A fixed attention layout, or dynamic switching."), POLICIES]
REQUEST_COLUMNS = ("request", "arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens", "status",
                   "preemptions")


def _csv_path(value: str | None) -> str | None:
    """--requests-csv is checked as the options are parsed, before any work."""
    if value is not None:
        from planner.inputs import check_output_path

        check_output_path(value, "--requests-csv", suffixes=(".csv",))
    return value


RequestsCsvOpt = Annotated[Optional[str], typer.Option(
    "--requests-csv", callback=_csv_path,
    help="Write one row per request (arrival, first token and finish times in s, input and output tokens, status, "
         "preemptions) to this CSV file; a time never reached is empty.")]


def write_requests_csv(rows: dict, path: str) -> None:
    import csv

    try:
        with open(path, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(REQUEST_COLUMNS)
            for row in zip(*(rows[c] for c in REQUEST_COLUMNS)):
                out.writerow("" if v is None else v for v in row)
    except OSError as exc:
        raise SpecError(f"cannot write --requests-csv {path}: {exc.strerror}") from None


class OrderChoice(str, Enum):
    fcfs = "fcfs"
    srpt_oracle = "srpt-oracle"
    boost = "boost"


def _plot(doc: dict, path: str) -> None:
    """Timeline: layout over time, batch size and KV use (matplotlib imported here only)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = doc["timeline"]
    names = list(doc["layout_time_s"])  # the tables' layouts, in index order
    fig, ax = plt.subplots(3, 1, figsize=(9, 6.5), sharex=True)
    ax[0].step(tl["t_s"], tl["layout"], where="pre")
    ax[0].set_yticks(range(len(names)), names)
    ax[0].set_ylabel("layout")
    ax[1].step(tl["t_s"], tl["batch"], where="pre")
    ax[1].set_ylabel("decode batch")
    ax[2].plot(tl["t_s"], [100 * x for x in tl["kv_used_fraction"]])
    ax[2].set_ylabel("KV used (%)")
    ax[2].set_xlabel("time (s)")
    for s in doc["switches"]:
        for a in ax:
            a.axvline(s["at_s"], color="grey", lw=0.5, ls=":")
    fig.suptitle(f"{doc['model']} on {doc['gpus']} × {doc['hardware']}: {doc['workload']}, policy {doc['policy']}, "
                 f"order {doc['order']}")
    fig.tight_layout()
    try:
        from cli.plots import save_figure

        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def _any_kv_pool(m, hw, moe, gpus, replicas, kv_dtype, mem_fraction) -> bool:
    """Whether some layout the policy may pick leaves a KV pool (else every request would abort)."""
    from planner.step import kv_pool_bytes
    from runtime_policy.tables import LAYOUTS

    for a in LAYOUTS:
        try:
            d = deployment(m, hw, a, moe, gpus, replicas, None, kv_dtype, mem_fraction, 64, 0.0)
        except SpecError:
            continue
        if kv_pool_bytes(d) > 0:
            return True
    return False


def simulate_cmd(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    workload: Annotated[str, typer.Option("--workload", "-w", help="chat, shrinking, bursty, longprompt, rollout, reasoning, agentic (runtime_policy/workloads.py says how each is drawn), or a trace: CSV (arrival_s,input_tokens,output_tokens), an Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens) Mooncake JSONL (timestamp ms, input_length, output_length), or a benchmark result listing its requests (vllm bench serve --save-result JSON, SGLang bench_serving --output-details JSONL).")] = "chat",
    requests: Annotated[int, typer.Option("--requests", "-n", help="Requests to generate (or to take from a trace).")] = 1000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the workload and of the step-time noise.")] = 0,
    policy: PolicyOpt = "dynamic",
    order: Annotated[OrderChoice, typer.Option("--order", help="Request ordering.")] = OrderChoice.fcfs,
    calibration: Annotated[Optional[str], typer.Option("--calibration", help="A calibration artifact (floorfirst calibrate): step times from the fitted model instead of the datasheet floors.")] = None,
    json_out: JsonOpt = False, plot: PlotOpt = None,
    moe: MoeOpt = None, replicas: ReplicasOpt = 1, kv_dtype: KvDtypeOpt = None,
    mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    rate: Annotated[Optional[float], typer.Option("--rate", help="Mean arrival rate of chat/bursty/longprompt/reasoning, requests/s (rollout and agentic arrive as a batch).")] = None,
    noise: Annotated[float, typer.Option("--noise", help="Relative σ of seeded step-time noise.")] = 0.0,
    boost: Annotated[Optional[float], typer.Option("--boost", help="The boost ordering's knob β: 0 = FCFS, large = shortest expected first.")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most requests holding KV at once.")] = 4096,
    host_tier: HostTierOpt = False, hbm_budget_tokens: BudgetOpt = 4096, locality: LocalityOpt = 0.8,
    host_page_rows: HostPageOpt = 1,
    tier_choice: Annotated[bool, typer.Option("--tier-choice", help="With --host-tier and --policy dynamic: the policy may also turn the tier on and off (each layout gets a '+host' twin).")] = False,
    requests_csv: RequestsCsvOpt = None,
) -> None:
    """Serve a workload with the simulated executor: dynamic or fixed layout, and an ordering."""
    from executor.sim import simulate
    from runtime_policy.loop import LoopConfig
    from runtime_policy.tables import calibrated_model, default_step_model, layout_names
    from runtime_policy.workloads import make_workload

    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise SpecError(f"rate={rate} must be a positive number of requests per second")
    m, hw = load_specs(model, hardware)
    attn = policy if policy != "dynamic" else None
    dep, first_err = None, None
    for a in ([attn] if attn else list(layout_names())):
        try:
            dep = deployment(m, hw, a, moe, gpus, replicas, None, kv_dtype, mem_fraction, None, None)
            break
        except SpecError as exc:
            first_err = first_err or exc
    if dep is None:
        raise first_err
    if attn is None and not _any_kv_pool(m, hw, moe, gpus, replicas, kv_dtype, mem_fraction):
        raise SpecError(f"{m.name} on {gpus} × {hw.name}: the weights leave no KV pool under any layout, so nothing "
                        "can be served (more GPUs, lower-precision weights or a higher --mem-fraction)")
    step_model = calibrated_model(calibration) if calibration else default_step_model(dep)
    w = make_workload(workload, requests, seed, rate)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    if tier_choice and (tier is None or attn is not None):
        raise SpecError(f"--tier-choice needs --host-tier and --policy dynamic (got --policy {policy}"
                        f"{'' if tier else ', no --host-tier'})")
    if tier is not None:
        # NOTE: the tier's walls as tokens are exact at one context: the workload's mean over a request's life
        ref = max(1, int(w.input_tokens.mean() + w.output_tokens.mean() / 2))
        dep = planner.replace_deployment(dep, host_tier=tier.model_copy(update={"reference_context_tokens": ref}))
    if max_batch < 1 or max_batch > 65536:
        raise SpecError(f"max_batch={max_batch} must be in [1, 65536]")
    bar = None
    if not json_out and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        # NOTE: on stderr: `simulate > file` must hold only the report (console=None drew it on stdout)
        bar = Progress(transient=True, console=Console(stderr=True))
        task = bar.add_task("simulating", total=w.requests)
        bar.start()
    last = [0]

    def progress(group, groups, done, total):
        if bar is not None and done != last[0]:
            bar.update(task, completed=done * groups if groups == 1 else None, advance=None)
            last[0] = done

    try:
        doc = simulate(dep, w, policy, order.value, step_model, noise, seed, config=LoopConfig(max_batch=max_batch),
                       boost=boost, progress=progress if bar else None, tier_choice=tier_choice)
    finally:
        if bar is not None:
            bar.stop()
    if doc["completed"] == 0 and doc["requests"] > 0:
        # NOTE: a run that served nothing has no throughput or latency to report: it is the deployment's
        # answer to this workload, said in one line (exit 2), not a table of zeros with exit 0
        raise SpecError(f"{m.name} on {gpus} × {hw.name} served nothing: all {doc['aborted']} of {doc['requests']} "
                        f"requests were aborted, none fitting the KV pool of a layout the policy "
                        f"{policy} may use (more GPUs, --kv-dtype fp8, shorter requests or a higher --mem-fraction)")
    doc = {"model": m.name, "hardware": hw.name, "gpus": gpus, "replicas": replicas, "moe": dep.moe,
           "kv_dtype": dep.kv_dtype, "workload": w.name, "workload_params": w.params, "seed": seed,
           "policy": policy, "order": order.value, **doc}
    rows = doc.pop("per_request")
    if requests_csv:
        write_requests_csv(rows, requests_csv)
    if plot:
        _plot(doc, plot)
    if json_out:
        doc.pop("timeline")
        emit_json("simulate", doc)
        return
    render(doc, f"{m.name} on {gpus} × {hw.name}: {w.name} ({w.requests} requests), policy {policy}, "
                f"order {order.value}")


def render(doc: dict, title: str) -> None:
    """The serving metrics as a table and a few lines (simulate and serve print the same)."""
    con = console()
    t = Table(title=escape(title))
    t.add_column("metric")
    for p in ("p50", "p90", "p99"):
        t.add_column(p, justify="right")
    for name in ("ttft", "tpot", "ttlt"):
        vals = [doc[f"{name}_{p}_s"] for p in ("p50", "p90", "p99")]
        t.add_row(f"{name} (s)", *("—" if v is None else f"{v:.3f}" for v in vals))
    qs = [doc[f"queue_{p}_requests"] for p in ("p50", "p90", "p99")]
    t.add_row("queue (requests)", *(f"{q:.0f}" for q in qs))
    con.print(t)
    con.print(f"throughput {doc['throughput_tokens_per_s']:.0f} tokens/s over {doc['makespan_s']:.1f} s; "
              f"{doc['completed']} completed, {doc['aborted']} aborted, {doc['preemptions']} preemptions")
    con.print(load_lines(doc))
    shares = {k: v for k, v in doc["layout_time_s"].items() if v > 0}
    con.print("time per layout: " + ", ".join(f"{k} {v:.1f} s" for k, v in shares.items()))
    con.print(f"{len(doc['switches'])} switches, total cost {doc['switch_cost_total_s'] * 1e3:.2f} ms")
    for s in doc["switches"][:20]:
        con.print(f"  {s['at_s']:9.2f} s  {s['from']} → {s['to']}  cost {s['cost_s'] * 1e3:.2f} ms, stall "
                  f"{s['stall_s'] * 1e3:.2f} ms  ({s['reason']})")
    for s in doc["aborted_switches"][:20]:
        con.print(f"  {s['at_s']:9.2f} s  {s['from']} → {s['to']}  aborted: {s['why']}")
    if doc["cant_decide"]:
        con.print(f"[yellow]the policy could not decide {doc['cant_decide']} times (it stayed)[/]")
    con.print(f"step time model: {doc['step_time_model']}")


def load_lines(doc: dict) -> str:
    """Offered against served load, the queue, the KV pool's full time and the verdict, as text."""
    off = doc["offered_requests_per_s"]
    offered = ("offered: every request at t = 0" if off is None else
               f"offered {off:.3g} requests/s ({doc['offered_input_tokens_per_s']:.0f} prompt + "
               f"{doc['offered_output_tokens_per_s']:.0f} output tokens/s) over {doc['arrival_span_s']:.1f} s")
    served = (f"served {doc['served_requests_per_s']:.3g} requests/s ({doc['served_input_tokens_per_s']:.0f} + "
              f"{doc['served_output_tokens_per_s']:.0f} tokens/s) over {doc['makespan_s']:.1f} s, the drain included")
    quarters = ", ".join("—" if q is None else f"{q:.3g}" for q in doc["ttft_p50_by_arrival_quarter_s"])
    full = doc["kv_full_time_fraction"]
    kv = "" if full is None else f"; KV pool full {100 * full:.0f} % of the time"
    colour = "red" if doc["overloaded"] else "green" if doc["overloaded"] is False else "yellow"
    return (f"{offered}; {served}\nqueue (arrived, no first token yet) up to {doc['queue_max_requests']} requests, "
            f"{doc['queue_at_last_arrival_requests']} at the last arrival; median TTFT by arrival quarter {quarters} s"
            f"{kv}\n[{colour}]{escape(doc['verdict'])}[/]")


def register(app: typer.Typer) -> None:
    app.command("simulate")(live(planning("simulate", simulate_cmd)))
