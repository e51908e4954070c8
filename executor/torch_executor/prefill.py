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
of the same tokens writes. On CUDA the pieces a rank attends run as one ragged batch through torch's
variable-length flash attention (torch.nn.attention.varlen), standing in for FlashInfer's ragged
prefill (SGLang's kernel for this form; the trimmed FlashInfer bundle carries only the MLA decode
sources); on CPU, or where that kernel is missing, one SDPA call per piece on the same ragged inputs.
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

import inspect
import os
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
        # the pieces this rank attends, as one ragged batch (layouts whose attending ranks hold every
        # prefix page: TP, DP's owner, DPTP's owner group); CP and DOP gather each piece's prefix
        self.ragged = None
        ragged = []
        if not lay.gathers_prefix:
            mine = lay.group_of_rank(rank)
            att = [i for i, sp in enumerate(spans) if not (lay.attends_own_rows and sp[4] != mine)]
            ragged = _ragged_vectors([spans[i] for i in att], [parts[2 * i] for i in att], row0)
        vecs = [np.concatenate(req), np.concatenate(pos), np.asarray(writes[0], dtype=np.int64),
                np.asarray(writes[1], dtype=np.int64)] + parts + (ragged[0] if ragged else [])
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
        if ragged:
            rows_t, prefix_idx, kv_order, cu_q, cu_k = views[4 + 2 * len(spans):]
            self.ragged = RaggedChunk(rows_t, prefix_idx, kv_order, cu_q.to(torch.int32), cu_k.to(torch.int32),
                                      *ragged[1])


@dataclass
class RaggedChunk:
    """The pieces one rank attends, as one ragged batch of causal sequences: sequence i is piece i's
    n_i chunk rows as queries over its prefix followed by those rows as keys."""

    rows: torch.Tensor  # [Nq] chunk rows of the attended pieces, in order
    prefix_idx: torch.Tensor  # [P] flat token slots of their prefixes, concatenated
    kv_order: torch.Tensor  # [Nk] the keys in sequence order, indexing cat(chunk latents [rows], prefixes [P])
    cu_q: torch.Tensor  # [S+1] int32 query offsets
    cu_k: torch.Tensor  # [S+1] int32 key offsets
    q_off: list[int]  # the same offsets on the host (the fallback's per-sequence loop)
    k_off: list[int]
    max_q: int
    max_k: int


def _ragged_vectors(spans: list[tuple], prefix_idx: list[np.ndarray], chunk_rows: int):
    """Host vectors of a RaggedChunk: ([rows, prefix_idx, kv_order, cu_q, cu_k], (q_off, k_off,
    max_q, max_k)); [] when the rank attends no piece."""
    if not spans:
        return []
    rows, order, q_off, k_off = [], [], [0], [0]
    p_at = chunk_rows
    for (q, start, n, r0, owner), idx in zip(spans, prefix_idx):
        rows.append(np.arange(r0, r0 + n, dtype=np.int64))
        order.append(np.arange(p_at, p_at + idx.size, dtype=np.int64))
        order.append(np.arange(r0, r0 + n, dtype=np.int64))
        p_at += idx.size
        q_off.append(q_off[-1] + n)
        k_off.append(k_off[-1] + idx.size + n)
    vecs = [np.concatenate(rows), np.concatenate(prefix_idx), np.concatenate(order),
            np.asarray(q_off, dtype=np.int64), np.asarray(k_off, dtype=np.int64)]
    return [vecs, (q_off, k_off, int(np.diff(q_off).max()), int(np.diff(k_off).max()))]


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
                dims: MLADims, seqs: RaggedChunk | None = None) -> torch.Tensor:
    """Causal MHA-form attention of query rows over key rows, and the output projection over the
    held heads. One sequence (seqs None): the n queries are the last n of the L keys. A ragged
    batch: sequence i's queries q_lat[q_off[i]:q_off[i+1]] are the last rows of its keys
    kv[k_off[i]:k_off[i+1]].
    q_lat [n, Q], kv [L, C+R] (post-RoPE key last), positions [n] -> [n, D] (partial over heads)."""
    n, hs = q_lat.shape[0], heads.num_heads
    nope, rope, c = dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.kv_lora_rank
    seq = kv.shape[0]
    q = (q_lat @ heads.w_qb.reshape(hs * (nope + rope), -1).t()).view(n, hs, nope + rope)  # [n, Hs, N+R]
    q = torch.cat((q[..., :nope], rope_rotate(q[..., nope:], positions, dims.rope_theta)), dim=-1)
    lat, k_pe = kv[:, :c], kv[:, c:]  # [L, C], [L, R]
    k_nope = torch.einsum("lc,hnc->lhn", lat, heads.w_uk)  # [L, Hs, N]
    v = torch.einsum("lc,hcv->lhv", lat, heads.w_uv)  # [L, Hs, V]
    k = torch.cat((k_nope, k_pe[:, None].expand(seq, hs, rope)), dim=-1)  # [L, Hs, N+R]
    vdim = v.shape[-1]
    if q.is_cuda and vdim != k.shape[-1]:
        # NOTE: values padded to the key width: torch's flash kernels (the ones that take the
        # lower-right causal mask without materializing it) want one head width for q, k and v
        v = F.pad(v, (0, k.shape[-1] - vdim))
    if seqs is None:
        seqs = RaggedChunk(None, None, None, None, None, [0, n], [0, seq], n, seq)
    varlen = _varlen_attention(q) if len(seqs.q_off) > 2 or seqs.cu_q is not None else None
    if varlen is not None:
        # NOTE: one kernel for every sequence of the chunk, as engines run an extend batch (SGLang:
        # FlashInfer BatchPrefillWithRaggedKVCacheWrapper over the batch's ragged q/k/v, python/
        # sglang/srt/layers/attention/flashinfer_mla_backend.py; vLLM: flash_attn_varlen_func in
        # vllm/v1/attention/backends/mla/common.py `_run_prefill_new_tokens_fa`). A loop of one
        # SDPA call per piece cost ~2 ms of host time per piece on a 4-layer stack, which made
        # served steps packing many short prompts 2-3x their step rows (issue 30).
        cu_q, cu_k = seqs.cu_q, seqs.cu_k
        if cu_q is None:
            cu_q = torch.tensor(seqs.q_off, dtype=torch.int32, device=q.device)
            cu_k = torch.tensor(seqs.k_off, dtype=torch.int32, device=q.device)
        o = varlen(q, k, v, cu_q, cu_k, seqs.max_q, seqs.max_k, dims.softmax_scale)  # [n, Hs, V']
    else:
        o = torch.empty((n, hs, v.shape[-1]), dtype=q.dtype, device=q.device)
        for q0, q1, k0, k1 in zip(seqs.q_off, seqs.q_off[1:], seqs.k_off, seqs.k_off[1:]):
            o[q0:q1] = _sdpa_causal(q[q0:q1], k[k0:k1], v[k0:k1], dims.softmax_scale)
    return o[..., :vdim].reshape(n, -1) @ heads.w_o.reshape(-1, heads.w_o.shape[-1])  # [n, D]


def _sdpa_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """One sequence: q [n, H, d] (the last n of the keys), k [L, H, d], v [L, H, dv] -> [n, H, dv],
    lower-right causal (a query at position p sees keys <= p)."""
    # NOTE: on CUDA, cuDNN's SDPA (torch 2.11 picks it first on sm90) builds an execution plan per new
    # (n, L) shape: ~14 ms of host time per call, measured (benchmarks/results/executor_gpu/
    # twin_1gpu/README.md, the prefill diagnostic), and serving makes a new shape every chunk,
    # which made served prefill steps 5-10x their step rows; the flash and memory-efficient
    # kernels have no per-shape build
    n, seq = q.shape[0], k.shape[0]
    with sdpa_kernel(_PREFILL_BACKENDS) if q.is_cuda else nullcontext():
        o = F.scaled_dot_product_attention(q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None],
                                           attn_mask=causal_lower_right(n, seq), scale=scale)[0]  # [H, n, dv]
    return o.transpose(0, 1)


_VARLEN: dict = {}


def _varlen_attention(q: torch.Tensor):
    """torch's variable-length flash attention (torch.nn.attention.varlen.varlen_attn) as
    f(q, k, v, cu_q, cu_k, max_q, max_k, scale) -> [n, H, d], lower-right causal; None where it
    can't run (CPU, an older torch, FLOORFIRST_PREFILL_VARLEN=0) or where its causal mask didn't
    match the per-sequence SDPA on a small check at first use (the loop runs instead)."""
    if not q.is_cuda:
        return None
    key = (q.device, q.dtype, q.shape[-1])
    if key in _VARLEN:
        return _VARLEN[key]
    fn = None
    if os.environ.get("FLOORFIRST_PREFILL_VARLEN", "1") != "0":
        try:
            from torch.nn.attention.varlen import varlen_attn
        except ImportError:
            varlen_attn = None
        if varlen_attn is not None:
            params = inspect.signature(varlen_attn).parameters
            causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}

            def fn(q, k, v, cu_q, cu_k, max_q, max_k, scale):
                return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, **causal)

            fn = fn if _varlen_matches(fn, q) else None
    _VARLEN[key] = fn
    return fn


def _varlen_matches(fn, like: torch.Tensor) -> bool:
    """The varlen kernel against the per-sequence SDPA on two sequences whose queries are the last
    rows of longer keys (a cached prefix): the lower-right causal mask, not the upper-left one."""
    gen = torch.Generator(device=like.device).manual_seed(0)
    h, d = 2, like.shape[-1]
    qn, kn = [3, 5], [7, 5]
    q = torch.randn((sum(qn), h, d), generator=gen, device=like.device, dtype=like.dtype)
    k = torch.randn((sum(kn), h, d), generator=gen, device=like.device, dtype=like.dtype)
    v = torch.randn((sum(kn), h, d), generator=gen, device=like.device, dtype=like.dtype)
    cq, ck = [0, 3, 8], [0, 7, 12]
    try:
        got = fn(q, k, v, torch.tensor(cq, dtype=torch.int32, device=q.device),
                 torch.tensor(ck, dtype=torch.int32, device=q.device), max(qn), max(kn), d ** -0.5)
    except (RuntimeError, TypeError, ValueError):
        return False
    want = torch.cat([_sdpa_causal(q[a:b], k[c:e], v[c:e], d ** -0.5)
                      for a, b, c, e in zip(cq, cq[1:], ck, ck[1:])])
    return bool((got.float() - want.float()).abs().max() < 2e-2)


def chunk_attention(h: torch.Tensor, latent: torch.Tensor, attn: ReplicatedAttnWeights, heads: HeadWeights,
                    pool_l: torch.Tensor, ch: ChunkInputs, dims: MLADims, g) -> torch.Tensor:
    """A layer's attention for the chunk rows, identical on every rank afterwards.
    h [n, D] normed chunk rows, latent [n, C+R] their cached rows (already written) -> [n, D]."""
    lay = ch.layout
    out = torch.zeros_like(h)  # [n, D]
    flat = pool_l.view(-1, pool_l.shape[-1])  # [P*page, C+R]
    mine = lay.group_of_rank(g.rank)
    if ch.ragged is not None:
        rg = ch.ragged
        src = torch.cat((latent, flat.index_select(0, rg.prefix_idx))) if rg.prefix_idx.numel() else latent
        kv = src.index_select(0, rg.kv_order)  # [Nk, C+R], sequence after sequence
        o = mha_prefill(q_latent(h.index_select(0, rg.rows), attn, dims), kv, ch.pos.index_select(0, rg.rows),
                        heads, dims, rg)
        out.index_copy_(0, rg.rows, o.to(out.dtype))
    for pc in (ch.pieces if lay.gathers_prefix else ()):  # CP, DOP: each piece's prefix gathered from its holders
        rows = slice(pc.row0, pc.row0 + pc.n)
        if lay.attends_own_rows and pc.owner != mine:
            continue  # the owner group attends; this rank adds zero rows to the all-reduce below
        kv = torch.cat((_prefix(pc, flat, lay.gathers_prefix, g), latent[rows]), dim=0) if pc.start else latent[rows]
        out[rows] = mha_prefill(q_latent(h[rows], attn, dims), kv, ch.pos[rows], heads, dims).to(out.dtype)
    if lay.chunk_reduced:  # TP, DOP, DPTP: partial over heads; DP, DPTP: zero rows off the owner group
        dist.all_reduce(out, group=g.main)
    return out
