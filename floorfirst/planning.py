"""The planning commands as functions: `floor` (one operating point on one layout, or the fastest
that fits), `compare` (every layout side by side) and `capacity` (every layout's KV pool and
concurrency), each returning the document `floorfirst <command> --json` prints (less its
`schema` key), as a dict of plain numbers. floorfirst.api types them; the CLI renders them.

Infeasible is an answer: a deployment whose weights or reserve don't fit, or a step whose KV
exceeds the pool, is a document with `feasible: false` and the reason in words, never a
tokens/s figure.

Every layout says whether the deployment's engine launches it, with the launch line that does
(planner.engines' `launch`) or why none does. The layout `floor` picks without an attn, and
compare's `recommended` (the CLI's ★), is the fastest feasible layout the engine launches (any
feasible layout with `all_layouts`), ranked by the step model's predicted time where one prices the
deployment (a shipped prior or a calibration) and by floor_max where none does; the documents say
which ranked (`ranked_by`). cli/commands/floor.py renders these documents and computes none.

Does not: render, plot or print (cli), parse a launch line (floorfirst.knobs).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import planner
from floorfirst.points import build_load, deployment, load_calibration, load_specs, parse_tokens, pricing_for, scalar, \
    select_layouts
from planner.errors import SpecError
from planner.units import GiB

if TYPE_CHECKING:  # NOTE: not at run time: the CLI imports this module at start, and the model costs ~40 ms
    from floorfirst.knobs import DeploymentSpec

DATASHEET_MIDPOINT = "datasheet midpoint: floor_max + 0.5*(floor_sum - floor_max), no overhead"


def make(spec: DeploymentSpec, m, hw, attn: str, moe: str | None = None, host_tier=None) -> planner.Deployment:
    """The planner's deployment of `spec` on layout attn/moe (moe None: the spec's, else the model's default)."""
    return deployment(m, hw, attn, moe if moe is not None else spec.moe, spec.gpus, spec.replicas, spec.weight_dtype,
                      spec.kv_dtype, spec.mem_fraction, spec.page_tokens, spec.reserve_gib, spec.engine, spec.nodes,
                      host_tier, spec.swa_full_tokens_ratio, spec.attn_groups)


def step_model_for(dep: planner.Deployment, calibration=None, calibration_path: str | None = None):
    """(the calibration that prices `dep`'s steps or None, its label): a given calibration, else the
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


def infeasible_reason(cost: planner.StepCost) -> str:
    """Why point 0 of a priced step can't run, in words ('' if it can)."""
    if not cost.memory_feasible:
        return cost.infeasible_reason
    res, pool = scalar(cost.kv_resident_bytes), cost.kv_pool_bytes
    if res > pool:
        return f"KV {res / GiB:.2f} GiB on the busiest rank exceeds its pool {pool / GiB:.2f} GiB ({res / pool:.1f}×)"
    tier = cost.host_tier
    if tier is not None and not bool(tier.host_fits[0]):
        host = float(tier.host_kv_resident_bytes[0])
        return (f"host-tier KV {host / GiB:.2f} GiB on the busiest rank exceeds its host memory "
                f"{tier.host_pool_bytes / GiB:.2f} GiB ({host / tier.host_pool_bytes:.1f}×)")
    return ""


def tier_document(cost) -> dict:
    """The JSON view of a step's host tier (point 0); compare adds the requests held by wall."""
    t = cost.host_tier
    return {"host_link_bytes": float(t.host_link_bytes[0]), "host_link_equivalent_bytes": float(t.host_link_equivalent_bytes[0]),
            "host_link_time_s": float(cost.times.host_link_s[0]), "miss_entries_count": float(t.miss_entries[0]),
            "unit_bytes": t.unit_bytes, "page_amplification_factor": t.amplification,
            "hbm_kv_resident_bytes": float(t.hbm_kv_resident_bytes[0]), "host_kv_resident_bytes": float(t.host_kv_resident_bytes[0]),
            "host_pool_bytes": t.host_pool_bytes, "host_fits": bool(t.host_fits[0]),
            "tiered_groups": list(t.tiered_groups), "tiered_layers_count": t.tiered_layers}


def cost_document(dep: planner.Deployment, cost: planner.StepCost, calibration=None,
                  prefill_context: float = 0.0, pricing: planner.Pricing | None = None,
                  calibration_path: str | None = None) -> dict[str, Any]:
    """The document of one priced point (index 0)."""
    from planner.effects import effect_times_s
    from planner.layouts.base import SCALEOUT, SCALEUP

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
    """Sort key: feasible first, then the ones that may take the recommendation (launchable unless
    all_layouts), then the ranking key, the floors breaking ties (DCP and DOP move the same HBM bytes)."""
    eligible = doc["launchable"] or not ranking["launchable_only"]
    return (not doc["feasible"], not eligible, doc[ranking["key"]], doc["floor_max_s"], doc["floor_sum_s"])


def recommended(docs: list[dict[str, Any]], ranking: dict[str, Any]) -> dict[str, Any] | None:
    """The recommendation (the CLI's ★): the first feasible, eligible layout of `docs` in rank order;
    None when there is none."""
    pick = min((d for d in docs if d["feasible"] and (d["launchable"] or not ranking["launchable_only"])),
               key=lambda d: rank_order(d, ranking), default=None)
    if pick is None:
        return None
    return {k: pick[k] for k in ("attn", "moe", "launchable", "launch_line", "launch_replicas", "launch_notes")}


def ranking_words(ranking: dict[str, Any], engine: str) -> str:
    """'fastest by <what> among the layouts <engine> launches', for the layout_choice and the CLI's lines."""
    by = f"the {ranking['step_model']}" if ranking["key"] == "predicted_s" else "floor_max (no step model prices it)"
    among = f"the layouts {engine} launches" if ranking["launchable_only"] else "all layouts (--all-layouts)"
    return f"fastest by {by}, among {among} whose KV fits"


def prefill_args(prefill_tokens: float, prefill_context: str) -> tuple[float, float]:
    """(prefill chunk tokens, the cached prefix it attends to, tokens), checked."""
    if isinstance(prefill_tokens, bool) or not isinstance(prefill_tokens, (int, float, np.integer, np.floating)):
        raise SpecError(f"prefill_tokens={prefill_tokens!r} must be a number of tokens ≥ 0")
    if not np.isfinite(prefill_tokens) or prefill_tokens < 0:
        raise SpecError(f"prefill_tokens={prefill_tokens} must be ≥ 0")
    ctx = 0.0 if prefill_context.strip() in ("", "0") else parse_tokens(prefill_context, "prefill_context")
    if ctx > 0 and prefill_tokens == 0:
        raise SpecError("--prefill-context needs --prefill-tokens (the chunk that attends to it)")
    return float(prefill_tokens), ctx


def valid_deployments(m, hw, spec: DeploymentSpec, moe: str | None = None, host_tier=None):
    """Every (attn, moe) the model can run here (only `moe` if given), and the ones it can't with
    the reason. The spec's `attn_groups` applies to the layouts that take a group count (the
    others have their own)."""
    from planner.layouts import attention_layouts
    from planner.layouts.base import moe_splits

    deps, skipped = [], []
    takes_groups = {n for n, x in attention_layouts().items() if x.group_rule == "given"}
    for a in tuple(planner.ATTN_LAYOUTS):
        for mo in ([moe] if moe else tuple(moe_splits())):
            try:
                deps.append(deployment(m, hw, a, mo, spec.gpus, spec.replicas, spec.weight_dtype, spec.kv_dtype,
                                       spec.mem_fraction, spec.page_tokens, spec.reserve_gib, spec.engine, spec.nodes,
                                       host_tier, spec.swa_full_tokens_ratio,
                                       spec.attn_groups if a in takes_groups else None))
            except SpecError as exc:
                skipped.append({"attn": a, "moe": mo, "reason": str(exc)})
    if not deps:
        raise SpecError(f"no layout can run: {skipped[0]['reason']}")
    return deps, skipped


def _auto_point(m, hw, spec: DeploymentSpec, batch, context, pre: float, pre_ctx: float, pricing, cal=None,
                calibration_path: str | None = None, all_layouts: bool = False):
    """Every layout priced; compare's recommendation (`recommended`: the fastest feasible launchable
    one, by the step model or the floors), else the fastest feasible one the engine does not launch,
    else the closest to fitting. Returns (deployment, cost, why, ranking)."""
    deps, _ = valid_deployments(m, hw, spec, spec.moe)
    load = build_load(batch, context)
    priced = [(d, planner.step_cost(d, load, pre, pricing, prefill_context=pre_ctx)) for d in deps]
    docs = [cost_document(d, c, cal, pre_ctx, pricing, calibration_path) for d, c in priced]
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


def floor_document(spec: DeploymentSpec, batch: int | None = None, context: str = "32k", prefill_tokens: float = 0.0,
                   prefill_context: str = "0", pricing: str = "datasheet",
                   calibration: str | None = None,
                   all_layouts: bool = False) -> tuple[dict[str, Any], planner.Deployment, planner.StepCost]:
    """`floorfirst floor`: (the document, the deployment, its priced step) of one operating point
    on `spec.attn`, or, when that is None, on compare's recommendation (the fastest feasible layout
    the engine launches; any feasible layout with `all_layouts`)."""
    cal = load_calibration(calibration)
    m, hw = load_specs(spec.model, spec.hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    pr = pricing_for(hw, pricing)
    ranking = None
    if spec.attn is None:
        dep, cost, why, ranking = _auto_point(m, hw, spec, batch, context, pre, pre_ctx, pr, cal, calibration,
                                              all_layouts)
    else:
        dep = make(spec, m, hw, spec.attn)
        load = build_load(batch, context)
        cost = planner.step_cost(dep, load, pre, pr, prefill_context=pre_ctx)
        why = "given by --attn"
    doc = {"model": dep.model.name, "hardware": dep.hardware.name, "layout_choice": why, "ranked_by": ranking,
           **cost_document(dep, cost, cal, pre_ctx, pr, calibration)}
    return doc, dep, cost


def compare_document(spec: DeploymentSpec, batch: int | None = None, context: str = "32k", prefill_tokens: float = 0.0,
                     prefill_context: str = "0", pricing: str = "datasheet", calibration: str | None = None,
                     moe: str | None = None, layouts: str | None = None,
                     host_tier=None, all_layouts: bool = False) -> tuple[dict[str, Any], list[planner.Deployment]]:
    """`floorfirst compare`: (the document, the deployments priced, in registry order) of every layout the model
    can run (only `moe` if given, only `layouts` if given) at one operating point: those that fit
    first, the engine's launchable ones first among them (all alike with `all_layouts`), fastest
    first by the step model where one prices the deployment, else by floor_max. `spec.attn` is not
    read (every layout is priced)."""
    from planner.capacity import capacity as kv_capacity

    cal = load_calibration(calibration)
    m, hw = load_specs(spec.model, spec.hardware)
    pre, pre_ctx = prefill_args(prefill_tokens, prefill_context)
    deps, skipped = valid_deployments(m, hw, spec, moe, host_tier=host_tier)
    deps = select_layouts(deps, layouts)
    load = build_load(batch, context)
    pr = pricing_for(hw, pricing)
    docs = [cost_document(d, planner.step_cost(d, load, pre, pr, prefill_context=pre_ctx), cal, pre_ctx, pr, calibration)
            for d in deps]
    if host_tier is not None:
        for d, doc in zip(deps, docs):  # requests held at the load's mean context, with and without the tier
            walls = kv_capacity(d, [doc["context_mean_tokens"]]).host_tier
            doc["host_tier"].update(requests_held_hbm_only=float(walls.hbm_only[0]), requests_held_tiered=float(walls.held[0]),
                                    tier_wall=str(walls.binding[0]))
    first = deps[0]
    # NOTE: ranked, not listed: a layout that can't hold the load is no candidate, however fast, and one
    # no flag of the engine launches is no recommendation unless all_layouts.
    ranking = ranked_by(docs[0]["step_model"], all_layouts)
    docs.sort(key=lambda d: rank_order(d, ranking))
    feasible = [d for d in docs if d["feasible"]]
    # NOTE: layouts that tie on one floor (DCP and DOP move the same HBM bytes) are ordered by the other
    best_max = min(feasible, key=lambda d: (d["floor_max_s"], d["floor_sum_s"])) if feasible else None
    best_sum = min(feasible, key=lambda d: (d["floor_sum_s"], d["floor_max_s"])) if feasible else None
    out = {
        "model": m.name, "hardware": hw.name, "gpus": spec.gpus, "nodes": first.nodes, "engine": first.engine,
        "batch": docs[0]["batch"],
        "context_mean_tokens": docs[0]["context_mean_tokens"], "prefill_tokens": pre, "prefill_context_tokens": pre_ctx,
        "layouts": docs, "skipped": skipped, "step_model": docs[0]["step_model"],
        "out": [{"attn": d["attn"], "moe": d["moe"], "reason": d["infeasible_reason"]} for d in docs if not d["feasible"]],
        "best_by_max": {"attn": best_max["attn"], "moe": best_max["moe"]} if best_max else None,
        "best_by_sum": {"attn": best_sum["attn"], "moe": best_sum["moe"]} if best_sum else None,
        "ranked_by": ranking, "recommended": recommended(docs, ranking),
    }
    return out, deps


def capacity_document(spec: DeploymentSpec, context: str = "32k",
                      host_tier=None) -> tuple[dict[str, Any], list[planner.Deployment]]:
    """`floorfirst capacity`: (the document, the deployments in its order): KV pool per GPU (as the
    engine sizes it), distinct tokens and max concurrency at a context length (or a mix), every
    layout. `spec.attn` and `spec.moe` are not read (every layout)."""
    from planner.capacity import capacity as kv_capacity
    from planner.host_tier import tiered_groups

    m, hw = load_specs(spec.model, spec.hardware)
    mix = context_mix(context)
    ctx = float(np.average(mix[:, 0], weights=mix[:, 1]))
    deps, skipped = valid_deployments(m, hw, spec, host_tier=host_tier)
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
    out = {"model": m.name, "hardware": hw.name, "gpus": spec.gpus, "nodes": deps[0].nodes, "engine": deps[0].engine,
           "mem_fraction": spec.mem_fraction, "swa_full_tokens_ratio": spec.swa_full_tokens_ratio,
           "page_tokens": deps[0].page_tokens,
           "datasheet_hbm_bytes_per_gpu": hw.peak.hbm_bytes, "usable_hbm_bytes_per_gpu": hw.usable_hbm_bytes,
           "context_tokens": ctx, "layouts": docs, "skipped": skipped}
    if len(mix) > 1:
        out["context_mix"] = [{"context_tokens": float(l), "requests": int(n)} for l, n in mix]
    return out, deps


def context_mix(context: str) -> np.ndarray:
    """A context as [[length, requests], …] (one length, a list, or a histogram)."""
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
