"""The host tier's cache manager (executor.host_cache, numpy).

Golden cases spell out the bucketed LRU's arithmetic; a plain-Python model of the same policy
(dicts and sorted lists) checks the vectorized resolver on random traces, with the invariants
that no page is lost or held twice and that budgets hold.
"""

import numpy as np
import pytest

from executor.host_cache import (DISABLED, FREE, HostCacheSpec, HostTierCache, NumpyOps, OutOfSlots,
                                 WorkingSetTooLarge, budget_pages_for, pages_for)
from executor.sparse_trace import TopKTraceSpec, topk_trace


class StrictOps(NumpyOps):
    """NumpyOps whose scatters fail when two writes to one place carry different values: numpy keeps the
    last, a GPU scatter any of them, so the resolver must never depend on which one lands."""

    @staticmethod
    def _agree(idx, values):
        order = np.argsort(idx, kind="stable")
        i, v = idx[order], values[order]
        clash = (i[1:] == i[:-1]) & (v[1:] != v[:-1])
        assert not clash.any(), f"conflicting writes to index {i[1:][clash][:3]}"

    def put_rows(self, a, idx, values):
        v = np.broadcast_to(values, idx.shape)
        for r in range(idx.shape[0]):
            self._agree(idx[r], v[r])
        super().put_rows(a, idx, values)

    def put(self, a, idx, values):
        self._agree(idx, np.broadcast_to(values, idx.shape))
        super().put(a, idx, values)


def make(layers=1, rows=1, page_rows=1, max_pages=16, budget=4, topk=2, buckets=8, total=64, ops=None):
    spec = HostCacheSpec(num_layers=layers, max_requests=rows, page_rows=page_rows, max_pages=max_pages,
                         max_budget_pages=budget, topk=topk, num_buckets=buckets)
    return HostTierCache(spec, total_slots=total, ops=ops)


def run(cache, steps, layer=0):
    out = []
    for idx in steps:
        out.append(cache.resolve(layer, np.array([idx] if np.ndim(idx) == 1 else idx, dtype=np.int64)))
        cache.advance()
    return out


def test_lru_golden_evicts_the_oldest_bucket():
    c = make(budget=4, topk=2)
    assert c.admit(0, 16, 4) == [0, 1, 2, 3]
    r = run(c, [[0, 1], [2, 3], [0, 4], [1, 2]])
    # t=1,2: pages 0..3 fill free slots 0..3 in slot order
    assert c.slot_page[0, 0, :4].tolist() == [0, 4, 2, 1]
    # t=3: page 0 hits slot 0 (stamped 3); eligible slots 1 (read t=1: age 2, bucket 1), 2 and 3 (t=2: age 1,
    # bucket 0) -> page 4 takes slot 1, page 1 leaves the directory
    assert r[2].row_loc.tolist() == [[0, 1]] and r[2].miss_src_row[:1].tolist() == [4]
    # t=4: page 2 hits slot 2; eligible 0 and 1 (t=3: bucket 0) and 3 (t=2: age 2, bucket 1) -> page 1 -> slot 3
    assert r[3].row_loc.tolist() == [[3, 2]] and r[3].miss_dst_row[:2].tolist() == [3, -1]
    assert c.directory[0, 0, :5].tolist() == [0, 3, 2, -1, 1]
    assert c.stats[0].tolist() == [2, 6, 6, 0]  # hits, missing entries, fetched units, overflow


@pytest.mark.parametrize("buckets, victim_page", [(2, 0), (8, 1)])
def test_saturated_buckets_tie_by_slot_order(buckets, victim_page):
    # t1 page 0 -> slot 0, t2 page 1 -> slot 1, t3 page 0 hits (slot 0 read at 3), t4 page 2 -> free slot 2;
    # t5 page 3: slot 0 age 2, slot 1 age 3, slot 2 age 1. With 2 buckets ages >= 2 share bucket 1 and the
    # tie goes to slot 0 (page 0, the more recent); with 8 buckets slot 1 (age 3, bucket 2) is older.
    c = make(budget=3, topk=1, buckets=buckets)
    c.admit(0, 16, 3)
    run(c, [[0], [1], [0], [2], [3]])
    assert victim_page not in c.slot_page[0, 0, :3].tolist()
    assert sorted(c.slot_page[0, 0, :3].tolist()) == sorted({0, 1, 2, 3} - {victim_page})


def test_free_slots_go_before_preloaded_pages():
    c = make(budget=4, topk=1)
    c.admit(0, 16, 4)
    host, dev = c.preload(0, np.array([7, 9]))
    assert host.tolist() == [7, 9] and dev.tolist() == [0, 1]  # local slots 0, 1 = device slots 0, 1
    assert c.slot_last[0, 0, :4].tolist() == [1 - 8, 1 - 8, FREE, FREE] and c.slot_last[0, 0, 4] == DISABLED
    run(c, [[3], [4], [5]])  # two free slots, then the oldest preloaded page (slot order: page 7)
    assert c.slot_page[0, 0, :4].tolist() == [5, 9, 3, 4]


def test_pages_of_several_rows_fetch_once_and_locate_each_token():
    c = make(rows=2, page_rows=4, max_pages=8, budget=3, topk=3, total=10)
    c.admit(0, 32, 3)
    c.admit(1, 20, 3)  # device slots 3, 4, 5
    r = c.resolve(0, np.array([[5, 6, 13], [0, -1, 19]]))
    # row 0: pages 1, 1, 3 -> two units; row 1: pages 0, 4 (-1 selects nothing)
    assert r.miss_bounds.tolist() == [0, 2, 4]
    # host rows: request b's region starts at b * max_pages * page_rows = b * 32; a unit starts at page * 4
    assert r.miss_src_row[:4].tolist() == [4, 12, 32 + 0, 32 + 16]
    assert r.miss_dst_row[:4].tolist() == [0 * 4, 1 * 4, 3 * 4, 4 * 4]
    # a token's device row = device slot * 4 + position % 4
    assert r.row_loc.tolist() == [[0 * 4 + 1, 0 * 4 + 2, 1 * 4 + 1], [3 * 4 + 0, -1, 4 * 4 + 3]]
    assert c.stats[0].tolist() == [0, 5, 4, 0]


def test_budgets_come_out_of_one_device_cache():
    c = make(rows=3, budget=4, total=6)
    a = c.admit(0, 16, 4)
    with pytest.raises(OutOfSlots, match="budget_pages=3 exceeds the 2 free slots of 6"):
        c.admit(1, 16, 3)
    b = c.admit(1, 16, 2)
    assert not set(a) & set(b) and c.free_slots == 0
    assert sorted(c.release(0)) == sorted(a) and c.free_slots == 4
    with pytest.raises(ValueError, match=r"budget_pages=5 is not in \[1, max_budget_pages=4\]"):
        c.admit(2, 16, 5)
    with pytest.raises(ValueError, match="row=1 already holds a request"):
        c.admit(1, 16, 1)
    with pytest.raises(ValueError, match="ctx_rows=17 exceeds max_pages\\*page_rows=16"):
        c.admit(2, 17, 1)


def test_a_step_larger_than_its_budget_is_refused():
    c = make(budget=2, topk=3)
    c.admit(0, 16, 2)
    with pytest.raises(WorkingSetTooLarge, match="3 distinct missing pages but only 2 free or evictable slots"):
        c.resolve(0, np.array([[1, 2, 3]]))


def test_spec_and_budget_arithmetic():
    with pytest.raises(ValueError, match=r"^HostCacheSpec.page_rows=0 must be a positive int$"):
        HostCacheSpec(num_layers=1, max_requests=1, page_rows=0, max_pages=1, max_budget_pages=1, topk=1)
    # 128K tokens in 64-row pages = 2048 pages; 90 % on host leaves ceil(0.1 * 2048) = 205 slots
    assert pages_for(131072, 64) == 2048 and budget_pages_for(131072, 0.9, 64) == 205
    assert budget_pages_for(100, 0.5, 1) == 50 and budget_pages_for(1, 0.9, 64) == 1
    with pytest.raises(ValueError, match="host_fraction=1.0"):
        budget_pages_for(100, 1.0, 1)
    spec = HostCacheSpec(num_layers=1, max_requests=1, page_rows=64, max_pages=2048, max_budget_pages=205, topk=1)
    assert spec.metadata_bytes_per_request_layer() == 8 * 2049 + 24 * 206


class ModelLRU:
    """The same policy in plain Python, one (layer, request) at a time: the oracle for random traces."""

    def __init__(self, budget, buckets):
        self.budget, self.buckets = budget, buckets
        self.page_of = {}  # slot -> page
        self.last = {s: None for s in range(budget)}  # slot -> step read (None: free)

    def step(self, pages, now):
        where = {p: s for s, p in self.page_of.items()}
        for p in pages:
            if p in where:
                self.last[where[p]] = now
        missing = sorted({p for p in pages if p not in where})

        def bucket(s):
            return self.buckets if self.last[s] is None else min(now - self.last[s] - 1, self.buckets - 1)
        cands = sorted((s for s in range(self.budget) if self.last[s] != now), key=lambda s: (-bucket(s), s))
        assert len(missing) <= len(cands)
        # the chosen victims take the missing pages in slot order (page order of the misses)
        for p, s in zip(missing, sorted(cands[:len(missing)])):
            self.page_of[s] = p
            self.last[s] = now
        return len(missing)


@pytest.mark.parametrize("page_rows, buckets, reuse", [(1, 8, 0.8), (8, 2, 0.5), (4, 8, 0.0)])
def test_random_traces_match_the_plain_model_and_lose_nothing(page_rows, buckets, reuse):
    rows, layers, k, ctx = 3, 2, 12, [300, 97, 12]
    max_pages = pages_for(300, page_rows)
    budgets = [max(k + 1, budget_pages_for(n, 0.6, page_rows)) for n in ctx]
    budgets = [min(b, max(k + 1, pages_for(n, page_rows))) for b, n in zip(budgets, ctx)]
    c = make(layers, rows, page_rows, max_pages, max(budgets), k, buckets, total=sum(budgets) + 5, ops=StrictOps())
    for b, n in enumerate(ctx):
        c.admit(b, n, budgets[b])
    models = {(layer, b): ModelLRU(budgets[b], buckets) for layer in range(layers) for b in range(rows)}
    trace = topk_trace(TopKTraceSpec(topk=k, reuse=reuse, cluster_rows=3, seed=page_rows), ctx, layers, 25)
    for t in range(len(trace)):
        now = int(c.clock[0])
        for layer in range(layers):
            idx = trace[t, layer]
            res = c.resolve(layer, idx)
            for b in range(rows):
                pages = [int(x) // page_rows for x in idx[b] if x >= 0]
                units = models[layer, b].step(pages, now)
                assert units == res.miss_bounds[b + 1] - res.miss_bounds[b]
                held = {s: p for s, p in enumerate(c.slot_page[layer, b, :budgets[b]].tolist()) if p >= 0}
                assert held == models[layer, b].page_of  # same victims, same slots
                assert len(set(held.values())) == len(held)  # no page held twice
                resident = {p: s for p, s in enumerate(c.directory[layer, b, :max_pages].tolist()) if s >= 0}
                assert resident == {p: s for s, p in held.items()}  # directory and slots agree: nothing lost
                assert (c.slot_page[layer, b, budgets[b]:] == -1).all()  # the budget holds
                glob = c.slot_global[b, :budgets[b]]
                sel = idx[b] >= 0
                assert (res.row_loc[b][sel] == glob[c.directory[layer, b, idx[b][sel] // page_rows]] * page_rows
                        + idx[b][sel] % page_rows).all()
                assert (res.row_loc[b][~sel] == -1).all()
        c.advance()
    valid = (trace >= 0).sum(axis=(0, 2, 3))
    assert (c.stats[:, 0] + c.stats[:, 1] == valid).all()


def test_append_token_writes_through():
    c = make(rows=2, page_rows=4, max_pages=4, budget=2, topk=1, total=4)
    c.admit(0, 5, 2)  # next token: position 5, page 1
    c.preload(0, np.array([1]))
    host, dev = c.append_token()
    assert host.tolist() == [5, -1]  # row 1 holds no request
    assert dev.tolist() == [[0 * 4 + 1, -1]]  # page 1 sits in device slot 0; offset 5 % 4
    assert c.ctx_rows.tolist() == [6, 0]
