"""Paged split-KV MLA decode attention: a Triton kernel (CUDA) and a plain-torch fallback.

What it does: for absorbed-MLA queries q [B, H, C+R] and a paged latent cache
pool [P, page, C+R] (post-RoPE key in the last R columns), returns the attention output over
the latent o [B, H, C] and the log-sum-exp of the scaled scores lse [B, H] (fp32, natural log),
so partial results over disjoint page sets merge exactly (`merge_partials`). A request's local
sequence is its block-table pages in order, all full except possibly the last; a request with
no local tokens returns o = 0, lse = -inf.
What it does not do: sparse (DSA top-k) attention, fp8 KV, causal masking inside a chunk (one
new token per request per step).

The Triton kernel splits every request's pages into `num_splits` ranges (split-KV) so the grid
is one full wave of the GPU, each program handles BLOCK_H heads of one request over one range
with an online softmax (bf16 tensor-core dots for q·k (C+R wide) and p·v (C wide), fp32
accumulators fed back into the dots), and a second kernel reduces the splits. Head blocks of one
(request, range) are adjacent program ids so they read the same pages while those are in L2.
Its launch shape is fixed by host ints only (no device reads), so it can be captured in a CUDA
graph: `max_pages` is then the captured capacity, and per-request lengths are read on device.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

LOG2E = 1.4426950408889634


def mla_decode_torch(
    q: torch.Tensor,  # [B, H, C+R]
    pool: torch.Tensor,  # [P, page, C+R]
    block_table: torch.Tensor,  # [B, maxp] int, padded entries any valid slot
    seq_lens: torch.Tensor,  # [B] int, local tokens per request
    scale: float,
    kv_lora_rank: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference-quality attention in fp32 (any device). Returns (o [B, H, C] in q.dtype, lse [B, H] fp32)."""
    b, h, _ = q.shape
    page = pool.shape[1]
    maxp = block_table.shape[1]
    if maxp == 0 or b == 0:
        return (torch.zeros(b, h, kv_lora_rank, dtype=q.dtype, device=q.device),
                torch.full((b, h), -math.inf, dtype=torch.float32, device=q.device))
    kv = pool[block_table.long()].reshape(b, maxp * page, -1).float()  # [B, T, C+R]
    s = torch.einsum("bhc,btc->bht", q.float(), kv) * scale  # [B, H, T]
    valid = torch.arange(maxp * page, device=q.device)[None, :] < seq_lens.to(q.device).long()[:, None]  # [B, T]
    s = s.masked_fill(~valid[:, None, :], -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # [B, H]
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # rows with no tokens: 0
    o = torch.einsum("bht,btc->bhc", p, kv[..., :kv_lora_rank])  # [B, H, C]
    return o.to(q.dtype), lse


def merge_partials(o_parts: torch.Tensor, lse_parts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact merge of attention over disjoint key sets. o_parts [S, B, H, C], lse_parts [S, B, H].

    o = sum_s exp(lse_s - m) o_s / sum_s exp(lse_s - m), lse = m + log sum_s exp(lse_s - m).
    """
    m = lse_parts.max(dim=0).values  # [B, H]
    m_safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp(lse_parts - m_safe[None])  # [S, B, H]; -inf parts weigh 0
    denom = w.sum(dim=0)  # [B, H]
    o = (w[..., None] * o_parts.float()).sum(dim=0) / denom.clamp_min(1e-30)[..., None]
    return o.to(o_parts.dtype), m_safe + torch.log(denom)


@dataclass(frozen=True)
class KernelConfig:
    """Launch shape of the Triton kernel."""

    block_h: int = 64
    """Heads per program (a power of two >= 16; capped at the heads present)."""
    num_warps: int = 8
    num_stages: int = 2
    block_n: int = 64
    """Tokens per inner-loop tile; divides the page size."""
    ctas_per_sm: int = 1
    """Programs the split count aims to keep resident per SM: the grid is sized to one wave
    of num_sms * ctas_per_sm programs, so no partly-empty last wave idles most SMs."""


@functools.lru_cache(maxsize=1)
def _build_triton_kernels():
    # NOTE: built on first use so importing this module needs no Triton (CPU runs); the cache
    # holds the two jitted functions, not data.
    import triton
    import triton.language as tl

    @triton.jit
    def _mla_split_kernel(
        q_ptr, pool_ptr, bt_ptr, len_ptr, o_ptr, lse_ptr,
        H, pages_per_split, qk_scale_log2,
        stride_qb, stride_qh, stride_pp, stride_bt_b,
        stride_ob, stride_oh, stride_os, stride_lb, stride_lh,
        C: tl.constexpr, R: tl.constexpr, PAGE: tl.constexpr, BLOCK_H: tl.constexpr,
        BLOCK_N: tl.constexpr,
    ):
        # grid (head_blocks, B, splits): head blocks of one (request, split) are adjacent
        # program ids, so they run together and read each KV tile from HBM once (then L2).
        hb = tl.program_id(0)
        b = tl.program_id(1)
        sp = tl.program_id(2)
        heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)  # [BH]
        hmask = heads < H
        offs_c = tl.arange(0, C)
        offs_r = tl.arange(0, R)
        offs_t = tl.arange(0, BLOCK_N)
        q_base = q_ptr + b * stride_qb + heads[:, None] * stride_qh
        q_lat = tl.load(q_base + offs_c[None, :], mask=hmask[:, None], other=0.0)  # [BH, C]
        q_pe = tl.load(q_base + C + offs_r[None, :], mask=hmask[:, None], other=0.0)  # [BH, R]
        seq_len = tl.load(len_ptr + b)
        n_tiles = tl.cdiv(seq_len, BLOCK_N)
        tiles_per_split = pages_per_split * (PAGE // BLOCK_N)
        t_lo = sp * tiles_per_split
        t_hi = tl.minimum(t_lo + tiles_per_split, n_tiles)
        m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_H], tl.float32)
        acc = tl.zeros([BLOCK_H, C], tl.float32)
        for it in range(t_lo, t_hi):
            # one block-table lookup per tile; a tile lies inside one page (BLOCK_N divides PAGE)
            slot = tl.load(bt_ptr + b * stride_bt_b + (it * BLOCK_N) // PAGE).to(tl.int64)
            tok = it * BLOCK_N + offs_t
            tmask = tok < seq_len
            kv_base = pool_ptr + slot * stride_pp + ((it * BLOCK_N) % PAGE + offs_t)[:, None] * (C + R)
            kv = tl.load(kv_base + offs_c[None, :], mask=tmask[:, None], other=0.0)  # [BN, C]
            kpe = tl.load(kv_base + C + offs_r[None, :], mask=tmask[:, None], other=0.0)  # [BN, R]
            # NOTE: accumulate into the dot (acc= form): a separate dot result and add would
            # hold a second [BH, C] fp32 array in registers and spill.
            s = tl.dot(q_pe, tl.trans(kpe), tl.dot(q_lat, tl.trans(kv)))  # [BH, BN] fp32
            s = tl.where(tmask[None, :], s * qk_scale_log2, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            alpha = tl.exp2(m_i - m_new)
            pr = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(pr, axis=1)
            acc = tl.dot(pr.to(kv.dtype), kv, acc * alpha[:, None])  # [BH, C]
            m_i = m_new
        has = l_i > 0
        out = acc / tl.where(has, l_i, 1.0)[:, None]
        lse2 = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
        o_base = o_ptr + b * stride_ob + heads[:, None] * stride_oh + sp * stride_os
        tl.store(o_base + offs_c[None, :], out, mask=hmask[:, None])
        tl.store(lse_ptr + b * stride_lb + heads * stride_lh + sp, lse2, mask=hmask)

    @triton.jit
    def _mla_reduce_kernel(
        op_ptr, lp_ptr, o_ptr, lse_ptr, S,
        stride_pb, stride_ph, stride_ps, stride_lpb, stride_lph,
        stride_ob, stride_oh,
        C: tl.constexpr, BLOCK_S: tl.constexpr,
    ):
        b = tl.program_id(0)
        h = tl.program_id(1)
        offs_s = tl.arange(0, BLOCK_S)
        smask = offs_s < S
        lse2 = tl.load(lp_ptr + b * stride_lpb + h * stride_lph + offs_s, mask=smask, other=float("-inf"))
        m = tl.max(lse2, axis=0)
        m_safe = tl.where(m == float("-inf"), 0.0, m)
        w = tl.exp2(lse2 - m_safe)  # [S]
        denom = tl.sum(w, axis=0)
        offs_c = tl.arange(0, C)
        parts = tl.load(op_ptr + b * stride_pb + h * stride_ph + offs_s[:, None] * stride_ps + offs_c[None, :],
                        mask=smask[:, None], other=0.0)  # [S, C]
        o = tl.sum(parts * w[:, None], axis=0) / tl.where(denom > 0, denom, 1.0)
        tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_c, o.to(o_ptr.dtype.element_ty))
        lse = tl.where(denom > 0, (m_safe + tl.log2(tl.where(denom > 0, denom, 1.0))) / 1.4426950408889634,
                       float("-inf"))
        tl.store(lse_ptr + b * tl.num_programs(1) + h, lse)

    return _mla_split_kernel, _mla_reduce_kernel


def triton_available() -> bool:
    """True when Triton imports (it is on the CUDA image; optional on CPU)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def choose_num_splits(batch: int, head_blocks: int, max_pages: int, num_sms: int, ctas_per_sm: int) -> int:
    """Splits per request so batch * head_blocks * splits fills one wave, >= 2 pages per split.

    NOTE: sized to a whole wave (not "at least N programs"): 272 programs on 132 SMs run as
    three waves, the last one 6 % full, costing a third of the time.
    """
    if max_pages <= 0:
        return 1
    slots = num_sms * ctas_per_sm
    want = max(1, slots // max(1, batch * head_blocks))
    return max(1, min(want, max(1, max_pages // 2), 64))


@functools.lru_cache(maxsize=8)
def _num_sms(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def mla_decode_triton(
    q: torch.Tensor,  # [B, H, C+R] bf16/fp16/fp32, contiguous
    pool: torch.Tensor,  # [P, page, C+R], contiguous
    block_table: torch.Tensor,  # [B, maxp] int32
    seq_lens: torch.Tensor,  # [B] int32
    scale: float,
    kv_lora_rank: int,
    max_pages: int,
    config: KernelConfig = KernelConfig(),
    num_splits: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton paged split-KV MLA decode. max_pages: host-known bound on pages of any request.

    Returns (o [B, H, C] in q.dtype, lse [B, H] fp32). C and R must be powers of two >= 16.
    """
    split_kernel, reduce_kernel = _build_triton_kernels()
    b, h, width = q.shape
    c = kv_lora_rank
    r = width - c
    page = pool.shape[1]
    o = torch.empty(b, h, c, device=q.device, dtype=q.dtype)
    lse = torch.empty(b, h, device=q.device, dtype=torch.float32)
    if b == 0:
        return o, lse
    block_h = min(config.block_h, max(16, 1 << (h - 1).bit_length()))
    head_blocks = -(-h // block_h)
    splits = num_splits or choose_num_splits(b, head_blocks, max_pages, _num_sms(q.device.index or 0),
                                             config.ctas_per_sm)
    pages_per_split = max(1, -(-max_pages // splits))
    o_part = torch.empty(b, h, splits, c, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(b, h, splits, device=q.device, dtype=torch.float32)
    split_kernel[(head_blocks, b, splits)](
        q, pool, block_table, seq_lens, o_part, lse_part,
        h, pages_per_split, scale * LOG2E,
        q.stride(0), q.stride(1), pool.stride(0), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        C=c, R=r, PAGE=page, BLOCK_H=block_h, BLOCK_N=min(config.block_n, page),
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    reduce_kernel[(b, h)](
        o_part, lse_part, o, lse, splits,
        o_part.stride(0), o_part.stride(1), o_part.stride(2), lse_part.stride(0), lse_part.stride(1),
        o.stride(0), o.stride(1),
        C=c, BLOCK_S=max(2, 1 << (splits - 1).bit_length()),
        num_warps=4,
    )
    return o, lse


def mla_decode(
    q: torch.Tensor,
    pool: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    scale: float,
    kv_lora_rank: int,
    max_pages: int,
    config: KernelConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Dispatch: the Triton kernel on CUDA tensors, plain torch elsewhere."""
    if q.is_cuda:
        return mla_decode_triton(q, pool, block_table, seq_lens, scale, kv_lora_rank, max_pages,
                                 config or KernelConfig())
    return mla_decode_torch(q, pool, block_table[:, :max_pages], seq_lens, scale, kv_lora_rank)
