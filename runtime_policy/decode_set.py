"""The serving loop's decoding set: which requests decode, their contexts, owners and the step at
which each is done, kept so that a run of steps without events costs a fixed number of operations
whatever the batch size.

- the set lives in slots [0, B) of fixed arrays (request ids, owners, and context − decode steps
  run, so contexts grow without being written); a leaving request's slot takes the last one. The
  order of joining, which completions and victim choice follow, is kept as a join sequence number;
- a heap of the decode step at which each decoder is done gives a run's cut and its completions;
  a heap of the step at which each context reaches top-k keeps Σ min(L, top-k) exact without a
  pass over B (NOTE: heap entries are ints, step << SEQ_BITS | join seq, which compare faster than
  tuples; the entries of requests that left are skipped when they surface);
- per-owner counts and context sums, so an owner layout's busiest rank is known without a pass;
- contexts are whole token counts, so every sum is exact in any order.

Does not: account KV (the loop's ledger), choose victims or run anything (loop.py, ordering.py).
"""

from __future__ import annotations

import heapq

import numpy as np

SEQ_BITS = 40  # heap entries: a step count above, a join sequence number in the low bits
SEQ_MASK = (1 << SEQ_BITS) - 1


class DecodeSet:
    """Decoding requests in slots, with their finish and top-k heaps (module docstring)."""

    def __init__(self, max_batch: int, requests: int, ranks: int, topk_tokens: float | None):
        self.b = 0  # decoding requests: slots [0, b)
        self.dsteps = 0  # decode steps run so far
        self.ids = np.zeros(max_batch, dtype=np.int64)  # [max_batch] request of each slot
        self.c0 = np.zeros(max_batch)  # [max_batch] its context − dsteps
        self.owners = np.zeros(max_batch, dtype=np.int64)  # [max_batch] its owner rank
        self.slot_id = [0] * max_batch  # = ids, as a list
        self.slot = [-1] * requests  # each request's slot (−1: not decoding)
        self.c0_of = [0.0] * requests  # = c0 by request
        self.jseq_of = [0] * requests  # when each last joined (a sequence number)
        self.jseq = 0
        self.seq_req = [-1]  # the request of each join sequence number
        self.fin_heap: list[int] = []  # the decode step at which each decoder is done
        self.fin_min = 0  # the step at which the first decoder is done (the top of fin_heap)
        self.capped = topk_tokens is not None
        self.topk = float(topk_tokens) if topk_tokens is not None else 0.0
        self.cap_at = float(np.ceil(self.topk)) if self.capped else 0.0  # first whole context with min(L, top-k) = top-k
        self.unc_heap: list[int] = []  # the decode step at which each decoder's context reaches top-k
        self.unc = [False] * requests  # decoding with context below top-k
        self.unc_cnt, self.unc_c0 = 0, 0.0  # how many, and Σ c0 over them
        self.per_owner = [0] * ranks  # decoders per owner
        self.owner_c0 = [0.0] * ranks  # Σ c0 of each owner's decoders (Σ context = owner_c0 + per_owner × dsteps)
        self.s2 = 0.0  # Σ decoders' contexts

    def context(self, i: int) -> float:
        return self.c0_of[i] + self.dsteps

    def join(self, i: int, c: float, owner: int, done_at_context: float) -> None:
        """Request i, at context c, decodes from now on until its context reaches `done_at_context`."""
        s = self.b
        self.b += 1
        c0 = c - self.dsteps
        fin = int(done_at_context - c) + self.dsteps  # whole numbers
        if s == 0 or fin < self.fin_min:
            self.fin_min = fin
        self.ids[s], self.c0[s], self.owners[s] = i, c0, owner
        self.slot_id[s] = i
        self.slot[i] = s
        self.c0_of[i] = c0
        self.jseq += 1
        seq = self.jseq_of[i] = self.jseq
        self.seq_req.append(i)
        heapq.heappush(self.fin_heap, fin << SEQ_BITS | seq)
        if self.capped and c < self.cap_at:
            heapq.heappush(self.unc_heap, int(self.cap_at - c0) << SEQ_BITS | seq)
            self.unc[i] = True
            self.unc_cnt += 1
            self.unc_c0 += c0
        self.per_owner[owner] += 1
        self.owner_c0[owner] += c0
        self.s2 += c

    def leave(self, i: int, owner: int) -> float:
        """Take request i out (its slot takes the last one); returns its context."""
        s = self.slot[i]
        self.b -= 1
        b = self.b
        if s != b:
            j = self.slot_id[b]
            self.ids[s], self.c0[s], self.owners[s] = j, self.c0_of[j], self.owners[b]
            self.slot_id[s] = j
            self.slot[j] = s
        self.slot[i] = -1
        c0 = self.c0_of[i]
        if self.unc[i]:
            self.unc[i] = False
            self.unc_cnt -= 1
            self.unc_c0 -= c0
        c = c0 + self.dsteps
        self.per_owner[owner] -= 1
        self.owner_c0[owner] -= c0
        self.s2 -= c
        return c

    def in_join_order(self) -> list[int]:
        """The decoding requests in the order they joined."""
        return sorted(self.slot_id[: self.b], key=self.jseq_of.__getitem__)

    def first_to_finish(self) -> int:
        """fin_min after decoders left: the top of fin_heap, past the entries of those that left."""
        heap, seq_req, slot, jseq_of = self.fin_heap, self.seq_req, self.slot, self.jseq_of
        while heap:
            e = heap[0]
            s = e & SEQ_MASK
            i = seq_req[s]
            if slot[i] >= 0 and jseq_of[i] == s:
                self.fin_min = e >> SEQ_BITS
                return self.fin_min
            heapq.heappop(heap)
        self.fin_min = 0
        return 0

    def done_by(self, step: int) -> list[int]:
        """Pop the decoders done by decode step `step`, in the order they joined."""
        due = []
        last = (step + 1) << SEQ_BITS
        heap, seq_req, slot, jseq_of = self.fin_heap, self.seq_req, self.slot, self.jseq_of
        while heap and heap[0] < last:
            s = heapq.heappop(heap) & SEQ_MASK
            i = seq_req[s]
            if slot[i] >= 0 and jseq_of[i] == s:
                due.append(s)
        due.sort()
        return [seq_req[s] for s in due]

    def capped_sum(self, at: int) -> float:
        """Σ min(context, top-k) over the decoders at decode step `at` (never less than the last call's)."""
        last = (at + 1) << SEQ_BITS  # entries below: the context reaches top-k at step ≤ at
        heap = self.unc_heap
        if heap and heap[0] < last:
            seq_req, unc, jseq_of, c0_of = self.seq_req, self.unc, self.jseq_of, self.c0_of
            while heap and heap[0] < last:
                s = heapq.heappop(heap) & SEQ_MASK
                i = seq_req[s]
                if unc[i] and jseq_of[i] == s:
                    unc[i] = False
                    self.unc_cnt -= 1
                    self.unc_c0 -= c0_of[i]
        return self.unc_c0 + self.unc_cnt * at + self.topk * (self.b - self.unc_cnt)

    def owner_contexts(self) -> list[float]:
        """[T] Σ context of each owner's decoders now."""
        d = self.dsteps
        return [x + c * d for x, c in zip(self.owner_c0, self.per_owner)]
