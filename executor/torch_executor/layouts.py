"""The four attention layouts: who computes which heads for which requests, and the collectives.

What it does: one function per layout computing a layer's attention contribution [B, D],
identical on every rank afterwards, from the normed hidden state h [B, D] (replicated):
- TP: heads sharded; every rank attends every request over its full copy of the KV; partial
  output projections summed by all-reduce.
- CP: weights replicated; each rank attends every request over the pages it holds (page
  interleaved); partial outputs and log-sum-exps all-gathered and merged exactly.
- DP-attention: weights replicated; each owner attends its own requests with all heads;
  outputs gathered (an all-reduce of rows that are zero off their owner, which is exact).
- DOP: heads sharded like TP, each request's KV on its owner: queries go to owners by
  all-to-all, attention outputs come back by all-to-all, partial projections all-reduced.
`KernelInputs` carries the per-step kernel inputs a rank needs for its layout, in fixed shapes (a
batch padded to its bucket; DP and DOP pad every owner's share to the busiest owner's bucket, so
DOP's all-to-alls have equal splits and a step of any batch in the bucket replays one CUDA graph).
What it does not do: caching or page allocation (runner.py), the FFN (always TP-sharded,
runner.py), or switching (transitions.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

from .config import MLADims
from .dist import RankGroups, all_gather_cat
from .kernels import KernelConfig, merge_partials, mla_decode
from .kv_pages import PageTable
from .layers import HeadWeights, ReplicatedAttnWeights, absorbed_queries, attention_output, q_latent


@dataclass
class KernelInputs:
    """Kernel inputs of one step on one rank (step_inputs.StepInputs fills them; fixed shapes)."""

    positions: torch.Tensor  # [rows] int64, position of each row's new token
    block_table: torch.Tensor  # [n_att, maxp] (the rows this rank attends)
    local_lens: torch.Tensor  # [n_att] tokens each attended row reads here (0: a padding row)
    max_pages: int
    own_rows: torch.Tensor | None = None  # DP: [own_cap] batch rows this rank owns, padded with row 0
    own_valid: torch.Tensor | None = None  # DP: [own_cap] 1 for an owned row, 0 for padding
    send_rows: torch.Tensor | None = None  # DOP: [T*own_cap] batch row for slot j of owner k at k*own_cap+j
    back_rows: torch.Tensor | None = None  # DOP: [rows] the slot each batch row's output comes back in
    own_cap: int = 0  # DP, DOP: rows per owner (the busiest owner's count, padded to its bucket)
    kernel: object | None = None  # kernels.decode_kernel's object (planned per step, run in-graph), or None


def _kernel(q, pool_l, sb: KernelInputs, dims: MLADims, kcfg: KernelConfig | dict | None):
    if sb.kernel is not None:
        return sb.kernel(q, pool_l)
    if isinstance(kcfg, dict):  # per heads-per-program count: {heads: KernelConfig}
        kcfg = kcfg.get(q.shape[1])
    return mla_decode(q, pool_l, sb.block_table, sb.local_lens, dims.softmax_scale, dims.kv_lora_rank,
                      sb.max_pages, kcfg)


def attention_tp(h, attn: ReplicatedAttnWeights, heads: HeadWeights, pool_l, sb: KernelInputs,
                 dims: MLADims, g: RankGroups, kcfg=None) -> torch.Tensor:
    q = absorbed_queries(q_latent(h, attn, dims), heads, sb.positions, dims)  # [B, Hs, C+R]
    o, _ = _kernel(q, pool_l, sb, dims, kcfg)  # [B, Hs, C]
    out = attention_output(o, heads)  # [B, D] partial over heads
    dist.all_reduce(out, group=g.main)
    return out


def attention_cp(h, attn, heads, pool_l, sb, dims, g, kcfg=None) -> torch.Tensor:
    q = absorbed_queries(q_latent(h, attn, dims), heads, sb.positions, dims)  # [B, H, C+R]
    o, lse = _kernel(q, pool_l, sb, dims, kcfg)  # [B, H, C], [B, H] over local pages
    t = g.world_size
    o_all = torch.empty((t * o.shape[0],) + tuple(o.shape[1:]), dtype=o.dtype, device=o.device)  # [T*B, H, C]
    lse_all = torch.empty((t * lse.shape[0], lse.shape[1]), dtype=lse.dtype, device=lse.device)  # [T*B, H]
    all_gather_cat(o_all, o.contiguous(), g.main)
    all_gather_cat(lse_all, lse.contiguous(), g.main)
    o_merged, _ = merge_partials(o_all.view((t,) + tuple(o.shape)), lse_all.view((t,) + tuple(lse.shape)))
    return attention_output(o_merged, heads)  # [B, D], same on every rank


def attention_dp(h, attn, heads, pool_l, sb, dims, g, kcfg=None) -> torch.Tensor:
    rows = sb.own_rows  # [own_cap], padding -> row 0
    q = absorbed_queries(q_latent(h.index_select(0, rows), attn, dims), heads,
                         sb.positions.index_select(0, rows), dims)  # [own_cap, H, C+R]
    o, _ = _kernel(q, pool_l, sb, dims, kcfg)  # [own_cap, H, C]
    mine = attention_output(o, heads)  # [own_cap, D]
    mine = torch.where(sb.own_valid[:, None] != 0, mine, torch.zeros_like(mine))  # padding adds nothing
    out = torch.zeros_like(h)  # [rows, D]
    out.index_add_(0, rows, mine)
    # NOTE: an all-reduce of rows that are zero except on their owner is an exact gather.
    dist.all_reduce(out, group=g.main)
    return out


def attention_dop(h, attn, heads, pool_l, sb, dims, g, kcfg=None) -> torch.Tensor:
    t, oc = g.world_size, sb.own_cap
    q = absorbed_queries(q_latent(h, attn, dims), heads, sb.positions, dims)  # [rows, Hs, C+R]
    hs, width = q.shape[1], q.shape[2]
    q_send = q.index_select(0, sb.send_rows)  # [T*oc, Hs, C+R]: to owner k, its oc slots (padded)
    recv = torch.empty_like(q_send)  # from each rank: my slots, its heads
    dist.all_to_all_single(recv, q_send, group=g.main)
    q_own = recv.view(t, oc, hs, width).permute(1, 0, 2, 3).reshape(oc, t * hs, width)  # [oc, H, C+R]
    o, _ = _kernel(q_own.contiguous(), pool_l, sb, dims, kcfg)  # [oc, H, C]
    c = o.shape[-1]
    send = o.view(oc, t, hs, c).permute(1, 0, 2, 3).reshape(t * oc, hs, c).contiguous()  # [T*oc, Hs, C]
    back = torch.empty_like(send)  # from owner k: its slots' outputs for my heads
    dist.all_to_all_single(back, send, group=g.main)
    o_mine = back.index_select(0, sb.back_rows)  # [rows, Hs, C] in batch order
    out = attention_output(o_mine, heads)  # [rows, D] partial over heads
    dist.all_reduce(out, group=g.main)
    return out


ATTENTION = {"tp": attention_tp, "cp": attention_cp, "dp": attention_dp, "dop": attention_dop}


def heads_sharded(kind: str) -> bool:
    """TP and DOP shard attention heads; CP and DP-attention replicate them."""
    return kind in ("tp", "dop")


def kernel_heads(kind: str, num_heads: int, world_size: int) -> int:
    """Heads per request the attention kernel sees: TP its shard; CP, DP and DOP (its own requests,
    all heads after the all-to-all) every head."""
    return num_heads // world_size if kind == "tp" else num_heads


@dataclass
class LayoutState:
    """What one rank holds under one layout: its page table, head weights and weight slots."""

    kind: str
    table: PageTable
    heads: list[HeadWeights]  # per layer: all heads (CP, DP) or this rank's shard (TP, DOP)
    weight_slots: list[int]  # page slots given up for replicated weights beyond the shard


def weight_slots_needed(kind: str, heads_full_bytes: int, world_size: int, page_bytes: int) -> int:
    """Slots a layout's head weights take from the KV pool beyond the sharded size (all layers).

    heads_full_bytes: per-head weights of every layer, all heads. Sharded layouts need none.
    """
    if heads_sharded(kind) or world_size == 1:
        return 0
    extra = heads_full_bytes - heads_full_bytes // world_size
    return -(-extra // page_bytes)

