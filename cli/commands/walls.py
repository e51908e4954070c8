"""`floorfirst walls` and `floorfirst regimes`: which wall binds first as load grows, and the
best layout over a batch × context grid."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

from cli.commands.floor import valid_deployments
from cli.host_tier_options import BudgetOpt, HostPageOpt, HostTierOpt, LocalityOpt, host_tier_spec
from cli.common import (console, DEFAULTS, LayoutsOpt, select_layouts, CalibrationOpt, EngineOpt, GpusOpt, HardwareOpt, JsonOpt, KvDtypeOpt,
                        MemFractionOpt, ModelOpt, NodesOpt, PageOpt, PlotOpt, ReplicasOpt, ReserveOpt, SwaRatioOpt, WeightDtypeOpt, AttnGroupsOpt,
                        emit_json, fmt_ms, load_calibration, load_specs, parse_tokens)
from cli.launch import planning
from cli.registry_options import live
from cli.rendering import deployment_title
from planner.errors import SpecError
from planner.units import GiB
from planner.regimes import TIE_MARGIN
from planner.regimes import regimes as compute_regimes
from planner.walls import walls as compute_walls


class Along(str, Enum):
    batch = "batch"
    context = "context"


class FloorKind(str, Enum):
    max = "max"
    sum = "sum"


def _range(text: str, what: str) -> tuple[float, float]:
    lo, sep, hi = text.partition(":")
    if not sep:
        raise SpecError(f"{what}={text!r} must be LO:HI (e.g. 1:4096 or 1k:256k)")
    a, b = parse_tokens(lo, what), parse_tokens(hi, what)
    if not a < b:
        raise SpecError(f"{what}={text!r}: LO must be below HI")
    return a, b


def _grid(text: str, what: str, default_n: int) -> np.ndarray:
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise SpecError(f"{what}={text!r} must be LO:HI or LO:HI:N")
    lo, hi = _range(":".join(parts[:2]), what)
    n = default_n
    if len(parts) == 3:
        try:
            n = int(parts[2])
        except ValueError:
            raise SpecError(f"{what}={text!r}: N must be a whole number") from None
        if not 2 <= n <= 200:
            raise SpecError(f"{what}={text!r}: N must be between 2 and 200")
    return np.unique(np.round(np.geomspace(lo, hi, n)))


def walls(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    replicas: ReplicasOpt = 1,
    along: Annotated[Along, typer.Option("--along", help="Grow batch at fixed --context, or context at fixed --batch.")] = Along.batch,
    batch: Annotated[int, typer.Option("--batch", "-b", help="Fixed batch when growing context.")] = DEFAULTS["batch"],
    context: Annotated[str, typer.Option("--context", "-c", help="Fixed context when growing batch: one length (32k).")] = DEFAULTS["context"],
    range_: Annotated[Optional[str], typer.Option("--range", help="LO:HI of the growing axis (default 1:4096 requests or 512:512k tokens).")] = None,
    layouts: LayoutsOpt = None, kv_dtype: KvDtypeOpt = None, weight_dtype: WeightDtypeOpt = None,
    mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"], page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None,
    engine: EngineOpt = DEFAULTS["engine"], nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None,
    attn_groups: AttnGroupsOpt = None, calibration: CalibrationOpt = None, json_out: JsonOpt = False, plot: PlotOpt = None,
    host_tier: HostTierOpt = False, hbm_budget_tokens: BudgetOpt = 4096, locality: LocalityOpt = 0.8,
    host_page_rows: HostPageOpt = 1,
) -> None:
    """Where each resource becomes binding and where KV runs out, per layout, in order (with
    --host-tier: each layout with all KV in HBM and with the tier, side by side)."""
    cal = load_calibration(calibration)
    m, hw = load_specs(model, hardware)
    deps = select_layouts(valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                     reserve_gib, engine, nodes, swa_ratio=swa_full_tokens_ratio,
                                     attn_groups=attn_groups)[0], layouts)
    tier = host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)
    if tier is not None:
        import planner

        deps = [x for d in deps for x in (d, planner.replace_deployment(d, host_tier=tier))]
    if batch < 1:
        raise SpecError(f"batch={batch} must be ≥ 1")
    if along == Along.batch and ("," in context or "*" in context):
        raise SpecError(f"walls --context {context!r}: give one length (every request has it as the batch grows); "
                        "a list or histogram of contexts goes to compare, capacity or floor")
    fixed = parse_tokens(context) if along == Along.batch else float(batch)
    lo, hi = _range(range_, "--range") if range_ else ((1.0, 4096.0) if along == Along.batch else (512.0, 524288.0))
    results = []
    docs = []
    # NOTE: every load carries its unit in its key: requests when batch grows, tokens when context does
    u = "requests" if along == Along.batch else "tokens"
    for d in deps:
        w = compute_walls(d, along.value, fixed, lo, hi)
        label = f"{d.attn}/{d.moe}" + (" +host tier" if d.host_tier is not None else "")
        results.append((label, w))
        doc = {"attn": d.attn, "moe": d.moe, "host_tier": d.host_tier is not None, f"walls_{u}": w.walls,
               "order": [{"resource": r, f"at_{u}": x} for r, x in w.order],
               "first_wall": {"resource": w.first_wall[0], f"at_{u}": w.first_wall[1]} if w.first_wall else None,
               "binding_at_start": str(w.binding[0]), f"kv_wall_{u}": w.walls.get("kv_capacity"),
               "feasible": d.memory.feasible, "infeasible_reason": d.memory.reason or None,
               "kv_pool_gib_per_gpu": d.memory.kv_pool_bytes / GiB, "nodes_per_group": d.group_nodes}
        if cal is not None:
            doc[f"loads_{u}"] = w.loads
            doc["predicted_s"] = cal.predict_s(w.cost)
            doc["floor_max_s"] = w.floor_max_s
            doc["floor_sum_s"] = w.floor_sum_s
        docs.append(doc)
    # layouts compared by which wall binds first, and where: earliest first
    ranking = sorted((x for x in docs if x["first_wall"]), key=lambda x: x["first_wall"][f"at_{u}"])
    out = {"model": m.name, "hardware": hw.name, "gpus": gpus, "nodes": deps[0].nodes, "engine": deps[0].engine,
           "along": along.value,
           ("context_tokens" if along == Along.batch else "batch"): fixed if along == Along.batch else int(fixed),
           f"range_{u}": [lo, hi], "layouts": docs,
           "first_wall_order": [{"attn": x["attn"], "moe": x["moe"], "host_tier": x["host_tier"], **x["first_wall"]}
                                for x in ranking]}
    title = (f"{deployment_title(deps[0])}: growing {along.value} at "
             + (f"context {fixed:.0f}" if along == Along.batch else f"batch {fixed:.0f}"))
    if plot:
        from cli.plots import plot_walls

        plot_walls(results, title, plot)
        out["plot"] = plot
    if json_out:
        emit_json("walls", out)
        return
    con = console()
    t = Table(title=escape(title))
    t.add_column("attn/moe")
    t.add_column("binds at start")
    t.add_column("walls in order (resource @ load)")
    t.add_column("KV wall", justify="right")
    unit = "" if along == Along.batch else " tok"
    for d in docs:
        if not d["feasible"]:
            t.add_row(f"{d['attn']}/{d['moe']}", "—", "no KV pool: " + d["infeasible_reason"], "—")
            continue
        order = "  →  ".join(f"{o['resource']} @ {o[f'at_{u}']:.0f}{unit}" for o in d["order"])
        kv = d[f"kv_wall_{u}"]
        name = f"{d['attn']}/{d['moe']}" + (" +host" if d["host_tier"] else "")
        t.add_row(name, d["binding_at_start"], order, f"{kv:.0f}{unit}" if kv else "none in range")
    con.print(t)
    con.print("first wall hit as " + along.value + " grows, earliest first: " + ", ".join(
        f"{x['attn']}/{x['moe']}{' +host' if x['host_tier'] else ''} {x['resource']} @ {x[f'at_{u}']:.0f}{unit}"
        for x in out["first_wall_order"]))
    if plot:
        con.print(f"plot written to {plot}")


def regimes(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    replicas: ReplicasOpt = 1,
    batch_range: Annotated[str, typer.Option("--batch-range", help="LO:HI[:N] requests, geometric.")] = "1:1024:11",
    context_range: Annotated[str, typer.Option("--context-range", help="LO:HI[:N] tokens, geometric.")] = "1k:256k:9",
    floor: Annotated[FloorKind, typer.Option("--floor", help="Rank layouts by the optimistic (max) or pessimistic (sum) floor.")] = FloorKind.max,
    layouts: LayoutsOpt = None, kv_dtype: KvDtypeOpt = None, weight_dtype: WeightDtypeOpt = None,
    mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"], page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None,
    engine: EngineOpt = DEFAULTS["engine"], nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None,
    attn_groups: AttnGroupsOpt = None, calibration: CalibrationOpt = None, json_out: JsonOpt = False, plot: PlotOpt = None,
    tie_margin: Annotated[float, typer.Option("--tie-margin", help="Layouts within this fraction of the best step time tie (0.01 = 1 %): a cell names them all, not a winner by a fraction of a percent.")] = TIE_MARGIN,
) -> None:
    """Best layout over a batch × context grid (ties within a margin named as ties, the runner-up's
    margin per cell); capacity-infeasible cells marked."""
    cal = load_calibration(calibration)
    m, hw = load_specs(model, hardware)
    deps = select_layouts(valid_deployments(m, hw, gpus, replicas, weight_dtype, kv_dtype, mem_fraction, page_tokens,
                                     reserve_gib, engine, nodes, swa_ratio=swa_full_tokens_ratio,
                                     attn_groups=attn_groups)[0], layouts)
    b = _grid(batch_range, "--batch-range", 11)
    c = _grid(context_range, "--context-range", 9)
    reg = compute_regimes(deps, b, c, floor.value, tie_margin)
    grid = [[reg.best_label(i, j) for j in range(c.size)] for i in range(b.size)]
    ties = [[reg.tie_labels(i, j) for j in range(c.size)] for i in range(b.size)]
    out = {"model": m.name, "hardware": hw.name, "gpus": gpus, "nodes": deps[0].nodes, "engine": deps[0].engine,
           "floor": floor.value, "batch": [int(x) for x in b], "context_tokens": c,
           "layouts": reg.labels, "best": grid, "tie_margin_fraction": tie_margin, "tied": ties,
           "runner_up_margin_fraction": reg.runner_up_margin,
           "step_time_s": {lab: reg.times_s[k] for k, lab in enumerate(reg.labels)}}
    if cal is not None:
        out["predicted_s"] = {lab: cal.predict_s(cost).reshape(b.size, c.size) for lab, cost in zip(reg.labels, reg.costs)}
    title = deployment_title(deps[0])
    if plot:
        from cli.plots import plot_regimes

        plot_regimes(reg, title, plot)
        out["plot"] = plot
    if json_out:
        emit_json("regimes", out)
        return
    con = console()
    t = Table(title=escape(f"{title}: best layout by floor_{floor.value} (rows batch, columns context)"))
    t.add_column("B \\ ctx", justify="right")
    for x in c:
        t.add_column(f"{x / 1024:.0f}k" if x >= 1024 else f"{x:.0f}", justify="center")
    for i, x in enumerate(b):
        t.add_row(f"{x:.0f}", *[_cell(ties[i][j], reg.runner_up_margin[i, j]) for j in range(c.size)])
    con.print(t)
    con.print(f"≈ = a tie: also within {100 * tie_margin:g} % of the best (≈+N: N more); +N% = how much slower the "
              "runner-up is; · = KV does not fit in any layout")
    if plot:
        con.print(f"plot written to {plot}")


def _cell(tied: list[str], margin: float) -> str:
    """A regimes cell: the best layout, then the tie or the runner-up's margin."""
    if not tied:
        return "·"
    if len(tied) == 2:
        return f"{tied[0]}\n≈{tied[1]}"
    if len(tied) > 2:
        return f"{tied[0]}\n≈+{len(tied) - 1}"
    return f"{tied[0]}\n" + ("only fit" if not np.isfinite(margin) else f"+{100 * margin:.0f}%" if margin >= 0.095
                              else f"+{100 * margin:.1f}%")


def register(app: typer.Typer) -> None:
    app.command("walls")(live(planning("walls", walls)))
    app.command("regimes")(live(planning("regimes", regimes)))
