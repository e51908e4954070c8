"""Paged split-KV MLA decode attention: a Triton kernel (CUDA) and a plain-torch fallback.

What it does: for absorbed-MLA queries q [B, H, C+R] and a paged latent cache
pool [P, page, C+R] (post-RoPE key in the last R columns), returns the attention output over
the latent o [B, H, C] and the log-sum-exp of the scaled scores lse [B, H] (fp32, natural log),
so partial results over disjoint page sets merge exactly (`merge_partials`). A request's local
sequence is its block-table pages in order, all full except possibly the last; a request with
no local tokens returns o = 0, lse = -inf.
What it does not do: sparse (DSA top-k) attention, fp8 KV, causal masking inside a chunk (one
new token per request per step).

The Triton kernel cuts every request's pages into work units of at most `c` pages (split-KV):
`c` is chosen on device from the step's own lengths so the units fill the GPU evenly (a few
candidate sizes between total/(2·slots) and the longest request are priced as
max(largest unit, (total pages + units · overhead) / slots); see `_schedule`), so a batch of many
short and a few very long requests is split where the work is rather than by the longest request.
Each program handles BLOCK_H heads of one unit with an online softmax (bf16 tensor-core dots for
q·k (C+R wide) and p·v (C wide), fp32 accumulators fed back into the dots); a second kernel merges
each request's units by log-sum-exp. Head blocks of one unit are adjacent program ids so they
read the same pages while those are in L2. Its launch shape is fixed by host ints only (no device
reads: the grid is the bound 2·slots + B on the unit count; spare programs load and store
nothing), so it can be captured in a CUDA graph with per-request lengths read on device each replay.
Cost of that (2 x H200, benchmarks/kernel_ab.py vs the rule that sized units from the longest
request): uniform batches 0.84-1.56x the time (median 1.12x: the spare programs, and at B=16,
64K a unit count just past one wave), mixed lengths 0.11-0.35x.
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
    """Programs resident per SM: the schedule fills num_sms * ctas_per_sm program slots."""
    balance: bool = True
    """Size the units from the step's lengths on device (False: the old rule, units of
    ceil(longest / splits) pages with splits from the batch size, kept to measure against)."""
    unit_overhead_pages: int = 3
    """What one extra unit costs, in pages read: its fp32 partial output written and read back
    (64 heads x 512 x 4 B x 2 = 256 KiB, ~3.5 pages of 576-wide bf16 latent)."""
    min_pages_per_unit: int = 2


@functools.lru_cache(maxsize=1)
def _build_triton_kernels():
    # NOTE: imported on first use so importing this module needs no Triton (CPU runs).
    from . import mla_triton

    return mla_triton.split_kernel, mla_triton.reduce_kernel


def triton_available() -> bool:
    """True when Triton imports (it is on the CUDA image; optional on CPU)."""
    try:
        import triton  # noqa: F401
    except Exception:
        return False
    return True


def choose_num_splits(batch: int, head_blocks: int, max_pages: int, num_sms: int, ctas_per_sm: int) -> int:
    """The old rule (KernelConfig.balance=False): splits per request so batch * head_blocks * splits
    fills one wave, >= 2 pages per split, sized from the longest request.

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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton paged split-KV MLA decode. max_pages: host-known bound on pages of any request
    (used only by the old unit rule, `config.balance=False`).

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
    sms = _num_sms(q.device.index or 0)
    slots = max(1, sms * config.ctas_per_sm // head_blocks)
    fixed_c = 0 if config.balance else max(1, -(-max_pages // choose_num_splits(
        b, head_blocks, max_pages, sms, config.ctas_per_sm)))
    units = 2 * slots + b  # bound on the schedule's unit count (see _schedule's candidates)
    o_part = torch.empty(units, h, c, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(units, h, device=q.device, dtype=torch.float32)
    sched = (b, slots, fixed_c, config.unit_overhead_pages, config.min_pages_per_unit)
    block_b = max(2, 1 << (b - 1).bit_length())
    split_kernel[(head_blocks, units)](
        q, pool, block_table, seq_lens, o_part, lse_part,
        sched[0], h, *sched[1:], scale * LOG2E,
        q.stride(0), q.stride(1), pool.stride(0), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), lse_part.stride(0),
        C=c, R=r, PAGE=page, BLOCK_H=block_h, BLOCK_N=min(config.block_n, page), BLOCK_B=block_b,
        num_warps=config.num_warps, num_stages=config.num_stages,
    )
    reduce_kernel[(b, h)](
        o_part, lse_part, seq_lens, o, lse, *sched,
        o_part.stride(0), o_part.stride(1), lse_part.stride(0), o.stride(0), o.stride(1),
        C=c, PAGE=page, BLOCK_B=block_b, BLOCK_U=8,
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
