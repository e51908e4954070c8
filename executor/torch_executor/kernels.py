"""Paged split-KV MLA decode attention: a Triton kernel (CUDA) and a plain-torch fallback.

What it does: for absorbed-MLA queries q [B, H, C+R] and a paged latent cache
pool [P, page, C+R] (post-RoPE key in the last R columns), returns the attention output over
the latent o [B, H, C] and the log-sum-exp of the scaled scores lse [B, H] (fp32, natural log),
so partial results over disjoint page sets merge exactly (`merge_partials`). A request's local
sequence is its block-table pages in order, all full except possibly the last; a request with
no local tokens returns o = 0, lse = -inf.
What it does not do: sparse (DSA top-k) attention, fp8 KV, causal masking inside a chunk (one
new token per request per step).

The Triton kernel cuts every request's pages into work units of at most `c` pages (split-KV).
Three launches: a one-program schedule kernel picks `c` on device from the step's own lengths
(candidates between total/(2·slots) and the longest request, and the old rule's size, priced by
the slowest slot; see `mla_triton.schedule_kernel`) and writes a map from split program to
(request, unit, output row), full-size units first; the split kernel gives each program BLOCK_H
heads of one unit with an online softmax (bf16 tensor-core dots for q·k (C+R wide) and p·v (C
wide), fp32 accumulators fed back into the dots; full tiles by TMA copies on Hopper at 64+ heads,
the last partial tile by masked loads); a merge kernel combines each request's units by
log-sum-exp. Head blocks of one unit are adjacent program ids so they read the same pages while
those are in L2. The launch shapes are fixed by host ints only (the split grid is the bound
2·slots + B on the unit count; spare programs load and store nothing), so the three can be
captured in a CUDA graph with per-request lengths read on device at each replay.
Measured side by side on 1 x H200 (benchmarks/kernel_ab.py; results/executor_gpu/kernel_ab.json)
against the rule that sized units from the longest request on the host: batches of 16-64 at
4K-64K 0.91-1.07x the time at 64 and 128 heads per program, 1.00-1.22x at 16 and 32 (the
schedule launch and spare programs, a few microseconds); mixed lengths 0.10-0.28x.

Backends (`KernelConfig.backend`, resolved once per fixed-shape step inputs by `decode_kernel`):
on CUDA, FlashInfer's FA3 MLA decode (`mla_flashinfer.py`, planned on the host before each step,
replayed inside the step's CUDA graph) where `choose_backend` picks it, else the Triton kernel
above, read in-graph from the step's device block table; plain torch on CPU. flashinfer is an
optional dependency (`floorfirst[gpu]`) and is imported only when a FlashInfer kernel is built.
`mla_decode_work` counts what one decode launch must move and compute, for roofline figures.
"""

from __future__ import annotations

import functools
import importlib.util
import math
from dataclasses import dataclass

import torch

from .config import MLADims

LOG2E = 1.4426950408889634
BACKENDS = ("auto", "flashinfer", "triton")


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
    tma: bool | None = None
    """Load full KV tiles by tensor-memory-accelerator copies instead of per-thread loads (the
    request's last, partial tile always takes masked loads). None: on Hopper and later at
    block_h >= 64, where it measured 4-13 % faster; below that it spilled and ran slower
    (results/executor_gpu/kernel_configs_sweep.json)."""
    backend: str = "auto"
    """Dense decode kernel on CUDA: "triton" (this module's), "flashinfer" (FA3 MLA; raises where it
    can't run) or "auto" (`choose_backend`: FlashInfer where it runs and measured faster)."""
    flashinfer_min_heads: int = 32
    """"auto" takes FlashInfer wherever it runs from this many heads per launch (`choose_backend`)."""
    flashinfer_few_heads_max_tokens: int = 1 << 20
    """Below flashinfer_min_heads, "auto" takes FlashInfer for launches of 4+ requests whose block
    tables hold fewer tokens than this (requests x capacity pages x page size)."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"KernelConfig.backend={self.backend!r} must be one of {', '.join(BACKENDS)}")


@functools.lru_cache(maxsize=1)
def _build_triton_kernels():
    # NOTE: imported on first use so importing this module needs no Triton (CPU runs).
    from . import mla_triton

    return mla_triton.schedule_kernel, mla_triton.split_kernel, mla_triton.reduce_kernel


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
    compile_stats: dict | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton paged split-KV MLA decode. max_pages: host-known bound on pages of any request
    (used only by the old unit rule, `config.balance=False`). compile_stats: if given, filled with
    the split kernel's registers per thread, spilled registers and shared-memory bytes (benchmarks).

    Returns (o [B, H, C] in q.dtype, lse [B, H] fp32). C and R must be powers of two >= 16.
    """
    schedule_kernel, split_kernel, reduce_kernel = _build_triton_kernels()
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
    units = 2 * slots + b  # bound on the schedule's unit count (see schedule_kernel's candidates)
    o_part = torch.empty(units, h, c, device=q.device, dtype=torch.float32)
    lse_part = torch.empty(units, h, device=q.device, dtype=torch.float32)
    block_b = max(2, 1 << (b - 1).bit_length())
    meta = torch.empty(8 + 3 * units + 4 * block_b, device=q.device, dtype=torch.int32)
    schedule_kernel[(1,)](seq_lens, meta, b, slots, fixed_c, config.unit_overhead_pages, config.min_pages_per_unit,
                          units, PAGE=page, BLOCK_B=block_b, LOG2_B=block_b.bit_length() - 1,
                          BLOCK_U=min(256, max(16, 1 << (units - 1).bit_length())), num_warps=4)
    kv_desc = pe_desc = None
    tma = config.tma if config.tma is not None else (
        block_h >= 64 and q.is_cuda and torch.cuda.get_device_capability(q.device)[0] >= 9)
    if tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        rows = pool.reshape(-1, width)  # [P * page, C+R]: a tile is BLOCK_N rows of one page
        bn = min(config.block_n, page)
        kv_desc = TensorDescriptor(rows, list(rows.shape), list(rows.stride()), [bn, c])
        pe_desc = TensorDescriptor(rows, list(rows.shape), list(rows.stride()), [bn, r])
    split = split_kernel[(head_blocks, units)](
        q, pool, kv_desc, pe_desc, block_table, seq_lens, meta, o_part, lse_part,
        h, units, scale * LOG2E,
        q.stride(0), q.stride(1), pool.stride(0), block_table.stride(0),
        o_part.stride(0), o_part.stride(1), lse_part.stride(0),
        C=c, R=r, PAGE=page, BLOCK_H=block_h, BLOCK_N=min(config.block_n, page),
        USE_TMA=tma, num_warps=config.num_warps, num_stages=config.num_stages,
    )
    if compile_stats is not None:
        compile_stats.update(n_regs=getattr(split, "n_regs", None), n_spills=getattr(split, "n_spills", None),
                             shared_bytes=getattr(getattr(split, "metadata", None), "shared", None))
    # NOTE: the merge's shape from the bound on units per request (the host can't see the real
    # count): with many (few requests on many slots) each program takes 128 columns and 16 units
    # per load, or its chain of loads outlasts the split (41 us for 256 units of one request);
    # with few, one program per (request, head) over all 512 columns, or tens of thousands of
    # programs mostly load masked lanes (1.3x the whole kernel at 64 x 4K). Threshold from the
    # 1 x H200 runs (benchmarks/results/executor_gpu/kernel_ab.json).
    per_req = -(-units // b)
    block_c, block_u, block_l = (min(128, c), 16, 256) if per_req >= 64 else (c, 8, max(8, 1 << (per_req - 1).bit_length()))
    reduce_kernel[(b, h, c // block_c)](
        o_part, lse_part, seq_lens, meta, o, lse, units,
        o_part.stride(0), o_part.stride(1), lse_part.stride(0), o.stride(0), o.stride(1),
        C=c, PAGE=page, BLOCK_B=block_b, BLOCK_C=block_c, BLOCK_U=block_u, BLOCK_L=block_l,
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


def flashinfer_unsupported(dtype: torch.dtype, kv_lora_rank: int, rope_dim: int, device) -> str | None:
    """Why FlashInfer's FA3 MLA decode can't run these launches here, or None if it can.

    NOTE: FlashInfer 0.7.2's own refusals (flashinfer/mla/_batch_mla/_backends/_fa_common.py,
    `_validate_generated_fa_plan`): fa3 needs SM90, bf16 or fp16 queries and a KV cache of the same
    dtype, head_dim_ckv in (128, 256, 512) and head_dim_kpe a multiple of 64. Checked without
    importing flashinfer (find_spec only).
    """
    dev = torch.device(device)
    if dev.type != "cuda":
        return "not a CUDA device"
    if torch.cuda.get_device_capability(dev)[0] != 9:
        return "FA3 MLA needs an SM90 (Hopper) GPU"
    if dtype not in (torch.bfloat16, torch.float16):
        return f"FA3 MLA takes bf16 or fp16, not {dtype}"
    if kv_lora_rank not in (128, 256, 512) or rope_dim % 64:
        return f"FA3 MLA needs a latent of 128/256/512 and a rope width divisible by 64, not {kv_lora_rank}/" \
               f"{rope_dim}"
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed (pip install 'floorfirst[gpu]')"
    return None


def choose_backend(config: KernelConfig, num_heads: int, dtype: torch.dtype, kv_lora_rank: int, rope_dim: int,
                   device, num_requests: int = 0, table_tokens: int = 0) -> str:
    """"flashinfer" or "triton" for launches of num_heads heads per request on device, num_requests
    requests whose block tables hold table_tokens tokens (requests x capacity pages x page size).

    NOTE ("auto"): the rule is the faster kernel of each shape measured side by side on 1 x H200
    (results/executor_gpu/kernel_grid.json: 4 head counts x B 1-64 x 1K-64K and 4 mixed batches).
    From 32 heads FlashInfer was 1.07-2.41x faster at every point but one (64 heads, B=1, 32K:
    half a microsecond, 1 %, slower in two runs). At 16 heads FA3's 64-row head tiles are three
    quarters padding (include/flashinfer/attention/scheduler.cuh, `MLAPlan`: heads x query tokens
    packed into 64-row tiles, 2-CTA clusters above 64 heads): it lost at B=1 (0.94-0.98x) and from
    1M table tokens (16 x 64K, 32 x 32K, 64 x 16K and up: 0.92-1.05x; the 28x2K+4x32K mix 0.94x)
    and won 1.07-1.41x below; so there it runs for 4+ requests under
    `flashinfer_few_heads_max_tokens`.
    """
    if config.backend == "triton":
        return "triton"
    why = flashinfer_unsupported(dtype, kv_lora_rank, rope_dim, device)
    if config.backend == "flashinfer":
        if why is not None:
            raise ValueError(f"KernelConfig.backend='flashinfer' can't run here: {why}")
        return "flashinfer"
    if why is not None:
        return "triton"
    if num_heads >= config.flashinfer_min_heads:
        return "flashinfer"
    few_heads_ok = num_requests >= 4 and table_tokens < config.flashinfer_few_heads_max_tokens
    return "flashinfer" if few_heads_ok else "triton"


def decode_kernel(config: KernelConfig | dict | None, num_heads: int, num_requests: int, max_pages: int,
                  dims: MLADims, dtype: torch.dtype, device, workspace=None):
    """The kernel object one fixed-shape step's inputs plan before each step and launch inside its
    graph (`mla_flashinfer.FlashInferDecode`), or None where the Triton kernel (CUDA, reading the
    device block table in-graph) or plain torch (CPU) runs. config: one KernelConfig, or one per
    heads-per-launch count ({heads: KernelConfig}). workspace: FlashInfer's float workspace, shared by
    the steps of one runner's layout (None: its own)."""
    cfg = (config.get(num_heads) if isinstance(config, dict) else config) or KernelConfig()
    if torch.device(device).type != "cuda":
        return None
    if choose_backend(cfg, num_heads, dtype, dims.kv_lora_rank, dims.qk_rope_head_dim, device, num_requests,
                      num_requests * max_pages * dims.page_size) != "flashinfer":
        return None
    from .mla_flashinfer import FlashInferDecode

    return FlashInferDecode(num_requests, max_pages, num_heads, dims.kv_lora_rank, dims.qk_rope_head_dim,
                            dims.page_size, dims.softmax_scale, dtype, device, workspace=workspace)


def mla_decode_work(attended_tokens: int, batch: int, num_heads: int, kv_lora_rank: int, rope_dim: int,
                    element_bytes: int) -> tuple[int, int]:
    """(bytes, FLOPs) one absorbed-MLA decode launch must move and do: the attended latent rows read
    once, the queries read, outputs and log-sum-exps written; per head and attended token a
    (C+R)-wide score dot and a C-wide value axpy, 2·(C+R) + 2·C FLOPs (2176 at DeepSeek's 512/64,
    planner.models.attention.mla `decode_flops`). attended_tokens: the batch's sum of lengths (DSA:
    of min(length, top-k))."""
    width = kv_lora_rank + rope_dim
    nbytes = (attended_tokens * width * element_bytes + batch * num_heads * width * element_bytes
              + batch * num_heads * kv_lora_rank * element_bytes + batch * num_heads * 4)
    flops = num_heads * attended_tokens * (2 * width + 2 * kv_lora_rank)
    return nbytes, flops


def roofline_s(nbytes: float, flops: float, copy_bytes_per_s: float, gemm_flops_per_s: float) -> float:
    """The faster of the two ceilings can't be beaten: max(bytes / copy rate, FLOPs / GEMM rate)."""
    return max(nbytes / copy_bytes_per_s, flops / gemm_flops_per_s)
