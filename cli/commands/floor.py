"""`floorfirst floor`, `compare` and `capacity`: one operating point priced on one layout, on
every layout side by side, and the KV capacity of every layout.

Infeasible is an answer: a deployment whose weights or reserve don't fit, or a step whose KV
exceeds the pool, is reported in words (`feasible: false` and the reason in JSON), never with a
tokens/s figure. Every layout says whether the deployment's engine launches it, with the launch line
that does (planner.engines' `launch`) or why none does. The ★ of `compare`, and the layout `floor`
picks without `--attn`, is the fastest feasible layout the engine launches (any feasible layout with
`--all-layouts`), ranked by the step model's predicted time where one prices the deployment (a shipped
prior or `--calibration`: the tokens/s column) and by floor_max where none does; the documents say
which ranked (`ranked_by`).

The documents are floorfirst.planning's (the Python API returns the same ones, typed): this module
reads the options into a DeploymentSpec, calls it and renders."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Optional

import numpy as np
import typer

import planner
from cli.common import (console, title, DEFAULTS, WideOpt, LayoutsOpt, BatchOpt, CalibrationOpt, ContextOpt, EngineOpt,
                        GpusOpt, HardwareOpt, JsonOpt, KvDtypeOpt, MemFractionOpt, ModelOpt, MoeOpt, NodesOpt, PageOpt,
                        PrefillContextOpt, PrefillOpt, PricingChoice, PricingOpt, ReplicasOpt, ReserveOpt, SwaRatioOpt,
                        WeightDtypeOpt, AttnGroupsOpt, build_load, emit_json, fmt_bytes, fmt_gib, fmt_flops, fmt_ms,
                        fmt_tokens, load_specs, pricing_for)
from cli.host_tier_options import BudgetOpt, HostPageOpt, HostTierOpt, LocalityOpt, host_tier_spec, tier_line
from cli.launch import planning
from cli.registry_options import LAYOUTS, live
from cli.rendering import (capacity_table, compare_table, launch_sentence, launch_words, deployment_title, memory_line,
                           unlaunchable_lines)
# NOTE: the documents are floorfirst's (floorfirst.planning); this module parses options and renders.
# prefill_args and mix_concurrency are re-exported for triage and tests/cli/test_context_forms.py.
from floorfirst.planning import (capacity_document, compare_document, floor_document, make,  # noqa: F401
                                 mix_concurrency, prefill_args, ranking_words)
from floorfirst.planning import valid_deployments as _valid_deployments
from planner.units import GiB

if TYPE_CHECKING:  # NOTE: imported when a command runs: building the pydantic model costs the CLI's start ~40 ms
    from floorfirst.knobs import DeploymentSpec

AutoAttnOpt = Annotated[Optional[str], typer.Option("--attn", help="Attention layout. Default: the fastest layout whose KV fits and the engine launches (all are priced)."), LAYOUTS]
AllLayoutsOpt = Annotated[bool, typer.Option("--all-layouts", help="Let a layout no engine flag launches (it needs a switching runtime) take the recommendation.")]


def _spec(model, hardware, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib,
          engine=DEFAULTS["engine"], nodes=None, swa_ratio=None, attn_groups=None, attn=None, moe=None) -> DeploymentSpec:
    """The options as the one frozen knobs object floorfirst's document functions read."""
    from floorfirst.knobs import DeploymentSpec

    return DeploymentSpec.of(model=model, hardware=hardware, gpus=gpus, replicas=replicas, weight_dtype=weight_dtype,
                             kv_dtype=kv_dtype, mem_fraction=mem_fraction, page_tokens=page_tokens,
                             reserve_gib=reserve_gib, engine=engine, nodes=nodes, swa_full_tokens_ratio=swa_ratio,
                             attn_groups=attn_groups, attn=attn, moe=moe)


def _point(model, hardware, attn, moe, gpus, replicas, batch, context, prefill_tokens, kv_dtype, weight_dtype,
           mem_fraction, page_tokens, reserve_gib, pricing, prefill_context="0", engine=DEFAULTS["engine"], nodes=None,
           swa_ratio=None, attn_groups=None):
    """(deployment, priced step) of one point on `attn` (triage reads it)."""
    spec = _spec(model, hardware, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib, engine,
                 nodes, swa_ratio, attn_groups, attn, moe)
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    dep = make(spec, m, hw, attn)
    return dep, planner.step_cost(dep, build_load(batch, context), pre, pricing_for(hw, pricing), prefill_context=pre_ctx)


def floor(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    attn: AutoAttnOpt = None, moe: MoeOpt = None, replicas: ReplicasOpt = 1, batch: BatchOpt = None,
    context: ContextOpt = DEFAULTS["context"], prefill_tokens: PrefillOpt = 0.0, prefill_context: PrefillContextOpt = "0",
    kv_dtype: KvDtypeOpt = None, weight_dtype: WeightDtypeOpt = None, mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None, pricing: PricingOpt = PricingChoice.datasheet,
    engine: EngineOpt = DEFAULTS["engine"], nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None,
    attn_groups: AttnGroupsOpt = None, calibration: CalibrationOpt = None, all_layouts: AllLayoutsOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """The five-resource vector of one step on the busiest rank, its floors and what binds."""
    spec = _spec(model, hardware, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib, engine,
                 nodes, swa_full_tokens_ratio, attn_groups, attn, moe)
    doc, dep, cost = floor_document(spec, batch, context, prefill_tokens, prefill_context, pricing, calibration,
                                    all_layouts)
    why = doc["layout_choice"]
    if json_out:
        emit_json("floor", doc)
        return
    from rich.markup import escape  # NOTE: here, not at the top: a --json call never imports rich
    from rich.table import Table

    con = console()
    r = doc["resources"]
    t = Table(title=title(f"{deployment_title(dep)}, {dep.label()}, B={doc['batch']:.0f}, mean context "
                          f"{fmt_tokens(doc['context_mean_tokens'])} [{dep.weight_dtype} weights, {dep.kv_dtype} KV, "
                          f"{cost.pricing}]"))
    t.add_column("resource (busiest rank)")
    t.add_column("amount", justify="right")
    t.add_column("time", justify="right")
    t.add_column("share of max", justify="right")
    mx = doc["floor_max_s"]
    for name, amount in (("hbm", fmt_bytes(r["hbm"]["bytes"])), ("compute", fmt_flops(r["compute"]["flops"])),
                         ("network_bytes", fmt_bytes(r["network_bytes"]["bytes"])),
                         ("network_messages", f"{r['network_messages']['count']:.0f} collectives")):
        ts = r[name]["time_s"]
        mark = " ◀" if name == doc["binding"] else ""
        t.add_row(name + mark, amount, fmt_ms(ts), f"{ts / mx:.0%}" if mx > 0 else "—")
    kv = r["kv_capacity"]
    pool = fmt_gib(kv["pool_bytes"]) if doc["weights_fit"] else "no pool"
    t.add_row("kv_capacity" + (" ◀ WALL" if not kv["fits"] else ""), f"{fmt_gib(kv['resident_bytes'])} of {pool}",
              "fits" if kv["fits"] else "DOES NOT FIT", f"{kv['used_fraction']:.0%}" if kv["used_fraction"] is not None else "—")
    con.print(t)
    con.print(memory_line(dep))
    if attn is None:
        con.print(escape(f"layout: {dep.attn}/{dep.moe}, {why}"))
    con.print(launch_words(doc, dep.engine), soft_wrap=True)
    if doc["feasible"]:
        con.print(f"floor_max {fmt_ms(doc['floor_max_s'])}  floor_sum {fmt_ms(doc['floor_sum_s'])}  binding [bold]{doc['binding']}[/]  "
                  f"decode {doc['decode_tokens_per_s_at_max']:.0f} … {doc['decode_tokens_per_s_at_sum']:.0f} tokens/s at the floors")
        con.print(f"predicted {fmt_ms(doc['predicted_s'])}, {doc['decode_tokens_per_s']:.0f} decode tokens/s ({doc['step_model']})")
    else:
        con.print(f"[bold]not feasible[/]: {doc['infeasible_reason']} (no tokens/s for a step that can't run; "
                  f"floors {fmt_ms(doc['floor_max_s'])} … {fmt_ms(doc['floor_sum_s'])} shown for reference)")
    eff = doc["engine_effects_s"]
    if any(eff.values()):
        con.print("engine effects (" + doc["decode_kernel"] + " decode kernel): " + ", ".join(
            f"{k} {fmt_ms(v)} ({v / doc['floor_sum_s']:.0%} of floor_sum)" for k, v in eff.items() if v))
    comp = Table(title="largest components")
    comp.add_column("resource")
    comp.add_column("component")
    comp.add_column("amount", justify="right")
    items = [(res, k, v) for res, d in doc["components"].items() for k, v in d.items() if v]
    fmt = {"hbm_bytes": fmt_bytes, "network_bytes": fmt_bytes, "flops": fmt_flops, "network_messages": lambda x: f"{x:.0f}"}
    for res in ("hbm_bytes", "flops", "network_bytes", "network_messages"):
        top = sorted((x for x in items if x[0] == res), key=lambda x: -x[2])[:4]
        for _, k, v in top:
            comp.add_row(res, k, fmt[res](v))
    con.print(comp)


def valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib,
                      engine=DEFAULTS["engine"], nodes=None, moe: str | None = None, host_tier=None, swa_ratio=None,
                      attn_groups=None):
    """Every (attn, moe) the model can run here, and the ones it can't with the reason (walls reads
    it): floorfirst.planning.valid_deployments."""
    spec = _spec(m.name, hw.name, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib, engine,
                 nodes, swa_ratio, attn_groups)
    return _valid_deployments(m, hw, spec, moe, host_tier)


def compare(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    replicas: ReplicasOpt = 1, batch: BatchOpt = None, context: ContextOpt = DEFAULTS["context"],
    prefill_tokens: PrefillOpt = 0.0, prefill_context: PrefillContextOpt = "0", kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None,
    mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"], page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None,
    engine: EngineOpt = DEFAULTS["engine"], nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None,
    attn_groups: AttnGroupsOpt = None, pricing: PricingOpt = PricingChoice.datasheet, calibration: CalibrationOpt = None,
    components: Annotated[bool, typer.Option("--components", help="Also show each layout's engine effects: DSA's indexer, top-k, padded head rows, unsharded attention weights (ms).")] = False,
    host_tier: HostTierOpt = False, hbm_budget_tokens: BudgetOpt = 4096, locality: LocalityOpt = 0.8,
    host_page_rows: HostPageOpt = 1,
    moe: MoeOpt = None, layouts: LayoutsOpt = None, wide: WideOpt = False, all_layouts: AllLayoutsOpt = False,
    launch_layout: Annotated[Optional[str], typer.Option("--launch-layout", hidden=True,
                                                         help="Set by --engine-args: the layout the launch runs.")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Every layout side by side at one operating point: those that fit first, the engine's launchable ones
    first among them, fastest first (by the step model where one prices the deployment, else floor_max)."""
    spec = _spec(model, hardware, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib, engine,
                 nodes, swa_full_tokens_ratio, attn_groups)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    out, deps = compare_document(spec, batch, context, prefill_tokens, prefill_context, pricing, calibration, moe, layouts,
                                 tier, all_layouts)
    docs, skipped, ranking = out["layouts"], out["skipped"], out["ranked_by"]
    feasible = [d for d in docs if d["feasible"]]
    pr = pricing_for(deps[0].hardware, pricing)
    if json_out:
        emit_json("compare", out)
        return
    from rich.markup import escape
    from rich.table import Table

    con = console(wide)
    rec = out["recommended"]
    star = next((d for d in docs if rec and (d["attn"], d["moe"]) == (rec["attn"], rec["moe"])), None)
    con.print(compare_table(out, deps[0], pr.label, True, star, wide, launch_layout))
    con.print(f"model ms and tok/s priced by the {out['step_model']}")
    if tier is not None:
        con.print(tier_line(deps[0]))
    if components:
        from rich import box

        # NOTE: times in ms under the title's unit, no borders: fits 80 columns with the JSON key names
        e = Table(title="engine effects per layout, ms at the pricing's rates (each overlaps the rest of its step)",
                  box=box.HEAVY_HEAD if wide else None, pad_edge=wide, show_header=True)
        names = list(docs[0]["engine_effects_s"])
        for c in ["layout", "kernel", *names, "sum"]:
            e.add_column(c, justify="left" if c in ("layout", "kernel") else "right", no_wrap=True)
        for d in docs:
            e.add_row(f"{d['attn']}/{d['moe']}", d["decode_kernel"],
                      *(f"{d['engine_effects_s'][k] * 1e3:.3f}" for k in names), f"{d['floor_sum_s'] * 1e3:.3f}")
        con.print(e)
    for d in out["out"]:
        con.print(f"out: {d['attn']}/{d['moe']}: {d['reason']}")
    for s in skipped:
        con.print(f"[dim]skipped {s['attn']}/{s['moe']}: {s['reason']}[/]")
    for line in unlaunchable_lines(docs, out["engine"]):
        con.print(line)
    if star is not None:
        con.print(escape(f"★ {star['attn']}/{star['moe']}: {ranking_words(ranking, out['engine'])}"))
        con.print(launch_words(star, out["engine"]), soft_wrap=True)
    else:
        con.print("no layout fits this load" if not feasible else
                  f"no layout that fits is one {out['engine']} launches (--all-layouts lets the others take the ★)")
    if launch_layout:
        con.print(launch_sentence(out, launch_layout, star))


def capacity(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    replicas: ReplicasOpt = 1, context: ContextOpt = DEFAULTS["context"], kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None, mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None, engine: EngineOpt = DEFAULTS["engine"],
    nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None, attn_groups: AttnGroupsOpt = None,
    host_tier: HostTierOpt = False, hbm_budget_tokens: BudgetOpt = 4096,
    locality: LocalityOpt = 0.8, host_page_rows: HostPageOpt = 1, json_out: JsonOpt = False,
) -> None:
    """KV pool per GPU (as the engine sizes it), distinct tokens and max concurrency at a context length, every layout."""
    spec = _spec(model, hardware, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib, engine,
                 nodes, swa_full_tokens_ratio, attn_groups)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    out, deps = capacity_document(spec, context, tier)
    docs, skipped = out["layouts"], out["skipped"]
    if json_out:
        emit_json("capacity", out)
        return
    con = console()
    con.print(capacity_table(out, deps[0]))
    if tier is not None:
        con.print(tier_line(deps[0]))
    m0, kdt = deps[0].model, deps[0].kv_dtype
    # NOTE: past its windows a token costs only the unwindowed layers' bytes; the windows are a
    # per-request constant once full (the bytes below every window are d['kv_bytes_per_token'])
    past = m0.token_bytes_per_token(kdt)
    windows = float(m0.memory_bytes(np.array([float(1 << 24)]), kdt)["window"][0])
    for d in docs:
        if not d["feasible"]:
            con.print(f"out: {d['attn']}/{d['moe']}: {d['infeasible_reason']}")
        elif d["state_bytes_per_request"] > 0 or windows > 0:  # more than one kind of memory: say which one binds
            mem = d["memory"]
            kv = (f"{past / 1024:.1f} KiB/token past the windows + {windows / 2**20:.1f} MiB/request of windows"
                  if windows > 0 else f"{d['kv_bytes_per_token'] / 1024:.1f} KiB/token of KV")
            state = ""
            if d["state_bytes_per_request"] > 0:
                pool = (f"state pool {mem['state_pool_bytes'] / GiB:.1f} GiB/GPU, ≤ {mem['max_running_requests']:.0f} running"
                        if "state_pool_bytes" in mem else "states share the KV pool")
                state = f" + {d['state_bytes_per_request'] / 2**20:.1f} MiB/request of state ({pool})"
            con.print(f"{d['attn']}/{d['moe']}: {kv}{state}; binds: {d['binding_memory']}")
    over = [(f"{d['attn']}/{d['moe']}", c) for d, dep in zip(docs, deps)
            if d["feasible"] and d["max_concurrency"] > (c := dep.engine_model.running_requests_cap(dep))]
    if over:
        flag = "--max-running-requests" if deps[0].engine == "sglang" else "--max-num-seqs"
        caps = ", ".join(f"{name} {c:.0f}" for name, c in over)
        con.print(f"note: by default {deps[0].engine} runs at most this many requests at once ({flag}): {caps}; "
                  "the walls above are what memory holds")
    for s in skipped:
        con.print(f"[dim]skipped {s['attn']}/{s['moe']}: {s['reason']}[/]")


def register(app: typer.Typer) -> None:
    app.command("floor")(live(planning("floor", floor)))
    app.command("compare")(live(planning("compare", compare)))
    app.command("capacity")(live(planning("capacity", capacity)))
