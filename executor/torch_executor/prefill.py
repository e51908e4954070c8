"""Chunked prefill on the real layers: a step's prompt tokens attend their request's cached prefix
and each other (causally), in the MHA form engines use for prefill.

What it does: `ChunkInputs` holds one step's prefill chunk on one rank — its pieces (a request, the
first position, the token count; consecutive pieces of several requests when a chunk packs short
prompts), each token's request and position, where this rank writes each token's latent (the
serving layout's pages, and a switch's other table while one is in flight) and where the cached
prefix of each piece lies in this rank's pool. `chunk_attention` is a layer's attention for those
rows: the prefix's latent rows (read here, or gathered from their holders) followed by the
chunk's own, expanded per head to keys [Hs, L, N+R] (the post-RoPE key shared by every head) and
values [Hs, L, V], and torch's scaled_dot_product_attention with the lower-right causal mask (a
query at position p sees tokens <= p), then the output projection.
NOTE: the MHA form (keys and values expanded from the latent) is SGLang's choice for an extend
batch with no cached prefix or a long one (python/sglang/srt/models/deepseek_common/
attention_backend_handler.py `_handle_attention_backend`: MHA_ONE_SHOT / MHA_CHUNKED_KV, absorbed
MLA otherwise) and the form the planner prices (planner/models/attention/mla.py `prefill_flops`:
2·(N+R) + 2·V FLOPs per head and causal pair); it is the absorbed decode's function exactly
(q·(W_uk c) = (q W_uk)·c, Σ p (c W_uv) = (Σ p c) W_uv), so the KV a chunk writes is the KV a decode
of the same tokens writes. torch's SDPA stands in for FlashInfer's ragged prefill (SGLang's kernel
for this form): the trimmed FlashInfer bundle carries only the MLA decode sources.
Per layout (read off its placement, placement_kind.ExecLayout): TP reads its full copy of the
prefix and attends its head shard (partial outputs all-reduced, as decode); DP's owner attends with
every head and DPTP's owner group with its R-th of the heads on each of its ranks, each holding the
whole prefix (the other groups contribute zero rows to the same all-reduce); CP and DOP gather the
prefix's latent rows from their holders (an all-reduce of a buffer each holder fills with its rows:
exact, the rest are zeros), then CP attends every head on every rank (replicated weights: identical
rows, no reduction) and DOP its head shard (partials all-reduced).
What it does not do: ring attention for CP (every rank attends the whole chunk), prefix chunking
for very long prefixes (the keys of the whole prefix are materialized per head), or run inside a
CUDA graph (a step with a chunk runs eagerly, as SGLang's extend batches do by default).
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

from .config import MLADims
from .kv_pages import PageTable
from .layers import HeadWeights, ReplicatedAttnWeights, q_latent, rope_rotate


@dataclass
class ChunkPiece:
    """One request's tokens [start, start + n) of a step's chunk, at chunk rows [row0, row0 + n)."""

    req: int
    start: int
    n: int
    row0: int
    owner: int  # layouts with owner groups: the request's owner group (DP, DOP: its owner rank), else -1
    prefix_idx: torch.Tensor  # [m] flat token slots (slot*page + offset) of the prefix tokens held here
    prefix_pos: torch.Tensor  # [m] their positions (the rows of the gathered prefix they fill)


class ChunkInputs:
    """One step's prefill chunk on one rank (module docstring); built on the host before the step."""

    def __init__(self, table: PageTable, pieces: list[tuple[int, int, int]], rank: int, page_size: int,
                 writes: tuple[list[int], list[int]], device: torch.device):
        """pieces: (request, first position, tokens) in chunk order; writes: (chunk row, flat token
        slot) of every latent this rank stores."""
        self.kind = table.kind
        self.layout = lay = table.resolve()
        parts, spans, row0 = [], [], 0
        req, pos = [], []
        for q, start, n in pieces:
            idx, at = [], []
            for lp, slot in sorted(table.pages.get(q, {}).items()):
                lo = lp * page_size
                if lo >= start:
                    break
                cnt = min(page_size, start - lo)
                idx.append(np.arange(slot * page_size, slot * page_size + cnt, dtype=np.int64))
                at.append(np.arange(lo, lo + cnt, dtype=np.int64))
            for xs in (idx, at):
                parts.append(np.concatenate(xs) if xs else np.zeros(0, dtype=np.int64))
            owner = table.owners[q] // lay.group_ranks if lay.owned and q in table.owners else -1
            spans.append((q, start, n, row0, owner))
            req.append(np.full(n, q, dtype=np.int64))
            pos.append(np.arange(start, start + n, dtype=np.int64))
            row0 += n
        self.rows = row0
        vecs = [np.concatenate(req), np.concatenate(pos), np.asarray(writes[0], dtype=np.int64),
                np.asarray(writes[1], dtype=np.int64)] + parts
        # NOTE: one host vector and one copy; on CUDA from pinned memory, asynchronously (a copy from
        # pageable memory would make the host wait for every step queued before it)
        host = torch.from_numpy(np.concatenate(vecs))
        if device.type == "cuda":
            dev = host.pin_memory().to(device, non_blocking=True)
        else:
            dev = host
        views, at = [], 0
        for v in vecs:
            views.append(dev[at:at + v.size])
            at += v.size
        self.req, self.pos, self.wrows, self.wtoks = views[:4]  # [n], [n], [w] chunk row, [w] flat token slot
        self.pieces = [ChunkPiece(q, start, n, r0, owner, views[4 + 2 * i], views[5 + 2 * i])
                       for i, (q, start, n, r0, owner) in enumerate(spans)]


def _prefix(piece: ChunkPiece, flat: torch.Tensor, gathered: bool, g) -> torch.Tensor:
    """The piece's cached prefix, latent rows in position order. flat [P*page, C+R] -> [start, C+R].
    `gathered`: this rank doesn't hold all of it (CP, DOP: ExecLayout.gathers_prefix)."""
    if not gathered:  # TP, DP's owner and DPTP's owner group hold every page of the request
        return flat.index_select(0, piece.prefix_idx)
    buf = torch.zeros((piece.start, flat.shape[1]), dtype=flat.dtype, device=flat.device)
    buf.index_copy_(0, piece.prefix_pos, flat.index_select(0, piece.prefix_idx))
    # NOTE: every token has exactly one holder among the ranks summed (CP: one page holder; DOP: the
    # owner), so the sum adds zeros to each row: exact
    dist.all_reduce(buf, group=g.main)
    return buf


_PREFILL_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]


def mha_prefill(q_lat: torch.Tensor, kv: torch.Tensor, positions: torch.Tensor, heads: HeadWeights,
                dims: MLADims) -> torch.Tensor:
    """Causal MHA-form attention of n chunk tokens over the L = prefix + n latent rows that end with
    theirs, and the output projection over the held heads.
    q_lat [n, Q], kv [L, C+R] (post-RoPE key last), positions [n] -> [n, D] (partial over heads)."""
    n, hs = q_lat.shape[0], heads.num_heads
    nope, rope, c = dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.kv_lora_rank
    seq = kv.shape[0]
    q = (q_lat @ heads.w_qb.reshape(hs * (nope + rope), -1).t()).view(n, hs, nope + rope)  # [n, Hs, N+R]
    q = torch.cat((q[..., :nope], rope_rotate(q[..., nope:], positions, dims.rope_theta)), dim=-1)
    lat, k_pe = kv[:, :c], kv[:, c:]  # [L, C], [L, R]
    k_nope = torch.einsum("lc,hnc->hln", lat, heads.w_uk)  # [Hs, L, N]
    v = torch.einsum("lc,hcv->hlv", lat, heads.w_uv)  # [Hs, L, V]
    k = torch.cat((k_nope, k_pe[None].expand(hs, seq, rope)), dim=-1)  # [Hs, L, N+R]
    vdim = v.shape[-1]
    if q.is_cuda and vdim != k.shape[-1]:
        # NOTE: values padded to the key width: torch's flash kernel (the one that takes the
        # lower-right causal mask without materializing it) wants one head width for q, k and v
        v = F.pad(v, (0, k.shape[-1] - vdim))
    # NOTE: on CUDA, cuDNN's SDPA (torch 2.11 picks it first on sm90) builds an execution plan per new
    # (n, L) shape: ~14 ms of host time per call, measured (benchmarks/results/executor_gpu/
    # twin_1gpu/README.md, the prefill diagnostic), and serving makes a new shape every chunk,
    # which made served prefill steps 5-10x their step rows. Engines run a ragged prefill
    # kernel with no per-shape build (SGLang: FlashInfer BatchPrefillWithRaggedKVCacheWrapper,
    # python/sglang/srt/layers/attention/flashinfer_mla_backend.py), so the flash and
    # memory-efficient kernels stand in for it here.
    with sdpa_kernel(_PREFILL_BACKENDS) if q.is_cuda else nullcontext():
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k[None], v[None],
                                           attn_mask=causal_lower_right(n, seq), scale=dims.softmax_scale)[0]  # [Hs, n, V]
    return o[..., :vdim].transpose(0, 1).reshape(n, -1) @ heads.w_o.reshape(-1, heads.w_o.shape[-1])  # [n, D]


def chunk_attention(h: torch.Tensor, latent: torch.Tensor, attn: ReplicatedAttnWeights, heads: HeadWeights,
                    pool_l: torch.Tensor, ch: ChunkInputs, dims: MLADims, g) -> torch.Tensor:
    """A layer's attention for the chunk rows, identical on every rank afterwards.
    h [n, D] normed chunk rows, latent [n, C+R] their cached rows (already written) -> [n, D]."""
    lay = ch.layout
    out = torch.zeros_like(h)  # [n, D]
    flat = pool_l.view(-1, pool_l.shape[-1])  # [P*page, C+R]
    mine = lay.group_of_rank(g.rank)
    for pc in ch.pieces:
        rows = slice(pc.row0, pc.row0 + pc.n)
        if lay.attends_own_rows and pc.owner != mine:
            continue  # the owner group attends; this rank adds zero rows to the all-reduce below
        kv = torch.cat((_prefix(pc, flat, lay.gathers_prefix, g), latent[rows]), dim=0) if pc.start else latent[rows]
        out[rows] = mha_prefill(q_latent(h[rows], attn, dims), kv, ch.pos[rows], heads, dims).to(out.dtype)
    if lay.chunk_reduced:  # TP, DOP, DPTP: partial over heads; DP, DPTP: zero rows off the owner group
        dist.all_reduce(out, group=g.main)
    return out
