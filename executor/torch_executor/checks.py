"""Cross-rank invariants of the paged cache, for tests and the GPU benchmark.

What it does: assemble every request's KV in logical token order from the ranks that hold it
(checking that replicas agree bit for bit), and check that every logical page is held by
exactly the ranks its layout names — no page lost, none duplicated.
What it does not do: anything on the hot path (it moves the whole cache to the host).
"""

from __future__ import annotations

import hashlib

import torch
import torch.distributed as dist

from .kv_pages import gather_logical_kv, holders, pages_for


def collect_logical_kv(runner) -> dict[int, torch.Tensor]:
    """req -> [L, seq_len, C+R] on CPU, assembled from all ranks; raises if replicas differ."""
    local = runner.local_logical_kv()
    gathered: list = [None] * runner.g.world_size
    dist.all_gather_object(gathered, local, group=runner.g.ctrl)
    page = runner.dims.page_size
    out = {}
    for req, n in runner.seq_lens.items():
        full = None
        filled = torch.zeros(pages_for(n, page), dtype=torch.bool)
        for rank_data in gathered:
            lps, kv = rank_data[req]
            if full is None:
                full = torch.empty((kv.shape[0], n, kv.shape[2]), dtype=kv.dtype)
            at = 0
            for lp in lps:
                cnt = min(page, n - lp * page)
                piece = kv[:, at:at + cnt]
                if filled[lp]:
                    if not torch.equal(full[:, lp * page:lp * page + cnt], piece):
                        raise AssertionError(f"replicas of request {req} page {lp} differ")
                else:
                    full[:, lp * page:lp * page + cnt] = piece
                    filled[lp] = True
                at += cnt
        if not bool(filled.all()):
            raise AssertionError(f"request {req}: pages {torch.nonzero(~filled).flatten().tolist()} held nowhere")
        out[req] = full
    return out


def collect_request_kv(runner, req: int) -> torch.Tensor:
    """One request's KV [L, seq_len, C+R] on CPU, assembled from every rank (a collective on the
    control group: every rank calls it), replicas checked as in `collect_logical_kv`."""
    table, n, page = runner.state.table, runner.seq_lens[req], runner.dims.page_size
    mine = (sorted(table.pages.get(req, {})), gather_logical_kv(runner.pool, table, req, n).cpu())
    gathered: list = [None] * runner.g.world_size
    dist.all_gather_object(gathered, mine, group=runner.g.ctrl)
    full = None
    filled = torch.zeros(pages_for(n, page), dtype=torch.bool)
    for lps, kv in gathered:
        if full is None:
            full = torch.empty((kv.shape[0], n, kv.shape[2]), dtype=kv.dtype)
        at = 0
        for lp in lps:
            cnt = min(page, n - lp * page)
            if not filled[lp]:
                full[:, lp * page:lp * page + cnt] = kv[:, at:at + cnt]
                filled[lp] = True
            at += cnt
    if not bool(filled.all()):
        raise AssertionError(f"request {req}: pages {torch.nonzero(~filled).flatten().tolist()} held nowhere")
    return full


def kv_checksum(kv: dict[int, torch.Tensor]) -> str:
    """sha256 over every request's KV bytes in logical token order."""
    h = hashlib.sha256()
    for req in sorted(kv):
        h.update(str(req).encode())
        h.update(kv[req].contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def check_global_placement(runner) -> None:
    """Every logical page held by exactly its layout's holders, and each rank's slots accounted for."""
    runner.check_pages()
    # NOTE: during an incremental move a landed request is served from the destination's table
    # (runner.serving_table; transitions.py)
    mine = {(req, lp) for req in runner.seq_lens for lp in runner.serving_table(req).pages.get(req, {})}
    gathered: list = [None] * runner.g.world_size
    dist.all_gather_object(gathered, mine, group=runner.g.ctrl)
    t = runner.g.world_size
    for req, n in runner.seq_lens.items():
        table = runner.serving_table(req)
        for lp in range(pages_for(n, runner.dims.page_size)):
            have = tuple(k for k in range(t) if (req, lp) in gathered[k])
            want = holders(table.resolve(t), t, req, lp, table.owners)
            if tuple(sorted(want)) != have:
                raise AssertionError(f"request {req} page {lp} held by {have}, layout {table.kind} wants {want}")
