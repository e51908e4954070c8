"""The crossovers SGLang's runtime TP/CP/DCP switching reads, from floorfirst's step model of the
launch line's deployment: the prefill tokens above which context parallelism (CP) beats TP, and the
decode context above which decode context parallelism (DCP) beats TP.

What SGLang switches on (sgl-project/sglang PR #36191, "[CP][AMD] Add runtime TP/CP switching for
MLA", open; its selector `select_attn_parallel_mode` in `python/sglang/srt/attn_parallel.py`),
per scheduler batch:
- prefill: CP when the batch's extend tokens (Σ extend_seq_lens) reach
  max(batch_floor, `min_prefill_tokens`), batch_floor = 2·cp for the zigzag strategy, cp for
  interleave; the server flag is `--dynamic-attn-parallel-min-prefill-tokens` (the PR's description
  and its benchmark README: "dynamic prefill remains TP unless
  `--dynamic-attn-parallel-min-prefill-tokens` is supplied … choose it from a measured crossover
  grid"); mixed prefill+decode batches stay TP by default (`allow_mixed`);
- decode: DCP when decode DCP is enabled (`dynamic_attn_parallel_enable_dcp`; the benchmark README
  spells the switch `--dynamic-include-dcp`) and the batch's longest context reaches
  `min_decode_context` (default 8192). NOTE: the PR's tests set that threshold as server_args field
  `dynamic_attn_parallel_dcp_min_context`; SGLang's ServerArgs fields are their flags with `_` as
  `-`, so the flag is printed as `--dynamic-attn-parallel-dcp-min-context` (the server_args diff
  itself was not in the stored PR text; check it against your SGLang build). Dynamic DCP keeps the
  KV replicated by default (`resolve_kv_residency`), so TP's KV wall still binds.

How floorfirst finds them: the step time of TP and of the other layout (same GPUs, MoE split, dtypes
and engine) along the axis — a prefill-only step of P tokens (after `prefix_tokens` cached), or a
decode step of `batch` requests all at context L — ranked by the datasheet floor_max (as `floorfirst
regimes` ranks by default), floor_sum, or a calibration's prediction; the crossover is the smallest
whole number of tokens from which the other layout is faster at every point up to the range's end
(`status` 'crossover'; 'always' when it is faster from the start, 'never' when not at the end). The
margin at a crossover: TP's advantage at half of it and the other layout's at twice it, and the
band around it where the two are within `flat_fraction` of each other (a flag anywhere in the band
costs at most that).

Does not: model the cost of a switch itself (SGLang switches per batch without moving KV), MTP or
speculative batches (the selector keeps them on TP), or a CP that replicates fewer attention weights
than floorfirst's CP layout (SPLASH's: every rank holds every attention weight).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

import planner
from calibration.artifact import Calibration
from integrations.launch import LaunchedDeployment
from planner.errors import SpecError
from planner.deployment import replace_deployment

PREFILL_FLAG = "--dynamic-attn-parallel-min-prefill-tokens"
DECODE_FLAG = "--dynamic-attn-parallel-dcp-min-context"
PR = "sgl-project/sglang PR #36191 (python/sglang/srt/attn_parallel.py select_attn_parallel_mode)"
RANKINGS = ("max", "sum", "calibrated")
GRID_POINTS = 400
FLAT_FRACTION = 0.02
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass(frozen=True)
class Curve:
    tokens: np.ndarray  # [G]
    tp_s: np.ndarray  # [G]
    other_s: np.ndarray  # [G]


@dataclass(frozen=True)
class Crossover:
    name: str  # 'prefill_cp' | 'decode_dcp'
    flag: str
    other: str  # the layout that wins above: 'cp' | 'dcp'
    status: str  # 'crossover' | 'always' | 'never'
    tokens: float | None
    margin_below_fraction: float | None  # (t_other − t_tp)/t_tp at tokens/2
    margin_above_fraction: float | None  # (t_tp − t_other)/t_other at 2·tokens
    band_tokens: tuple[float, float] | None
    curve: Curve
    batch: int | None = None
    prefix_tokens: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)


class StepTimer:
    """Step seconds of a deployment under one ranking: a datasheet floor or a calibration."""

    def __init__(self, ranking: str, calibration: Calibration | None = None):
        if ranking not in RANKINGS:
            raise SpecError(f"ranking={ranking!r}: choose one of {', '.join(RANKINGS)}")
        if (ranking == "calibrated") != (calibration is not None):
            raise SpecError("the calibrated ranking needs a calibration (and a calibration ranks by it)")
        self.ranking = ranking
        self.calibration = calibration

    def __call__(self, dep: planner.Deployment, batch, context, prefill=0.0, prefix=0.0) -> np.ndarray:
        cost = planner.step_cost(dep, planner.DecodeLoad.equal(batch, np.maximum(context, 1.0)), prefill_tokens=prefill,
                                 prefill_context=prefix)
        if self.ranking == "max":
            return np.asarray(cost.floor_max_s, dtype=np.float64)
        if self.ranking == "sum":
            return np.asarray(cost.floor_sum_s, dtype=np.float64)
        return np.asarray(self.calibration.predict_s(cost), dtype=np.float64)


def layout_group(dep: planner.Deployment, attn: str) -> planner.Deployment:
    """`dep`'s group (one replica) under layout `attn`; SpecError naming why the model can't run it."""
    g = dep if dep.replicas == 1 else replace_deployment(dep, gpus=dep.ranks, replicas=1)
    return replace_deployment(g, attn=attn)


def _first_stays(f, lo: float, hi: float) -> tuple[str, float | None, Curve]:
    """Where f(tokens) = (t_tp, t_other) flips for good: the smallest whole L in [lo, hi] from which
    the other layout is faster at every grid point, refined by bisection between grid points."""
    grid = np.unique(np.round(np.geomspace(lo, hi, GRID_POINTS)))
    tp, other = f(grid)
    faster = other < tp
    curve = Curve(grid, tp, other)
    if faster.all():
        return "always", float(grid[0]), curve
    if not faster[-1]:
        return "never", None, curve
    k = int(np.flatnonzero(~faster)[-1])  # the last grid point where TP is not slower
    a, b = float(grid[k]), float(grid[k + 1])  # not faster at a, faster at b
    while b - a > 1:
        mid = float(np.floor((a + b) / 2))
        t0, t1 = f(np.array([mid]))
        if t1[0] < t0[0]:
            b = mid
        else:
            a = mid
    return "crossover", b, curve


def _margins(f, tokens: float | None, lo: float, hi: float) -> tuple[float | None, float | None]:
    if tokens is None:
        return None, None
    below = max(lo, tokens / 2)
    above = min(hi, tokens * 2)
    (tb,), (ob,) = f(np.array([below]))
    (ta,), (oa,) = f(np.array([above]))
    return (float((ob - tb) / tb) if below < tokens else None), float((ta - oa) / oa)


def _band(curve: Curve, tokens: float | None, flat: float) -> tuple[float, float] | None:
    if tokens is None:
        return None
    gap = np.abs(curve.tp_s - curve.other_s) / np.minimum(curve.tp_s, curve.other_s)
    near = gap <= flat
    k = int(np.searchsorted(curve.tokens, tokens))
    k = min(k, curve.tokens.size - 1)
    if not near[k] and not (k > 0 and near[k - 1]):
        return (tokens, tokens)
    k = k if near[k] else k - 1
    i = j = k
    while i > 0 and near[i - 1]:
        i -= 1
    while j < near.size - 1 and near[j + 1]:
        j += 1
    return (float(min(curve.tokens[i], tokens)), float(max(curve.tokens[j], tokens)))


def prefill_crossover(dep: planner.Deployment, timer: StepTimer, prefix_tokens: float = 0.0, lo: float = 16.0,
                      hi: float = float(1 << 20), flat: float = FLAT_FRACTION, chunk_tokens: int | None = None) -> Crossover:
    """Prefill tokens (a prefill-only step, `prefix_tokens` cached) above which CP beats TP."""
    tp, cp = layout_group(dep, "tp"), layout_group(dep, "cp")

    def f(p):
        z = np.zeros_like(p)
        return timer(tp, z, 1.0, p, prefix_tokens), timer(cp, z, 1.0, p, prefix_tokens)

    status, tokens, curve = _first_stays(f, lo, hi)
    below, above = _margins(f, tokens, lo, hi)
    notes = [f"SGLang switches a prefill batch to CP at max(2·cp zigzag | cp interleave, {PREFILL_FLAG}) extend tokens, "
             "mixed prefill+decode batches stay TP"]
    if tokens is not None and chunk_tokens and tokens > chunk_tokens:
        notes.append(f"the crossover is above the launch line's prefill chunk ({chunk_tokens} tokens): no prefill batch is "
                     "that large, so CP would never be selected unless --chunked-prefill-size is raised")
    return Crossover("prefill_cp", PREFILL_FLAG, "cp", status, tokens, below, above, _band(curve, tokens, flat), curve,
                     None, float(prefix_tokens), tuple(notes))


def decode_crossover(dep: planner.Deployment, timer: StepTimer, batch: int, lo: float = 64.0, hi: float = float(1 << 20),
                     flat: float = FLAT_FRACTION) -> Crossover:
    """Decode context (every one of `batch` requests at it) above which DCP beats TP."""
    if batch < 1:
        raise SpecError(f"batch={batch} must be ≥ 1")
    tp, dcp = layout_group(dep, "tp"), layout_group(dep, "dcp")

    def f(c):
        b = np.full_like(c, float(batch))
        return timer(tp, b, c), timer(dcp, b, c)

    status, tokens, curve = _first_stays(f, lo, hi)
    below, above = _margins(f, tokens, lo, hi)
    notes = ["SGLang compares the batch's longest decode context with the threshold; dynamic DCP keeps the KV "
             "replicated, so TP's KV pool bounds the batch either way"]
    wall = tp_kv_wall_context(tp, batch, hi)
    if wall is not None:
        notes.append(f"a batch of {batch} fits TP's (replicated) KV pool up to {wall:.0f} tokens of context per request")
    return Crossover("decode_dcp", DECODE_FLAG, "dcp", status, tokens, below, above, _band(curve, tokens, flat), curve,
                     int(batch), 0.0, tuple(notes))


def tp_kv_wall_context(tp: planner.Deployment, batch: int, hi: float) -> float | None:
    """The longest context at which `batch` requests fit TP's KV pool (None: past `hi`)."""
    def fits(c):
        return bool(planner.step_cost(tp, planner.DecodeLoad.equal(float(batch), c)).kv_fits[0])

    if fits(hi):
        return None
    a, b = 1.0, hi
    if not fits(a):
        return 0.0
    while b - a > 1:
        mid = float(np.floor((a + b) / 2))
        a, b = (mid, b) if fits(mid) else (a, mid)
    return a


@dataclass(frozen=True)
class Thresholds:
    launched: LaunchedDeployment
    ranking: str
    prefill: Crossover
    decode: Crossover
    decode_by_batch: list[Crossover]

    def flags(self) -> list[str]:
        """The flags to add to the launch line (a crossover that never happens in range: none)."""
        out = []
        for c in (self.prefill, self.decode):
            if c.tokens is not None:
                out += [c.flag, str(int(c.tokens))]
        return out


def thresholds(launched: LaunchedDeployment, ranking: str = "max", calibration: Calibration | None = None,
               batch: int = 1, prefix_tokens: float = 0.0, batches: tuple[int, ...] = DECODE_BATCHES) -> Thresholds:
    """Both crossovers of `launched`'s deployment (module docstring)."""
    if launched.reading.engine != "sglang":
        raise SpecError("--engine-args: the runtime TP/CP/DCP switching flags are SGLang's (PR #36191); give an "
                        "SGLang launch line")
    if calibration is not None and calibration.rates.hardware != launched.deployment.hardware.name:
        raise SpecError(f"calibration is for {calibration.rates.hardware}, the deployment runs on "
                        f"{launched.deployment.hardware.name}")
    if not np.isfinite(prefix_tokens) or prefix_tokens < 0:
        raise SpecError(f"prefix_tokens={prefix_tokens} must be ≥ 0")
    timer = StepTimer(ranking, calibration)
    dep = launched.deployment
    pre = prefill_crossover(dep, timer, prefix_tokens, chunk_tokens=launched.chunk_tokens)
    dec = decode_crossover(dep, timer, batch)
    by_batch = [decode_crossover(dep, timer, b) for b in sorted(set(batches) | {batch})]
    return Thresholds(launched, ranking, pre, dec, by_batch)
