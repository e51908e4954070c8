"""`floorfirst simulate`: serve a workload on a deployment with the simulated executor under a
fixed layout or the dynamic layout policy, and one request ordering (floorfirst.serving computes
the document, which `floorfirst.simulate()` returns typed); report throughput, TTFT /
TPOT / time-to-last-token percentiles, offered against served load, the queue, whether the load is
overloaded (runtime_policy.metrics states the rule) and the switches made (table, `--json`,
`--plot`, and `--requests-csv` for one row per request)."""

from __future__ import annotations

import sys
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cli.common import (DEFAULTS, EngineOpt, GpusOpt, HardwareOpt, JsonOpt, KvDtypeOpt, MemFractionOpt, ModelOpt,
                        MoeOpt, PlotOpt, ReplicasOpt, console, emit_json)
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
    engine: EngineOpt = DEFAULTS["engine"],
    rate: Annotated[Optional[float], typer.Option("--rate", help="Mean arrival rate of chat/bursty/longprompt/reasoning, requests/s (rollout and agentic arrive as a batch).")] = None,
    noise: Annotated[float, typer.Option("--noise", help="Relative σ of seeded step-time noise.")] = 0.0,
    boost: Annotated[Optional[float], typer.Option("--boost", help="The boost ordering's knob β: 0 = FCFS, large = shortest expected first.")] = None,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most requests holding KV at once.")] = 4096,
    host_tier: HostTierOpt = False, hbm_budget_tokens: BudgetOpt = 4096, locality: LocalityOpt = 0.8,
    host_page_rows: HostPageOpt = 1,
    tier_choice: Annotated[bool, typer.Option("--tier-choice", help="With --host-tier and --policy dynamic: the policy may also turn the tier on and off (each layout gets a '+host' twin).")] = False,
    requests_csv: RequestsCsvOpt = None,
    disagg: Annotated[Optional[str], typer.Option("--disagg", help="Disaggregated: xPyD, x prefill and y decode instances of --gpus GPUs each (e.g. 1P1D, 1P3D, 3P1D), a hand-off queue between them (runtime_policy/disagg.py).")] = None,
    prefill_layout: Annotated[Optional[str], typer.Option("--prefill-layout", help="With --disagg: the prefill instances' layout (default: --policy if it names one, else tp).")] = None,
    decode_layout: Annotated[Optional[str], typer.Option("--decode-layout", help="With --disagg: the decode instances' layout (default: --policy if it names one, else tp).")] = None,
    prefill_gpus: Annotated[Optional[int], typer.Option("--prefill-gpus", help="With --disagg: GPUs per prefill instance (default --gpus).")] = None,
    decode_gpus: Annotated[Optional[int], typer.Option("--decode-gpus", help="With --disagg: GPUs per decode instance (default --gpus).")] = None,
) -> None:
    """Serve a workload with the simulated executor: dynamic or fixed layout, and an ordering."""
    if disagg is not None or any(v is not None for v in (prefill_layout, decode_layout, prefill_gpus, decode_gpus)):
        from cli.disagg_simulate import simulate_disagg

        return simulate_disagg(model, hardware, gpus, workload, requests, seed, getattr(policy, "value", policy),
                               order.value, calibration, json_out, plot, moe, replicas, kv_dtype, mem_fraction, rate,
                               noise, boost, max_batch, host_tier or tier_choice, requests_csv, disagg, prefill_layout,
                               decode_layout, prefill_gpus, decode_gpus, engine=getattr(engine, "value", engine))
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.serving import simulate_document

    spec = DeploymentSpec.of(model=model, hardware=hardware, gpus=gpus, moe=moe, replicas=replicas, kv_dtype=kv_dtype,
                             mem_fraction=mem_fraction, engine=engine)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    bar, task = None, None
    if not json_out and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        # NOTE: on stderr: `simulate > file` must hold only the report (console=None drew it on stdout)
        bar = Progress(transient=True, console=Console(stderr=True))
    last = [0]

    def progress(group, groups, done, total):
        nonlocal task
        if task is None:
            task = bar.add_task("simulating", total=total * groups)
            bar.start()
        if done != last[0]:
            bar.update(task, completed=done * groups if groups == 1 else None, advance=None)
            last[0] = done

    try:
        doc = simulate_document(spec, workload, requests, seed, getattr(policy, "value", policy), order.value,
                                calibration, rate, noise, boost, max_batch, tier, tier_choice,
                                progress=progress if bar else None)
    finally:
        if bar is not None and task is not None:
            bar.stop()
    rows = doc.pop("per_request")
    if requests_csv:
        write_requests_csv(rows, requests_csv)
    if plot:
        _plot(doc, plot)
    if json_out:
        doc.pop("timeline")
        emit_json("simulate", doc)
        return
    render(doc, f"{doc['model']} on {gpus} × {doc['hardware']}: {doc['workload']} ({doc['requests']} requests), "
                f"policy {doc['policy']}, order {order.value}")


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
