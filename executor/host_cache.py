"""Host-memory KV tier: the GPU cache manager of a sparse-attention decode step (pure numpy core).

What it does: a request's whole KV lives in host memory (the backing store); the GPU holds a cache
of its pages, `budget_pages` slots per request and layer (the per-request HBM budget). Each step,
per layer, `resolve` takes the sparse indices (DSA-style top-k token positions [B, K], -1 = none),
finds which pages are resident (hits, read in place), picks victims for the missing pages by a
bucketed LRU, installs the misses in the directory, and returns where every selected token sits in
the device cache plus the compacted list of pages to fetch over the host link (host row -> device
row, one unit = `page_rows` consecutive rows). `page_rows` = 1 is token granularity (SGLang
HiSparse), 64 a page of 64 rows (SGLang HiCache / SPIN pages), where one selected token costs a
whole page on a miss.
What it does not do: move bytes (executor.torch_executor.host_tier does, with this same algorithm
on device tensors), size budgets from locality (SPIN resizes them online; here a budget is fixed at
admission), prefetch ahead of the indices, or bound the directory by the working set.

The algorithm is written once against a tiny array namespace (`NumpyOps` here, `TorchOps` in
host_tier.py), fixed-shape and without host reads, so the torch backend runs inside a CUDA graph
and both backends give the same slots and counts for the same trace (tested).

Metadata per (layer, request): a dense page directory (8 B per page of context: page -> local slot,
-1 when not resident) and three slot tables sized to the budget (page held, last step read, device
slot). NOTE: SPIN's two-level layout sizes the directory to the working set too; a dense directory
is 0.7 % of a 1152-B-row request's KV at token granularity and 0.01 % at 64-row pages, and it keeps
the lookup one gather, so it is what this first version does.

Bucketed LRU (SPIN, arXiv 2604.26837, "a GPU-friendly bucketed LRU"; this implementation is ours):
a slot's age is the number of steps since it was last read; ages fall in `num_buckets` buckets
(0 = read last step, ..., num_buckets-1 = idle that long or longer) and free slots in one more,
oldest. Victims come from the oldest buckets first, and within the cut-off bucket in slot order,
so choosing them is a histogram, two prefix sums and a compaction over the slots: no sort of the
slots. Slots read in the current step are never victims, so a step whose distinct pages exceed
its budget cannot run: numpy raises `WorkingSetTooLarge`, the device backend counts it in
`stats[:, 3]` and `check()` raises.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

FREE = -(1 << 60)
"""slot_last of a free slot: older than any step, so free slots are taken first."""
DISABLED = 1 << 60
"""slot_last of a slot past a request's budget (and of the dump column): never a victim."""
STAT_NAMES = ("hit_entries", "miss_entries", "fetched_units", "overflow_units")


class WorkingSetTooLarge(RuntimeError):
    """A step selects more distinct missing pages than the request's free or evictable slots."""


class OutOfSlots(RuntimeError):
    """The device cache has fewer free slots than an admission's budget."""


class NumpyOps:
    """The array operations `HostTierCache` uses, on numpy int64 arrays (CPU, eager)."""

    eager = True

    def full(self, shape, value):
        return np.full(shape, value, dtype=np.int64)

    def asarray(self, a):
        return np.asarray(a, dtype=np.int64)

    def arange(self, n):
        return np.arange(n, dtype=np.int64)

    def to_numpy(self, a):
        return np.asarray(a)

    def where(self, c, a, b):
        return np.where(c, a, b)

    def clamp_min(self, a, v):
        return np.maximum(a, v)

    def clamp_max(self, a, v):
        return np.minimum(a, v)

    def as_int(self, a):
        return a.astype(np.int64)

    def take_rows(self, a, idx):
        return np.take_along_axis(a, idx, axis=1)

    def put_rows(self, a, idx, values):
        np.put_along_axis(a, idx, np.broadcast_to(values, idx.shape), axis=1)

    def put(self, a, idx, values):
        a[idx] = values

    def sort_rows(self, a):
        return np.sort(a, axis=1)

    def cumsum_rows(self, a):
        return np.cumsum(a, axis=1)

    def cumsum(self, a):
        return np.cumsum(a)

    def sum_rows(self, a):
        return a.sum(axis=1)

    def concat_cols(self, a, b):
        return np.concatenate([a, b], axis=1)

    def concat(self, a, b):
        return np.concatenate([a, b])

    def stack(self, xs):
        return np.stack(xs)

    def histogram_rows(self, v, bins):
        """[B, N] ints in [0, bins) -> [B, bins] counts per row."""
        b = v.shape[0]
        flat = (v + bins * np.arange(b, dtype=np.int64)[:, None]).ravel()
        return np.bincount(flat, minlength=b * bins).reshape(b, bins)


@dataclass(frozen=True)
class HostCacheSpec:
    """Shape of one GPU's host KV tier: what the directory and slot tables are sized for."""

    num_layers: int
    """Layers whose KV the tier holds (each has its own directory and slots)."""
    max_requests: int
    """Batch rows B; a request occupies one row from `admit` to `release`."""
    page_rows: int
    """Rows (tokens) per page, the unit of residency and of a fetch: 1 = token granularity."""
    max_pages: int
    """Pages of the longest context a row can hold (the directory's width)."""
    max_budget_pages: int
    """Most device slots one request may hold per layer (the slot tables' width)."""
    topk: int
    """Indices per request per layer per step K (DSA index_topk, 2048 for DeepSeek-V3.2)."""
    num_buckets: int = 8
    """LRU age buckets for slots in use; ages at or past num_buckets-1 steps share the last."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "max_requests", "page_rows", "max_pages", "max_budget_pages", "topk",
                     "num_buckets"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"HostCacheSpec.{name}={value!r} must be a positive int")

    @property
    def max_rows(self) -> int:
        """Host rows reserved per request per layer (whole pages)."""
        return self.max_pages * self.page_rows

    def metadata_bytes_per_request_layer(self) -> int:
        """Directory (8 B per page) plus the three int64 slot tables (24 B per slot), dump columns included."""
        return 8 * (self.max_pages + 1) + 24 * (self.max_budget_pages + 1)


def pages_for(rows: int, page_rows: int) -> int:
    return -(-rows // page_rows)


def budget_pages_for(ctx_rows: int, host_fraction: float, page_rows: int) -> int:
    """Slots that hold (1 - host_fraction) of a request's pages (at least one)."""
    if not 0.0 <= host_fraction < 1.0:
        raise ValueError(f"host_fraction={host_fraction} must be in [0, 1)")
    return max(1, int(np.ceil((1.0 - host_fraction) * pages_for(ctx_rows, page_rows))))


@dataclass
class LayerResolution:
    """One layer's step after `resolve`: where each selected token is, and what to fetch."""

    row_loc: object
    """[B, K] row in the layer's device cache (slot * page_rows + offset); -1 where the index is -1."""
    miss_src_row: object
    """[B*K + 1] host row where each fetched unit starts (compacted, request-major); -1 past the count."""
    miss_dst_row: object
    """[B*K + 1] device-cache row where that unit goes; -1 past the count."""
    miss_bounds: object
    """[B + 1] request b's units are entries [bounds[b], bounds[b+1]) of the miss lists."""


class HostTierCache:
    """Directory, slot tables and bucketed LRU of one GPU's host KV tier; `ops` picks the backend."""

    def __init__(self, spec: HostCacheSpec, total_slots: int, ops=None):
        if total_slots <= 0:
            raise ValueError(f"total_slots={total_slots} must be positive")
        self.spec, self.ops, self.total_slots = spec, ops or NumpyOps(), total_slots
        o, L, B = self.ops, spec.num_layers, spec.max_requests
        NP, S = spec.max_pages, spec.max_budget_pages
        # last columns are dumps: scatters of entries that are no-ops land there
        self.directory = o.full((L, B, NP + 1), -1)  # page -> local slot, -1 not resident
        self.slot_page = o.full((L, B, S + 1), -1)  # local slot -> page, -1 free
        self.slot_last = o.full((L, B, S + 1), DISABLED)  # step the slot was last read
        self.slot_global = o.full((B, S + 1), -1)  # local slot -> device-cache slot
        self.host_row0 = o.asarray(np.arange(B, dtype=np.int64) * spec.max_rows)  # [B]
        self.ctx_rows = o.full((B,), 0)
        self.clock = o.full((1,), 1)  # the decode step, advanced once per step (all layers share it)
        self.stats = o.full((L, len(STAT_NAMES)), 0)
        self.budget = np.zeros(B, dtype=np.int64)
        self._free_slots = list(range(total_slots - 1, -1, -1))
        self._held: dict[int, list[int]] = {}

    # --- admission: per-request budgets out of one device cache -------------------------------
    @property
    def free_slots(self) -> int:
        return len(self._free_slots)

    def admit(self, row: int, ctx_rows: int, budget_pages: int) -> list[int]:
        """Give batch row `row` a request of ctx_rows tokens and budget_pages slots per layer."""
        sp = self.spec
        if not 0 <= row < sp.max_requests:
            raise ValueError(f"row={row} is not in [0, {sp.max_requests})")
        if row in self._held:
            raise ValueError(f"row={row} already holds a request")
        if not 0 <= ctx_rows <= sp.max_rows:
            raise ValueError(f"ctx_rows={ctx_rows} exceeds max_pages*page_rows={sp.max_rows}")
        if not 1 <= budget_pages <= sp.max_budget_pages:
            raise ValueError(f"budget_pages={budget_pages} is not in [1, max_budget_pages={sp.max_budget_pages}]")
        if budget_pages > len(self._free_slots):
            raise OutOfSlots(f"budget_pages={budget_pages} exceeds the {len(self._free_slots)} free slots "
                             f"of {self.total_slots}")
        slots = [self._free_slots.pop() for _ in range(budget_pages)]
        o, S = self.ops, sp.max_budget_pages
        glob = np.full(S + 1, -1, dtype=np.int64)
        glob[:budget_pages] = slots
        last = np.full(S + 1, DISABLED, dtype=np.int64)
        last[:budget_pages] = FREE
        self.slot_global[row] = o.asarray(glob)
        self.slot_last[:, row] = o.asarray(last)
        self.slot_page[:, row] = -1
        self.directory[:, row] = -1
        self.ctx_rows[row] = ctx_rows
        self.budget[row] = budget_pages
        self._held[row] = slots
        return slots

    def release(self, row: int) -> list[int]:
        """Free a row; its device slots go back to the pool (its host rows are the caller's to reuse)."""
        slots = self._held.pop(row)
        self._free_slots.extend(reversed(slots))
        self.slot_global[row] = -1
        self.slot_last[:, row] = DISABLED
        self.slot_page[:, row] = -1
        self.directory[:, row] = -1
        self.ctx_rows[row] = 0
        self.budget[row] = 0
        return slots

    def preload(self, row: int, pages: np.ndarray):
        """Make `pages` (same for every layer, at most the budget) resident, as a prefill's tail would be.

        They count as idle for num_buckets-1 steps (the oldest in-use bucket). Returns (host_row [n],
        device_row [n]) of the units to copy, the same rows in every layer.
        """
        pages = np.asarray(pages, dtype=np.int64)
        n, sp, o = len(pages), self.spec, self.ops
        if n > self.budget[row] or len(np.unique(pages)) != n:
            raise ValueError(f"preload of {n} pages into a budget of {self.budget[row]} (pages must be distinct)")
        if n and (pages.min() < 0 or pages.max() >= pages_for(int(o.to_numpy(self.ctx_rows)[row]), sp.page_rows)):
            raise ValueError(f"preload pages out of [0, {pages_for(int(o.to_numpy(self.ctx_rows)[row]), sp.page_rows)})")
        local = o.asarray(np.arange(n))
        pg = o.asarray(pages)
        for layer in range(sp.num_layers):
            self.directory[layer, row, pg] = local
            self.slot_page[layer, row, local] = pg
            self.slot_last[layer, row, local] = self.clock - sp.num_buckets
        glob = np.asarray(self._held[row][:n], dtype=np.int64)
        host = int(o.to_numpy(self.host_row0)[row]) + pages * sp.page_rows
        return host, glob * sp.page_rows

    def advance(self) -> None:
        """End of a decode step: the clock every layer's LRU ages are counted in moves on."""
        self.clock += 1

    # --- the step ------------------------------------------------------------------------------
    def resolve(self, layer: int, topk) -> LayerResolution:
        """Hits, misses, victims and the fetch list of one layer. topk [B, K] token positions, -1 = none."""
        o, sp = self.ops, self.spec
        P, NP, S, NB, K = sp.page_rows, sp.max_pages, sp.max_budget_pages, sp.num_buckets, sp.topk
        B = sp.max_requests
        directory, slot_page, slot_last = self.directory[layer], self.slot_page[layer], self.slot_last[layer]
        now = self.clock

        valid = topk >= 0
        page = o.where(valid, topk // P, NP)  # [B, K]; invalid -> the dump column (always -1)
        slot = o.take_rows(directory, page)
        hit = valid & (slot >= 0)
        # slots read this step are in use: stamp them now so they are not victims
        o.put_rows(slot_last, o.where(hit, slot, S), o.where(hit, now, DISABLED))

        # distinct missing pages in page order; `first` marks one entry per page
        key = o.sort_rows(o.where(valid & ~hit, page, NP))  # [B, K]; NP = no miss
        prev = o.concat_cols(o.full((B, 1), -1), key[:, :-1])
        first = (key < NP) & (key != prev)
        n_miss = o.sum_rows(o.as_int(first))  # [B]
        rank = o.cumsum_rows(o.as_int(first)) - 1  # [B, K]

        # bucketed LRU: bucket per slot, oldest buckets first, slot order inside the cut-off bucket
        age = now - slot_last  # [B, S+1]; > 0 only for slots not read this step and not disabled
        eligible = age > 0
        bucket = o.where(slot_page < 0, NB, o.clamp_max(age - 1, NB - 1))  # NB: free, oldest
        bucket = o.where(eligible, bucket, NB + 1)  # NB+1: not a candidate
        counts = o.histogram_rows(bucket, NB + 2)[:, :NB + 1]  # [B, NB+1]
        csum = o.cumsum_rows(counts)
        at_or_older = csum[:, -1:] - csum + counts  # [B, NB+1] candidates in bucket j or older
        need = n_miss[:, None]
        cut = o.sum_rows(o.as_int(at_or_older >= need)) - 1  # [B] youngest bucket still needed
        older = o.take_rows(o.concat_cols(at_or_older, o.full((B, 1), 0)), (cut + 1)[:, None])  # [B, 1]
        take = o.clamp_min(need - older, 0)  # victims from the cut-off bucket
        in_cut = bucket == cut[:, None]
        victim = (eligible & (bucket > cut[:, None])) | (in_cut & (o.cumsum_rows(o.as_int(in_cut)) <= take))
        overflow = o.clamp_min(n_miss - o.sum_rows(o.as_int(victim)), 0)  # [B]
        vpos = o.where(victim, o.cumsum_rows(o.as_int(victim)) - 1, K)
        victims = o.full((B, K + 1), S)  # rank -> local slot; S (the dump slot) past the victims
        # NOTE: every write a scatter sends to a dump column carries the same value, so the result does
        # not depend on which of the colliding writes lands (a GPU scatter picks any of them)
        o.put_rows(victims, vpos, o.where(victim, o.arange(S + 1)[None, :], S))

        # install: miss of rank r takes victim r; evicted pages leave the directory first
        vslot = o.where(first, o.take_rows(victims, o.where(first, rank, K)), S)  # [B, K]; S: no miss / no victim
        placed = first & (vslot < S)
        old = o.take_rows(slot_page, vslot)
        o.put_rows(directory, o.where(placed & (old >= 0), old, NP), -1)
        o.put_rows(directory, o.where(placed, key, NP), o.where(placed, vslot, -1))
        o.put_rows(slot_page, vslot, o.where(placed, key, -1))
        o.put_rows(slot_last, vslot, o.where(placed, now, DISABLED))

        # where each selected token is now, and the compacted fetch list (request-major)
        slot = o.take_rows(directory, page)
        glob = o.take_rows(self.slot_global, o.where(slot >= 0, slot, S))
        row_loc = o.where(valid & (glob >= 0), glob * P + topk % P, -1)
        unit = o.take_rows(self.slot_global, vslot)
        src = o.where(placed, self.host_row0[:, None] + key * P, -1).reshape(-1)
        dst = o.where(placed, unit * P, -1).reshape(-1)
        flat = placed.reshape(-1)
        pos = o.where(flat, o.cumsum(o.as_int(flat)) - 1, B * K)
        miss_src, miss_dst = o.full((B * K + 1,), -1), o.full((B * K + 1,), -1)
        o.put(miss_src, pos, src)
        o.put(miss_dst, pos, dst)
        bounds = o.concat(o.full((1,), 0), o.cumsum(n_miss - overflow))

        self.stats[layer] += o.stack([o.as_int(hit).sum(), o.as_int(valid & ~hit).sum(), n_miss.sum(),
                                      overflow.sum()])
        if o.eager and int(overflow.sum()):
            b = int(np.argmax(o.to_numpy(overflow)))
            raise WorkingSetTooLarge(
                f"layer {layer} row {b}: {int(n_miss[b])} distinct missing pages but only "
                f"{int(n_miss[b] - overflow[b])} free or evictable slots of budget_pages={int(self.budget[b])}")
        return LayerResolution(row_loc, miss_src, miss_dst, bounds)

    def check(self) -> None:
        """Raise WorkingSetTooLarge if any resolve so far had a miss with no slot (a device sync)."""
        over = self.ops.to_numpy(self.stats)[:, 3]
        if over.any():
            raise WorkingSetTooLarge(f"{int(over.sum())} missing pages had no free or evictable slot "
                                     f"(per layer {over.tolist()}); raise budget_pages")

    # --- decode growth -------------------------------------------------------------------------
    def append_token(self):
        """Grow every admitted request by one token (write-through: host always, device if resident).

        Returns (host_row [B], device_row [L, B]) for the new token (-1 for rows with no request and,
        for device_row, where its page is not resident); the caller writes the row to both.
        """
        o, sp = self.ops, self.spec
        ctx = self.ctx_rows
        active = o.asarray(self.budget > 0) > 0
        if int(o.to_numpy(ctx).max(initial=0)) >= sp.max_rows:
            raise ValueError(f"a request would exceed max_pages*page_rows={sp.max_rows} rows")
        page = o.where(active, ctx // sp.page_rows, sp.max_pages)[:, None]  # [B, 1]
        dev = []
        for layer in range(sp.num_layers):
            slot = o.take_rows(self.directory[layer], page)[:, 0]  # [B]
            glob = o.take_rows(self.slot_global, o.where(slot >= 0, slot, sp.max_budget_pages)[:, None])[:, 0]
            dev.append(o.where(active & (glob >= 0), glob * sp.page_rows + ctx % sp.page_rows, -1))
        host = o.where(active, self.host_row0 + ctx, -1)
        self.ctx_rows += o.as_int(active)
        return host, o.stack(dev)
