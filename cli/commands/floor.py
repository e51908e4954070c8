"""`floorfirst floor`, `compare` and `capacity`: one operating point priced on one layout, on
every layout side by side, and the KV capacity of every layout.

Infeasible is an answer: a deployment whose weights or reserve don't fit, or a step whose KV
exceeds the pool, is reported in words (`feasible: false` and the reason in JSON), never with a
tokens/s figure. Every layout says whether the deployment's engine launches it, with the launch line
that does (planner.engines' `launch`) or why none does. The ★ of `compare`, and the layout `floor`
picks without `--attn`, is the fastest feasible layout the engine launches (any feasible layout with
`--all-layouts`), ranked by the step model's predicted time where one prices the deployment (a shipped
prior or `--calibration`: the tokens/s column) and by floor_max where none does; the documents say
which ranked (`ranked_by`)."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

import planner
from cli.common import (console, title, DEFAULTS, AttnOpt, WideOpt, LayoutsOpt, select_layouts, BatchOpt, CalibrationOpt, ContextOpt, EngineOpt, GpusOpt, HardwareOpt,
                        JsonOpt, KvDtypeOpt, MemFractionOpt, ModelOpt, MoeOpt, NodesOpt, PageOpt, PrefillContextOpt,
                        PrefillOpt, PricingChoice, PricingOpt, ReplicasOpt, ReserveOpt, SwaRatioOpt, WeightDtypeOpt, AttnGroupsOpt, build_load,
                        deployment, emit_json, fmt_bytes, fmt_gib, fmt_flops, fmt_ms, fmt_tokens, load_calibration, load_specs,
                        parse_tokens, pricing_for, scalar)
from cli.host_tier_options import (BudgetOpt, HostPageOpt, HostTierOpt, LocalityOpt, host_tier_spec, tier_document,
                                   tier_line)
from cli.launch import planning
from cli.registry_options import LAYOUTS, layout_names, live, moe_names
from cli.rendering import (capacity_table, compare_table, launch_sentence, launch_words, deployment_title, infeasible_reason,
                           memory_line, unlaunchable_lines)
from planner.capacity import capacity as kv_capacity
from planner.errors import SpecError
from planner.host_tier import tiered_groups
from planner.layouts.base import SCALEOUT, SCALEUP
from planner.units import GiB

AutoAttnOpt = Annotated[Optional[str], typer.Option("--attn", help="Attention layout. Default: the fastest layout whose KV fits and the engine launches (all are priced)."), LAYOUTS]
AllLayoutsOpt = Annotated[bool, typer.Option("--all-layouts", help="Let a layout no engine flag launches (it needs a switching runtime) take the recommendation.")]


DATASHEET_MIDPOINT = "datasheet midpoint: floor_max + 0.5*(floor_sum - floor_max), no overhead"


def step_model_for(dep: planner.Deployment, calibration=None, calibration_path: str | None = None):
    """(the calibration that prices `dep`'s steps or None, its label): a given --calibration, else the
    shipped prior of the deployment's (GPU, engine) (calibration/priors), else the datasheet midpoint
    (issue 26: every tokens/s figure is priced by the default model and says which)."""
    if calibration is not None:
        return calibration, f"calibration: {calibration_path or 'given'}"
    try:
        from calibration.priors import SOURCE_WHEEL, prior_for
    except ImportError:  # pragma: no cover - the calibration package is part of the install
        return None, DATASHEET_MIDPOINT
    prior = prior_for(dep.hardware.name, dep.engine) if dep.engine_kernels else None
    if prior is None:
        return None, DATASHEET_MIDPOINT
    return prior, f"prior: {dep.hardware.name} × {dep.engine} ({SOURCE_WHEEL} per-kernel tables)"


def cost_document(dep: planner.Deployment, cost: planner.StepCost, calibration=None,
                  prefill_context: float = 0.0, pricing: planner.Pricing | None = None,
                  calibration_path: str | None = None) -> dict[str, Any]:
    """The JSON view of one priced point (index 0)."""
    from planner.effects import effect_times_s

    t = cost.times
    fits = bool(scalar(cost.kv_fits))
    feasible = bool(scalar(cost.feasible))
    doc: dict[str, Any] = {
        "attn": dep.attn,
        "moe": dep.moe,
        "gpus": dep.gpus,
        "replicas": dep.replicas,
        "ranks_per_group": dep.ranks,
        "nodes": dep.nodes,
        "nodes_per_group": dep.group_nodes,
        "engine": dep.engine,
        "weight_dtype": dep.weight_dtype,
        "kv_dtype": dep.kv_dtype,
        "page_tokens": dep.page_tokens,
        "pricing": cost.pricing,
        "batch": int(round(scalar(cost.batch))),
        "context_mean_tokens": scalar(cost.mean_context),
        "prefill_tokens": scalar(cost.prefill_tokens),
        "prefill_context_tokens": prefill_context,
        "resources": {
            "hbm": {"bytes": scalar(cost.hbm_bytes), "time_s": scalar(t.hbm_s)},
            "compute": {"flops": scalar(cost.flops), "flops_by_dtype": {k: scalar(v) for k, v in cost.flops_by_dtype.items()},
                        "time_s": scalar(t.compute_s)},
            "network_bytes": {"bytes": scalar(cost.network_bytes), "time_s": scalar(t.network_bytes_s),
                              "bytes_by_tier": {k: scalar(cost.network_bytes_by_tier[k]) for k in (SCALEUP, SCALEOUT)}},
            "network_messages": {"count": scalar(cost.network_messages), "time_s": scalar(t.network_messages_s),
                                 "count_by_tier": {k: scalar(cost.network_messages_by_tier[k]) for k in (SCALEUP, SCALEOUT)}},
            "host_link": {"bytes": scalar(cost.host_tier.host_link_bytes) if cost.host_tier is not None else 0.0,
                          "time_s": scalar(t.host_link_s)},
            "kv_capacity": {"resident_bytes": scalar(cost.kv_resident_bytes), "pool_bytes": cost.kv_pool_bytes,
                            "fits": fits,
                            "used_fraction": scalar(cost.kv_resident_bytes) / cost.kv_pool_bytes if cost.kv_pool_bytes > 0 else None},
        },
        "weights_resident_bytes_per_gpu": cost.weights_resident_bytes,
        "weights_fit": bool(cost.memory_feasible),
        "kv_pool_gib_per_gpu": cost.kv_pool_bytes / GiB,
        "feasible": feasible,
        "infeasible_reason": None if feasible else infeasible_reason(cost),
        "memory": dep.memory.describe(),
        "floor_max_s": scalar(cost.floor_max_s),
        "floor_sum_s": scalar(cost.floor_sum_s),
        "binding": str(cost.binding[0]),
        "decode_tokens_per_s_at_max": scalar(cost.decode_tokens_per_s_at_max),
        "decode_tokens_per_s_at_sum": scalar(cost.decode_tokens_per_s_at_sum),
        "components": {res: {k: scalar(v) for k, v in comp.items()} for res, comp in cost.components.items()},
        "engine_effects_s": {k: scalar(v) for k, v in
                             effect_times_s(cost, pricing or planner.Pricing.datasheet(dep.hardware)).items()},
        "decode_kernel": dep.decode_kernel.name,
    }
    if cost.host_tier is not None:
        doc["host_tier"] = tier_document(cost)
    model, label = step_model_for(dep, calibration, calibration_path)
    predicted = (scalar(model.predict_s(cost)) if model is not None
                 else doc["floor_max_s"] + 0.5 * (doc["floor_sum_s"] - doc["floor_max_s"]))
    doc["predicted_s"] = predicted
    doc["step_model"] = label
    doc["decode_tokens_per_s"] = doc["batch"] / predicted if feasible and predicted > 0 else None
    doc.update(dep.engine_model.launch(dep).describe())
    if cost.engine is not None:
        e = cost.engine
        doc["engine_kernels"] = dep.kernels.describe()
        doc["engine_terms"] = {res: {k: scalar(v) for k, v in comp.items()} for res, comp in e.components().items()}
    return doc


def ranked_by(step_model: str, all_layouts: bool) -> dict[str, Any]:
    """How layouts are ranked: by the step model's predicted_s where a model prices them (a prior or
    a calibration), else by floor_max_s; over the launchable layouts unless `all_layouts`."""
    key = "floor_max_s" if step_model == DATASHEET_MIDPOINT else "predicted_s"
    return {"key": key, "step_model": step_model if key == "predicted_s" else None, "launchable_only": not all_layouts}


def rank_order(doc: dict[str, Any], ranking: dict[str, Any]) -> tuple:
    """Sort key: feasible first, then the ones that may take the ★ (launchable unless --all-layouts),
    then the ranking key, the floors breaking ties (DCP and DOP move the same HBM bytes)."""
    eligible = doc["launchable"] or not ranking["launchable_only"]
    return (not doc["feasible"], not eligible, doc[ranking["key"]], doc["floor_max_s"], doc["floor_sum_s"])


def recommended(docs: list[dict[str, Any]], ranking: dict[str, Any]) -> dict[str, Any] | None:
    """The ★: the first feasible, eligible layout of `docs` in rank order; None when there is none."""
    pick = min((d for d in docs if d["feasible"] and (d["launchable"] or not ranking["launchable_only"])),
               key=lambda d: rank_order(d, ranking), default=None)
    if pick is None:
        return None
    return {k: pick[k] for k in ("attn", "moe", "launchable", "launch_line", "launch_replicas", "launch_notes")}


def ranking_words(ranking: dict[str, Any], engine: str) -> str:
    """'fastest by <what> among the layouts <engine> launches' for the CLI's lines."""
    by = f"the {ranking['step_model']}" if ranking["key"] == "predicted_s" else "floor_max (no step model prices it)"
    among = f"the layouts {engine} launches" if ranking["launchable_only"] else "all layouts (--all-layouts)"
    return f"fastest by {by}, among {among} whose KV fits"


def prefill_args(prefill_tokens: float, prefill_context: str) -> tuple[float, float]:
    if not np.isfinite(prefill_tokens) or prefill_tokens < 0:
        raise SpecError(f"prefill_tokens={prefill_tokens} must be ≥ 0")
    ctx = 0.0 if prefill_context.strip() in ("", "0") else parse_tokens(prefill_context, "prefill_context")
    if ctx > 0 and prefill_tokens == 0:
        raise SpecError("--prefill-context needs --prefill-tokens (the chunk that attends to it)")
    return float(prefill_tokens), ctx


def _point(model, hardware, attn, moe, gpus, replicas, batch, context, prefill_tokens, kv_dtype, weight_dtype,
           mem_fraction, page_tokens, reserve_gib, pricing, prefill_context="0", engine=DEFAULTS["engine"], nodes=None,
           swa_ratio=None, attn_groups=None):
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    dep = deployment(m, hw, attn, moe, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib,
                     engine, nodes, swa_ratio=swa_ratio, attn_groups=attn_groups)
    load = build_load(batch, context)
    return dep, planner.step_cost(dep, load, pre, pricing_for(hw, pricing), prefill_context=pre_ctx)


def _auto_point(model, hardware, moe, gpus, replicas, batch, context, prefill_tokens, kv_dtype, weight_dtype,
                mem_fraction, page_tokens, reserve_gib, pricing, prefill_context, engine, nodes, swa_ratio=None,
                attn_groups=None, cal=None, calibration_path=None, all_layouts=False):
    """Every layout priced; the ★ of compare (`recommended`: the fastest feasible launchable one, by
    the step model or the floors), else the fastest feasible one the engine does not launch, else
    the closest to fitting. Returns (deployment, cost, why, ranking)."""
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    deps, _ = valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib,
                                engine, nodes, moe, swa_ratio=swa_ratio, attn_groups=attn_groups)
    load = build_load(batch, context)
    pr = pricing_for(hw, pricing)
    priced = [(d, planner.step_cost(d, load, pre, pr, prefill_context=pre_ctx)) for d in deps]
    docs = [cost_document(d, c, cal, pre_ctx, pr, calibration_path) for d, c in priced]
    ranking = ranked_by(docs[0]["step_model"], all_layouts)
    ok = [i for i, d in enumerate(docs) if d["feasible"]]
    if ok:
        i = min(ok, key=lambda j: rank_order(docs[j], ranking))
        dep, cost = priced[i]
        n_launch = sum(docs[j]["launchable"] for j in ok)
        why = f"{ranking_words(ranking, dep.engine)} ({len(ok)} of {len(priced)} fit, {n_launch} launchable)"
        if not docs[i]["launchable"] and ranking["launchable_only"]:
            why = (f"none of the {len(ok)} layouts that fit is one {dep.engine} launches; the fastest that fits "
                   f"({ranking['key']}) is shown: {docs[i]['launch_reason']}")
        return dep, cost, why, ranking
    # NOTE: with nothing feasible, show the layout that comes closest: among those with a pool the
    # smallest KV overrun, else the smallest weight deficit.
    def closeness(x):
        d, c = x
        if d.memory.feasible:
            return (1, -scalar(c.kv_resident_bytes) / c.kv_pool_bytes)
        return (0, d.memory.kv_budget_bytes)

    dep, cost = max(priced, key=closeness)
    return dep, cost, f"none of the {len(priced)} layouts fits; the closest, {dep.attn}/{dep.moe}, is shown", ranking


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
    cal = load_calibration(calibration)
    ranking = None
    if attn is None:
        dep, cost, why, ranking = _auto_point(model, hardware, moe, gpus, replicas, batch, context,
                                              prefill_tokens, kv_dtype, weight_dtype, mem_fraction, page_tokens,
                                              reserve_gib, pricing, prefill_context, engine, nodes,
                                              swa_full_tokens_ratio, attn_groups, cal, calibration, all_layouts)
    else:
        dep, cost = _point(model, hardware, attn, moe, gpus, replicas, batch, context,
                           prefill_tokens, kv_dtype, weight_dtype, mem_fraction, page_tokens, reserve_gib, pricing,
                           prefill_context, engine, nodes, swa_full_tokens_ratio, attn_groups)
        why = "given by --attn"
    doc = {"model": dep.model.name, "hardware": dep.hardware.name, "layout_choice": why, "ranked_by": ranking,
           **cost_document(dep, cost, cal, prefill_args(prefill_tokens, prefill_context)[1], pricing_for(dep.hardware, pricing),
                           calibration)}
    if json_out:
        emit_json("floor", doc)
        return
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
    """Every (attn, moe) the model can run here (only `moe` if given), and the ones it can't
    with the reason. `attn_groups` applies to the layouts that take a group count (the others
    have their own)."""
    from planner.layouts import attention_layouts

    deps, skipped = [], []
    takes_groups = {n for n, x in attention_layouts().items() if x.group_rule == "given"}
    for a in layout_names():
        for mo in ([moe] if moe else moe_names()):
            try:
                deps.append(deployment(m, hw, a, mo, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                       reserve_gib, engine, nodes, host_tier, swa_ratio,
                                       attn_groups if a in takes_groups else None))
            except SpecError as exc:
                skipped.append({"attn": a, "moe": mo, "reason": str(exc)})
    if not deps:
        raise SpecError(f"no layout can run: {skipped[0]['reason']}")
    return deps, skipped


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
    cal = load_calibration(calibration)
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    deps, skipped = valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                      reserve_gib, engine, nodes, moe, host_tier=tier, swa_ratio=swa_full_tokens_ratio,
                                      attn_groups=attn_groups)
    deps = select_layouts(deps, layouts)
    load = build_load(batch, context)
    pr = pricing_for(hw, pricing)
    docs = [cost_document(d, planner.step_cost(d, load, pre, pr, prefill_context=pre_ctx), cal, pre_ctx, pr, calibration)
            for d in deps]
    if tier is not None:
        for d, doc in zip(deps, docs):  # requests held at the load's mean context, with and without the tier
            walls = kv_capacity(d, [doc["context_mean_tokens"]]).host_tier
            doc["host_tier"].update(requests_held_hbm_only=float(walls.hbm_only[0]), requests_held_tiered=float(walls.held[0]),
                                    tier_wall=str(walls.binding[0]))
    # NOTE: ranked, not listed: a layout that can't hold the load is no candidate, however fast, and one
    # no flag of the engine launches is no recommendation unless --all-layouts.
    ranking = ranked_by(docs[0]["step_model"], all_layouts)
    docs.sort(key=lambda d: rank_order(d, ranking))
    feasible = [d for d in docs if d["feasible"]]
    # NOTE: layouts that tie on one floor (DCP and DOP move the same HBM bytes) are ordered by the other
    best_max = min(feasible, key=lambda d: (d["floor_max_s"], d["floor_sum_s"])) if feasible else None
    best_sum = min(feasible, key=lambda d: (d["floor_sum_s"], d["floor_max_s"])) if feasible else None
    out = {
        "model": m.name, "hardware": hw.name, "gpus": gpus, "nodes": deps[0].nodes, "engine": deps[0].engine,
        "batch": docs[0]["batch"],
        "context_mean_tokens": docs[0]["context_mean_tokens"], "prefill_tokens": pre, "prefill_context_tokens": pre_ctx,
        "layouts": docs, "skipped": skipped, "step_model": docs[0]["step_model"],
        "out": [{"attn": d["attn"], "moe": d["moe"], "reason": d["infeasible_reason"]} for d in docs if not d["feasible"]],
        "best_by_max": {"attn": best_max["attn"], "moe": best_max["moe"]} if best_max else None,
        "best_by_sum": {"attn": best_sum["attn"], "moe": best_sum["moe"]} if best_sum else None,
        "ranked_by": ranking, "recommended": recommended(docs, ranking),
    }
    if json_out:
        emit_json("compare", out)
        return
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
    m, hw = load_specs(model, hardware)
    mix = context_mix(context)
    ctx = float(np.average(mix[:, 0], weights=mix[:, 1]))
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    deps, skipped = valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                      reserve_gib, engine, nodes, host_tier=tier, swa_ratio=swa_full_tokens_ratio,
                                      attn_groups=attn_groups)
    docs = []
    for d in deps:
        c = kv_capacity(d, mix[:, 0])
        plan = c.memory
        docs.append({
            "attn": d.attn, "moe": d.moe, "gpus": d.gpus, "replicas": d.replicas, "nodes_per_group": d.group_nodes,
            "kv_dtype": d.kv_dtype, "weight_dtype": d.weight_dtype, "page_tokens": d.page_tokens,
            "weights_gib_per_gpu": c.weights_resident_bytes_per_gpu / GiB,
            "weights_fit": plan.feasible,
            "feasible": plan.feasible,
            "infeasible_reason": plan.reason or None,
            "mem_fraction": plan.fraction,
            "reserve_gib_per_gpu": plan.reserve_bytes / GiB,
            "kv_pool_gib_per_gpu": c.kv_pool_bytes_per_gpu / GiB,
            "kv_pool_tokens_per_gpu": plan.kv_pool_tokens,
            "kv_bytes_per_token": c.kv_bytes_per_token,
            "kv_replication": c.kv_replication,
            "distinct_tokens": c.distinct_tokens,
            "context_tokens": ctx,
            "max_concurrency": int(mix_concurrency(c.max_concurrency, mix[:, 1])),
            "state_bytes_per_request": c.state_bytes_per_request,
            "binding_memory": c.binding_memory[int(np.argmax(mix[:, 1]))],  # at the mix's most frequent length
            "memory": plan.describe(),
        })
        if c.host_tier is not None:
            w = c.host_tier
            docs[-1]["host_tier"] = {"hbm_budget_tokens": w.budget_tokens, "host_memory_bytes_per_gpu": w.host_memory_bytes_per_gpu,
                                     "requests_held_hbm_only": float(w.hbm_only[0]), "hbm_wall_requests": float(w.hbm_wall[0]),
                                     "host_wall_requests": float(w.host_wall[0]), "requests_held_tiered": float(w.held[0]),
                                     "binding_wall": str(w.binding[0]),
                                     "tiered_groups": [f"{v.describe()}×{n}" for v, n, _ in tiered_groups(d.model)]}
    out = {"model": m.name, "hardware": hw.name, "gpus": gpus, "nodes": deps[0].nodes, "engine": deps[0].engine,
           "mem_fraction": mem_fraction, "swa_full_tokens_ratio": swa_full_tokens_ratio, "page_tokens": deps[0].page_tokens,
           "datasheet_hbm_bytes_per_gpu": hw.peak.hbm_bytes, "usable_hbm_bytes_per_gpu": hw.usable_hbm_bytes,
           "context_tokens": ctx, "layouts": docs, "skipped": skipped}
    if len(mix) > 1:
        out["context_mix"] = [{"context_tokens": float(l), "requests": int(n)} for l, n in mix]
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


def context_mix(context: str) -> np.ndarray:
    """--context as [[length, requests], …] (one length, a list, or a histogram)."""
    load = build_load(None, context) if ("," in context or "*" in context) else None
    if load is None:
        return np.array([[parse_tokens(context), 1.0]])
    lengths, counts = np.asarray(load.lengths[0]), np.asarray(load.counts[0])
    out: dict[float, float] = {}
    for l, n in zip(lengths, counts):
        out[float(l)] = out.get(float(l), 0.0) + float(n)
    return np.array(sorted(out.items()))


def mix_concurrency(alone: np.ndarray, requests: np.ndarray) -> float:
    """Requests of a context mix that fit at once. NOTE: a request of length L_i takes 1/n_i of the
    pool, n_i being how many of that length alone fit (page rounding and the busiest rank included),
    so N requests in the mix's shares f_i fit while N·Σ f_i/n_i ≤ 1; one length gives n_1."""
    alone = np.asarray(alone, dtype=np.float64)
    f = np.asarray(requests, dtype=np.float64) / float(np.sum(requests))
    if np.any(alone <= 0):
        return 0.0
    return float(np.floor(1.0 / np.sum(f / alone) + 1e-9))


def register(app: typer.Typer) -> None:
    app.command("floor")(live(planning("floor", floor)))
    app.command("compare")(live(planning("compare", compare)))
    app.command("capacity")(live(planning("capacity", capacity)))
