"""The policy's step times: a batch state's predicted step seconds in every layout, in plain
Python floats over the compiled tables (runtime_policy/step_time.py's formula; a numpy call costs
~1 µs to dispatch, more than a table row's arithmetic).

The decode step of the batch, blended with a prefill chunk of the observed mean size and prefix in
the observed share of steps that run one (`PolicyState.prefill_*`): one-group layouts (TP, CP)
spread a chunk over the ranks; layouts of several owner groups run `prefill_owner_share` of it on
one group, so, as in the step model, their chunk step is the slower of the decode-busiest group and
that group (taken as the lightest, where admission puts new requests). Without the blend a prefill-heavy (long-prompt) load
looks like its decode batch alone, where owner layouts win, while its chunks run several times
slower on one owner.

Does not: decide anything (policy.py), or read a state's validity (policy.py checks it first).
"""

from __future__ import annotations

import math

from runtime_policy.tables import StepTimeTable

CHUNK_STEP = 1.03  # the prefill blend's chunk sizes, rounded to 3 % steps (cached rows)
LOG_CHUNK_STEP = math.log(CHUNK_STEP)
OWNER_SHARE_STEPS = 32  # the chunk's owner share, rounded to 1/32 (cached rows)
ROW_CACHE_ENTRIES = 4096  # base rows past the decode-only ones, and chunk rows, kept as Python floats


class StepPricer:
    """Step seconds of a batch in every layout of one compiled table (see the module docstring)."""

    def __init__(self, tables: StepTimeTable, max_batch: int):
        t = tables
        self.tables = t
        n = len(t.layouts)
        self.layouts = range(n)
        groups = [int(g) for g in t.info.owner_groups]
        self.owner = [g > 1 for g in groups]
        # the kernels compiled for this table's layouts (once per table: tables.py), and the mask of
        # every layout (bit i: layout i), what `step_times` prices without a `subset`
        self.kernels = t.layout_kernels
        self.all_layouts = (1 << n) - 1
        self.n_base = max_batch + 1
        rows = t.base_rows_py  # NOTE: compiled once per table (a per-policy copy cost ~6 ms)
        self.base_py = rows[: self.n_base] if self.n_base <= len(rows) else t.base_s[: self.n_base].tolist()
        self.knee = float(t.prefix_knee_tokens)
        self.max_chunk = t.max_prefill_tokens
        self.size_cap = 2.0 * t.max_prefill_tokens
        self.n_max = t.max_tokens
        self.steps = [0.0] * n  # the last call's answer (reused: the hot path allocates no list)
        self.net = [0.0] * n  # the last call's network-bytes term of each layout's decode step
        self._row_cache: dict[int, list] = {}  # base_s rows by token count past base_py
        self._chunk_cache: dict[tuple[int, int], list] = {}  # chunk rows by (chunk, owner's tokens)
        self._chunk_sizes: dict[int, int] = {}  # 1.03^e tokens, capped, by e

    def step_times(self, b: int, s1: float, s2: float, own, own_min, prefill_fraction: float,
                   prefill_tokens: float, prefill_context: float, owner_share: float,
                   subset: int | None = None) -> list[float]:
        """[L] step seconds of a batch of `b` decodes with sums `s1` (Σ min(L, top-k)) and `s2` (Σ L),
        whose busiest and lightest owner groups hold `own` and `own_min` KV tokens (per layout [L]
        lists or tuples; or one float each where every layout of several groups has the same count),
        and the observed prefill (share of steps with a chunk, tokens per step, their prefix, the
        owner group's share). Every number finite (the policy checks its state first). Returns
        `self.steps`, overwritten by the next call (copy what you keep). NOTE: one kernel call for
        every layout (step_time.layout_kernels), nothing allocated that stays. `subset`: a bit mask
        of the layouts to price (bit i: layout i; None: every one); the others' entries of the
        answer are left as they were (the policy's twins, policy.py)."""
        # NOTE: min/max of two numbers spelled out (min(x, y) is x unless y < x): ~10 builtin calls
        # here would cost more than the arithmetic of one layout
        if type(own) is not list and type(own) is not tuple:
            own, own_min = [own] * len(self.owner), [own_min] * len(self.owner)
        mask = self.all_layouts if subset is None else subset
        rows = self.base_py[b if b < self.n_base else self.n_base - 1]
        f = prefill_fraction if prefill_fraction < 1.0 else 1.0
        if not (f > 0 and prefill_tokens > 0):
            return self.kernels.decode_steps(mask, rows, s1, s2, own, own_min, self.steps, self.net)
        # the blend's chunk: its size rounded to 3 % steps and the owner's share to 1/32 (both running
        # means) so their rows are cached; NOTE: the chunk is capped at the tables' largest, so a size
        # past twice that (a tiny share of steps with prefill: tokens / f overflows) rounds to the cap
        size = prefill_tokens / f
        if size > self.size_cap:
            size = self.size_cap
        e = round(math.log(size if size > 1.0 else 1.0) / LOG_CHUNK_STEP)
        chunk = self._chunk_sizes.get(e)
        if chunk is None:
            chunk = self._chunk_sizes[e] = min(max(int(CHUNK_STEP ** e), 1), self.max_chunk)
        share = owner_share if owner_share < 1.0 else 1.0
        own_p = int(chunk * (round(share * OWNER_SHARE_STEPS) / OWNER_SHARE_STEPS if share > 0.0 else 0.0))
        if own_p < 1:
            own_p = 1
        if own_p > chunk:
            own_p = chunk
        rows_n, crows = self._chunk_rows(b + chunk, chunk, own_p)
        pfx = prefill_context if prefill_context > 0.0 else 0.0
        lo = self.knee if self.knee < pfx else pfx  # = step_time.prefix_split(pfx, knee)
        # the chunk over every rank, next to the whole batch; on one group (the lightest), next to
        # the decode-busiest
        return self.kernels.blended_steps(mask, rows, rows_n, crows, lo, pfx - lo, s1, s2, own, own_min, f,
                                          self.steps, self.net)

    def net_share(self, layout: int, step_s: float) -> float:
        """The network-bytes share of `layout`'s last priced decode step (link contention)."""
        return self.net[layout] / step_s if step_s > 0 else 0.0

    def _chunk_rows(self, n: int, chunk: int, own_p: int) -> tuple[list, list]:
        """The blend's base rows for n = b + chunk tokens, and each layout's chunk row (the columns of
        its 3R its kernel reads, `LayoutKernels.chunk_cols`: the whole chunk for spread layouts, the
        owner's share of it for owner layouts), cached."""
        if n > self.n_max:
            n = self.n_max
        if n < self.n_base:
            rows = self.base_py[n]
        else:
            rows = self._row_cache.get(n)
            if rows is None:
                if len(self._row_cache) > ROW_CACHE_ENTRIES:
                    self._row_cache.clear()
                rows = self._row_cache[n] = self.tables.base_s[n].tolist()
        crows = self._chunk_cache.get((chunk, own_p))
        if crows is None:
            if len(self._chunk_cache) > ROW_CACHE_ENTRIES:
                self._chunk_cache.clear()
            cr, cols = self.tables.chunk_rows_s, self.kernels.chunk_cols
            crows = self._chunk_cache[(chunk, own_p)] = [
                cr[own_p if self.owner[i] else chunk, i, list(cols[i])].tolist() for i in self.layouts]
        return rows, crows
