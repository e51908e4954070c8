"""The serving loop's request states, its waiting queue, and the run-time sum the loop advances
its clock by.

Does not: decide admission (admission.py) or order requests (ordering.py: the loop hands its keys).
"""

from __future__ import annotations

import numpy as np

PENDING, WAITING, PREFILL, DECODE, DONE, ABORTED = range(6)  # a request's states, in the order it moves


class WaitingQueue:
    """Requests waiting for admission: `ids[pos:]` in admission order with their KV needs, and the
    ones that joined since (`new`), re-sorted by the ordering's keys when it changed. `ctxf`: every
    request's context (the serving loop's array; a waiting request's does not change while it
    waits)."""

    def __init__(self, ctxf: np.ndarray) -> None:
        self.ids: list[int] = []
        self.pos = 0
        self.new: list[int] = []
        self.dirty = False
        self.version = 0  # changes whenever `ids` is replaced
        self._ctxf = ctxf
        self._needs: np.ndarray | None = None  # [len(ids)] context tokens each needs, once built

    def __len__(self) -> int:
        return len(self.ids) - self.pos + len(self.new)

    def push(self, i: int) -> None:
        self.new.append(i)
        self.dirty = True

    def needs(self) -> np.ndarray:
        """[len(ids)] context tokens each queued request needs (NOTE: built when first read after `ids`
        changed: a request that arrives and is admitted in the same turn needs no array)."""
        if self._needs is None:
            self._needs = self._ctxf[self.ids] if self.ids else np.zeros(0)
        return self._needs

    def replace(self, ids: list[int]) -> None:
        """The queue is `ids` now (from its head)."""
        self.ids, self.pos, self._needs = ids, 0, None
        self.version += 1

    def resort(self, keyfn, keys_are_arrival: bool) -> None:
        """`keys_are_arrival`: keyfn's keys are the arrival times (requests are numbered in arrival order)."""
        if self.pos >= len(self.ids) and len(self.new) == 1:
            self.replace(self.new)  # one request: nothing to sort (the common case)
        else:
            ids = self.ids[self.pos:] + self.new
            if keys_are_arrival and ids == sorted(ids):
                # NOTE: in request order, so in arrival order: the stable sort by arrival leaves them
                # as they are (the new ones are arrivals after the queue's last, unless preempted)
                old, pos = self._needs, self.pos
                self.replace(ids)
                if old is not None:  # the needs kept, the new ones' after (NOTE: a list of ids to an
                    # index array costs ~0.1 µs a request: rebuilding a long queue's was ~10 µs a turn)
                    self._needs = np.concatenate((old[pos:], self._ctxf[self.new]))
            else:
                ids = np.array(ids, dtype=np.int64)
                ids = ids[np.argsort(keyfn(ids), kind="stable")]
                self.replace(ids.tolist())
                self._needs = self._ctxf[ids]
        self.new, self.dirty = [], False


def sum_as_numpy(x: list[float]) -> float:
    """`np.add.reduce` of a list of floats in numpy's order (pairwise: blocks of ≤ 128 summed in 8
    lanes, numpy's `pairwise_sum`), bit for bit, without building an array (NOTE: a run's step
    times are summed once per run; the array round trip costs more than the sum, and the sum must
    be numpy's so a run priced either way ends at the same time)."""
    n = len(x)
    if n < 8:
        res = -0.0
        for v in x:
            res += v
        return res
    if n <= 128:
        m = n - n % 8
        # lane j: x[j] + x[j + 8] + … in order, the 8 lanes in locals (~2× the list's speed)
        r0, r1, r2, r3, r4, r5, r6, r7 = x[:8]
        for i in range(8, m, 8):
            a0, a1, a2, a3, a4, a5, a6, a7 = x[i:i + 8]
            r0 += a0
            r1 += a1
            r2 += a2
            r3 += a3
            r4 += a4
            r5 += a5
            r6 += a6
            r7 += a7
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        for i in range(m, n):
            res += x[i]
        return res
    half = n // 2
    half -= half % 8
    return sum_as_numpy(x[:half]) + sum_as_numpy(x[half:])
