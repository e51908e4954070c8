"""Fixed-shape inputs of a decode step: one host fill, one copy, static device views, any batch
that fits the shape.

What it does: `StepInputs` holds, for one layout state and one shape — `rows` decode rows (a
batch-size bucket: the batch is padded up to it), `own_cap` rows per owner group (DP, DPTP, DOP:
the busiest group's requests, padded) and a block-table capacity of `cap` pages per request — the device
tensors a decode step reads: request ids, positions, the new tokens' write rows and flat cache
slots (2·rows entries, padding aimed at a reserved trash slot), the block table [n_att, cap] and
local lengths of the rows this rank attends, the rows its group owns with their mask (DP, DPTP)
and DOP's send and return indices, as views of one int64 vector. `fill` writes any batch of at most `rows` requests
(padded rows attend nothing: length 0) into a pinned staging copy (double-buffered, so it never
overwrites bytes a copy still reads) and issues one host->device copy on the main stream. The
shapes never change, which is what lets a step be captured once per bucket as a CUDA graph and
replayed for every batch of that bucket (step_graph.py).
NOTE: DP, DPTP and DOP pad every owner group's share to the same `own_cap` (the bucket of the busiest owner's
count, a replicated fact), as SGLang's DP attention pads every rank's batch to the largest one
(sglang python/sglang/srt/model_executor/cuda_graph_runner.py `CudaGraphRunner.replay_prepare`:
`bisect_left(self.capture_bs, max(global_num_tokens))`); DOP's all-to-alls then have equal splits,
which a graph can hold.
What it does not do: allocate pages (runner.py), prefill chunks (prefill.py), run the step, or
sync the device.
"""

from __future__ import annotations

import numpy as np
import torch

from .layouts import KernelInputs, LayoutState


class StepInputs:
    """Static decode-step inputs of `state` for up to `rows` requests on one rank."""

    def __init__(self, state: LayoutState, rows: int, own_cap: int, cap_pages: int, rank: int, world_size: int,
                 page_size: int, trash_token: int, device: torch.device):
        lay = self.layout = state.resolve(world_size)
        self.state, self.rows, self.own_cap, self.cap = state, rows, own_cap, max(1, cap_pages)
        self.rank, self.world_size, self.page_size, self.device = rank, world_size, page_size, device
        self.trash_token = trash_token
        self.n_att = own_cap if lay.owned else rows
        dp, dop = lay.attends_own_rows, lay.moves_queries  # own rows and a mask (DP, DPTP); DOP's all-to-all indices
        sizes = {"req": rows, "pos": rows, "wrows": 2 * rows, "wtoks": 2 * rows, "bt": self.n_att * self.cap,
                 "lens": self.n_att, "own": own_cap if dp else 0, "valid": own_cap if dp else 0,
                 "send": world_size * own_cap if dop else 0, "back": rows if dop else 0}
        self._off, at = {}, 0
        for name, n in sizes.items():
            self._off[name] = (at, at + n)
            at += n
        pinned = device.type == "cuda"
        self._host = [torch.zeros(at, dtype=torch.int64, pin_memory=pinned) for _ in range(2 if pinned else 1)]
        self._copied = [torch.cuda.Event() for _ in self._host] if pinned else None
        self._turn = 0
        self.dev = torch.zeros(at, dtype=torch.int64, device=device) if pinned else self._host[0]  # [N]
        self._bt_host = np.zeros((self.n_att, self.cap), dtype=np.int64)  # [n_att, cap]
        self._bt_key: list = [None] * self.n_att  # (request, row length) each block-table row holds
        self.batch_size = 0  # real rows of the last fill
        self.req = self._view("req")  # [rows]
        self.pos = self._view("pos")  # [rows]
        self.wrows = self._view("wrows")  # [2 rows] batch row of each written token
        self.wtoks = self._view("wtoks")  # [2 rows] flat slot*page+offset (trash for padding)
        self.batch = KernelInputs(self.pos, self._view("bt").view(self.n_att, self.cap), self._view("lens"), self.cap,
                                  own_rows=self._view("own") if dp else None,
                                  own_valid=self._view("valid") if dp else None,
                                  send_rows=self._view("send") if dop else None,
                                  back_rows=self._view("back") if dop else None, own_cap=own_cap)

    def _view(self, name: str) -> torch.Tensor:
        lo, hi = self._off[name]
        return self.dev[lo:hi]

    def _att_rows(self, order: list[int], hv: np.ndarray) -> list[int]:
        """Batch rows this rank attends, in its attention order; fills the own-rows (DP, DPTP) and
        DOP's index vectors."""
        lay, b, oc = self.layout, len(order), self.own_cap
        if not lay.owned:
            return list(range(b))
        owners, r = self.state.table.owners, lay.group_ranks
        if lay.attends_own_rows:
            mine = lay.group_of_rank(self.rank)
            att = [i for i, q in enumerate(order) if owners[q] // r == mine]
            lo = self._off["own"][0]
            hv[lo:lo + oc] = 0
            hv[lo:lo + len(att)] = att
            lo = self._off["valid"][0]
            hv[lo:lo + oc] = 0
            hv[lo:lo + len(att)] = 1
            return att
        slots: list[list[int]] = [[] for _ in range(self.world_size)]
        back = np.zeros(self.rows, dtype=np.int64)
        for i, q in enumerate(order):
            k = owners[q] // r
            back[i] = k * oc + len(slots[k])
            slots[k].append(i)
        send = np.zeros(self.world_size * oc, dtype=np.int64)
        for k, s in enumerate(slots):
            send[k * oc:k * oc + len(s)] = s
        hv[slice(*self._off["send"])] = send
        hv[slice(*self._off["back"])] = back
        return slots[self.rank]

    def fill(self, order: list[int], seq_lens: dict[int, int], rows: list[int], toks: list[int]) -> None:
        """Write this step's values for the decode batch `order` (at most `rows` requests) and copy them
        to the device (main stream, no sync). seq_lens: tokens before this step; rows/toks: the new
        tokens' writes (at most 2 per request: the serving layout's page and a switch's other one)."""
        b = len(order)
        if b > self.rows or len(rows) > 2 * self.rows:
            raise ValueError(f"a batch of {b} requests does not fit step inputs of {self.rows} rows")
        h = self._host[self._turn]
        if self._copied is not None:
            self._copied[self._turn].synchronize()  # the copy that last read this buffer is done
        hv = h.numpy()
        r = self.rows
        lo = self._off["req"][0]
        hv[lo:lo + r] = 0
        hv[lo:lo + b] = order
        lo = self._off["pos"][0]
        hv[lo:lo + r] = 0
        pos = np.fromiter((seq_lens[q] for q in order), dtype=np.int64, count=b)
        hv[lo:lo + b] = pos
        n = len(rows)
        lo = self._off["wrows"][0]
        hv[lo:lo + n] = rows
        hv[lo + n:lo + 2 * r] = 0
        lo = self._off["wtoks"][0]
        hv[lo:lo + n] = toks
        hv[lo + n:lo + 2 * r] = self.trash_token
        att = self._att_rows(order, hv)
        if len(att) > self.n_att:
            raise ValueError(f"{len(att)} requests on one owner do not fit {self.n_att} owner rows")
        table, page = self.state.table, self.page_size
        lens = np.zeros(self.n_att, dtype=np.int64)
        bt, keys = self._bt_host, self._bt_key
        for a, i in enumerate(att):
            q = order[i]
            m = table.row_len.get(q, 0)
            if m > self.cap:
                raise ValueError(f"request {q} holds {m} pages here, the block table {self.cap}")
            if keys[a] != (q, m):  # NOTE: rows refilled only when their request or its pages changed
                if m:
                    bt[a, :m] = table.rows[q][:m]
                keys[a] = (q, m)
            lens[a] = table.local_len(q, int(pos[i]) + 1, page)
        hv[slice(*self._off["bt"])] = bt.reshape(-1)
        hv[slice(*self._off["lens"])] = lens
        self.batch_size = b
        self._plan_and_copy(h, bt, lens)

    def fill_dry(self) -> None:
        """Inputs for a warm-up or a capture: every row padding, writes to the trash slot, and every
        attended row one token long on the trash page (zeroed by the runner), so a kernel that plans
        on the host plans real work."""
        h = self._host[self._turn]
        if self._copied is not None:
            self._copied[self._turn].synchronize()
        hv = h.numpy()
        hv[:] = 0
        lo, hi = self._off["wtoks"]
        hv[lo:hi] = self.trash_token
        trash_slot = self.trash_token // self.page_size
        self._bt_host[:, 0] = trash_slot
        self._bt_key = [None] * self.n_att
        hv[slice(*self._off["bt"])] = self._bt_host.reshape(-1)
        lens = np.ones(self.n_att, dtype=np.int64)
        hv[slice(*self._off["lens"])] = lens
        if self.layout.attends_own_rows:
            hv[slice(*self._off["valid"])] = 0
        self.batch_size = 0
        self._plan_and_copy(h, self._bt_host, lens)

    def _plan_and_copy(self, h: torch.Tensor, bt: np.ndarray, lens: np.ndarray) -> None:
        if self.batch.kernel is not None:  # plan the step's kernel on the host, outside any graph
            self.batch.kernel.plan(bt, lens)
        if self._copied is not None:
            self.dev.copy_(h, non_blocking=True)
            self._copied[self._turn].record()
            self._turn ^= 1
