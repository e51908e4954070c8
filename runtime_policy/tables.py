"""Compiled step-time tables: one deployment group's step time under each attention layout as a
cheap function of (decode requests, prefill tokens, KV tokens on the busiest rank).

Built once by probing `planner.step_cost` (so the floors stay the single source of truth), then
queried by table lookup and a few multiply-adds — the policy's `decide` and the simulator price
a step without calling the planner. What is tabulated, per layout and per timed resource r:

  t_r(B, P, C, S1, S2) = base_r[B + P] + prefill_r[P] + prefix_r(P, C) + c1_r·S1 + c2_r·S2

- base_r[n]: a step of n decode tokens at 1-token context (weights, MoE expert coverage, projections,
  collectives, KV writes) — exact per integer n;
- prefill_r[P]: what a P-token prefill chunk costs beyond P decode tokens (its causal attention core);
- prefix_r(P, C): what attending to C tokens of the request's cached prefix adds to a P-token chunk
  (prefix KV read, the chunk × prefix attention): piecewise linear in C, exact at C = 0, C = knee
  (top-k for sparse attention, where the sparse core saturates; else 16K) and C = 64K, and linear
  beyond the knee (exact there: only the dense indexer and the prefix read still grow);
- S1 = Σ min(L, knee), S2 = Σ L over the requests whose KV the busiest rank reads (all requests for
  TP and CP, whose per-token coefficient already holds the 1/kv-split or 1/T share; the busiest
  owner's requests for DP-attention and DOP). The knee (the table's `topk` field) is where the
  model's per-request costs bend, as its variants declare it (`AttentionVariant.knees`: DSA's and
  DeepSeek-V4 CSA's top-k span, a sliding window, MiniMax-M3's block span, Llama-4's chunk);
  without one knee = ∞ and c2 = 0. A per-request state (a recurrent state read and rewritten once
  per step) costs the same at every context, so base_r[n] (n requests at the 1-token probe
  context) already holds it.

Between knees every cost declaration is linear in L, so with one knee the decomposition is exact up
to the 1-token probe context and the additivity of prefill and decode (NOTE: the MoE expert
coverage is evaluated at B + P jointly, which is what the planner does). NOTE: a model whose
variants declare several knees (DeepSeek-V4: its 128-token window and the CSA span 4·top-k) is
tabulated at the largest one (`cost_knee`), its probes at knee/2, knee and 2·knee: what the smaller
knees cap (DeepSeek-V4-Flash: the 43 windows' 3.2 MB per request, full by 128 tokens) is missed as
a per-request constant, −0.63 % to −0.66 % of a TP step on 8 × H200 at 16 requests of 0.5K-32K
(tests/runtime_policy/test_tables_knees.py).

Owner layouts (DP-attention, DOP) run a request's chunk on its owner, so, as in the planner, a
step with a chunk is the slower (larger max term) of two ranks: the decode-busiest owner without
the chunk (base[B + P] + c·S_busiest) and the owner running the most of the step's chunk tokens
(base[B + P] + prefill + prefix of *its* tokens + c·S_that owner); a step's chunk may hold several
short prompts owned by different ranks. (NOTE: base[B + P] spreads the chunk's P tokens over the
owners like decodes, so each candidate carries P/T tokens of projection work it doesn't do; the
planner's candidates don't.)

The step time from the per-resource times is `overhead_s + max + α·(sum − max)`, and a step that
carries a prompt chunk adds the fixed host cost of running without a full CUDA graph
(`prefill_overhead_s`, and `mixed_overhead_s` more when decode rows run beside the chunk:
calibration/artifact.py says which engines graph which steps), overlapping the step's device time
where the calibration's α_h < 1 (`host_overlap_alpha`: overhead + max(E, D) + α_h·min(E, D)): α and the overheads come from a calibration artifact when one is given, else from the shipped prior of the deployment's
(GPU, engine) (`default_step_model`, calibration/priors), else the datasheet floors with α = 0.5 (the
midpoint of the optimistic and pessimistic floors, `DATASHEET_MODEL`).

The KV facts the loop's ledger counts in (`kv_bytes_per_token`, `request_slack_tokens`, each
layout's `kv_pool_bytes`) are priced as the planner's capacity prices a request (kv_ledger.py).

Does not: decide anything, or know about requests (see policy.py, loop.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

import planner
from planner.deployment import Deployment, replace_deployment
from planner.errors import SpecError
from planner.layouts import attention_layouts
from planner.resources.vector import TIMED_RESOURCES
from runtime_policy import step_time
from runtime_policy.kv_ledger import ledger_budget_bytes, ledger_pool_bytes, ledger_rate, request_slack_tokens

NO_TOPK = step_time.NO_TOPK
DATASHEET_ALPHA = 0.5
DATASHEET_MODEL = "datasheet_floor_midpoint: max + 0.5*(sum - max) of the datasheet floors, no overhead"
NET_BYTES = step_time.NET_BYTES
PREFIX_KNEE_DENSE_TOKENS = 16384.0  # knee of the prefix probes without sparse attention (linear anyway)
PREFIX_FAR_TOKENS = 65536.0  # the far prefix probe: prompts up to 64K
SHARE_PROBE_PAGES = 64  # pages per rank of the one request the KV-share probe stores (page-aligned: exact)


def layout_names() -> tuple[str, ...]:
    """The attention layouts the runtime indexes, from the planner's registry: the planner's order
    (`planner.ATTN_LAYOUTS`) first, then any layout registered later (a new module, a test's toy).
    NOTE: the order fixes layout indices, and with them the policy's tie-breaking; read it when
    compiling (a table keeps its own `layouts`), not at import, so a later registration is seen."""
    reg = attention_layouts()
    known = [n for n in planner.ATTN_LAYOUTS if n in reg]
    return tuple(known + [n for n in reg if n not in known])


LAYOUTS: tuple[str, ...] = layout_names()  # the built-in layouts at import (CLI choices, scripts)


@dataclass(frozen=True)
class StepTimeModel:
    """How per-resource times combine into a step time, and where the times come from."""

    label: str
    alpha: float
    overhead_s: float
    calibration: object | None = None  # calibration.artifact.Calibration, imported lazily
    prefill_overhead_s: float = 0.0  # extra seconds of a step with a prompt chunk (no full CUDA graph)
    mixed_overhead_s: float = 0.0  # and more where that step has decode rows too
    host_overlap_alpha: float = 1.0  # α_h: how those seconds overlap the step's device time (1: they add)

    def terms_s(self, cost) -> np.ndarray:
        """[R, P] per-resource seconds of a planner.StepCost (R = len(TIMED_RESOURCES))."""
        if self.calibration is None:
            return cost.times.stacked()
        t = self.calibration.predict_terms_s(cost)
        return np.stack([np.asarray(t[r], dtype=np.float64) for r in TIMED_RESOURCES])


def datasheet_model() -> StepTimeModel:
    return StepTimeModel(DATASHEET_MODEL, DATASHEET_ALPHA, 0.0)


def default_step_model(dep: Deployment) -> StepTimeModel:
    """The step model a deployment is priced by unless a calibration is given (issue 26): the shipped
    prior of its (GPU, engine) (calibration/priors: per-kernel tables, no end-to-end row) when one
    exists and the deployment runs its engine's kernels; else the datasheet midpoint (DATASHEET_MODEL).
    Its label says which."""
    from calibration.priors import SOURCE_WHEEL, prior_path  # lazy: optional package

    path = prior_path(dep.hardware.name, dep.engine) if dep.engine_kernels else None
    if path is None:
        return datasheet_model()
    m = calibrated_model(str(path))
    p = m.calibration.params
    label = (f"prior: {dep.hardware.name} × {dep.engine} (calibration/priors/{path.name}, {SOURCE_WHEEL} per-kernel "
             f"tables; overhead {p.overhead_s:g} s + max + {p.overlap_alpha:g}*(sum - max))")
    return StepTimeModel(label, m.alpha, m.overhead_s, m.calibration, m.prefill_overhead_s, m.mixed_overhead_s,
                         m.host_overlap_alpha)


def calibrated_model(path: str) -> StepTimeModel:
    """The calibration artifact's model; SpecError (one line) if it can't be read."""
    from calibration.artifact import load_calibration  # lazy: optional package

    cal = load_calibration(path)
    p = cal.params
    eager = (f"; a step with a prompt chunk + {p.prefill_step_overhead_s:g} s, with decode rows too + "
             f"{p.mixed_step_overhead_s:g} s more" if p.prefill_step_overhead_s or p.mixed_step_overhead_s else "")
    if eager and p.host_overlap_alpha < 1.0:
        eager += f", overlapping the device's time: max + {p.host_overlap_alpha:g}*min"
    label = f"calibrated: {path} (overhead {p.overhead_s:g} s + max + {p.overlap_alpha:g}*(sum - max){eager})"
    return StepTimeModel(label, float(p.overlap_alpha), float(p.overhead_s), cal, float(p.prefill_step_overhead_s),
                         float(p.mixed_step_overhead_s), float(p.host_overlap_alpha))


@dataclass(frozen=True)
class LayoutInfo:
    """Per-layout numbers the policy and the transition model need, arrays [L] in the table's
    `layouts` order; the KV facts follow each layout's placement (planner/layouts/placement.py):
    requests are spread over `owner_groups` groups of `ranks / owner_groups` consecutive ranks, and
    a rank of a group stores `group_share` of its group's KV."""

    kv_pool_bytes: np.ndarray  # per GPU, the pool the KV ledger fills (kv_ledger.py; −1: the model can't run the layout)
    weights_bytes: np.ndarray  # resident per rank
    attn_weights_bytes: np.ndarray  # attention + LM head part of weights_bytes
    # fraction of its group's KV (one copy) one rank of the group stores, as the planner's share says:
    # TP 1, or 1/kv-split where KV splits by heads; CP 1/T; DP-attention and DOP 1 (a group of one)
    group_share: np.ndarray
    owner_groups: np.ndarray  # [L] int: G, the groups requests are spread over (1: every rank holds every request's share)
    placements: tuple  # each layout's planner Placement (None: the model can't run it)
    # [L] each layout's ledger slack per request beyond the tables' `request_slack_tokens` (which is
    # the deployment's own layout's): a token split's page per rank, a layout's own share of the
    # windows and states (kv_ledger.py `request_slack_tokens`); 0 for the deployment's layout
    extra_slack_tokens: np.ndarray
    # each layout's engine scheduler (planner.engines.scheduling; None: the model can't run it): the
    # serving loop's chunk per owner group, running cap, prefill mode, routing and preemption
    schedulers: tuple = ()
    # most requests the group may run (the engine's per-request state slots; inf: no cap)
    max_requests: np.ndarray = field(default_factory=lambda: np.zeros(0))
    # the host KV tier per layout, for twin tables (runtime_policy/host_tier_tables.py; empty: every
    # layout as the table's `host_kv_fraction` and `memory_budget_bytes` say): whether it runs with
    # the tier, the part of a token's KV bytes the tier keeps in host memory, the other twin's index,
    # and the move budget in the loop's KV-equivalent bytes
    host_tier: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    host_kv_fraction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    twin: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    memory_budget_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def has_twins(self) -> bool:
        """Whether the tables carry HBM-only layouts and their tiered twins (the policy may switch the tier)."""
        return bool(self.twin.size) and bool((self.twin >= 0).any())


@dataclass(frozen=True)
class StepTimeTable:
    """The compiled tables of one deployment group (T ranks). Arrays are read-only views."""

    layouts: tuple[str, ...]  # the layout of each index (layout_names() at compile)
    ranks: int
    num_layers: int
    max_tokens: int  # largest B + P the base table covers
    max_prefill_tokens: int
    topk: float
    kv_bytes_per_token: float  # the ledger's rate: all layers, one copy, past every window (kv_ledger.py)
    page_tokens: int
    request_slack_tokens: float  # the ledger's tokens per request beyond its context: page + fixed bytes (kv_ledger.py)
    memory_budget_bytes: float  # weights + KV the engine allows per GPU (planner.engines MemoryPlan.static_budget_bytes)
    base_s: np.ndarray  # [max_tokens+1, L layouts, R resources]
    # base_s[: max_tokens − max_prefill_tokens + 1] (every decode-only step: n ≤ the max batch) as
    # nested lists of Python floats, read-only: the pure-Python hot paths (the policy's decide, the
    # simulator's short runs) read a row without a numpy round trip (NOTE: built once here, not
    # once per policy or executor)
    base_rows_py: list = field(repr=False, compare=False)
    prefill_s: np.ndarray  # [max_prefill+1, L, R]
    prefix_lo_s: np.ndarray  # [max_prefill+1, L, R] seconds per cached-prefix token up to the knee
    prefix_hi_s: np.ndarray  # [max_prefill+1, L, R] seconds per cached-prefix token beyond the knee
    prefix_knee_tokens: float
    # [max_prefill+1, L, 3R]: prefill_s, prefix_lo_s and prefix_hi_s side by side (those three are
    # views of it), so a chunk size's row for a layout is one read
    chunk_rows_s: np.ndarray
    c1_s: np.ndarray  # [L, R] seconds per token of Σ min(L, top-k)
    c2_s: np.ndarray  # [L, R] seconds per token of Σ L
    alpha: float
    overhead_s: float
    model_label: str
    info: LayoutInfo
    hbm_bytes_per_s: float
    link_bytes_per_s: float
    message_latency_s: float
    host_kv_fraction: float = 0.0  # of a token's KV bytes, the part a host tier keeps in host memory (0: no tier)
    host_link_bytes_per_s: float = float("inf")  # the host link a tier's pages move over (runtime_policy/host_tier_tables.py)
    # a step with a prompt chunk runs without a full CUDA graph: its extra fixed seconds, and more
    # where decode rows run beside the chunk (StepTimeModel; 0 for the datasheet and the priors)
    prefill_overhead_s: float = 0.0
    mixed_overhead_s: float = 0.0
    # α_h: a chunk step's eager seconds E and its device seconds D take overhead + max(E, D) +
    # α_h·min(E, D) (calibration/artifact.py); 1: E adds, as the chunk overhead (`chunk_overhead_s`)
    host_overlap_alpha: float = 1.0

    @property
    def host_overlap(self) -> bool:
        """Whether a chunk step's eager seconds overlap its device time (α_h < 1 and E > 0): its
        seconds are then `chunk_step_s` of its device time, not the formula with `chunk_overhead_s`."""
        return self.host_overlap_alpha < 1.0 and (self.prefill_overhead_s > 0 or self.mixed_overhead_s > 0)

    def eager_s(self, decodes: bool) -> float:
        """E: the eager host seconds of a step with a chunk (`decodes`: with decode rows beside it)."""
        return self.prefill_overhead_s + (self.mixed_overhead_s if decodes else 0.0)

    def chunk_step_s(self, device_s: float, decodes: bool) -> float:
        """A chunk step's seconds from its device time (the formula with overhead 0) where
        `host_overlap`: step_time.host_overlap_s."""
        return step_time.host_overlap_s(device_s, self.eager_s(decodes), self.host_overlap_alpha, self.overhead_s)

    def chunk_overhead_s(self, decodes: bool) -> float:
        """The fixed seconds of a step with a chunk (`decodes`: with decode rows beside it, as the
        loop composed the step: a separate-prefill step has none). The same in every layout: the
        host's launches per layer set it, not the layout's collectives."""
        return self.overhead_s + self.prefill_overhead_s + (self.mixed_overhead_s if decodes else 0.0)

    def __getstate__(self) -> dict:
        """Pickled without the compiled kernels (functions of generated code don't pickle; a rank
        process compiles its own, `layout_kernels`)."""
        state = self.__dict__.copy()
        state.pop("layout_kernels", None)
        return state

    @cached_property
    def layout_kernels(self) -> step_time.LayoutKernels:
        """The policy's kernels compiled for these tables (step_time.layout_kernels), built on first
        use and kept with the table (NOTE: a cached property, not a field: `dataclasses.replace`
        makes a table with other rows, and that table compiles its own; ~20-50 ms, once per table,
        not once per policy)."""
        owner = [int(g) > 1 for g in self.info.owner_groups]
        chunk_over = [self.chunk_overhead_s(True)] * len(owner)
        host = ([self.eager_s(True)] * len(owner), self.host_overlap_alpha) if self.host_overlap else None
        return step_time.layout_kernels(self.base_s, self.chunk_rows_s, self.c1_s, self.c2_s, owner, self.alpha,
                                        self.overhead_s, chunk_over, host)

    def combine(self, terms: np.ndarray) -> np.ndarray:
        """Step seconds from per-resource seconds on the last axis (step_time.combine)."""
        return step_time.combine(terms, self.alpha, self.overhead_s)

    def chunk_terms(self, layout: int, prefill_tokens: np.ndarray, prefill_context: np.ndarray | None) -> np.ndarray:
        """[k, R] what each step's chunk adds (prefill_r[P] + prefix_r(P, C)); C None: 0."""
        p = np.minimum(prefill_tokens.astype(np.int64), self.max_prefill_tokens)
        return step_time.chunk_terms_np(self.prefill_s[p, layout], self.prefix_lo_s[p, layout],
                                        self.prefix_hi_s[p, layout], prefill_context, self.prefix_knee_tokens)

    def step_s(self, layout: int, batch: int, prefill_tokens: np.ndarray, s1: np.ndarray, s2: np.ndarray,
               with_terms: bool = False, prefill_context: np.ndarray | None = None, chunk_owner=None):
        """Step seconds [k] of k consecutive steps in one layout (runtime_policy/step_time.py's
        formula, vectorized over the steps).

        `batch` decode requests in every step; `prefill_tokens`, `s1`, `s2` are [k] (S on the rank
        the layout makes busiest, see the module docstring); `prefill_context` [k] the cached prefix
        the chunk attends to (None: 0). For layouts of several owner groups, `chunk_owner` = (tokens,
        context, s1, s2), arrays [k], describes the group running the most of each step's chunk
        tokens (its chunk tokens, their prefix, its decodes' S): a step with a chunk is then the
        slower of that group and the decode-busiest one (None: the whole chunk is priced on the
        decode-busiest group)."""
        p = np.minimum(prefill_tokens.astype(np.int64), self.max_prefill_tokens)
        n = np.minimum(batch + p, self.max_tokens)
        base = self.base_s[n, layout]
        c1, c2 = self.c1_s[layout], self.c2_s[layout]
        if chunk_owner is not None and self.info.owner_groups[layout] > 1:
            own_p, own_c, s1c, s2c = chunk_owner
            busy = step_time.decode_terms_np(base, None, c1, c2, s1, s2)
            own = step_time.decode_terms_np(base, self.chunk_terms(layout, own_p, own_c), c1, c2, s1c, s2c)
            terms = step_time.owner_choice_np(busy, own, p > 0)
        else:
            terms = step_time.decode_terms_np(base, self.chunk_terms(layout, prefill_tokens, prefill_context),
                                              c1, c2, s1, s2)
        over_chunk = self.chunk_overhead_s(batch > 0)
        if self.host_overlap:  # a chunk step's eager seconds overlap its device time (step_time.host_overlap_s)
            d = step_time.combine(terms, self.alpha, 0.0)
            t = np.where(p > 0, step_time.host_overlap_np(d, self.eager_s(batch > 0), self.host_overlap_alpha,
                                                         self.overhead_s), self.combine(terms))
        elif over_chunk != self.overhead_s:  # steps with a chunk pay the eager-step overheads (the same sum as step_time's kernels)
            t = step_time.combine(terms, self.alpha, np.where(p > 0, over_chunk, self.overhead_s))
        else:
            t = self.combine(terms)
        return (t, terms) if with_terms else t


def _group_deployment(dep: Deployment) -> Deployment:
    return dep if dep.replicas == 1 else replace_deployment(dep, gpus=dep.ranks, replicas=1)


def layout_deployments(dep: Deployment, names: tuple[str, ...] | None = None) -> list[Deployment | None]:
    """The group deployment under each layout (`names`, default `layout_names()`); None where the
    model can't run that layout."""
    g = _group_deployment(dep)
    out: list[Deployment | None] = []
    for name in names or layout_names():
        try:
            out.append(replace_deployment(g, attn=name))
        except SpecError:
            out.append(None)
    return out


def _terms(model: StepTimeModel, d: Deployment, load, prefill=0.0, pricing=None, prefill_context=0.0) -> np.ndarray:
    cost = planner.step_cost(d, load, prefill, pricing, prefill_context=prefill_context)
    terms = model.terms_s(cost)
    # NOTE: fixed per-layer latencies (DSA's top-k, set by the longest row, not by Σ L) can't be
    # written in these per-token terms: they are left out of the tables (and so of the policy and
    # the simulator) until the tables carry a longest-context term (issue 15).
    terms[TIMED_RESOURCES.index("compute")] -= cost.fixed_latency_s
    return terms.T  # [P, 4]


def compile_tables(dep: Deployment, model: StepTimeModel | None = None, max_batch: int = 4096,
                   max_prefill_tokens: int = 8192, tier_choice: bool = False) -> StepTimeTable:
    """Probe the planner once per layout and freeze the tables (a few ms per layout). With
    `tier_choice` (a deployment with a host tier), 2L layouts: the L HBM-only ones and their
    tiered "+host" twins, so the policy may switch the tier (runtime_policy/host_tier_tables.py).
    Without a `model`, the deployment's default (`default_step_model`: its (GPU, engine) prior, else
    the datasheet midpoint)."""
    model = model or default_step_model(dep)
    if tier_choice:
        from runtime_policy.host_tier_tables import twin_tables

        return twin_tables(dep, model, max_batch, max_prefill_tokens)
    if max_batch < 1 or max_prefill_tokens < 1:
        raise SpecError(f"max_batch={max_batch} and max_prefill_tokens={max_prefill_tokens} must be ≥ 1")
    names = layout_names()
    deps = layout_deployments(dep, names)
    if deps[names.index(dep.attn)] is None:
        raise SpecError(f"{dep.model.name} cannot run attn={dep.attn} on {dep.ranks} ranks")
    topk = cost_knee(dep.model)
    # NOTE: every owner group's scheduler takes its own chunk in the same step (planner.engines.
    # scheduling): the base rows cover the decodes and all groups' chunks, each at most the table's
    n_max = max_batch + max_prefill_tokens * max_step_chunks(deps)
    nl, nr = len(names), len(TIMED_RESOURCES)
    base = np.full((n_max + 1, nl, nr), np.inf)
    pre = np.zeros((max_prefill_tokens + 1, nl, nr))
    pfx_lo = np.zeros((max_prefill_tokens + 1, nl, nr))
    pfx_hi = np.zeros((max_prefill_tokens + 1, nl, nr))
    knee = topk if topk < NO_TOPK else PREFIX_KNEE_DENSE_TOKENS
    c1 = np.zeros((nl, nr))
    c2 = np.zeros((nl, nr))
    pools, weights, attn_w, share = (np.zeros(nl) for _ in range(4))
    groups = np.ones(nl, dtype=np.int64)
    slacks = np.zeros(nl)
    rate = ledger_rate(dep.model, dep.kv_dtype)
    caps = np.full(nl, np.inf)
    placements = tuple(None if d is None else d.placement for d in deps)
    for i, d in enumerate(deps):
        if d is None:
            pools[i] = -1.0  # never fits: the policy refuses layouts the model can't run
            continue
        n = np.arange(n_max + 1, dtype=np.float64)
        base[:, i] = _terms(model, d, planner.DecodeLoad.equal(n, 1.0))
        p = np.arange(max_prefill_tokens + 1, dtype=np.float64)
        no_decode = planner.DecodeLoad.equal(np.zeros_like(p), 1.0)
        t0 = _terms(model, d, no_decode, p)
        pre[:, i] = t0 - base[: p.size, i]
        pre[0, i] = 0.0
        t_knee = _terms(model, d, no_decode, p, prefill_context=knee)
        t_far = _terms(model, d, no_decode, p, prefill_context=PREFIX_FAR_TOKENS)
        pfx_lo[:, i] = (t_knee - t0) / knee
        pfx_hi[:, i] = (t_far - t_knee) / (PREFIX_FAR_TOKENS - knee)
        pfx_lo[0, i] = pfx_hi[0, i] = 0.0
        if topk < NO_TOPK:
            lens = np.array([topk / 2, topk, 2 * topk])
            t = _terms(model, d, planner.DecodeLoad.equal(1.0, lens))
            low = (t[1] - t[0]) / (lens[1] - lens[0])
            c2[i] = (t[2] - t[1]) / (lens[2] - lens[1])
            c1[i] = low - c2[i]
        else:
            lens = np.array([1024.0, 2048.0])
            t = _terms(model, d, planner.DecodeLoad.equal(1.0, lens))
            c1[i] = (t[1] - t[0]) / (lens[1] - lens[0])
        w = planner.step.weights_resident_bytes(d)
        pools[i] = ledger_pool_bytes(d)
        weights[i] = sum(w.values())
        attn_w[i] = sum(v for k, v in w.items() if k.startswith(("attention", "indexer", "embedding")))
        share[i] = group_share(d)
        groups[i] = d.placement.owner_groups
        slacks[i] = request_slack_tokens(d, rate, float(share[i]))
        caps[i] = request_caps(d)
    np.maximum(c1, 0.0, out=c1)  # numerical noise of the finite differences
    np.maximum(pfx_lo, 0.0, out=pfx_lo)
    np.maximum(pfx_hi, 0.0, out=pfx_hi)
    np.maximum(c2, 0.0, out=c2)
    hw = dep.hardware
    pricing = planner.Pricing.datasheet(hw)
    # NOTE: the ledger's rate, and its slack per request: the deployment's own layout's in every
    # request's entry (tables.request_slack_tokens), each other layout's difference charged per
    # request where that layout is read (runtime_policy/kv_ledger.py KvLedger)
    k_dep = names.index(dep.attn)
    slack = float(slacks[k_dep])
    extra = np.where(pools >= 0, slacks - slack, 0.0)
    scheds = tuple(None if d is None else d.engine_model.scheduler(d) for d in deps)
    info = LayoutInfo(pools, weights, attn_w, share, groups, placements, extra, schedulers=scheds, max_requests=caps)
    chunk_rows = np.concatenate([pre, pfx_lo, pfx_hi], axis=2)
    pre, pfx_lo, pfx_hi = chunk_rows[..., 0:nr], chunk_rows[..., nr:2 * nr], chunk_rows[..., 2 * nr:3 * nr]
    for a in (base, chunk_rows, pre, pfx_lo, pfx_hi, c1, c2, pools, weights, attn_w, share, groups, extra, caps):
        a.setflags(write=False)
    table = StepTimeTable(
        layouts=names, ranks=dep.ranks, num_layers=dep.model.num_layers, max_tokens=n_max, max_prefill_tokens=max_prefill_tokens, topk=topk,
        kv_bytes_per_token=rate, page_tokens=dep.page_tokens, request_slack_tokens=slack,
        memory_budget_bytes=ledger_budget_bytes(dep),
        base_s=base, base_rows_py=base[: max_batch + 1].tolist(), prefill_s=pre, prefix_lo_s=pfx_lo, prefix_hi_s=pfx_hi, prefix_knee_tokens=float(knee), chunk_rows_s=chunk_rows, c1_s=c1, c2_s=c2, alpha=model.alpha, overhead_s=model.overhead_s,
        model_label=model.label, info=info, hbm_bytes_per_s=pricing.hbm_bytes_per_s,
        link_bytes_per_s=pricing.link_bytes_per_s, message_latency_s=pricing.message_latency_s,
        prefill_overhead_s=model.prefill_overhead_s, mixed_overhead_s=model.mixed_overhead_s,
        host_overlap_alpha=model.host_overlap_alpha)
    if dep.host_tier is None:
        return table
    from runtime_policy.host_tier_tables import with_host_tier  # NOTE: issue 17's hook (a host KV tier)

    return with_host_tier(table, dep, model, deps)


def max_step_chunks(deps) -> int:
    """The most owner groups that each run a full chunk in one step, over the layouts `deps` (None:
    can't run): G where every group takes the engine's whole chunk (vLLM's engine cores, TRT-LLM's
    ranks), 1 where the engine splits one chunk over its groups (SGLang's chunked_prefill_size //
    dp_size)."""
    most = 1
    for d in deps:
        if d is None:
            continue
        sch = d.engine_model.scheduler(d)
        if not sch.chunk_split_over_groups:
            most = max(most, sch.owner_groups)
    return most


def cost_knee(model) -> float:
    """The context where the model's per-request decode costs bend (module docstring): the largest
    knee its mixers declare, NO_TOPK when none does."""
    knees = [k for v, _ in model.mixers for k in v.knees() if k > 0]
    return float(max(knees)) if knees else NO_TOPK


def request_caps(d: Deployment) -> float:
    """Most requests the group may run under `d`'s layout as the engine's memory plan allows
    (SGLang with recurrent layers: max_mamba_cache_size // 3 per GPU; each owner group's GPUs hold
    their own requests' states, so G groups hold G times it), inf without a cap."""
    return float(d.memory.max_running_requests * d.placement.owner_groups)


def group_share(d: Deployment) -> float:
    """The fraction of one group's KV a rank of the group stores under `d`'s layout, as the
    planner's share says: one request per owner group of `SHARE_PROBE_PAGES` pages per rank
    (page-aligned, so page rounding is exact), the busiest rank's resident KV over one request's
    whole KV (TP with MLA: 1; with ≥ T KV heads: 1/T; token-split layouts: 1/T; a group of one, or
    MLA's latent replicated over a DP group's ranks: 1). NOTE: read from the layout's own cost
    declaration, not from its name, so a new layout's share needs no runtime edit."""
    tokens = float(SHARE_PROBE_PAGES * d.ranks * d.page_tokens)
    g = float(d.placement.owner_groups)
    kv, _, window = planner.step.decode_resident_bytes(d, planner.DecodeLoad.equal(g, tokens))
    mem = d.model.memory_bytes(np.array([tokens]), d.kv_dtype)
    if window is not None:
        # NOTE: SGLang's hybrid SWA pools: the ledger fills the full-attention layers' pool
        # (kv_ledger.ledger_pool_bytes), so the share is of their tokens alone (a token split keeps
        # 1/T of a full layer's tokens but up to a whole window of a sliding one)
        return float(kv[0] - window[0]) / float(mem["token"][0]) if mem["token"][0] > 0 else 0.0
    whole = float(mem["token"][0] + mem["window"][0])  # per-token pages, all layers (states are per request)
    return float(kv[0]) / whole if whole > 0 else 0.0

