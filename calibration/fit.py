"""Fit the calibrated step model (calibration.artifact) to measured steps by robust least squares.

Residuals are log(predicted / measured): relative errors, so a 1 ms step and a 30 ms step weigh
the same, and a robust loss (soft_l1 by default, f_scale 0.05 ≈ 5 %) keeps outlier rows from
pulling the fit. Every parameter is bounded — efficiencies in (0, 1] so a prediction can never
beat a datasheet floor, α in [0, 1], overhead between 0 and the fastest measured step.

Parameters the data can't determine are held at a prior and named as fixed with where the
value came from: a resource with no signal in the profile (no network bytes on one GPU, say), or
whose column of the Jacobian at the solution is ~0 (never binding and α ≈ 0). Priors come from a
microbench result when given, else from the hardware file's efficiency defaults.

Refuses (SpecError) too little data: fewer than max(MIN_ROWS, ROWS_PER_PARAM × free parameters)
usable rows, or rows from more than one hardware kind.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

import planner
from calibration.artifact import (ENGINE_CODES, ENGINE_PARAM_NAMES, EFF_MIN, MAX_LATENCY_S, PARAM_NAMES, Calibration,
                                  DataSource, EngineParams, FitSummary, FittedParams, RowFeatures, engine_code)
from calibration.costs import ProfileCosts
from planner.errors import SpecError

MIN_ROWS = 8
ROWS_PER_PARAM = 3
DEFAULT_LOSS = "soft_l1"
DEFAULT_F_SCALE = 0.05
HOST_BOUND_MARGIN = 1.05  # a chunk row tells α_h apart where its eager host time exceeds its device time by this
# Internal scaling so every free variable is O(1) for the optimizer: latency in µs, overhead in ms.
_SCALE = np.array([1, 1, 1, 1, 1, 1e-6, 1, 1e-3, 1e-3, 1e-3, 1], dtype=np.float64)
_SIGNAL = {  # which feature carries each parameter's signal
    "hbm_weight_efficiency": "weight_hbm_s", "hbm_kv_efficiency": "other_hbm_s",
    "compute_linear_efficiency": "linear_compute_s", "compute_attention_efficiency": "attention_compute_s",
    "network_efficiency": "network_bytes_s", "message_latency_s": "network_messages",
    "prefill_step_overhead_s": "prefill_step", "mixed_step_overhead_s": "mixed_step",
}
# the fixed per-step costs: bounded by the measured steps, not by a physical rate, so a fit at 0 is
# not a bound to warn about
_OVERHEADS = ("overhead_s", "prefill_step_overhead_s", "mixed_step_overhead_s")


def priors_from(hw_name: str, microbench: dict | None) -> tuple[dict[str, float], dict[str, str]]:
    """Starting/fixed values and where each came from."""
    hw = planner.load_hardware(hw_name)
    p, e = hw.peak, hw.efficiency
    vals = {"hbm_weight_efficiency": e.hbm, "hbm_kv_efficiency": e.hbm, "compute_linear_efficiency": e.flops,
            "compute_attention_efficiency": e.flops, "network_efficiency": e.network,
            "message_latency_s": p.collective_latency_s, "overlap_alpha": 0.5, "overhead_s": 0.0,
            "prefill_step_overhead_s": 0.0, "mixed_step_overhead_s": 0.0, "host_overlap_alpha": 1.0}
    src = {k: f"hardware spec {hw.name} defaults" for k in vals}
    src["overlap_alpha"] = src["overhead_s"] = "neutral start (α = 0.5, overhead 0)"
    src["prefill_step_overhead_s"] = src["mixed_step_overhead_s"] = "neutral start (no eager-step overhead)"
    src["host_overlap_alpha"] = "neutral start (α_h = 1: host and device time add)"
    s = (microbench or {}).get("summary", {})
    tag = "microbench"
    from_mb = {
        "hbm_weight_efficiency": s.get("weight_stream_bytes_per_s", 0) / p.hbm_bandwidth_bytes_per_s,
        "hbm_kv_efficiency": s.get("mla_attention_kv_bytes_per_s", 0) / p.hbm_bandwidth_bytes_per_s,
        "compute_linear_efficiency": s.get("bf16_flops_per_s", 0) / p.bf16_flops_per_s,
        "compute_attention_efficiency": s.get("mla_attention_flops_per_s", 0) / p.bf16_flops_per_s,
        "network_efficiency": s.get("link_bytes_per_s", 0) / p.scaleup_bandwidth_bytes_per_s_per_direction,
        "message_latency_s": s.get("all_reduce_small_cuda_graph_latency_s") or s.get("all_reduce_small_latency_s") or 0,
    }
    for k, v in from_mb.items():
        if v and v > 0:
            vals[k] = float(min(v, 1.0)) if k != "message_latency_s" else float(v)
            src[k] = f"{tag} {microbench.get('device', '')} ({microbench.get('created_utc', '')})".strip()
    return vals, src


def _scale(names: list[str]) -> np.ndarray:
    return np.array([_SCALE[PARAM_NAMES.index(n.split("@")[0])] for n in names], dtype=np.float64)


def _residuals(z, free_idx, x_full, f: RowFeatures, measured, scale):
    x = x_full.copy()
    x[free_idx] = z * scale[free_idx]
    return np.log(f.predict(x) / measured)


def _bounds(measured, names: list[str] | None = None):
    """Each parameter's range: efficiencies (0, 1], latency and α as the artifact allows, the
    per-step overhead below the fastest measured row, an eager-step overhead below the slowest."""
    lo = np.array([EFF_MIN] * 5 + [0.0] * 6)
    hi = np.array([1.0] * 5 + [MAX_LATENCY_S, 1.0, float(np.min(measured)) * 0.999]
                  + [float(np.max(measured)) * 0.999] * 2 + [1.0])
    if names is None:
        return lo, hi
    idx = [PARAM_NAMES.index(n.split("@")[0]) for n in names]
    return lo[idx], hi[idx]


def block_names(engines: list[str]) -> list[str]:
    """Names of the per-engine parameters ('hbm_weight_efficiency@vllm', …) of `engines`."""
    return [f"{p}@{e}" for e in engines for p in ENGINE_PARAM_NAMES]


def fit_params(f: RowFeatures, measured: np.ndarray, priors: dict[str, float], loss: str = DEFAULT_LOSS,
               f_scale: float = DEFAULT_F_SCALE, fixed: set[str] | None = None,
               own_engines: list[str] | None = None) -> tuple[np.ndarray, list[str], dict[str, float], dict[str, str]]:
    """(x, free names, 1σ of free params, reasons for names held fixed). x is PARAM_NAMES' values,
    then, for each engine of `own_engines` (rows of several engines), its ENGINE_PARAM_NAMES
    (`block_names`), which price that engine's steps (calibration.artifact `per_step_params`); its
    priors are the shared ones'. Raises SpecError on too little data."""
    from scipy.optimize import least_squares

    own = list(own_engines or [])
    names = list(PARAM_NAMES) + block_names(own)
    f = f.with_blocks(tuple(engine_code(e) for e in own))
    priors = {**priors, **{n: priors[n.split("@")[0]] for n in names if "@" in n and n not in priors}}
    reasons: dict[str, str] = {}
    for name, feat in _SIGNAL.items():
        if not np.any(getattr(f.steps, feat) > 0):
            reasons[name] = "no signal in the data"
            for e in own:
                if f"{name}@{e}" in names:
                    reasons[f"{name}@{e}"] = "no signal in the data"
    if (not reasons.get("mixed_step_overhead_s") and "prefill_step_overhead_s" not in reasons
            and np.array_equal(f.steps.prefill_step, f.steps.mixed_step)):
        # NOTE: every row with a prompt chunk has decode rows too: the two eager-step overheads are one
        # column of the Jacobian, so the chunk step's whole extra cost is the prefill one's
        for n in names:
            if n.split("@")[0] == "mixed_step_overhead_s":
                reasons[n] = "not separable: every row with a prompt chunk has decode rows too"
    if "prefill_step_overhead_s" in reasons:
        # NOTE: α_h prices how an eager step's host time overlaps its device time: no eager step, no signal
        for n in names:
            if n.split("@")[0] == "host_overlap_alpha":
                reasons[n] = "no eager-step overhead to overlap (no row with a prompt chunk)"
    for name in fixed or ():
        reasons.setdefault(name, "held fixed by the caller")
    free = [n for n in names if n not in reasons]
    need = max(MIN_ROWS, ROWS_PER_PARAM * len(free))
    if measured.size < need:
        raise SpecError(f"calibration needs at least {need} measured steps to fit {len(free)} parameters "
                        f"({ROWS_PER_PARAM} per parameter, {MIN_ROWS} minimum); got {measured.size}")
    x0 = np.array([priors[n] for n in names], dtype=np.float64)
    lo, hi = _bounds(measured, names)
    scale = _scale(names)
    x0 = np.clip(x0, lo, hi)
    best = None
    for _ in range(2):  # a second pass drops parameters the first found to have no influence
        if not free:
            # NOTE: nothing left to fit (every parameter held, without signal, or without influence
            # on any row): the priors are the fit (it was an IndexError on an empty index array)
            return x0.copy(), [], {}, reasons
        idx = np.array([names.index(n) for n in free], dtype=np.int64)
        lo_z, hi_z = lo[idx] / scale[idx], hi[idx] / scale[idx]
        best = None
        for alpha0 in (x0[6], 0.1, 0.9):  # the max() kink makes the surface piecewise: try a few starts
            z0 = np.clip(x0[idx] / scale[idx], lo_z, hi_z)
            if "overlap_alpha" in free:
                z0[free.index("overlap_alpha")] = alpha0
            res = least_squares(_residuals, z0, bounds=(lo_z, hi_z), loss=loss, f_scale=f_scale,
                                args=(idx, x0, f, measured, scale), method="trf", max_nfev=2000)
            if best is None or res.cost < best.cost:
                best = res
        col = np.linalg.norm(best.jac, axis=0)
        dead = [n for n, c in zip(free, col) if c < 1e-6 * max(col.max(), 1e-30)]
        if not dead:
            break
        for n in dead:
            reasons[n] = "no influence on any row at the fit (never binding)"
        free = [n for n in free if n not in dead]
    x = x0.copy()
    x[idx] = best.x * scale[idx]
    unseen = [n for n in free if n.split("@")[0] == "host_overlap_alpha" and not _host_bound(f, x, n, own)]
    if unseen:
        # NOTE: where every chunk step is device-bound (E < D), t = overhead + D + α_h·E: only the
        # product is determined, and any α_h < 1 with a larger E fits as well. Held at 1, E is the
        # seconds the eager launches add (what such rows measure), and the fit is made again.
        x, free, std, again = fit_params(f, measured, {**priors, **{n: 1.0 for n in unseen}}, loss, f_scale,
                                         set(fixed or ()) | set(unseen), own)
        for n in unseen:
            again[n] = ("not separable: no step with a prompt chunk is host-bound at the fit (its eager host time "
                        "below its device time on every row), so only α_h × the eager overheads is determined: "
                        "held at 1 (they add)")
        return x, free, std, again
    jac = best.jac / scale[idx]  # d r / d x = (d r / d z) / scale
    dof = max(measured.size - len(free), 1)
    s2 = float(np.sum(best.fun ** 2) / dof)
    cov = np.linalg.pinv(jac.T @ jac) * s2
    std = {n: float(np.sqrt(max(cov[i, i], 0.0))) for i, n in enumerate(free)}
    return x, free, std, reasons


def _host_bound(f: RowFeatures, x: np.ndarray, name: str, own: list[str]) -> bool:
    """Whether any step with a prompt chunk priced by parameter `name` (shared, or '…@engine') has
    its eager host time above its device time at `x` (calibration.artifact `predict_from_features`)."""
    from calibration.artifact import calibrated_terms_s

    p = f.params(x)
    p = p if p.ndim == 2 else np.repeat(p[:, None], f.steps.prefill_step.size, axis=1)
    eager = p[8] * f.steps.prefill_step + p[9] * f.steps.mixed_step
    terms = calibrated_terms_s(f.steps, p)
    mx = terms.max(axis=0)
    device = mx + p[6] * (terms.sum(axis=0) - mx)
    codes = f.steps.engine_code
    blocks = [engine_code(e) for e in own]
    mine = codes == engine_code(name.split("@")[1]) if "@" in name else ~np.isin(codes, blocks)
    # NOTE: by a margin: with no host-bound row the optimizer can park E on the smallest D (the kink),
    # where the row says nothing about α_h either
    return bool(np.any(mine & (f.steps.prefill_step > 0) & (eager > HOST_BOUND_MARGIN * device)))


def engines_of(costs: ProfileCosts) -> tuple[str | None, list[str]]:
    """(the reference engine, the other engines of the rows): the reference, the engine with the most
    rows, prices with the shared parameters; each other engine gets its own (ENGINE_PARAM_NAMES).
    Rows measured outside any engine count as 'bare' (None when every row is)."""
    codes = costs.features.steps.engine_code
    if codes.size == 0:
        return None, []
    names = {engine_code(n): n for n in ENGINE_CODES}
    present = sorted({float(c) for c in codes}, key=lambda c: (-int(np.sum(codes == c)), c))
    ref = names.get(present[0], "bare")
    others = [names.get(c, "bare") for c in present[1:]]
    return (None if ref == "bare" else ref), others


def abs_pct_errors(pred: np.ndarray, measured: np.ndarray) -> np.ndarray:
    return np.abs(pred - measured) / measured * 100.0


def _no_rows(costs: ProfileCosts, what: str) -> SpecError:
    first = f" (first rejection: {costs.issues[0]})" if costs.issues else ""
    return SpecError(f"no usable rows in the profile: nothing to {what}{first}")


def fit_calibration(costs: ProfileCosts, sources: list[dict], microbench: dict | None = None,
                    microbench_source: DataSource | None = None, loss: str = DEFAULT_LOSS,
                    f_scale: float = DEFAULT_F_SCALE, priors: dict[str, float] | None = None,
                    prior_sources: dict[str, str] | None = None) -> Calibration:
    """Fit one hardware's calibration from priced profile rows."""
    if costs.size == 0:
        raise _no_rows(costs, "calibrate")
    kinds = sorted(set(costs.hardware.tolist()))
    if len(kinds) > 1:
        raise SpecError(f"the profile mixes hardware {', '.join(kinds)}: calibrate one hardware at a time")
    hw = kinds[0]
    base, base_src = priors_from(hw, microbench)
    if priors:
        base.update(priors)
        base_src.update(prior_sources or {k: "given" for k in priors})
    ref, own = engines_of(costs)
    x, free, std, reasons = fit_params(costs.features, costs.measured_s, base, loss, f_scale, own_engines=own)
    feats = costs.features.with_blocks(tuple(engine_code(e) for e in own))
    pred = feats.predict(x)
    err = abs_pct_errors(pred, costs.measured_s)
    below = int(np.sum(costs.measured_s < costs.floor_max_s))
    notes = []
    names = list(PARAM_NAMES) + block_names(own)
    lo, hi = _bounds(costs.measured_s, names)
    for i, n in enumerate(names):
        if n in free and n.split("@")[0] not in _OVERHEADS + ("host_overlap_alpha",) and (x[i] >= hi[i] * 0.995 or x[i] <= lo[i] * 1.005 + 1e-12):
            edge = "upper" if x[i] >= hi[i] * 0.995 else "lower"
            notes.append(f"{n} = {x[i]:.4g} sits at its {edge} bound: the data push past the physical range, so it "
                         "trades against the parameters it is confounded with (see param_std); read it as a bound, "
                         "not a measured rate")
    if below:
        notes.append(f"{below} rows measured below their datasheet floor_max: a spec or the cost model is wrong for them")
    blocks = {e: EngineParams(**{p: float(x[names.index(f"{p}@{e}")]) for p in ENGINE_PARAM_NAMES}) for e in own}
    return Calibration(
        created_utc=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        rates=costs.rates[hw],
        params=FittedParams.from_vector(x[: len(PARAM_NAMES)]),
        engine=ref, engines=blocks,
        fitted=tuple(free),
        fixed={n: f"{reasons[n]}; value from {base_src.get(n.split('@')[0], 'the shared prior')}" for n in names
               if n in reasons},
        param_std=std,
        priors={n: float(base[n]) for n in PARAM_NAMES},
        sources=tuple(DataSource(**s) for s in sources),
        microbench=microbench_source,
        fit=FitSummary(rows=int(costs.size), loss=loss, f_scale=f_scale,
                       median_abs_pct_error=float(np.median(err)), p90_abs_pct_error=float(np.percentile(err, 90)),
                       rows_below_floor=below),
        notes=tuple(notes),
    )
