"""Fixed-shape per-step inputs of one layout state: one host fill, one copy, static device views.

What it does: `StepInputs` holds, for one (layout state, batch order, page capacity), the
device tensors a decode step reads — request ids, positions, the new token's write rows and
flat cache slots (padded to 2B entries that land in a reserved trash slot), the block table
[n_att, cap], local lengths, DP's owned rows and DOP's owner permutation — as views of one int64
vector. Each step the host fills a pinned staging copy (double-buffered, so it never overwrites
bytes a copy still reads) and issues one host->device copy on the main stream. Shapes are fixed
for the life of the object, which is what lets a step be captured once in a CUDA graph and
replayed (step_graph.py); the runner builds a new one when the batch, the layout or the page
capacity changes, and a switch builds the destination's during its copying phase.
What it does not do: allocate pages (runner.py), run the step, or sync the device.
"""

from __future__ import annotations

import numpy as np
import torch

from .kv_pages import PageTable, pages_for
from .layouts import LayoutState, KernelInputs


class StepInputs:
    """Static step inputs for `state` with batch `order` on one rank."""

    def __init__(self, state: LayoutState, order: list[int], rank: int, world_size: int, page_size: int,
                 cap_pages: int, trash_token: int, device: torch.device):
        table: PageTable = state.table
        kind, b = state.kind, len(order)
        self.state, self.order, self.page_size, self.device = state, list(order), page_size, device
        self.trash_token = trash_token
        own_rows = perm = counts = None
        if kind in ("tp", "cp"):
            att_idx = list(range(b))
        elif kind == "dp":
            att_idx = [i for i, q in enumerate(order) if table.owners[q] == rank]
            own_rows = att_idx
        else:
            perm = sorted(range(b), key=lambda i: (table.owners[order[i]], i))
            counts = [0] * world_size
            for q in order:
                counts[table.owners[q]] += 1
            start = sum(counts[:rank])
            att_idx = perm[start:start + counts[rank]]
        self.att = [order[i] for i in att_idx]
        self.cap = max(1, cap_pages)
        n_att, n_own = len(self.att), len(own_rows or [])
        sizes = {"req": b, "pos": b, "wrows": 2 * b, "wtoks": 2 * b, "bt": n_att * self.cap, "lens": n_att,
                 "own": n_own, "perm": b if perm is not None else 0}
        self._off, at = {}, 0
        for name, n in sizes.items():
            self._off[name] = (at, at + n)
            at += n
        pinned = device.type == "cuda"
        self._host = [torch.zeros(at, dtype=torch.int64, pin_memory=pinned) for _ in range(2 if pinned else 1)]
        self._copied = [torch.cuda.Event() for _ in self._host] if pinned else None
        self._turn = 0
        self.dev = torch.zeros(at, dtype=torch.int64, device=device) if pinned else self._host[0]  # [N]
        for h in self._host:  # static parts, written once
            hv = h.numpy()
            if own_rows is not None:
                hv[slice(*self._off["own"])] = own_rows
            if perm is not None:
                hv[slice(*self._off["perm"])] = perm
        self._bt_host = np.zeros((n_att, self.cap), dtype=np.int64)  # [n_att, cap]
        self._bt_version = -1
        self.req = self._view("req")  # [B]
        self.pos = self._view("pos")  # [B]
        self.wrows = self._view("wrows")  # [2B] batch row of each written token
        self.wtoks = self._view("wtoks")  # [2B] flat slot*page+offset (trash for padding)
        self.batch = KernelInputs(self.pos, self._view("bt").view(n_att, self.cap), self._view("lens"), self.cap,
                               self._view("own") if own_rows is not None else None,
                               self._view("perm") if perm is not None else None, counts)

    def _view(self, name: str) -> torch.Tensor:
        lo, hi = self._off[name]
        return self.dev[lo:hi]

    def fits(self, state: LayoutState, order: list[int], seq_lens: dict[int, int]) -> bool:
        """Still valid for this state and batch: same objects, and every request's logical pages
        after this step's token fit the capacity.

        NOTE: decided from replicated facts (order, global lengths), never from this rank's own
        rows, so every rank rebuilds at the same step: a rebuild runs collectives (warm-up and
        capture), and a DP rank with no growing request of its own used to keep its graph while
        its peer rebuilt, hanging both (seen on 2 x H200).
        """
        if state is not self.state or order != self.order:
            return False
        return all(pages_for(seq_lens[q] + 1, self.page_size) <= self.cap for q in order)

    def refresh_block_table(self) -> None:
        """Rebuild the host block table if the page table changed (host only, no device work)."""
        table = self.state.table
        if table.version == self._bt_version:
            return
        for i, q in enumerate(self.att):
            n = table.row_len.get(q, 0)
            if n:
                self._bt_host[i, :n] = table.rows[q][:n]
        self._bt_version = table.version

    def upload(self, seq_lens: dict[int, int], rows: list[int], toks: list[int]) -> None:
        """Fill this step's values and copy them to the device (main stream, no sync).

        seq_lens: tokens before this step; rows/toks: the new tokens' writes (at most 2B).
        """
        h = self._host[self._turn]
        if self._copied is not None:
            self._copied[self._turn].synchronize()  # the copy that last read this buffer is done
        hv = h.numpy()
        b = len(self.order)
        pos = np.fromiter((seq_lens[q] for q in self.order), dtype=np.int64, count=b)
        hv[slice(*self._off["req"])] = self.order
        hv[slice(*self._off["pos"])] = pos
        n = len(rows)
        lo = self._off["wrows"][0]
        hv[lo:lo + n] = rows
        hv[lo + n:lo + 2 * b] = 0
        lo = self._off["wtoks"][0]
        hv[lo:lo + n] = toks
        hv[lo + n:lo + 2 * b] = self.trash_token
        self.refresh_block_table()
        lo, hi = self._off["bt"]
        hv[lo:hi] = self._bt_host.reshape(-1)
        table, page = self.state.table, self.page_size
        lens = np.fromiter((table.local_len(q, seq_lens[q] + 1, page) for q in self.att), dtype=np.int64,
                           count=len(self.att))
        hv[slice(*self._off["lens"])] = lens
        if self.batch.kernel is not None:  # plan the step's kernel on the host, outside any graph
            self.batch.kernel.plan(self._bt_host, lens)
        if self._copied is not None:
            self.dev.copy_(h, non_blocking=True)
            self._copied[self._turn].record()
            self._turn ^= 1
