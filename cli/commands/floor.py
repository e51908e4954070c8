"""`floorfirst floor`, `compare` and `capacity`: one operating point priced on one layout, on
every layout side by side, and the KV capacity of every layout."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import typer
from rich.table import Table

import planner
from cli.common import (console, DEFAULTS, AttnOpt, BatchOpt, CalibrationOpt, ContextOpt, GpusOpt, HardwareOpt, JsonOpt,
                        KvDtypeOpt, MemFractionOpt, ModelOpt, MoeOpt, PageOpt, PrefillContextOpt, PrefillOpt, PricingChoice, PricingOpt,
                        ReplicasOpt, ReserveOpt, WeightDtypeOpt, build_load, deployment, emit_json, fmt_bytes,
                        fmt_flops, fmt_ms, fmt_tokens, load_calibration, load_specs, parse_tokens, pricing_for, scalar)
from planner.capacity import capacity as kv_capacity
from planner.errors import SpecError
from planner.units import GiB


def cost_document(dep: planner.Deployment, cost: planner.StepCost, calibration=None,
                  prefill_context: float = 0.0, pricing: planner.Pricing | None = None) -> dict[str, Any]:
    """The JSON view of one priced point (index 0)."""
    from planner.effects import effect_times_s

    t = cost.times
    doc: dict[str, Any] = {
        "attn": dep.attn,
        "moe": dep.moe,
        "gpus": dep.gpus,
        "replicas": dep.replicas,
        "ranks_per_group": dep.ranks,
        "weight_dtype": dep.weight_dtype,
        "kv_dtype": dep.kv_dtype,
        "pricing": cost.pricing,
        "batch": scalar(cost.batch),
        "context_mean_tokens": scalar(cost.mean_context),
        "prefill_tokens": scalar(cost.prefill_tokens),
        "prefill_context_tokens": prefill_context,
        "resources": {
            "hbm": {"bytes": scalar(cost.hbm_bytes), "time_s": scalar(t.hbm_s)},
            "compute": {"flops": scalar(cost.flops), "flops_by_dtype": {k: scalar(v) for k, v in cost.flops_by_dtype.items()},
                        "time_s": scalar(t.compute_s)},
            "network_bytes": {"bytes": scalar(cost.network_bytes), "time_s": scalar(t.network_bytes_s)},
            "network_messages": {"count": scalar(cost.network_messages), "time_s": scalar(t.network_messages_s)},
            "kv_capacity": {"resident_bytes": scalar(cost.kv_resident_bytes), "pool_bytes": cost.kv_pool_bytes,
                            "fits": bool(scalar(cost.kv_fits)),
                            "used_fraction": scalar(cost.kv_resident_bytes) / cost.kv_pool_bytes if cost.kv_pool_bytes > 0 else None},
        },
        "weights_resident_bytes_per_gpu": cost.weights_resident_bytes,
        "weights_fit": cost.kv_pool_bytes > 0,
        "kv_pool_gib_per_gpu": cost.kv_pool_bytes / GiB,
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
    if calibration is not None:
        doc["predicted_s"] = scalar(calibration.predict_s(cost))
    return doc


def prefill_args(prefill_tokens: float, prefill_context: str) -> tuple[float, float]:
    if not np.isfinite(prefill_tokens) or prefill_tokens < 0:
        raise SpecError(f"prefill_tokens={prefill_tokens} must be ≥ 0")
    ctx = 0.0 if prefill_context.strip() in ("", "0") else parse_tokens(prefill_context, "prefill_context")
    if ctx > 0 and prefill_tokens == 0:
        raise SpecError("--prefill-context needs --prefill-tokens (the chunk that attends to it)")
    return float(prefill_tokens), ctx


def _point(model, hardware, attn, moe, gpus, replicas, batch, context, prefill_tokens, kv_dtype, weight_dtype,
           mem_fraction, page_tokens, reserve_gib, pricing, prefill_context="0"):
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    dep = deployment(m, hw, attn, moe, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib)
    load = build_load(batch, context)
    return dep, planner.step_cost(dep, load, pre, pricing_for(hw, pricing), prefill_context=pre_ctx)


def floor(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    attn: AttnOpt = "tp", moe: MoeOpt = None, replicas: ReplicasOpt = 1, batch: BatchOpt = None,
    context: ContextOpt = DEFAULTS["context"], prefill_tokens: PrefillOpt = 0.0, prefill_context: PrefillContextOpt = "0",
    kv_dtype: KvDtypeOpt = None, weight_dtype: WeightDtypeOpt = None, mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    page_tokens: PageOpt = 64, reserve_gib: ReserveOpt = 0.0, pricing: PricingOpt = PricingChoice.datasheet,
    calibration: CalibrationOpt = None, json_out: JsonOpt = False,
) -> None:
    """The five-resource vector of one step on the busiest rank, its floors and what binds."""
    cal = load_calibration(calibration)
    dep, cost = _point(model, hardware, attn.value, moe.value if moe else None, gpus, replicas, batch, context,
                       prefill_tokens, kv_dtype, weight_dtype, mem_fraction, page_tokens, reserve_gib, pricing,
                       prefill_context)
    doc = {"model": dep.model.name, "hardware": dep.hardware.name,
           **cost_document(dep, cost, cal, prefill_args(prefill_tokens, prefill_context)[1], pricing_for(dep.hardware, pricing))}
    if json_out:
        emit_json("floor", doc)
        return
    con = console()
    r = doc["resources"]
    t = Table(title=f"{dep.model.name} on {dep.gpus} × {dep.hardware.name}, {dep.label()}, "
                    f"B={doc['batch']:.0f}, mean context {fmt_tokens(doc['context_mean_tokens'])} "
                    f"[{dep.weight_dtype} weights, {dep.kv_dtype} KV, {cost.pricing}]")
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
    t.add_row("kv_capacity" + (" ◀ WALL" if not kv["fits"] else ""), f"{fmt_bytes(kv['resident_bytes'])} of {fmt_bytes(kv['pool_bytes'])}",
              "fits" if kv["fits"] else "DOES NOT FIT", f"{kv['used_fraction']:.0%}" if kv["used_fraction"] is not None else "—")
    con.print(t)
    con.print(f"floor_max {fmt_ms(doc['floor_max_s'])}  floor_sum {fmt_ms(doc['floor_sum_s'])}  binding [bold]{doc['binding']}[/]  "
              f"decode {doc['decode_tokens_per_s_at_max']:.0f} … {doc['decode_tokens_per_s_at_sum']:.0f} tokens/s")
    if "predicted_s" in doc:
        con.print(f"calibrated prediction {fmt_ms(doc['predicted_s'])}")
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


def valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib):
    """Every (attn, moe) the model can run here, and the ones it can't with the reason."""
    deps, skipped = [], []
    for a in planner.ATTN_LAYOUTS:
        for mo in planner.MOE_SPLITS:
            try:
                deps.append(deployment(m, hw, a, mo, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                       reserve_gib))
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
    mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"], page_tokens: PageOpt = 64, reserve_gib: ReserveOpt = 0.0,
    pricing: PricingOpt = PricingChoice.datasheet, calibration: CalibrationOpt = None,
    components: Annotated[bool, typer.Option("--components", help="Also show each layout's engine effects: DSA's indexer, top-k, padded head rows, unsharded attention weights (ms).")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Every layout side by side at one operating point."""
    cal = load_calibration(calibration)
    m, hw = load_specs(model, hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    deps, skipped = valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib)
    load = build_load(batch, context)
    pr = pricing_for(hw, pricing)
    docs = [cost_document(d, planner.step_cost(d, load, pre, pr, prefill_context=pre_ctx), cal, pre_ctx, pr) for d in deps]
    feasible = [d for d in docs if d["resources"]["kv_capacity"]["fits"]]
    # NOTE: layouts that tie on one floor (DCP and DOP move the same HBM bytes) are ordered by the other
    best_max = min(feasible, key=lambda d: (d["floor_max_s"], d["floor_sum_s"])) if feasible else None
    best_sum = min(feasible, key=lambda d: (d["floor_sum_s"], d["floor_max_s"])) if feasible else None
    out = {
        "model": m.name, "hardware": hw.name, "gpus": gpus, "batch": docs[0]["batch"],
        "context_mean_tokens": docs[0]["context_mean_tokens"], "prefill_tokens": pre, "prefill_context_tokens": pre_ctx,
        "layouts": docs, "skipped": skipped,
        "best_by_max": {"attn": best_max["attn"], "moe": best_max["moe"]} if best_max else None,
        "best_by_sum": {"attn": best_sum["attn"], "moe": best_sum["moe"]} if best_sum else None,
    }
    if json_out:
        emit_json("compare", out)
        return
    con = console()
    t = Table(title=f"{m.name} on {gpus} × {hw.name}, B={out['batch']:.0f}, mean context "
                    f"{fmt_tokens(out['context_mean_tokens'])} ({pr.label} floors, busiest rank)")
    cols = ["attn/moe", "floor max", "floor sum", "binding", "tokens/s @max", "KV used", "HBM", "compute", "net bytes", "net msgs"]
    if cal is not None:
        cols.insert(3, "predicted")
    for c in cols:
        t.add_column(c, justify="left" if c in ("attn/moe", "binding") else "right")
    for d in docs:
        r = d["resources"]
        kv = r["kv_capacity"]
        star = " ★" if best_max and d is best_max else ""
        row = [f"{d['attn']}/{d['moe']}{star}", fmt_ms(d["floor_max_s"]), fmt_ms(d["floor_sum_s"]), d["binding"],
               f"{d['decode_tokens_per_s_at_max']:.0f}",
               (f"{kv['used_fraction']:.0%}" if kv["used_fraction"] is not None else "no pool") + ("" if kv["fits"] else " ✗"),
               fmt_ms(r["hbm"]["time_s"]), fmt_ms(r["compute"]["time_s"]), fmt_ms(r["network_bytes"]["time_s"]),
               fmt_ms(r["network_messages"]["time_s"])]
        if cal is not None:
            row.insert(3, fmt_ms(d["predicted_s"]))
        t.add_row(*row)
    con.print(t)
    if components:
        e = Table(title="engine effects per layout (ms at the pricing's rates; each overlaps the rest of its step)")
        names = list(docs[0]["engine_effects_s"])
        for c in ["attn/moe", "decode kernel", *names, "floor sum"]:
            e.add_column(c, justify="left" if c in ("attn/moe", "decode kernel") else "right")
        for d in docs:
            e.add_row(f"{d['attn']}/{d['moe']}", d["decode_kernel"], *(fmt_ms(d["engine_effects_s"][k]) for k in names),
                      fmt_ms(d["floor_sum_s"]))
        con.print(e)
    for s in skipped:
        con.print(f"[dim]skipped {s['attn']}/{s['moe']}: {s['reason']}[/]")
    con.print("★ fastest by floor_max among layouts whose KV fits" if best_max else "no layout fits this load")


def capacity(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    replicas: ReplicasOpt = 1, context: ContextOpt = DEFAULTS["context"], kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None, mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    page_tokens: PageOpt = 64, reserve_gib: ReserveOpt = 0.0, json_out: JsonOpt = False,
) -> None:
    """KV pool per GPU, distinct tokens and max concurrency at a context length, every layout."""
    m, hw = load_specs(model, hardware)
    ctx = parse_tokens(context)
    deps, skipped = valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens, reserve_gib)
    docs = []
    for d in deps:
        c = kv_capacity(d, [ctx])
        docs.append({
            "attn": d.attn, "moe": d.moe, "gpus": d.gpus, "replicas": d.replicas, "kv_dtype": d.kv_dtype,
            "weight_dtype": d.weight_dtype,
            "weights_gib_per_gpu": c.weights_resident_bytes_per_gpu / GiB,
            "weights_fit": c.kv_pool_bytes_per_gpu > 0,
            "kv_pool_gib_per_gpu": c.kv_pool_bytes_per_gpu / GiB,
            "kv_bytes_per_token": c.kv_bytes_per_token,
            "kv_replication": c.kv_replication,
            "distinct_tokens": c.distinct_tokens,
            "context_tokens": ctx,
            "max_concurrency": float(c.max_concurrency[0]),
        })
    out = {"model": m.name, "hardware": hw.name, "gpus": gpus, "mem_fraction": mem_fraction, "page_tokens": page_tokens,
           "context_tokens": ctx, "layouts": docs, "skipped": skipped}
    if json_out:
        emit_json("capacity", out)
        return
    t = Table(title=f"{m.name} on {gpus} × {hw.name}: KV capacity at {fmt_tokens(ctx)} tokens/request "
                    f"(mem_fraction {mem_fraction}, {page_tokens}-token pages)")
    for col in ("attn/moe", "weights GiB/GPU", "KV pool GiB/GPU", "KV copies", "distinct tokens", "max concurrency"):
        t.add_column(col, justify="left" if col == "attn/moe" else "right")
    for d in docs:
        pool = f"{d['kv_pool_gib_per_gpu']:.1f}" if d["weights_fit"] else "weights don't fit"
        t.add_row(f"{d['attn']}/{d['moe']}", f"{d['weights_gib_per_gpu']:.1f}", pool,
                  f"{d['kv_replication']:.0f}", fmt_tokens(d["distinct_tokens"]), f"{d['max_concurrency']:.0f}")
    console().print(t)
    for s in skipped:
        console().print(f"[dim]skipped {s['attn']}/{s['moe']}: {s['reason']}[/]")


def register(app: typer.Typer) -> None:
    app.command("floor")(floor)
    app.command("compare")(compare)
    app.command("capacity")(capacity)
