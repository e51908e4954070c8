"""Paged latent KV cache: slot allocation, per-layout placement and per-rank page tables.

What it does: one rank's page slots (`SlotAllocator`: free list plus slots reserved for
replicated weights), where each layout puts a logical page (`holders`, read off the layout's
placement: every rank of the request's owner group — TP's one group of T, DP's and DOP's owner,
DPTP's group of R — or, where tokens split, one of them page-interleaved: CP), owner
assignment balanced by KV bytes, a rank's
page table (request, logical page) -> slot with the block table the kernel reads, and
deterministic synthetic history so long contexts need no prefill.
What it does not do: allocate the pool tensor's memory twice (weights replicated by a layout
claim slots as an accounting of the shared HBM budget; their tensors live apart), evict or
preempt requests, or move data (transitions.py).

Pool tensor: [L, P, page, C+R] per rank; a page slot p is the same slot in every layer, so a
page move moves all layers of those tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

import numpy as np
import torch

from .placement_kind import PRIMITIVES, ExecLayout, exec_layout

# NOTE: the four layouts named like their primitive, for callers that list them (tests); what the
# executor runs is decided from a layout's placement (placement_kind.py), not from this list
LAYOUT_KINDS = PRIMITIVES[:4]


class OutOfPages(RuntimeError):
    """A rank has fewer free page slots than an allocation needs."""


def holders(kind: "str | ExecLayout", world_size: int, request_id: int, logical_page: int,
            owners: Mapping[int, int]) -> tuple[int, ...]:
    """Ranks that store a logical page under a layout (an ExecLayout, or a registered name on
    `world_size` ranks): placement_kind.ExecLayout.holders."""
    return exec_layout(kind, world_size).holders(request_id, logical_page, owners)


def least_loaded(load: list, groups: int = 0) -> int:
    """The least-loaded rank (the first on ties); with 1 < `groups` < T owner groups of consecutive
    ranks, the least-loaded rank of the least-loaded group (runtime_policy/kv_ledger.py
    KvLedger.place, the loop's rule)."""
    t = len(load)
    if groups <= 1 or groups >= t:
        return min(range(t), key=lambda k: (load[k], k))
    r = t // groups
    g = min(range(groups), key=lambda j: (sum(load[j * r:(j + 1) * r]), j))
    return min(range(g * r, (g + 1) * r), key=lambda k: (load[k], k))


def balance_owners(seq_lens: Mapping[int, int], world_size: int, groups: int = 0) -> dict[int, int]:
    """Owner rank per request, balancing KV bytes: longest first onto the least-loaded rank (of the
    least-loaded of `groups` owner groups, where a layout has 1 < G < T)."""
    load = [0] * world_size
    owners: dict[int, int] = {}
    for req in sorted(seq_lens, key=lambda r: (-seq_lens[r], r)):
        rank = least_loaded(load, groups)
        owners[req] = rank
        load[rank] += max(1, seq_lens[req])
    return owners


def pages_for(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


class SlotAllocator:
    """Free list of one rank's page slots, and slots reserved for replicated weights."""

    def __init__(self, num_slots: int):
        if num_slots <= 0:
            raise ValueError(f"num_slots={num_slots} must be positive")
        self.num_slots = num_slots
        self._free: list[int] = list(range(num_slots - 1, -1, -1))
        self.reserved: list[int] = []

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        if n > len(self._free):
            raise OutOfPages(f"need {n} page slots, {len(self._free)} free of {self.num_slots}")
        out = self._free[len(self._free) - n:]
        del self._free[len(self._free) - n:]
        return out[::-1]

    def release(self, slots: Iterable[int]) -> None:
        self._free.extend(slots)

    def reserve(self, n: int) -> list[int]:
        """Take n slots out of the pool for weights; returns them for a later `unreserve`."""
        taken = self.alloc(n)
        self.reserved.extend(taken)
        return taken

    def unreserve(self, slots: Iterable[int]) -> None:
        slots = list(slots)
        keep = set(slots)
        self.reserved = [s for s in self.reserved if s not in keep]
        self.release(slots)

    def free_set(self) -> set[int]:
        return set(self._free)

    def check_disjoint(self) -> None:
        """Raise if a free or reserved slot is listed twice."""
        pool = self._free + self.reserved
        if len(pool) != len(set(pool)):
            raise AssertionError("a page slot is free or reserved twice")


@dataclass
class PageTable:
    """One rank's pages under one layout: request -> {logical page: slot}.

    `kind` is the layout's name (given an ExecLayout, its name; `layout` keeps the ExecLayout, or
    resolves a name against the group's T at first use). `owners` maps each request to its owner
    rank where the layout has owner groups (a group's requests: those whose owner is in it).
    `rows` keeps each request's held slots in logical order (the kernel's block-table row) and
    `version` counts mutations so a runner rebuilds device block tables only when they change.
    """

    kind: "str | ExecLayout"
    owners: dict[int, int]
    pages: dict[int, dict[int, int]] = field(default_factory=dict)
    rows: dict[int, np.ndarray] = field(default_factory=dict)
    row_len: dict[int, int] = field(default_factory=dict)
    last_lp: dict[int, int] = field(default_factory=dict)
    version: int = 0
    layout: ExecLayout | None = None

    def __post_init__(self) -> None:
        if isinstance(self.kind, ExecLayout):
            self.layout, self.kind = self.kind, self.kind.name

    def resolve(self, world_size: int | None = None) -> ExecLayout:
        """The table's ExecLayout (a name resolved on `world_size` ranks, once)."""
        if self.layout is None:
            self.layout = exec_layout(self.kind, world_size)
        return self.layout

    def holds(self, rank: int, world_size: int, req: int, lp: int) -> bool:
        return rank in self.resolve(world_size).holders(req, lp, self.owners)

    def add(self, req: int, lp: int, slot: int) -> None:
        per = self.pages.setdefault(req, {})
        if lp in per:
            raise AssertionError(f"request {req} page {lp} already held in slot {per[lp]}")
        per[lp] = slot
        n = self.row_len.get(req, 0)
        if n == 0 or lp > self.last_lp[req]:
            row = self.rows.get(req)
            if row is None or n == len(row):
                grown = np.zeros(max(8, 2 * n), dtype=np.int32)
                if row is not None:
                    grown[:n] = row[:n]
                row = self.rows[req] = grown
            row[n] = slot
            self.row_len[req] = n + 1
            self.last_lp[req] = lp
        else:
            self.rows[req] = np.array([per[k] for k in sorted(per)], dtype=np.int32)
            self.row_len[req] = len(per)
            self.last_lp[req] = max(per)
        self.version += 1

    def remove_request(self, req: int) -> list[int]:
        """Forget a request; returns the slots it held."""
        self.rows.pop(req, None)
        self.row_len.pop(req, None)
        self.last_lp.pop(req, None)
        self.version += 1
        return list(self.pages.pop(req, {}).values())

    def slots(self) -> list[int]:
        return [s for per in self.pages.values() for s in per.values()]

    def local_len(self, req: int, seq_len: int, page_size: int) -> int:
        """Tokens of a request this rank holds: its held pages are full except the request's last."""
        per = self.pages.get(req)
        if not per or seq_len <= 0:
            return 0
        last = (seq_len - 1) // page_size
        if last in per:
            return (len(per) - 1) * page_size + seq_len - last * page_size
        return len(per) * page_size

    def block_table(self, reqs: list[int], page_size: int) -> tuple[np.ndarray, int]:
        """Block table [n, maxp] int32 for `reqs` (held pages in logical order, pad 0) and maxp."""
        lens = [self.row_len.get(r, 0) for r in reqs]
        maxp = max(lens + [1])
        bt = np.zeros((len(reqs), maxp), dtype=np.int32)
        for i, (r, n) in enumerate(zip(reqs, lens)):
            if n:
                bt[i, :n] = self.rows[r][:n]
        return bt, maxp


def history_rows(req: int, positions: torch.Tensor, layer: int, width: int, seed: int) -> torch.Tensor:
    """Deterministic synthetic cached rows for (request, position, layer). positions [n] -> [n, width] fp32.

    Stands in for a prefill: values of unit scale, a pure function of their arguments, so the
    reference and every rank agree bit for bit on the same device type.
    """
    k = torch.arange(width, device=positions.device, dtype=torch.float32)  # [W]
    phase = (positions.to(torch.float32) * 0.0012207 + req * 0.6180339 + layer * 0.4142136
             + seed * 0.2718282)[:, None]  # [n, 1]
    return torch.sin(phase * (1.0 + 0.173 * k[None, :]) + k[None, :] * 0.7071)


def flat_token_index(slots: list[int], counts: list[int], page_size: int, device) -> torch.Tensor:
    """Flat token indices slot*page + [0, count) into a [P*page, W] view of one layer. -> [sum counts] int64."""
    idx = np.concatenate([np.arange(s * page_size, s * page_size + c, dtype=np.int64)
                          for s, c in zip(slots, counts)]) if slots else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(idx).to(device)


def write_history(pool: torch.Tensor, table: PageTable, req: int, n_tokens: int, seed: int) -> None:
    """Fill this rank's held pages of `req` with synthetic history for positions [0, n_tokens)."""
    num_layers, _, page, width = pool.shape
    held = sorted(table.pages.get(req, {}).items())
    if not held:
        return
    slots = [s for _, s in held]
    counts = [min(page, n_tokens - lp * page) for lp, _ in held]
    positions = torch.from_numpy(np.concatenate(
        [np.arange(lp * page, lp * page + c, dtype=np.int64) for (lp, _), c in zip(held, counts)])).to(pool.device)
    idx = flat_token_index(slots, counts, page, pool.device)
    flat = pool.view(num_layers, -1, width)
    for layer in range(num_layers):
        flat[layer].index_copy_(0, idx, history_rows(req, positions, layer, width, seed).to(pool.dtype))


def gather_logical_kv(pool: torch.Tensor, table: PageTable, req: int, seq_len: int) -> torch.Tensor:
    """This rank's held tokens of a request in logical order. -> [L, n_local, W] (a copy)."""
    num_layers, _, page, width = pool.shape
    held = sorted(table.pages.get(req, {}).items())
    idx = flat_token_index([s for _, s in held], [min(page, seq_len - lp * page) for lp, _ in held],
                           page, pool.device)
    return pool.view(num_layers, -1, width).index_select(1, idx)


def write_kv(pool: torch.Tensor, table: PageTable, req: int, kv: torch.Tensor) -> None:
    """Write a request's KV `kv` [L, n, W] (logical token order, any device) into this rank's held
    pages of it (the rows of the pages `table` holds)."""
    num_layers, _, page, width = pool.shape
    n = kv.shape[1]
    held = sorted(table.pages.get(req, {}).items())
    if not held:
        return
    counts = [min(page, n - lp * page) for lp, _ in held]
    idx = flat_token_index([s for _, s in held], counts, page, pool.device)
    src = torch.from_numpy(np.concatenate([np.arange(lp * page, lp * page + c, dtype=np.int64)
                                           for (lp, _), c in zip(held, counts)])).to(kv.device)
    flat = pool.view(num_layers, -1, width)
    flat.index_copy_(1, idx, kv.index_select(1, src).to(pool.device, pool.dtype))
