"""Weights on one rank: what each layer group's parts hold and stream at their checkpoint dtypes
(planner.models.quant), and the projection and MLP FLOPs those weights run, by dtype. Split out
of planner.step (the step model imports these; `planner.step.weights_resident_bytes` stays its
name for callers).

Mixers: a head-sharding layout splits a variant's head-sharded parts over its placement's weight
split (T, or an owner group's R) and keeps the rest whole (engines replicate the fused q_a/kv_a projection and DSA's indexer), a replicating layout
keeps everything whole. MLPs: the variant's own per-rank split (planner.models.mlp).
"""

from __future__ import annotations

import numpy as np

from planner.deployment import Deployment
from planner.layouts.base import ShareInputs
from planner.models.mlp.base import component_part
from planner.units import WEIGHT_BYTES_PER_PARAM

HEAD_BYTES_PER_PARAM = 2.0  # LM head and embeddings stay bf16 in FP8 checkpoints (reference/models.md)


def mixer_params_on_rank(dep: Deployment, group) -> dict[str, float]:
    """One layer group's mixer parameters on one rank, by component (one layer): head-sharded parts
    over the placement's weight split (T under TP and DOP, R under attention TP inside a DP group)."""
    w = float(dep.placement.weight_split)
    return {k: p.params / (w if p.head_sharded else 1.0) for k, p in group.mixer.weight_parts().items()}


def _add(out: dict, key: str, v) -> None:
    out[key] = out.get(key, 0.0) + v


def weights_resident_bytes(dep: Deployment) -> dict[str, float]:
    """Weight bytes resident on one rank, by component; each layer group's parts at their own
    checkpoint dtype (planner.models.quant) unless the deployment gives one."""
    m, t = dep.model, dep.ranks
    out: dict[str, float] = {}
    for g in m.layers:
        if g.mixer is not None:
            wb = WEIGHT_BYTES_PER_PARAM[dep.part_dtype(g, "mixer")]
            for k, v in mixer_params_on_rank(dep, g).items():
                _add(out, f"{k}_weights", v * wb * g.count)
        if g.mlp is not None:
            for k, v in g.mlp.rank_resident_params(t, dep.moe).items():
                _add(out, f"{k}_weights", v * WEIGHT_BYTES_PER_PARAM[dep.part_dtype(g, component_part(k))] * g.count)
    emb = m.embedding_params / dep.placement.lm_head_split
    out["embedding_weights"] = emb * HEAD_BYTES_PER_PARAM
    return out


def weight_work(dep: Deployment, inp: ShareInputs, projected: np.ndarray, points: int, owned=None, mlp_reads=None):
    """Weight bytes read, projection / MLP FLOPs (by component) and those FLOPs by dtype, of one
    rank's step: every layer group at its parts' dtypes. NOTE: groups that share a variant and its
    dtypes are priced once (Qwen3.5's GDN and attention layers share one MoE): the sweep's speed.
    `owned` (hbm, flops, by_dtype key sets) collects the sums made here (`acc`); `mlp_reads` keeps
    each MLP variant's `rank_read_params`, for the engine's narrow expert GEMMs (`engine_layer`).
    Weights read whole every step are one value over the points (a read-only broadcast)."""
    m, t = dep.model, dep.ranks
    o_hbm, o_flops, o_dtype = owned or (None, None, None)
    mixer_params: dict[tuple[str, str], float] = {}  # (component, dtype) -> params on the rank, all layers
    mlp_groups: dict[tuple, float] = {}
    for g in m.layers:
        if g.mixer is not None:
            dt = dep.part_dtype(g, "mixer")
            for k, v in mixer_params_on_rank(dep, g).items():
                mixer_params[(k, dt)] = mixer_params.get((k, dt), 0.0) + v * g.count
        if g.mlp is not None:
            key = (g.mlp, tuple(dep.part_dtype(g, p) for p in ("routed_experts", "shared_experts", "dense_mlp")))
            mlp_groups[key] = mlp_groups.get(key, 0.0) + g.count
    hbm: dict[str, np.ndarray] = {}
    flops: dict[str, np.ndarray] = {}
    coef: dict[str, float] = {}
    by_coef: dict[str, float] = {}
    for (k, dt), v in mixer_params.items():
        hbm[f"{k}_weights"] = hbm.get(f"{k}_weights", 0.0) + v * WEIGHT_BYTES_PER_PARAM[dt]
        coef[k] = coef.get(k, 0.0) + 2.0 * v
        by_coef[dt] = by_coef.get(dt, 0.0) + 2.0 * v
    hbm = {k: np.broadcast_to(np.float64(v), (points,)) for k, v in hbm.items()}
    flops = {f"{k}_proj": projected * c for k, c in coef.items()}
    by_dtype: dict[str, np.ndarray] = {dt: projected * c for dt, c in by_coef.items()}
    if o_dtype is not None:
        o_dtype.update(by_dtype)
    reads = {} if mlp_reads is None else mlp_reads
    for (mlp, dts), n in mlp_groups.items():
        part = dict(zip(("routed_experts", "shared_experts", "dense_mlp"), dts))
        if mlp not in reads:
            reads[mlp] = mlp.rank_read_params(inp.step_tokens, t, dep.moe)
        for k, v in reads[mlp].items():
            acc(hbm, f"{k}_weights", v, n * WEIGHT_BYTES_PER_PARAM[part[component_part(k)]], o_hbm)
        for k, v in mlp.rank_flops(inp.step_tokens, t, dep.moe).items():
            f = v * n
            acc(flops, k, f, 1.0, o_flops)
            acc(by_dtype, part[component_part(k)], f, 1.0, o_dtype)
    return hbm, flops, by_dtype


def acc(out: dict, key: str, v, scale: float, owned: set | None = None) -> None:
    """out[key] += v · scale, without a multiply when scale is 1 and without an add for a new key.
    With `owned` (the keys whose arrays this sum made itself), a sum already made is added to in
    place (the same values: one array fewer); an array it was handed is never written to."""
    x = v if scale == 1.0 else v * scale
    if key not in out:
        out[key] = x
        if owned is not None and x is not v and writable(x):
            owned.add(key)
    elif owned is not None and key in owned and np.shape(out[key]) == np.broadcast_shapes(np.shape(out[key]), np.shape(x)):
        np.add(out[key], x, out=out[key])
    else:
        out[key] = out[key] + x
        if owned is not None and writable(out[key]):
            owned.add(key)


def _one_value(x) -> bool:
    """x is one value broadcast over the points (a weight read whole every step)."""
    return isinstance(x, np.ndarray) and x.ndim >= 1 and x.size > 0 and not any(x.strides)


def writable(x) -> bool:
    """x is a float64 array that can be added to in place (a sum's own array, not a broadcast)."""
    return isinstance(x, np.ndarray) and x.dtype == np.float64 and x.flags.writeable


def total(values, start=0):
    """sum(values, start) with the same rounding (each value added in order; start + x is x when
    start is 0), one new array and the rest added in place; `start` for no values."""
    it = iter(values)
    out = next(it, None)
    if out is None:
        return start
    fresh = False
    for v in it:
        if fresh and np.shape(out) == np.broadcast_shapes(np.shape(out), np.shape(v)):
            np.add(out, v, out=out)
        elif _one_value(out) and _one_value(v) and out.shape == v.shape:  # two broadcasts: add the values
            out = np.broadcast_to(out.flat[0] + v.flat[0], out.shape)
        else:
            out = out + v
            fresh = writable(out)
    if fresh or not isinstance(start, np.ndarray):
        return out
    return start + out  # NOTE: a lone value under an array start: its shape and a copy, as sum() gives
