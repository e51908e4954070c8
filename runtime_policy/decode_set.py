"""The serving loop's decoding set: which requests decode, their contexts, owners and the step at
which each is done, kept so that a run of steps without events costs a fixed number of operations
per owner group whatever the batch size.

- the set lives in slots [0, B) (request ids, in a list); a leaving request's slot takes the last
  one. Each request keeps its owner and its context less its group's clock, so contexts grow
  without being written; `arrays` builds the slots' ids, contexts − decode steps run and owners as
  numpy arrays for a reader that wants them (an executor that reads per-request contexts, the
  projection, a preemption's keys). NOTE: lists, not arrays, are kept: a numpy scalar write costs
  ~100 ns, and the simulator reads only the sums below. The order of joining, which completions and
  victim choice follow, is kept as a join sequence number;
- the decoders are grouped by the current layout's owner groups (G groups of R consecutive ranks,
  the planner's Placement), and each group keeps its own clock: the decode steps run, less the
  steps it sat out (`lag`) while its scheduler ran a prefill batch instead (SGLang runs a step's
  prefill or its decodes, not both: planner.engines.scheduling). A request's context is its c0 +
  its group's clock; a run of k steps in which some groups prefill advances every clock but those
  (`advance`, a few operations per group that sits out);
- per group, a heap of the group-clock step at which each decoder is done gives a run's cut and its
  completions, and a heap of the step at which each context reaches top-k keeps Σ min(L, top-k)
  exact without a pass over B (NOTE: heap entries are ints, step << SEQ_BITS | join seq, which
  compare faster than tuples; the entries of requests that left are skipped when they surface);
- per-owner counts and context sums, so a layout's busiest owner group is known without a pass;
- contexts are whole token counts, so every sum is exact in any order.

With one group and no group sitting out, this is one clock, one heap of each kind.

Does not: account KV (the loop's ledger), choose victims or run anything (loop.py, ordering.py).
"""

from __future__ import annotations

import heapq

import numpy as np

SEQ_BITS = 40  # heap entries: a step count above, a join sequence number in the low bits
SEQ_MASK = (1 << SEQ_BITS) - 1
_FAR = 1 << 62  # a decode step never reached
_heappush, _heappop = heapq.heappush, heapq.heappop  # (module globals: one lookup, not two, per event)


class DecodeSet:
    """Decoding requests in slots, with their per-group clocks and heaps (module docstring)."""

    # NOTE: slots (~35 fields, read per event: an instance dict past 30 keys is slower to read)
    __slots__ = ("b", "dsteps", "version", "slot_id", "slot", "c0_of", "group_of", "owner_of", "done_at", "jseq_of",
                 "jseq", "seq_req", "fin_min", "capped", "topk", "cap_at", "whole_topk", "unc", "ranks", "per_owner",
                 "owner_c0", "s2", "groups", "group_range", "group_ranks", "lag", "fin_heaps", "fin_top", "fin_at", "fin_of", "unc_heaps",
                 "unc_cnt", "unc_c0", "gcount", "gc0", "unc_n", "unc_sum", "unc_lag", "cap_next", "__dict__")

    def __init__(self, max_batch: int, requests: int, ranks: int, topk_tokens: float | None, groups: int = 1):
        self.b = 0  # decoding requests: slots [0, b)
        self.dsteps = 0  # decode steps run so far (every group's clock counts them, less its lag)
        self.version = 0  # changes whenever what `arrays` answers changes other than by dsteps
        self.slot_id = [0] * max_batch  # the request of each slot
        self.slot = [-1] * requests  # each request's slot (−1: not decoding)
        self.c0_of = [0.0] * requests  # its context − its group's clock
        self.group_of = [0] * requests  # its owner group
        self.owner_of = [0] * requests  # its owner rank
        self.done_at = [0.0] * requests  # the context at which it is done
        self.jseq_of = [0] * requests  # when each last joined (a sequence number)
        self.fin_of = [-1] * requests  # its entry in its group's heap of completions
        self.jseq = 0
        self.seq_req = [-1]  # the request of each join sequence number
        self.fin_min = 0  # the decode step (dsteps) at which the first decoder is done
        self.capped = topk_tokens is not None
        self.topk = float(topk_tokens) if topk_tokens is not None else 0.0
        self.cap_at = float(np.ceil(self.topk)) if self.capped else 0.0  # first whole context with min(L, top-k) = top-k
        # `capped_sum` from running totals over every group (its whole-number sums are exact in any
        # order; a top-k that is not a whole number takes the per-group pass)
        self.whole_topk = self.capped and float(self.topk).is_integer()
        self.unc = [False] * requests  # decoding with context below top-k
        self.ranks = ranks
        self.per_owner = [0] * ranks  # decoders per owner
        self.owner_c0 = [0.0] * ranks  # Σ c0 of each owner's decoders (Σ context = owner_c0 + per_owner × its clock)
        self.s2 = 0.0  # Σ decoders' contexts
        self._set_groups(groups)

    def _set_groups(self, groups: int) -> None:
        self.groups = groups
        self.group_range = range(groups)
        self.group_ranks = self.ranks // groups
        self.lag = [0] * groups  # steps each group sat out since the grouping was set
        self.fin_heaps: list[list[int]] = [[] for _ in range(groups)]  # group-clock step each decoder is done
        # per group, its heap's least entry of a decoder still decoding (−1: none or not known) and
        # the decode step (dsteps) at which that decoder is done (_FAR: none, −1: not known), kept
        # through joins and other decoders' leaves, so a pass over the groups (`_fin_tops`) walks
        # only the heaps whose first decoder is done or not known (NOTE: most groups, at most
        # completions, cost a comparison)
        self.fin_top = [-1] * groups
        self.fin_at = [_FAR] * groups
        self.unc_heaps: list[list[int]] = [[] for _ in range(groups)]  # group-clock step its context reaches top-k
        self.unc_cnt = [0] * groups  # decoding with context below top-k, per group
        self.unc_c0 = [0.0] * groups  # Σ c0 over them
        self.gcount = [0] * groups  # decoders per group
        self.gc0 = [0.0] * groups  # Σ c0 of each group's decoders (Σ context = gc0 + gcount × its clock)
        # over every group: decoders below top-k, Σ their c0, Σ their group's lag, and a lower bound
        # on the decode step at which the next one reaches top-k (the heaps' tops + their lags)
        self.unc_n = 0
        self.unc_sum = 0.0
        self.unc_lag = 0
        self.cap_next = _FAR

    # ---- the set --------------------------------------------------------------------------------
    def context(self, i: int) -> float:
        return self.c0_of[i] + (self.dsteps - self.lag[self.group_of[i]])

    def join(self, i: int, c: float, owner: int, done_at_context: float) -> None:
        """Request i, at context c, decodes from now on until its context reaches `done_at_context`."""
        s = self.b
        self.b = s + 1
        g = owner // self.group_ranks
        lag = self.lag[g]
        clock = self.dsteps - lag
        c0 = c - clock
        fin = int(done_at_context - c) + clock  # whole numbers, on the group's clock
        at = fin + lag  # on dsteps
        if s == 0 or at < self.fin_min:
            self.fin_min = at
        self.slot_id[s] = i
        self.slot[i] = s
        self.c0_of[i] = c0
        self.group_of[i] = g
        self.owner_of[i] = owner
        self.version += 1
        self.done_at[i] = done_at_context
        seq = self.jseq = self.jseq + 1
        self.jseq_of[i] = seq
        self.seq_req.append(i)
        e = self.fin_of[i] = fin << SEQ_BITS | seq
        _heappush(self.fin_heaps[g], e)
        fin_at = self.fin_at
        if fin_at[g] >= 0:  # known: it may be the group's first decoder now
            top = self.fin_top[g]
            if top < 0 or e < top:
                self.fin_top[g] = e
                fin_at[g] = at
        if self.capped and c < self.cap_at:
            e = int(self.cap_at - c0)
            _heappush(self.unc_heaps[g], e << SEQ_BITS | seq)
            self.unc[i] = True
            self.unc_cnt[g] += 1
            self.unc_c0[g] += c0
            self.unc_n += 1
            self.unc_sum += c0
            self.unc_lag += lag
            if e + lag < self.cap_next:
                self.cap_next = e + lag
        self.per_owner[owner] += 1
        self.owner_c0[owner] += c0
        self.gcount[g] += 1
        self.gc0[g] += c0
        self.s2 += c

    def leave(self, i: int, owner: int) -> float:
        """Take request i out (its slot takes the last one); returns its context."""
        slot = self.slot
        s = slot[i]
        b = self.b = self.b - 1
        if s != b:
            j = self.slot_id[b]
            self.slot_id[s] = j
            slot[j] = s
        slot[i] = -1
        self.version += 1
        c0 = self.c0_of[i]
        g = self.group_of[i]
        lag = self.lag[g]
        if self.fin_top[g] == self.fin_of[i]:  # the group's first decoder: not known now
            self.fin_top[g] = self.fin_at[g] = -1
        if self.unc[i]:
            self.unc[i] = False
            self.unc_cnt[g] -= 1
            self.unc_c0[g] -= c0
            self.unc_n -= 1
            self.unc_sum -= c0
            self.unc_lag -= lag
        c = c0 + (self.dsteps - lag)
        self.per_owner[owner] -= 1
        self.owner_c0[owner] -= c0
        self.gcount[g] -= 1
        self.gc0[g] -= c0
        self.s2 -= c
        return c

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """([B] request ids, [B] contexts − dsteps, [B] owner ranks) of the slots, as new numpy arrays
        (a request's context at decode step dsteps is its entry + dsteps)."""
        ids, c0 = self.id_contexts()
        return ids, c0, np.array(list(map(self.owner_of.__getitem__, self.slot_id[: self.b])), dtype=np.int64)

    def id_contexts(self) -> tuple[np.ndarray, np.ndarray]:
        """`arrays` without the owners: ([B] request ids, [B] contexts − dsteps)."""
        ids = self.slot_id[: self.b]
        c0 = np.array(list(map(self.c0_of.__getitem__, ids)), dtype=np.float64)  # − its group's lag below
        lag = self.lag
        if any(lag):
            if self.groups == 1:
                c0 -= lag[0]
            else:
                c0 -= np.array(lag, dtype=np.float64)[np.array(list(map(self.group_of.__getitem__, ids)), dtype=np.int64)]
        return np.array(ids, dtype=np.int64), c0

    def in_join_order(self) -> list[int]:
        """The decoding requests in the order they joined."""
        return sorted(self.slot_id[: self.b], key=self.jseq_of.__getitem__)

    # ---- the clocks -------------------------------------------------------------------------------
    def advance(self, k: int, sat_out: tuple | list = ()) -> int:
        """k decode steps ran; the groups in `sat_out` ran prefill instead (their decoders kept their
        contexts). Returns how many decoders advanced. NOTE: the caller updates `s2` (it knows
        the count) and calls `first_to_finish` when a sitting-out group's completions moved."""
        self.dsteps += k
        if not sat_out:
            return self.b
        moved = self.b
        lag, gcount, unc_cnt = self.lag, self.gcount, self.unc_cnt
        fin_at = self.fin_at
        for g in sat_out:
            lag[g] += k
            moved -= gcount[g]
            if 0 <= fin_at[g] < _FAR:
                fin_at[g] += k  # its first decoder is done k steps later
            self.unc_lag += unc_cnt[g] * k  # (its contexts reach top-k later: cap_next stays a bound)
        self.version += 1
        return moved

    def regroup(self, groups: int) -> None:
        """The layout changed its owner groups: every decoder keeps its context and remaining steps
        on the new groups' clocks (a pass over B, at a switch's commit)."""
        if groups == self.groups and not any(self.lag):
            return
        members = self.in_join_order()
        state = [(i, self.context(i), self.owner_of[i], self.done_at[i]) for i in members]
        # = a leave of each (NOTE: its per-group parts are reset by _set_groups; s2, a sum of whole
        # numbers, is Σ their contexts again after the joins)
        slot, unc = self.slot, self.unc
        for i in members:
            slot[i] = -1
            unc[i] = False
        self.version += len(members)
        self.b = 0
        self.s2 = 0.0
        self.per_owner[:] = [0] * self.ranks
        self.owner_c0[:] = [0.0] * self.ranks
        self._set_groups(groups)
        for i, c, owner, done_at in state:
            self.join(i, c, owner, done_at)
        self.first_to_finish()

    def first_to_finish(self) -> int:
        """fin_min after decoders left (or groups sat out): the earliest top of the groups' heaps,
        past the entries of those that left, on dsteps."""
        self._fin_tops(-1)
        return self.fin_min

    def done_by(self, step: int) -> list[int]:
        """Pop the decoders done by decode step `step`, in the order they joined, and set `fin_min`
        as `first_to_finish` answers once they have left (NOTE: one pass over the groups' heaps for
        both: their entries are popped here, and leaving touches no heap)."""
        due = self._fin_tops(step)
        if len(due) > 1:
            due.sort()
        seq_req = self.seq_req
        return [seq_req[s] for s in due]

    def _fin_tops(self, step: int) -> list[int]:
        """Pop the entries of decoders done by decode step `step` (−1: none) from the heaps of the
        groups whose first decoder is done by then or not known, and those of decoders that left,
        down to each one's first decoder (`fin_top`, `fin_at`); set fin_min from every group's.
        Returns the join sequence numbers of the decoders popped as done."""
        due: list[int] = []
        at_of = self.fin_at
        if min(at_of) <= step:
            seq_req, slot, jseq_of, lag, tops, heaps = self.seq_req, self.slot, self.jseq_of, self.lag, \
                self.fin_top, self.fin_heaps
            pop = heapq.heappop
            for g in self.group_range:
                if at_of[g] > step:
                    continue
                heap = heaps[g]
                last = (step - lag[g] + 1) << SEQ_BITS if step >= 0 else -1
                e, at = -1, _FAR
                while heap:
                    top = heap[0]
                    s = top & SEQ_MASK
                    i = seq_req[s]
                    if top < last:
                        pop(heap)
                        if slot[i] >= 0 and jseq_of[i] == s:
                            due.append(s)
                    elif slot[i] >= 0 and jseq_of[i] == s:
                        e, at = top, (top >> SEQ_BITS) + lag[g]
                        break
                    else:
                        pop(heap)
                tops[g], at_of[g] = e, at
        best = min(at_of)
        self.fin_min = best if best < _FAR else 0
        return due

    def capped_sum(self, at: int, sat_out: tuple | list = (), active_only: bool = False) -> float:
        """Σ min(context, top-k) over the decoders at decode step `at` (never less than the last
        call's), the groups in `sat_out` held at their clocks now (they sit out until then), or
        left out (`active_only`). NOTE: with no group held, from the running totals (a few operations
        whatever the group count), the heaps popped only once a context may have reached top-k."""
        if not sat_out and self.whole_topk:
            if at >= self.cap_next:
                self._pop_capped(at)
            n = self.unc_n
            return self.unc_sum + (n * at - self.unc_lag) + self.topk * (self.b - n)
        total = 0.0
        lag, heaps, unc_cnt, unc_c0, gcount, topk = self.lag, self.unc_heaps, self.unc_cnt, self.unc_c0, self.gcount, \
            self.topk
        for g in self.group_range:
            if sat_out and g in sat_out:
                if active_only:
                    continue
                t = self.dsteps - lag[g]  # the group's clock now: it sits out until `at`
            else:
                t = at - lag[g]  # the group's clock at `at`
            heap = heaps[g]
            if heap and heap[0] < (t + 1) << SEQ_BITS:  # contexts that reach top-k by then
                self._capped(g, (t + 1) << SEQ_BITS)
            n = unc_cnt[g]
            total += unc_c0[g] + n * t + topk * (gcount[g] - n)
        return total

    def _pop_capped(self, at: int) -> None:
        """Every group's decoders whose context reaches top-k by decode step `at` leave the counts
        below top-k; `cap_next` from the heaps' tops."""
        lag, heaps = self.lag, self.unc_heaps
        nxt = _FAR
        for g in self.group_range:
            heap = heaps[g]
            last = (at - lag[g] + 1) << SEQ_BITS
            if heap and heap[0] < last:
                self._capped(g, last)
            if heap:
                x = (heap[0] >> SEQ_BITS) + lag[g]
                if x < nxt:
                    nxt = x
        self.cap_next = nxt

    def _capped(self, g: int, last: int) -> None:
        """Group g's decoders whose context reaches top-k before heap entry `last` leave its uncapped
        count and Σ c0."""
        heap, seq_req, unc, jseq_of, c0_of = self.unc_heaps[g], self.seq_req, self.unc, self.jseq_of, self.c0_of
        while heap and heap[0] < last:
            s = heapq.heappop(heap) & SEQ_MASK
            i = seq_req[s]
            if unc[i] and jseq_of[i] == s:
                unc[i] = False
                self.unc_cnt[g] -= 1
                self.unc_c0[g] -= c0_of[i]
                self.unc_n -= 1
                self.unc_sum -= c0_of[i]
                self.unc_lag -= self.lag[g]

    def owner_contexts(self) -> list[float]:
        """[T] Σ context of each owner's decoders now."""
        d, lag, r = self.dsteps, self.lag, self.group_ranks
        if self.groups == 1:
            d -= lag[0]
            return [x + c * d for x, c in zip(self.owner_c0, self.per_owner)]
        if r == 1:  # a group per rank (DP, DOP)
            return [x + c * (d - g) for x, c, g in zip(self.owner_c0, self.per_owner, lag)]
        return [x + c * (d - lag[k // r]) for k, (x, c) in enumerate(zip(self.owner_c0, self.per_owner))]

    def group_contexts(self) -> list[float]:
        """[G] Σ context of each owner group's decoders now."""
        d = self.dsteps
        return [x + c * (d - lag) for x, c, lag in zip(self.gc0, self.gcount, self.lag)]
