"""One chunk of a live switch over the side group, every message verified before the commit.

What it does: `run_chunk` moves chunk k of a plan on one rank: the head weights its layers gather
(an all-gather on the side group) and the valid prefixes of the KV pages it moves (packed, one
batched send/recv with each peer, unpacked into the destination pages). Each message travels with
its sender's checksum (`payload_checksum`); the receiver checksums what landed in its pages (the
gathered weights: against the sum of every rank's share, one small all-reduce) and counts
mismatches on the device, read once when the last chunk has moved (`Transition.agree`), so a
corrupted transfer aborts the switch instead of committing.
Faults on one rank never leave its peers waiting for the process-group timeout: an exception
while preparing the chunk (a page-table lookup, an allocation) fails the switch and the rank
still takes part in the exchange with placeholders of the planned sizes, so every peer's
transfer completes; an exception in the exchange itself (a transport error) fails the switch and
marks the side group broken, and the peers left waiting on this rank are released by the side
group's own short timeout (dist.SIDE_TIMEOUT_S), fail too, and the group rebuilds the side group
when it aborts (every rank learns of it at the next agreement).
What it does not do: decide anything (transitions.py), or wait for the side stream (the checksums
are compared on the device; the host reads one counter per switch).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.distributed as dist

from .dist import all_gather_cat

# NOTE: the checksum weights c(j) = (j·K + C) | 1 (odd, 64-bit): K is 2^64 / golden ratio
# (Knuth's multiplicative hash), C an arbitrary odd offset. int64 products and sums wrap mod 2^64
# on CPU and CUDA alike, and integer sums don't depend on the order they're added in, so the sum
# is the same on every device and rank.
_K = -7046029254386353131  # 0x9E3779B97F4A7C15 as a signed int64
_C = 0x632BE59BD9B4E019
_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_CHECKSUM_TAG = 1  # the checksum message of a pair (gloo matches by tag; NCCL keeps the order)


def payload_checksum(x: torch.Tensor, offset: int = 0, word_bytes: int | None = None) -> torch.Tensor:
    """Σ_i w_i·c(offset + i) mod 2^64 over x's bytes read as words w_i (4-byte words where its size
    allows, else its elements; `word_bytes` fixes the width) in row-major order -> int64 scalar on
    x's device. A changed word changes it: its difference is nonzero and under 2^32 in magnitude,
    and an odd weight times it can't be 0 mod 2^64; a word moved to another place meets another
    weight. `offset` (in words) places x inside a larger tensor (a shard in a gathered weight).
    NOTE: words, not elements: a bf16 payload costs half the int64 arithmetic."""
    flat = x.contiguous().view(-1)
    width = word_bytes or (4 if flat.numel() * flat.element_size() % 4 == 0 else flat.element_size())
    words = flat.view(torch.uint8).view(_BITS[width]).to(torch.int64)
    j = torch.arange(offset, offset + words.numel(), dtype=torch.int64, device=x.device)
    return (words * ((j * _K + _C) | 1)).sum()


def _index(slots: list[int], counts: list[int], page: int, device) -> torch.Tensor:
    """Flat token indices of the copied prefixes. -> [sum counts] int64 on device."""
    if not slots:
        return torch.zeros(0, dtype=torch.int64, device=device)
    idx = np.concatenate([np.arange(s * page, s * page + c, dtype=np.int64) for s, c in zip(slots, counts)])
    t = torch.from_numpy(idx)
    return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t


def _gather_weights(tr, runner, k: int) -> None:
    """All-gather the heads of the layers chunk k moves, and count the gathered tensors whose
    checksum differs from the sum of every rank's share (one all-reduce of the shares' sums).
    Rank j's share is its slice j mod weight_split of the source's heads, so the first weight_split
    shares are every head in order: a destination that keeps every head gathered from a T-way split
    (TP, DOP -> CP, DP) receives straight into its tensors; any other (a DPTP source, whose slices
    repeat in every group, or a split destination: TP <-> DPTP) gathers into a buffer of T shares
    and copies its own slice out of the first weight_split of them."""
    g, r = runner.g, runner.g.rank
    pairs = []  # (gathered [T * share], src share, destination tensor or None, its heads [lo, hi) in gathered)
    for layer, c in enumerate(tr.plan.weight_chunk):
        if c != k:
            continue
        dst_h = tr.new.heads[layer]
        lo = dst_h.head_start  # the gathered tensor's first rows are heads 0, 1, ... in order
        for out, src in zip(dst_h.tensors(), runner.state.heads[layer].tensors()):
            if out.shape[0] == g.world_size * src.shape[0]:
                pairs.append((out, src, None, (0, 0)))
            else:
                buf = torch.empty((g.world_size * src.shape[0],) + tuple(src.shape[1:]), dtype=src.dtype,
                                  device=src.device)
                pairs.append((buf, src, out, (lo, lo + out.shape[0])))
    if not pairs:
        return
    for gathered, src, _, _ in pairs:
        all_gather_cat(gathered, src, g.side)
    widths = [4 if src.numel() * src.element_size() % 4 == 0 else src.element_size() for _, src, _, _ in pairs]
    shares = torch.stack([payload_checksum(src, r * src.numel() * src.element_size() // w, w)
                          for (_, src, _, _), w in zip(pairs, widths)])  # [n] int64
    dist.all_reduce(shares, group=g.side)  # Σ over ranks = the checksum of the gathered tensor
    got = torch.stack([payload_checksum(gathered, 0, w) for (gathered, _, _, _), w in zip(pairs, widths)])
    tr.mismatch += (got != shares).sum()
    for gathered, _, out, (lo, hi) in pairs:
        if out is not None:
            out.copy_(gathered[lo:hi])


def run_chunk(tr, runner, k: int) -> None:
    """Chunk k of `tr` (a transitions.Transition) on this rank, on the side stream; failures go to
    `tr.fail` (module docstring)."""
    plan, g = tr.plan, runner.g
    r, page, dev, dims = g.rank, runner.dims.page_size, g.device, runner.dims
    flat = runner.pool.view(dims.num_layers, -1, dims.latent_dim)  # [L, P*page, C+R]
    live = np.fromiter((int(q) in runner.seq_lens for q in plan.move_req), dtype=bool, count=len(plan.move_req))
    sel = np.nonzero((plan.move_chunk == k) & live)[0]  # moves of requests finished since: skipped
    f = tr.chunk_faults
    sends, recvs = [], []  # (peer, data, checksum); (peer, token idx or None, data buffer, checksum buffer)
    try:
        if tr._failed is not None:  # failed since the last agreement: its tables may be gone, take part only
            raise RuntimeError(tr._failed)
        old_t, new_t = runner.state.table, tr.new.table
        for peer in range(plan.world_size):
            if peer == r:
                continue
            out_rows = sel[(plan.move_src[sel] == r) & (plan.move_dst[sel] == peer)]
            if len(out_rows):
                idx = _index([old_t.pages[int(plan.move_req[i])][int(plan.move_lp[i])] for i in out_rows],
                             [int(plan.move_tokens[i]) for i in out_rows], page, dev)
                data = flat.index_select(1, idx)  # [L, n, C+R]
                sends.append((peer, data, payload_checksum(data).view(1)))
            in_rows = sel[(plan.move_dst[sel] == r) & (plan.move_src[sel] == peer)]
            if len(in_rows):
                idx = _index([new_t.pages[int(plan.move_req[i])][int(plan.move_lp[i])] for i in in_rows],
                             [int(plan.move_tokens[i]) for i in in_rows], page, dev)
                recvs.append((peer, idx, torch.empty((dims.num_layers, len(idx), dims.latent_dim), dtype=flat.dtype,
                                                     device=dev), torch.empty(1, dtype=torch.int64, device=dev)))
    except Exception as e:  # noqa: BLE001 - any failure here must still complete the peers' transfers
        tr.fail(f"chunk {k} could not be prepared on rank {r}: {type(e).__name__}: {e}")
        sends, recvs = _placeholders(plan, sel, r, dims, flat.dtype, dev)
    try:
        _gather_weights(tr, runner, k)
        if f is not None and f.transfer_error_chunk == k and f.fail_transfer_rank == r:
            raise RuntimeError(f"injected: transport error in chunk {k} on rank {r}")
        ops = []
        for peer, data, csum in sends:
            ops += [dist.P2POp(dist.isend, data, peer, group=g.side),
                    dist.P2POp(dist.isend, csum, peer, group=g.side, tag=_CHECKSUM_TAG)]
        for peer, _, buf, cbuf in recvs:
            ops += [dist.P2POp(dist.irecv, buf, peer, group=g.side),
                    dist.P2POp(dist.irecv, cbuf, peer, group=g.side, tag=_CHECKSUM_TAG)]
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()
    except Exception as e:  # noqa: BLE001 - a transport error: the side group is suspect from here on
        tr.fail(f"chunk {k} transfer failed on rank {r}: {type(e).__name__}: {str(e)[:200]}")
        tr.side_broken = True
        return
    for _, idx, buf, cbuf in recvs:
        if idx is None:  # placeholders: nothing of ours to unpack
            continue
        if f is not None and f.corrupt_chunk is not None and k >= f.corrupt_chunk and f.fail_transfer_rank == r \
                and not tr.corrupted:
            buf.view(-1)[:1].view(_BITS[buf.element_size()]).bitwise_xor_(1)  # one flipped bit, no error
            tr.corrupted = True
        flat.index_copy_(1, idx, buf)
        tr.mismatch += (payload_checksum(flat.index_select(1, idx)) != cbuf[0]).to(torch.int64)
    if f is not None and f.fail_transfer_chunk == k and f.fail_transfer_rank == r:
        for _, idx, _, _ in recvs:  # what a broken transfer leaves behind: garbage in the new pages
            if idx is not None:
                flat.index_fill_(1, idx, float("nan"))
        tr.fail(f"injected: transfer of chunk {k} failed on rank {r}")


def _placeholders(plan, sel, r: int, dims, dtype, dev) -> tuple[list, list]:
    """The messages of chunk k with the planned sizes (from the plan alone) and no content."""
    sends, recvs = [], []
    for peer in range(plan.world_size):
        if peer == r:
            continue
        n_out = int(plan.move_tokens[sel[(plan.move_src[sel] == r) & (plan.move_dst[sel] == peer)]].sum())
        if n_out:
            sends.append((peer, torch.zeros((dims.num_layers, n_out, dims.latent_dim), dtype=dtype, device=dev),
                          torch.zeros(1, dtype=torch.int64, device=dev)))
        n_in = int(plan.move_tokens[sel[(plan.move_dst[sel] == r) & (plan.move_src[sel] == peer)]].sum())
        if n_in:
            recvs.append((peer, None, torch.empty((dims.num_layers, n_in, dims.latent_dim), dtype=dtype, device=dev),
                          torch.empty(1, dtype=torch.int64, device=dev)))
    return sends, recvs
