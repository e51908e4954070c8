"""The layout policy: compiled once, asked "stay or switch?" every step.

`LayoutPolicy.compile(dep, ...)` validates its knobs, builds the step-time tables and checks they
are finite (slow, once). `decide(state)` reads the batch state — per-request context lengths,
per-rank KV tokens, free KV per rank, the waiting queue, the current layout, a switch in flight —
and answers with a small frozen `Decision` carrying an enum `Reason`. It is a function of the state
alone (nothing the policy remembers between calls changes an answer but the completed output
lengths it was fed, `observe_completion`), logs nothing, and reuses preallocated buffers; stay
decisions are built at compile time, so the common answer allocates nothing.

It never raises into the server. At its boundary it checks, cheaply, what it reads: a valid layout
index (not a bool, not −1), finite numbers in range, per-rank lists of T entries, a batch no larger
than the tables' (so the work is bounded by the state's size); a state that fails is a counted
CANT_DECIDE stay (`refused_states`, with `last_refusal` naming the field), and so is an exception
inside the rules, should one get past the checks (`internal_errors`; a test holds it at 0).

Rules, in order:
1. capacity — the waiting queue's head can't be admitted (KV), the running set no longer fits, or
   its expected KV peak (`PolicyState.kv_growth_tokens`: the running requests' expected growth,
   from the observed output lengths, runtime_policy/projection.py) outgrows the current layout:
   every layout priced by the decode rate it sustains at the batch its KV would hold
   (runtime_policy/capacity_rule.py);
2. throughput — the fastest layout whose KV fits with headroom, which admits at least what the
   current one admits and holds the running set's expected peak if the current one does; switch
   only if (a) it is faster by `min_gain_fraction`, (b) the last switch is `cooldown_steps` old and
   (c) 60 / `max_switches_per_minute` seconds old, (d) the move's memory fits, and (e) it repays its
   priced cost — its link time, then `(1 + margin) × (interference + commit stall)` over the step
   time it saves — within `payback_horizon_s` and the expected dwell (`Decision.payback_s`). Rule 2
   compares layouts on the prefill statistics over the policy's horizon
   (`PolicyState.horizon_prefill_*`, half-life `stats_half_life_steps`), rule 1 on the recent ones.
   With `knobs.horizon_load` (the default) rule 2 prices the load, not the batch of the moment: the
   batch averaged over the horizon, and (a) the gain must hold at both ends of the horizon's range
   (average ± the batch's and the prefill share's spread: a layout that wins at one end only is a
   tie) and (b) on the batch and prefill projected over the payback window (the running requests'
   survival, the queue, the arrivals); the least of those gains is the one checked and repaid
   (runtime_policy/projection.py `HorizonLoad`, where the loads are kept and why).
Every answer carries its `Reason`, and the layout it weighed (`Decision.candidate`); docs/runtime-policy.md.
With twin tables (`compile(..., tier_choice=True)`, runtime_policy/host_tier_tables.py) a layout's
"+host" twin is one more layout to both rules: its larger pool is what rule 1 prices when the
HBM-only wall binds (the tier goes on), its slower step (the misses) what rule 2 leaves when the
HBM-only layout holds the set with headroom again (the tier goes off), with the same hysteresis.
Step times per layout: the current decode batch blended with the observed prefill
(runtime_policy/pricing.py). The expected dwell is prediction-free: `dwell_fraction` × a running
mean of completed requests' output lengths (the batch turns over on that scale), clamped to
[min, max] steps.

Does not: order requests, move state or run steps (ordering.py, the executor, loop.py).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from planner.deployment import Deployment
from runtime_policy.capacity_rule import PRICED_NO_MOVE, REPRICE_EVERY_STEPS, CapacityRule
from runtime_policy.compile_checks import check_knobs, check_tables
from runtime_policy.decision import Decision, PolicyKnobs, PolicyState, Reason
from runtime_policy.host_tier_tables import twin_layout_names
from runtime_policy.pricing import StepPricer
from runtime_policy.tables import StepTimeModel, StepTimeTable, compile_tables, layout_names
from runtime_policy.transitions import max_fitting_kv_bytes, memory_fits, plan_transition

__all__ = ["REPRICE_EVERY_STEPS", "Decision", "FixedPolicy", "LayoutPolicy", "PolicyKnobs", "PolicyState", "Reason",
           "planned_knobs"]

# With a stated load, a falling load frees the throughput rule from the layouts that carry it only
# once the window expects less than this share of the horizon's prefill (the arrivals have fallen
# off: a drain). NOTE: on the window's batch alone GLM-5's longprompt (8 x B200, the prior, 1/s)
# looked like a drain at 285 s, mid-load, and moved CP -> TP, which can't hold the load's prompts;
# the capacity rule moved back 72 s later
DRAIN_PREFILL_SCALE = 0.5
_INF = math.inf  # NOTE: `-_INF < x < _INF` is the finiteness check here (NaN fails both comparisons)


def _as_list(x) -> list:
    """A [T] or [W] state field as a list of floats (the loop hands lists; other callers arrays)."""
    return x if type(x) is list else x.tolist()


@dataclass
class LayoutPolicy:
    tables: StepTimeTable
    knobs: PolicyKnobs = field(default_factory=PolicyKnobs)
    reads_kv_growth = True  # the loop fills PolicyState.kv_growth_tokens for it (projection.py)
    reads_horizon_load = True  # and PolicyState.horizon_context_* (projection.HorizonLoad), if knobs.horizon_load

    # ---- compile (slow, validated) ------------------------------------------------------------
    @classmethod
    def compile(cls, dep: Deployment, model: StepTimeModel | None = None, knobs: PolicyKnobs | None = None,
                max_prefill_tokens: int = 8192, tier_choice: bool = False) -> "LayoutPolicy":
        """`tier_choice`: the policy may also switch `dep`'s host tier on and off (each layout and
        its "+host" twin, runtime_policy/host_tier_tables.py); `knobs.allowed` may name twins."""
        knobs = knobs or PolicyKnobs()
        check_knobs(knobs, twin_layout_names(layout_names()) if tier_choice else layout_names())
        tables = compile_tables(dep, model, max_batch=knobs.max_batch, max_prefill_tokens=max_prefill_tokens,
                                tier_choice=tier_choice)
        check_tables(tables)
        return cls(tables, knobs)

    def __post_init__(self) -> None:
        t, k = self.tables, self.knobs
        n = len(t.layouts)
        allowed = t.layouts if k.allowed is None else k.allowed
        self._n, self._layouts = n, range(n)
        self._ok = [t.layouts[i] in allowed and t.info.kv_pool_bytes[i] > 0 for i in range(n)]
        self._pool = [float(x) for x in t.info.kv_pool_bytes]
        self._share = [float(x) for x in t.info.group_share]
        self._groups = [int(x) for x in t.info.owner_groups]
        self._owner = [g > 1 for g in self._groups]  # requests spread over several owner groups
        self._inv_groups = [1.0 / g for g in self._groups]
        # the throughput rule's pricings of the loads of one PolicyState.load_version (decide)
        self._memo: dict = {}
        self._memo_version = -1
        # the distinct group counts of several groups, and each layout's position among them (−1: one group)
        self._gcounts = tuple(sorted({g for g in self._groups if g > 1}))
        self._gpos = [self._gcounts.index(g) if g > 1 else -1 for g in self._groups]
        self._bpt = t.kv_bytes_per_token
        self._topk = t.topk
        self._slack = float(t.request_slack_tokens)
        self._ranks = t.ranks
        self._max_batch = k.max_batch
        self._headroom_keep = 1.0 - k.kv_headroom_fraction
        self._others = [tuple(i for i in range(n) if i != c) for c in range(n)]
        # stay decisions, built once: as they are, and after a capacity pricing that found no move
        # (the caller keeps that memo, see capacity_rule.py)
        self._stay = [[Decision(i, False, r) for r in Reason] for i in range(n)]
        self._stay_priced = [[Decision(i, False, r, capacity_stands_steps=REPRICE_EVERY_STEPS) for r in Reason]
                             for i in range(n)]
        # the same, naming the candidate layout the rule weighed (Decision.candidate)
        self._stay_for = [[[Decision(i, False, r, candidate=c) for r in Reason] for c in range(n)] for i in range(n)]
        self._stay_priced_for = [[[Decision(i, False, r, capacity_stands_steps=REPRICE_EVERY_STEPS, candidate=c)
                                   for r in Reason] for c in range(n)] for i in range(n)]
        # the switch-rate bound as the least seconds between two switches the policy chooses
        self._min_gap_s = 60.0 / k.max_switches_per_minute if k.max_switches_per_minute > 0 else _INF
        self._cant = self._stay[0][Reason.CANT_DECIDE]
        self._zeros = [0.0] * n  # an empty batch's group loads
        self._extra = [float(x) for x in t.info.extra_slack_tokens]
        self._extra_layouts = tuple(i for i in range(n) if self._extra[i])
        self._has_extra = bool(self._extra_layouts)
        self._state_reqs, self._state_running = None, 0  # the state `_group_loads` reads them from
        self._init_group_loads()
        self._no_growth = [0.0] * n
        self._buf = np.empty(k.max_batch + 1)  # Σ min(L, top-k) of a context array, without allocating
        self._ones = np.ones(k.max_batch + 1)
        self.pricer = StepPricer(t, k.max_batch)
        self._init_dominance()
        self._capacity = CapacityRule(self)
        # prediction-free dwell: running mean of completed output lengths
        self._dwell_steps = k.initial_dwell_steps
        self._dwell_fraction, self._dwell_bounds = k.dwell_fraction, (k.min_dwell_steps, k.max_dwell_steps)
        self._mean_output = 0.0
        self._completed = 0
        # CANT_DECIDE, counted: states refused at the boundary (the field last refused), and
        # exceptions inside the rules (none expected: the boundary checks come first)
        self.refused_states = 0
        self.internal_errors = 0
        self.last_refusal = ""
        self.ignored_observations = 0
        # seconds per prompt token of a full chunk in each layout (owner layouts: on one owner), the
        # price of prefilling again the KV a move sheds
        one = np.array([float(t.max_prefill_tokens)])
        # (inf for a layout the model can't run: its base rows are inf, and inf − inf is no price)
        self._prefill_s_per_token = [float(t.step_s(i, 0, one, np.zeros(1), np.zeros(1))[0]) / t.max_prefill_tokens
                                     if np.isfinite(t.base_s[0, i]).all() else float("inf") for i in range(n)]
        self._max_fit_bytes = [[max_fitting_kv_bytes(t, a, c) if a != c else -1.0 for c in range(n)] for a in range(n)]
        self._init_plan()

    def _init_plan(self) -> None:
        """The layouts that carry the stated load (`PolicyKnobs.planned_*`; compiled once): those
        `planned_prices` says keep up with it, else (none does: an overload) those that serve within
        `min_gain_fraction` of the most requests a second. The throughput rule moves only among them
        while the load is not falling (`_plan_rows`: `_cand_rows` so filtered; None: no load stated).
        NOTE: priced on the batch of the moment at the start of a 20/s chat load (a few requests
        decoding) TP is the faster step, and the policy left DOP for TP at 0.5 s, whose pool the load
        fills at ~41 s: the capacity rule moved back behind a backlog (DS-V3.2, 8 x H200: 0.976x
        fixed DOP); the start alone did not hold it."""
        self.planned_layouts: tuple[int, ...] = ()
        self._plan_rows = None
        # the candidates' rows decide reads per pricing mode (0: the moment, 1: the horizon, 2: the
        # window alone, a drain): one lookup on the hot path
        self._rows_by_mode = (self._cand_rows,) * 3
        self._fns_by_mode = (self._cands_fn,) * 3  # the same rows compiled (`_compile_candidates`)
        # with a stated load the start is a switch whose cooldown is the horizon's half-life: until
        # the horizon measures the load, the stated one (the start's) is the better estimate
        # NOTE: started in CP for GLM-5's longprompt (8 x B200, the prior) the policy moved CP -> DOP
        # at 0.35 s (one request decoding) and DOP -> TP at 11.8 s, each on a horizon of a few
        # requests; the capacity rule is not held
        self._plan_hold_steps = -1
        if not self.knobs.planned_rate_per_s > 0:
            return
        prices = self.planned_prices()
        if not prices:
            return
        keep = [i for i, p in prices.items() if p["keeps_up"]]
        if not keep:
            top = max(p["served_per_s"] for p in prices.values())
            keep = [i for i, p in prices.items() if p["served_per_s"] >= (1.0 - self.knobs.min_gain_fraction) * top]
        self.planned_layouts = tuple(sorted(keep))
        self._plan_rows = [tuple(r for r in rows if r[0] in keep) for rows in self._cand_rows]
        self._rows_by_mode = (self._plan_rows, self._plan_rows, self._cand_rows)
        plan_fns = [self._compile_candidates(rows) for rows in self._plan_rows]
        self._fns_by_mode = (plan_fns, plan_fns, self._cands_fn)
        self._plan_hold_steps = int(self.knobs.stats_half_life_steps)

    def _init_dominance(self) -> None:
        """Which layouts the throughput rule need not price (compiled once): a "+host" twin whose
        step can never be faster than its HBM-only layout's — the same base, chunk and c2 rows, c1
        no smaller in any resource (the misses' host-link term), the same owner groups and slack —
        so while that layout is usable and its KV checks pass (or it is not faster than the best so
        far) the twin can't win; the twin is priced only when it might (`_lean`, `_lower`).
        NOTE: a step is max + α·(Σ − max) of its terms, non-decreasing in every term for α ∈ [0, 1];
        this halves the layouts priced on a twin policy's common path (decide p99 ~33 → ≤ 20 µs)."""
        t, n = self.tables, self._n
        info = t.info
        self._dominated_by = [-1] * n
        twin = getattr(info, "twin", None)
        tier = getattr(info, "host_tier", None)
        if twin is not None and len(twin) == n and tier is not None and len(tier) == n and 0 <= float(t.alpha) <= 1:
            for j in range(n):
                i = int(twin[j])
                if not tier[j] or tier[i] or not self._ok[i]:
                    continue
                same = (np.array_equal(t.base_s[:, i], t.base_s[:, j]) and np.array_equal(t.chunk_rows_s[:, i], t.chunk_rows_s[:, j])
                        and np.array_equal(t.c2_s[i], t.c2_s[j]) and bool(np.all(t.c1_s[j] >= t.c1_s[i]))
                        and self._groups[i] == self._groups[j] and self._share[i] == self._share[j]
                        and self._extra[i] == self._extra[j])
                if same and i < j:  # (the throughput rule checks the HBM-only layout first)
                    self._dominated_by[j] = i
        dom = self._dominated_by
        # per current layout: the mask of the layouts priced first (None: all), the twins that
        # take their HBM-only layout's step as a lower bound, and a flag per layout for the latter
        self._lean, self._lower = [], []
        for c in range(n):
            lean = [i for i in range(n) if dom[i] < 0 or i == c]
            pairs = tuple((j, dom[j]) for j in range(n) if dom[j] >= 0 and j != c)
            self._lean.append(sum(1 << i for i in lean) if pairs else None)
            self._lower.append(pairs)
        # the throughput rule's candidates per current layout: the usable layouts but the current one,
        # in index order (a twin after its HBM-only layout; none whose HBM-only layout is the current
        # one), each as (index, its bit, its HBM-only layout's bit or 0, KV share, pool bytes, the
        # pool a target may fill: pool × (1 − headroom)); and the layouts to price for each set of
        # candidates (`_subset`)
        self._cand_rows = [tuple((i, 1 << i, 1 << dom[i] if dom[i] >= 0 else 0, self._share[i], self._pool[i],
                                  self._pool[i] * self._headroom_keep)
                                 for i in range(n) if i != c and self._ok[i] and dom[i] != c) for c in range(n)]
        self._subsets: dict[int, tuple] = {}
        self._cands_fn = [self._compile_candidates(rows) for rows in self._cand_rows]

    def _compile_candidates(self, rows: tuple):
        """The throughput rule's candidate filter over `rows` (one current layout's `_cand_rows`) as one
        generated function of (busy, lite, head_admits_cur, head, grows, growth, outgrown) -> the mask
        of candidates that pass: each row's checks in `_decide`'s order with its share, pools, bits and
        the KV rate written in as constants (NOTE: the same operations in the same order, x * share * rate
        left to right; the per-row tuple unpacking was a third of the loop, ~11 rows a twin policy's
        decide)."""
        consts: dict[str, float] = {}

        def lit(x: float) -> str:
            if type(x) in (int, float) and math.isfinite(x):
                return repr(x)
            name = f"_c{len(consts)}"
            consts[name] = x
            return name

        bpt = lit(self._bpt)
        body = ["mask = 0"]
        for i, bit, dom_bit, sh, room, fill in rows:
            sh_, room_ = lit(sh), lit(room)
            body += [f"if not busy[{i}] * {sh_} * {bpt} > {lit(fill)}:",
                     f"    if not (head_admits_cur and (lite[{i}] + head) * {sh_} * {bpt} > {room_}):",
                     f"        if not (grows and (busy[{i}] + growth[{i}]) * {sh_} * {bpt} > {room_} and not outgrown):"]
            if dom_bit:  # a twin its HBM-only layout (a candidate that passed) can't lose to
                body += [f"            if not mask & {dom_bit}:", f"                mask |= {bit}"]
            else:
                body.append(f"            mask |= {bit}")
        body.append("return mask")
        src = ("def candidates(busy, lite, head_admits_cur, head, grows, growth, outgrown):\n"
               + "".join(f"    {line}\n" for line in body))
        namespace: dict = dict(consts)
        exec(compile(src, "<policy candidates>", "exec"), namespace)  # noqa: S102
        return namespace["candidates"]

    @property
    def cant_decide(self) -> int:
        """CANT_DECIDE answers so far (refused states + internal errors)."""
        return self.refused_states + self.internal_errors

    # ---- running statistics (prediction-free dwell) ------------------------------------------
    def observe_completion(self, output_tokens: float) -> None:
        """Feed one finished request's output length (updates the expected dwell). A length that is
        not a finite number ≥ 0 is ignored (counted in `ignored_observations`), never stored: one NaN
        would make every later dwell, gain and decision NaN."""
        if type(output_tokens) is float:
            x = output_tokens
        else:
            x = float(output_tokens) if isinstance(output_tokens, (int, float, np.number)) else math.nan
        if not 0.0 <= x < _INF:
            self.ignored_observations += 1
            return
        self._completed += 1
        mean = self._mean_output = self._mean_output + (x - self._mean_output) / self._completed
        # = min(max(dwell_fraction × mean, min_dwell_steps), max_dwell_steps), compared
        lo, hi = self._dwell_bounds
        d = self._dwell_fraction * mean
        if lo > d:
            d = lo
        self._dwell_steps = hi if hi < d else d

    # ---- the hot path -------------------------------------------------------------------------
    def step_times_s(self, state: PolicyState) -> list[float]:
        """Predicted step seconds of the state's batch in each layout, [L] in `tables.layouts` order
        (a copy; the state is not checked)."""
        b = state.context_requests if state.context_requests >= 0 else state.context_tokens.shape[0]
        s2, s1 = self._sums(state, b) if b else (0.0, 0.0)
        okv = _as_list(state.owner_kv_tokens)
        self._state_reqs, self._state_running = state.owner_requests, max(state.running, b)
        busy, lite = self._group_loads(okv, sum(okv)) if b else (self._zeros, self._zeros)
        return list(self.pricer.step_times(b, s1, s2, busy, lite, state.prefill_step_fraction,
                                           state.prefill_tokens_per_step, state.prefill_context_tokens,
                                           state.prefill_owner_share))

    def _init_group_loads(self) -> None:
        """What `_group_loads` reads and where it writes (compiled once). Its answer is picked off one
        list of values, `_loads`: [0] the total, then each distinct group count's busiest and
        lightest group, then each extra-slack layout's busiest and lightest group (NOTE: picked by
        operator.itemgetter, one C call per [L] answer, where a per-layout loop cost ~6 operations
        a layout)."""
        t, n = self._ranks, self._n
        # per distinct group count: its first group's slice of the per-rank list and the others' (None: G = T)
        self._gslices = tuple(None if g == t else (slice(0, t // g), tuple(slice(k * (t // g), (k + 1) * (t // g))
                                                                           for k in range(1, g)))
                              for g in self._gcounts)
        first_extra = 1 + 2 * len(self._gcounts)
        at = [0 if p < 0 else 1 + 2 * p for p in self._gpos]  # each layout's busiest value (its lightest: + 1)
        # per extra-slack layout: its slack, where it writes its own loads, and for one of several
        # groups, its groups and where its token loads are
        self._extra_one = tuple((self._extra[i], first_extra + 2 * e) for e, i in enumerate(self._extra_layouts)
                                if self._groups[i] == 1)
        self._extra_at = tuple((self._extra[i], self._groups[i], at[i], at[i] + 1, first_extra + 2 * e)
                               for e, i in enumerate(self._extra_layouts) if self._groups[i] > 1)
        busy_at = [first_extra + 2 * self._extra_layouts.index(i) if self._extra[i] else at[i] for i in range(n)]
        lite_at = [b + 1 if self._extra[i] else b + (self._gpos[i] >= 0) for i, b in enumerate(busy_at)]
        self._loads = [0.0] * (first_extra + 2 * len(self._extra_layouts))
        self._busy_of, self._lite_of = _picker(busy_at), _picker(lite_at)
        self._loads_fn = self._compile_group_loads(busy_at, lite_at, first_extra)

    def _compile_group_loads(self, busy_at: list[int], lite_at: list[int], first_extra: int):
        """`_group_loads` for `decide` (a state of T per-rank entries, checked there) as one generated
        function of (okv, total, running): the per-rank list unpacked once, each group's sum, the
        busiest and lightest group per group count and the one-group layouts' extra slack in locals,
        both [L] answers built as tuples (NOTE: the same operations in the same order as
        `_group_loads`: `sum` of a slice is 0 + x0 + x1 + … left to right, max/min of every rank the
        builtins, ties to the first; ~40 % of its time, and it was a fifth of a typical decide).
        None where a layout of several groups has extra slack (`_extra_at`: per-group request
        counts; `_group_loads` answers those)."""
        if self._extra_at or not all(math.isfinite(x) for x, _ in self._extra_one):
            return None
        t = self._ranks
        names = {0: "total"}
        body = []
        if any(parts is not None for parts in self._gslices):
            body.append(f"{', '.join(f'o{r}' for r in range(t))}, = okv")
        for p, (g, parts) in enumerate(zip(self._gcounts, self._gslices)):
            hi, lo = f"hi{p}", f"lo{p}"
            names[1 + 2 * p], names[2 + 2 * p] = hi, lo
            if parts is None:
                body += [f"{hi} = max(okv)", f"{lo} = min(okv)"]
                continue
            r = t // g
            sums = [f"g{p}_{k}" for k in range(g)]
            body += [f"{x} = 0 + {' + '.join(f'o{k * r + j}' for j in range(r))}" for k, x in enumerate(sums)]
            body.append(f"{hi} = {lo} = {sums[0]}")
            for x in sums[1:]:
                body += [f"if {x} > {hi}:", f"    {hi} = {x}", f"if {x} < {lo}:", f"    {lo} = {x}"]
        if self._extra_one:
            body.append("running = max(running, 0)")
        for e, (x, out) in enumerate(self._extra_one):
            body.append(f"e{e} = total + {x!r} * running")
            names[out] = names[out + 1] = f"e{e}"
        body.append(f"return ({', '.join(names[j] for j in busy_at)},), ({', '.join(names[j] for j in lite_at)},)")
        src = "def group_loads(okv, total, running):\n" + "".join(f"    {line}\n" for line in body)
        namespace: dict = {}
        exec(compile(src, "<policy group loads>", "exec"), namespace)  # noqa: S102
        return namespace["group_loads"]

    def _group_loads(self, okv: list, total: float) -> tuple[tuple, tuple]:
        """[L] each layout's busiest and lightest owner group's KV tokens (the total for one-group
        layouts), from the per-rank tokens: one pass per distinct group count (tuples)."""
        vals = self._loads
        vals[0] = total
        j = 1
        for parts in self._gslices:
            if parts is None:
                vals[j], vals[j + 1] = max(okv), min(okv)
            else:
                first, rest = parts
                top = bot = sum(okv[first])
                for part in rest:
                    x = sum(okv[part])
                    if x > top:
                        top = x
                    if x < bot:
                        bot = x
                vals[j], vals[j + 1] = top, bot
            j += 2
        if self._has_extra:
            self._add_extra(vals)
        return self._busy_of(vals), self._lite_of(vals)

    def _add_extra(self, vals: list[float]) -> None:
        """The layouts whose ledger slack per request differs from the tables' (`extra_slack_tokens`)
        charge it per request of their busiest / lightest group (the state's per-rank requests, else
        the running requests spread evenly over the groups): written to their own `_loads` slots."""
        total, running = vals[0], self._state_running
        for x, out in self._extra_one:  # one group holds every running request
            vals[out] = vals[out + 1] = total + x * running
        reqs, t = self._state_reqs, self._ranks
        for x, g, hi_at, lo_at, out in self._extra_at:
            if reqs is not None and len(reqs) == t:
                if g == t:
                    n_hi, n_lo = max(reqs), min(reqs)
                else:
                    r = t // g
                    sums = [sum(reqs[k * r:(k + 1) * r]) for k in range(g)]
                    n_hi, n_lo = max(sums), min(sums)
            else:
                n_hi = n_lo = self._state_running / g
            vals[out] = vals[hi_at] + x * n_hi
            vals[out + 1] = vals[lo_at] + x * n_lo

    def _growth(self, g_tot: float, g_own: float, lay_growth) -> list[float]:
        """[L] the expected KV growth of each layout's busiest owner group: the projection's per
        layout when given (PolicyState.layout_kv_growth_tokens), else all ranks' for one group, the
        busiest rank's for groups of one, and R × that for groups of R ranks (a bound)."""
        if lay_growth is not None and len(lay_growth) == self._n:
            return lay_growth
        t = self._ranks
        return [g_tot if g == 1 else g_own * (t // g) for g in self._groups]

    def decide(self, state: PolicyState) -> Decision:
        """Stay or switch; never raises (a state out of range, or anything unexpected, is a counted
        CANT_DECIDE stay)."""
        try:
            return self._decide(state)
        except Exception:  # NOTE: a policy bug must not take the server down; stay put instead.
            return self._after_error(state)

    def _after_error(self, state) -> Decision:
        """An exception inside decide: a state whose field has the wrong type is a refusal (the hot
        path checks values, not types: a type error raises there and lands here); anything else is
        an internal error. Both answer CANT_DECIDE."""
        if not isinstance(state, PolicyState):
            return self._refuse(0, "state")
        cur = _layout_index(getattr(state, "layout", None))
        cur = cur if 0 <= cur < self._n else 0
        arrays = (("context_tokens", state.context_tokens), ("waiting_tokens", state.waiting_tokens))
        for name, x in arrays:
            if type(x) is not np.ndarray or x.ndim != 1:
                return self._refuse(cur, name)
        for name in ("owner_kv_tokens", "free_kv_bytes"):
            if type(getattr(state, name)) not in (list, np.ndarray):
                return self._refuse(cur, name)
        for name in ("context_requests", "running", "steps_since_switch", "step_index", "capacity_reprice_at_step"):
            if type(getattr(state, name)) is not int:
                return self._refuse(cur, name)
        self.internal_errors += 1
        return self._stay[cur][Reason.CANT_DECIDE]

    def _refuse(self, cur: int, field_name: str) -> Decision:
        self.refused_states += 1
        self.last_refusal = field_name
        return self._stay[cur][Reason.CANT_DECIDE]

    def _sums(self, state: PolicyState, b: int) -> tuple[float, float]:
        """(Σ context, Σ min(context, top-k)) of the running batch: the caller's, or from the array.
        NOTE: np.dot into preallocated buffers, not ufunc reductions (which allocate ~1 KB per call);
        contexts are whole token counts, so any summation order gives the same sums."""
        if state.context_sum_tokens >= 0 and state.context_capped_sum_tokens >= 0:
            return float(state.context_sum_tokens), float(state.context_capped_sum_tokens)
        ctx = state.context_tokens
        ones = self._ones[:b] if b <= self._ones.shape[0] else np.ones(b)
        s2 = float(np.dot(ctx, ones))
        if self._topk < 1e17:
            buf = self._buf[:b] if b <= self._buf.shape[0] else np.empty(b)
            return s2, float(np.dot(np.minimum(ctx, self._topk, out=buf), ones))
        return s2, s2

    def _decide(self, state: PolicyState) -> Decision:
        # ---- the boundary: what the rules read, checked (cheap: no pass over the batch; a field of
        # the wrong type raises below and is refused by `_after_error`) ---------------------------
        cur = state.layout
        if type(cur) is not int:
            cur = _layout_index(cur)
        if not 0 <= cur < self._n:
            return self._refuse(0, "layout")
        stay = self._stay[cur]
        if state.switch_in_flight:
            return stay[Reason.STAY_IN_FLIGHT]
        b, s2, s1 = state.context_requests, state.context_sum_tokens, state.context_capped_sum_tokens
        if b < 0 or not (s2 >= 0 and s1 >= 0):  # decide reads the context array itself
            ctx = state.context_tokens
            if type(ctx) is not np.ndarray or ctx.ndim != 1 or (0 <= b != ctx.shape[0]):
                return self._refuse(cur, "context_tokens")
            b = ctx.shape[0]
            s2, s1 = self._sums(state, b) if b <= self._max_batch else (0.0, 0.0)
        if b > self._max_batch:
            return self._refuse(cur, "context_requests")  # beyond the compiled tables (and bounded work)
        if not b:
            s2 = s1 = 0.0
        if not (0.0 <= s1 < _INF and 0.0 <= s2 < _INF):
            return self._refuse(cur, "context_tokens")
        okv = state.owner_kv_tokens
        if type(okv) is not list:
            okv = okv.tolist()
        if len(okv) != self._ranks:
            return self._refuse(cur, "owner_kv_tokens")
        total = sum(okv)
        if not (0.0 <= min(okv) and total < _INF):
            return self._refuse(cur, "owner_kv_tokens")
        if self._loads_fn is not None:  # [L] tokens of each layout's busiest / lightest group
            busy, lite = self._loads_fn(okv, total, state.running)
        else:
            if self._has_extra:
                self._state_reqs, self._state_running = state.owner_requests, max(state.running, 0)
            busy, lite = self._group_loads(okv, total)
        wt = state.waiting_tokens
        w = wt.shape[0]
        running = state.running
        if running < 0:
            return self._refuse(cur, "running")
        f, p_tok = state.prefill_step_fraction, state.prefill_tokens_per_step
        p_ctx, p_share = state.prefill_context_tokens, state.prefill_owner_share
        if not -_INF < f + p_tok + p_ctx + p_share < _INF:  # a NaN or an infinity in any of them
            return self._refuse(cur, "prefill statistics")
        # the throughput rule's: the same over the policy's horizon, where the caller keeps them
        hf = state.horizon_prefill_step_fraction
        if hf >= 0.0:
            h_tok, h_ctx, h_share = (state.horizon_prefill_tokens_per_step, state.horizon_prefill_context_tokens,
                                     state.horizon_prefill_owner_share)
            if not -_INF < hf + h_tok + h_ctx + h_share < _INF:
                return self._refuse(cur, "horizon prefill statistics")
        else:
            hf, h_tok, h_ctx, h_share = f, p_tok, p_ctx, p_share
        g_tot, g_own = state.kv_growth_tokens, state.owner_kv_growth_tokens
        if (g_tot or g_own) and (g_tot in (_INF, -_INF) or g_own in (_INF, -_INF)):  # NaN: "none projected"
            return self._refuse(cur, "kv_growth_tokens")
        lay_growth = state.layout_kv_growth_tokens
        if lay_growth is not None and not (len(lay_growth) == self._n and -_INF < sum(lay_growth) < _INF):
            return self._refuse(cur, "layout_kv_growth_tokens")
        if b == 0 and w == 0:
            return stay[Reason.STAY_IDLE]
        # ---- admission of the queue's head, per layout -----------------------------------------
        bpt, pool, owner, share = self._bpt, self._pool, self._owner, self._share
        blocked = False
        head = 0.0
        if w and running < self._max_batch:
            head = float(wt[0])
            fr = state.free_kv_bytes
            if type(fr) is not list:
                fr = fr.tolist()
            if not 0.0 <= head < _INF:
                return self._refuse(cur, "waiting_tokens")
            if len(fr) != self._ranks or not -_INF < sum(fr) < _INF:
                return self._refuse(cur, "free_kv_bytes")
            head += self._slack
            need = head * bpt
            # NOTE: a one-group layout's ranks all have the same room (min); else the group with the most
            blocked = (max(fr) if owner[cur] else min(fr)) < need * share[cur]
        fits_now = busy[cur] * share[cur] * bpt <= pool[cur]  # = self._kv_bytes(cur, busy)
        grows = g_tot > 0.0 or g_own > 0.0 or lay_growth is not None  # (NaN: none projected)
        outgrown = False
        growth = self._no_growth
        if grows:
            if not g_tot > 0.0:
                g_tot = 0.0
            if not g_own > 0.0:
                g_own = 0.0
            growth = self._growth(g_tot, g_own, lay_growth)
            outgrown = (busy[cur] + growth[cur]) * share[cur] * bpt > pool[cur]
        if not b:
            if blocked or not fits_now:  # nothing running: the fastest layout with room for the head
                steps = self.pricer.step_times(0, 0.0, 0.0, self._zeros, self._zeros, f, p_tok, p_ctx, p_share)
                d = self._room_for_head(cur, b, total, busy, lite, head, steps)
                if d is not None:
                    return d
            return stay[Reason.STAY_IDLE]
        pricer, lean = self.pricer, self._lean[cur]
        priced = False
        if blocked or not fits_now or outgrown:
            # ---- capacity (rule 1): on the recent prefill statistics. NOTE: lean, the twins' steps
            # are lower bounds (their HBM-only layout's), good for the rule's bound; it prices every
            # layout itself before it compares rates (capacity_rule.py)
            steps = pricer.step_times(b, s1, s2, busy, lite, f, p_tok, p_ctx, p_share, lean)
            if lean is not None:
                for j, i in self._lower[cur]:
                    steps[j] = steps[i]
            d = self._capacity.decide(state, cur, b, w, total, busy, lite, s1, s2, steps, blocked, fits_now,
                                      outgrown, head, g_tot, growth, lean is not None)
            if d is PRICED_NO_MOVE:
                priced, stay = True, self._stay_priced[cur]
            elif d is not None:
                return d
        # the load priced (PolicyKnobs.horizon_load; projection.HorizonLoad keeps it): the horizon's
        # average batch, its range's ends and the window's projection where they are kept, else
        # the batch of the moment
        mode = 0  # 0: the moment; 1: the horizon, its range and the window; 2: the window alone
        if self.knobs.horizon_load:
            hb, wb = state.horizon_context_requests, state.window_context_requests
            if hb >= 0:
                hs2, hs1 = state.horizon_context_sum_tokens, state.horizon_context_capped_sum_tokens
                sd, sf = state.horizon_context_spread, state.horizon_prefill_spread
                if not (-_INF < hs1 + hs2 < _INF and hs2 >= 0.0 and hs1 >= 0.0 and 0.0 <= sd < _INF
                        and 0.0 <= sf < _INF):
                    return self._refuse(cur, "horizon load")
                hg = state.horizon_group_tokens
                if hg is None or len(hg) != self._n:
                    hg = self.group_tokens(hb, hs2)
                mode = 1
            if wb >= 0:
                ws2, ws1, rho = state.window_context_sum_tokens, state.window_context_capped_sum_tokens, state.window_prefill_scale
                if not (-_INF < ws1 + ws2 + rho < _INF and ws2 >= 0.0 and ws1 >= 0.0 and 0.0 <= rho <= 1.0):
                    return self._refuse(cur, "window load")
                wg = state.window_group_tokens
                if wg is None or len(wg) != self._n:
                    wg = self.group_tokens(wb, ws2)
                # NOTE: a falling load (the batch now and the window's both below the horizon's
                # range: a drain) is priced on the window alone, the past's range being no evidence
                # of a tie there and its average lagging: the window's batch there is the survival
                # of requests already running, which it foresees. A rising one is not: it rests on
                # arrivals going on, which a burst's don't (GLM-5 longprompt, 14 decoding on a range
                # of 7 ± 4 (the window 12), moved TP -> CP and lost 10 % of the steps that followed)
                if mode == 0 or (wb < hb - sd and b < hb - sd):
                    mode = 2
        # ---- throughput (rule 2): the candidates by their KV first (no pricing), then only they and
        # the current layout priced, on the horizon's prefill statistics
        # with a stated load (PolicyKnobs.planned_*) only the layouts that carry it are candidates,
        # but in a drain (the window alone priced: the load falls) whose arrivals have fallen off
        # (the window expects under DRAIN_PREFILL_SCALE of the horizon's prefill): no steady state
        # is left to carry
        sel = mode if mode != 2 or rho < DRAIN_PREFILL_SCALE else 1
        # each candidate (`_rows_by_mode[sel][cur]`, compiled into `_fns_by_mode[sel][cur]`): its KV
        # fits with headroom (busiest group × share × rate ≤ pool × (1 − headroom)); it admits what
        # the current layout admits; the running set's expected peak fits there if it fits here now;
        # and a twin only where its HBM-only layout did not pass
        mask = self._fns_by_mode[sel][cur](busy, lite, w > 0 and not blocked, head, grows, growth, outgrown)
        key = mask * 64 + cur
        sub = self._subsets.get(key)
        if sub is None:
            sub = self._subset(mask, cur, key)
        cands, priced_sets = sub
        memo = None
        if mode:
            snap = state.load_prefill
            if snap is not None:  # the prefill statistics as they were when the loads were written
                if len(snap) != 4 or not -_INF < sum(snap) < _INF:
                    return self._refuse(cur, "load_prefill")
                hf, h_tok, h_ctx, h_share = snap
            ver = state.load_version
            if ver >= 0:  # NOTE: a cache, not a memory: equal versions carry equal loads (PolicyState)
                if ver != self._memo_version:
                    self._memo.clear()
                    self._memo_version = ver
                memo = self._memo
                steps = memo.get((mode, cur, priced_sets))
        if not mode:
            steps = pricer.step_times(b, s1, s2, busy, lite, hf, h_tok, h_ctx, h_share, priced_sets)
        elif memo is None or steps is None:
            if mode == 1:
                steps = pricer.step_times(hb if hb < self._max_batch else self._max_batch, hs1, hs2, hg, hg, hf, h_tok,
                                          h_ctx, h_share, priced_sets)
            else:
                steps = pricer.step_times(wb if wb < self._max_batch else self._max_batch, ws1, ws2, wg, wg, hf * rho,
                                          h_tok * rho, h_ctx, h_share, priced_sets)
            if memo is not None:
                steps = memo[(mode, cur, priced_sets)] = steps[:]  # (the pricer's list is overwritten next call)
        best, best_t = cur, steps[cur]
        for i in cands:
            if steps[i] < best_t:
                best, best_t = i, steps[i]
        if best == cur:
            return stay[Reason.STAY_BEST]
        stay = (self._stay_priced_for if priced else self._stay_for)[cur][best]  # the stays name the candidate
        t_cur = steps[cur]
        gain = t_cur - best_t
        k = self.knobs
        if gain < k.min_gain_fraction * t_cur:
            return stay[Reason.STAY_SMALL_GAIN]
        if state.steps_since_switch < k.cooldown_steps or 0 <= state.step_index < self._plan_hold_steps:
            return stay[Reason.STAY_COOLDOWN]
        if mode == 1:
            # the same gain at either end of the horizon's range (the batch and the prefill share at
            # their average ± spread, together: both rise with a burst of arrivals), and on the
            # window's projection: the least of them stands
            least = memo.get((cur, best)) if memo is not None else None
            if least is None:
                least = self._least_gain(cur, best, t_cur, gain, hb, hs1, hs2, sd, sf, wb, ws1 if wb >= 0 else 0.0,
                                         ws2 if wb >= 0 else 0.0, wg if wb >= 0 else None, rho if wb >= 0 else 1.0,
                                         hf, h_tok, h_ctx, h_share)
                if memo is not None:
                    memo[(cur, best)] = least
            t_cur, gain = least
            if gain < k.min_gain_fraction * t_cur:
                return stay[Reason.STAY_SMALL_GAIN]
        if self._since_switch_s(state, t_cur) < self._min_gap_s:
            return stay[Reason.STAY_RATE_LIMIT]
        plan = plan_transition(self.tables, cur, best, total * bpt, [x * bpt for x in busy], b, t_cur,
                               self.pricer.net_share(cur, t_cur))
        if not plan.feasible:
            return stay[Reason.STAY_NO_MEMORY]
        # the switch's priced cost (link + interference + commit stall) repaid by the time it saves:
        # the link's seconds earn nothing, then each served second saves gain / t_cur
        payback_s = plan.link_s + (1.0 + k.margin) * plan.cost_s * t_cur / gain
        window_s = min(self._dwell_steps * t_cur, k.payback_horizon_s)
        gain_s = gain * (window_s - plan.link_s) / t_cur
        if payback_s >= window_s:
            return Decision(cur, False, Reason.STAY_NOT_WORTH, gain_s, plan.cost_s, plan,
                            capacity_stands_steps=REPRICE_EVERY_STEPS if priced else 0, candidate=best,
                            payback_s=payback_s)
        return Decision(best, True, Reason.SWITCH_THROUGHPUT, gain_s, plan.cost_s, plan,
                        capacity_stands_steps=REPRICE_EVERY_STEPS if priced else 0, candidate=best, payback_s=payback_s)

    def _least_gain(self, cur: int, best: int, t_cur: float, gain: float, hb: int, hs1: float, hs2: float, sd: float,
                    sf: float, wb: int, ws1: float, ws2: float, wg, rho: float, hf: float, h_tok: float, h_ctx: float,
                    h_share: float) -> tuple[float, float]:
        """(current step, step saved) of the least gain of `best` over `cur` among the horizon's
        average (given), its range's two ends and the window's projection (wb < 0: none); it stops
        at the first below `min_gain_fraction`."""
        pricer, cap, floor = self.pricer, self._max_batch, self.knobs.min_gain_fraction
        pair = 1 << cur | 1 << best
        ends = ((-1.0, 1.0) if sd >= 0.5 or sf > 0.0 else ()) + ((0.0,) if wb >= 0 else ())
        for sign in ends:
            if sign:
                x = hb + sign * sd
                nb = int(x + 0.5) if x > 1.0 else 1
                f = nb / hb if hb > 0 else 1.0
                g = 1.0 + sign * sf
                g = 0.0 if g < 0.0 else (1.0 / hf if hf * g > 1.0 else g)
                eg = self.group_tokens(nb, hs2 * f)
                e = pricer.step_times(nb if nb < cap else cap, hs1 * f, hs2 * f, eg, eg, hf * g, h_tok * g, h_ctx,
                                      h_share, pair)
            else:
                e = pricer.step_times(wb if wb < cap else cap, ws1, ws2, wg, wg, hf * rho, h_tok * rho, h_ctx, h_share,
                                      pair)
            e_cur, e_gain = e[cur], e[cur] - e[best]
            if e_gain * t_cur < gain * e_cur:  # a smaller share of the step saved
                t_cur, gain = e_cur, e_gain
                if gain < floor * t_cur:
                    break
        return t_cur, gain

    def group_tokens(self, requests: float, context_sum: float) -> list[float]:
        """[L] KV tokens of each layout's owner group for a batch of `requests` whose contexts sum to
        `context_sum`, spread evenly over its groups (a one-group layout holds it all): the load the
        throughput rule prices a projected or averaged batch at (which requests it holds, and so
        which group is busiest, is not projected)."""
        tot = context_sum + requests * self._slack
        return [tot * g for g in self._inv_groups]

    def payback_window_steps(self, step_s: float) -> float:
        """The steps a throughput switch must repay in at `step_s` a step: the payback horizon, at
        most the expected dwell (the window `decide` prices; projection.HorizonLoad averages the
        batch over it)."""
        return min(self._dwell_steps, self.knobs.payback_horizon_s / step_s) if step_s > 0 else self._dwell_steps

    def _subset(self, mask: int, cur: int, key: int) -> tuple:
        """(the candidates in `mask`, in index order; the mask of the layouts to price: they and
        `cur`), cached by `key` (at most 2^L × L entries, each built once)."""
        cands = tuple(i for i in range(self._n) if mask >> i & 1)
        sub = (cands, mask | 1 << cur)
        self._subsets[key] = sub
        return sub

    def _since_switch_s(self, state: PolicyState, step_s: float) -> float:
        """Seconds since the last switch: the caller's clock (`PolicyState.seconds_since_switch`),
        else estimated as the steps since it × the current step (inf: none yet)."""
        x = state.seconds_since_switch
        if 0.0 <= x:
            return x
        n = state.steps_since_switch
        return _INF if n >= 1 << 30 else n * step_s

    def _room_for_head(self, cur: int, b: int, total: float, busy: list[float], lite: list[float], head: float,
                       steps: list[float]) -> Decision | None:
        """Nothing running and the head blocked: the fastest layout with room for it (None: none)."""
        bpt, pool, share = self._bpt, self._pool, self._share
        busy_b = [x * bpt for x in busy]
        best, best_t = -1, _INF
        for i in self._layouts:
            if i == cur or not self._ok[i] or steps[i] >= best_t:
                continue
            if (lite[i] + head) * share[i] * bpt > pool[i]:
                continue
            if memory_fits(self.tables, cur, i, total * bpt, busy_b, b):
                best, best_t = i, steps[i]
        if best < 0:
            return None
        plan = plan_transition(self.tables, cur, best, total * bpt, busy_b, b, steps[cur],
                               self.pricer.net_share(cur, steps[cur]))
        return Decision(best, True, Reason.SWITCH_CAPACITY, 0.0, plan.cost_s, plan)

    def _kv_bytes(self, i: int, busy_tokens: list[float]) -> float:
        """KV bytes the fullest rank of layout i holds: its busiest group's tokens at its share."""
        return busy_tokens[i] * self._share[i] * self._bpt

    def usable_layouts(self) -> list[int]:
        return [i for i in self._layouts if self._ok[i]]

    # ---- start-up -----------------------------------------------------------------------------
    def initial_layout(self, waiting_tokens: np.ndarray) -> int:
        """The layout to start in (no switch cost yet): the best predicted throughput for the first
        batch each layout can hold from the queue, over that batch's life — its prompts' chunked
        prefill, then an expected output (the mean observed, else `initial_dwell_steps`) of decode
        steps at that batch, at its mean context over the decode (prompt + half the output).
        The batch a layout holds is what fits its KV pool at the batch's expected peak: each
        request's prompt, the tables' slack and the expected output (`first_batch`).
        NOTE: the prefill counts: a queue of long prompts (16K-64K on DS-V3.2, 8 x H200) is mostly
        prefill work, which CP runs ~3.7x faster than DOP (an 8K chunk after a 28K prefix: 124 vs
        458 ms) though DOP holds more requests and decodes faster; priced on decode steps alone the
        policy started in DOP, and a full owner layout can't make room for a move later.
        NOTE: so does the output's KV: sized on the prompts alone, a layout whose pool holds the
        queue's prompts but not what they grow to (TP's replicated MLA cache, a 512-request rollout
        after outputs of ~4K were observed) was priced at the whole queue, started, and preempted."""
        t = self.tables
        best, best_rate = -1, -1.0
        lens = np.asarray(waiting_tokens, dtype=np.float64)[: self.knobs.max_batch]
        lens = lens[np.isfinite(lens) & (lens >= 0)]
        if self.knobs.planned_rate_per_s > 0:
            best = self.planned_start(lens)
            if best >= 0:
                return best
        out = self._mean_output if self._completed else self.knobs.initial_dwell_steps
        chunk = float(t.max_prefill_tokens)
        for i in self._layouts:
            if not self._ok[i]:
                continue
            bsz = self.first_batch(i, lens, out)
            if bsz == 0:
                continue
            ctx = lens[:bsz]
            mid = ctx + 0.5 * out  # the decode's mean context
            s2 = float(mid.sum())
            s1 = float(np.minimum(mid, t.topk).sum())
            g = self._groups[i]
            if g > 1:
                s1, s2 = s1 / g, s2 / g
            step = float(t.step_s(i, bsz, np.zeros(1), np.array([s1]), np.array([s2]))[0])
            rate = bsz * out / (self._prefill_s(i, ctx, chunk) + out * step)
            if rate > best_rate:
                best, best_rate = i, rate
        if best >= 0:
            return best
        usable = self.usable_layouts()
        return usable[0] if usable else 0

    def planned_start(self, waiting_tokens: np.ndarray | None = None) -> int:
        """The layout that serves the stated load (`PolicyKnobs.planned_rate_per_s`; −1: none
        stated or no usable layout): of the layouts that keep up with it — its steady decode batch
        fits their pool at its peak KV and their prefill leaves time to decode — the one that serves
        a request soonest (the least seconds in service, so the least batch and the shortest drain);
        if none keeps up, the one that serves the most requests a second at the batch its pool
        holds. Each layout is priced by `planned_prices`."""
        best, best_key = -1, None
        for i, p in self.planned_prices(waiting_tokens).items():
            key = (min(p["served_per_s"], self.knobs.planned_rate_per_s), -p["service_s"])
            if best_key is None or key > best_key:
                best, best_key = i, key
        return best

    def planned_prices(self, waiting_tokens: np.ndarray | None = None) -> dict[int, dict]:
        """Each usable layout at the stated load (rate λ, mean prompt I and output O tokens: the
        knobs, else the queue's mean prompt and the mean observed output or `initial_dwell_steps`),
        by Little's law with the layout's own step times:
        - prefill: p = seconds of chunk-only steps of one mean prompt (`_prefill_s`, on its owner);
          the share of steps that prefill is f = λ·p (SGLang runs a prefill batch for all data-parallel
          ranks at once, so one group's prefill pauses every group's decode);
        - the steady decode batch N = λ·O·step(N)/(1 − f) (requests in decode = the rate × the time
          each decodes), step(N) the layout's decode step at N requests of mean context I + O/2,
          solved by fixed-point iteration (step is increasing in N);
        - it keeps up if that N exists and the pool holds it at its peak KV (I + the slack + O each,
          as `first_batch`); then it serves λ and a request spends p + O·step(N)/(1 − f) in
          service; else it serves μ = Nc / (O·step(Nc) + Nc·p) requests a second at the batch Nc
          its pool holds.
        Keys: batch, keeps_up, served_per_s, service_s, prefill_share, step_s, pool_requests."""
        k, t = self.knobs, self.tables
        lam = float(k.planned_rate_per_s)
        lens = np.asarray(waiting_tokens if waiting_tokens is not None else (), dtype=np.float64)
        lens = lens[np.isfinite(lens) & (lens >= 0)]
        inp = k.planned_input_tokens or (float(lens.mean()) if lens.size else 0.0)
        out = k.planned_output_tokens or (self._mean_output if self._completed else k.initial_dwell_steps)
        out = max(out, 1.0)
        chunk = float(t.max_prefill_tokens)
        mid = inp + 0.5 * out  # a decoding request's mean context
        zero = np.zeros(1)
        prices: dict[int, dict] = {}
        if lam <= 0:
            return prices
        for i in self._layouts:
            if not self._ok[i]:
                continue
            g = self._groups[i]
            per = 1.0 / g if g > 1 else 1.0

            def step(n: float, i=i, per=per) -> float:
                b = max(1, min(int(math.ceil(n)), self._max_batch))
                return float(t.step_s(i, b, zero, np.array([b * min(mid, t.topk) * per]),
                                      np.array([b * mid * per]))[0])

            pre = self._prefill_s(i, np.array([inp]), chunk) if inp > 0 else 0.0
            f = lam * pre
            cap = self.first_batch(i, np.full(self._max_batch, inp), out)
            if t.info.max_requests.size:  # the engine's running-request cap (its state slots, its scheduler)
                cap = int(min(cap, t.info.max_requests[i]))
            n, keeps = 1.0, False
            if f < 1.0 and cap >= 1:
                for _ in range(100):
                    nxt = lam * out * step(n) / (1.0 - f)
                    if nxt > cap:
                        break
                    if abs(nxt - n) <= 1e-3 * max(n, 1.0):
                        n, keeps = nxt, True
                        break
                    n = nxt
            if keeps:
                st = step(n)
                prices[i] = {"batch": n, "keeps_up": True, "served_per_s": lam, "prefill_share": f, "step_s": st,
                             "service_s": pre + out * st / (1.0 - f), "pool_requests": cap}
            else:
                nc = max(cap, 1)
                st = step(nc)
                mu = nc / (out * st + nc * pre) if cap >= 1 else 0.0
                prices[i] = {"batch": float(nc), "keeps_up": False, "served_per_s": mu,
                             "prefill_share": min(mu * pre, 1.0), "step_s": st,
                             "service_s": pre + out * st / max(1.0 - mu * pre, 1e-9), "pool_requests": cap}
        return prices

    def first_batch(self, layout: int, prompts: np.ndarray, output_tokens: float) -> int:
        """How many of the queue's first requests layout `layout`'s KV pool holds at their expected
        peak: prompt + the tables' slack + `output_tokens` each, against the pool of all its owner
        groups (one group: its pool at its share)."""
        need = np.cumsum(prompts + self.tables.request_slack_tokens + output_tokens)
        cap_tokens = self._pool[layout] / (self._bpt * self._share[layout])
        g = self._groups[layout]
        if g > 1:
            cap_tokens *= g
        return int(np.searchsorted(need, cap_tokens, side="right"))

    def _prefill_s(self, layout: int, prompts: np.ndarray, chunk: float) -> float:
        """Seconds of chunk-only steps that prefill `prompts` in `layout`, chunk by chunk, each
        chunk attending to the prompt's prefix before it (a chunk is one request's, at most `chunk`
        tokens; owner layouts run it on the request's owner)."""
        n = np.ceil(prompts / chunk).astype(np.int64)
        if not n.sum():
            return 0.0
        req = np.repeat(np.arange(prompts.size), n)
        k = np.arange(req.size) - np.repeat(np.cumsum(n) - n, n)  # each chunk's index in its prompt
        prefix = k * chunk
        tokens = np.minimum(prompts[req] - prefix, chunk)
        zeros = np.zeros(req.size)
        return float(self.tables.step_s(layout, 0, tokens, zeros, zeros, prefill_context=prefix).sum())


def planned_knobs(knobs: PolicyKnobs, workload, replicas: int = 1) -> PolicyKnobs:
    """`knobs` with the load a workload states (`PolicyKnobs.planned_*`): its arrival rate (the
    built-in `chat`, `bursty`, `longprompt` and `reasoning` state one, `params["rate_per_s"]`; split
    over `replicas` identical groups) and its requests' mean prompt and output tokens (what an
    operator sizes a deployment by, and what the best fixed layout it is compared with is chosen
    knowing). A workload that states no rate (a batch at t = 0, a trace) leaves `knobs` as they are:
    the start is priced on the queue."""
    from dataclasses import replace

    rate = (getattr(workload, "params", None) or {}).get("rate_per_s")
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate < _INF or not workload.requests:
        return knobs
    return replace(knobs, planned_rate_per_s=float(rate) / max(int(replicas), 1),
                   planned_input_tokens=float(np.mean(workload.input_tokens)),
                   planned_output_tokens=float(np.mean(workload.output_tokens)))


def _picker(at: list[int]):
    """x -> (x[at[0]], x[at[1]], ...), a tuple whatever len(at) (operator.itemgetter of one index
    answers a scalar)."""
    if len(at) == 1:
        return lambda x, i=at[0]: (x[i],)
    return operator.itemgetter(*at)


def _layout_index(x) -> int:
    """A layout index from an integer-like value (numpy ints); −1 for anything else (a bool too)."""
    if isinstance(x, (bool, np.bool_)):
        return -1
    try:
        return operator.index(x)
    except TypeError:
        return -1


@dataclass
class FixedPolicy:
    """Always the same layout (the baselines)."""

    layout: int

    def __post_init__(self) -> None:
        self._stay = Decision(self.layout, False, Reason.STAY_FIXED)

    def decide(self, state: PolicyState) -> Decision:
        return self._stay

    def usable_layouts(self) -> list[int]:
        return [self.layout]

    def observe_completion(self, output_tokens: float) -> None:
        return None

    def initial_layout(self, waiting_tokens: np.ndarray) -> int:
        return self.layout
