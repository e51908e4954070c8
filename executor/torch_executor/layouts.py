"""The attention primitives: who computes which heads for which requests, and the collectives.

What it does: one function per primitive (placement_kind.py maps a layout's placement to one)
computing a layer's attention contribution [B, D], identical on every rank afterwards, from the
normed hidden state h [B, D] (replicated):
- TP: heads sharded; every rank attends every request over its full copy of the KV; partial
  output projections summed by all-reduce.
- CP: weights replicated; each rank attends every request over the pages it holds (page
  interleaved); partial outputs and log-sum-exps all-gathered and merged exactly.
- DP-attention: weights replicated; each owner attends its own requests with all heads;
  outputs gathered (an all-reduce of rows that are zero off their owner, which is exact).
- DOP: heads sharded like TP, each request's KV on its owner: queries go to owners by
  all-to-all, attention outputs come back by all-to-all, partial projections all-reduced.
- DPTP (DP attention with attention TP inside G groups of R ranks): heads sharded R ways inside
  each group; every rank of a group keeps the latent of the requests the group owns and attends
  them with its R-th of the heads; one all-reduce over all T ranks of rows that are zero outside
  their group both sums the group's partial output projections and gathers every group's rows
  (DP's gather and TP's sum at once, exact: the other groups add zeros). NOTE: SGLang's own path:
  with attn_dp_size > 1 the attention's o_proj is left partial over the attention-TP group and
  `dp_gather_partial` writes every rank's partial rows at its group's offsets into a zeroed buffer
  and all-reduces it over the whole TP group (sglang python/sglang/srt/layers/communicator.py
  `_gather_hidden_states_and_residual`, python/sglang/srt/layers/dp_attention.py
  `_dp_gather_via_all_reduce` with is_partial=True); so no per-group process group is needed.
`KernelInputs` carries the per-step kernel inputs a rank needs for its layout, in fixed shapes (a
batch padded to its bucket; DP, DPTP and DOP pad every owner group's share to the busiest group's bucket, so
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
from .placement_kind import ExecLayout, exec_layout


@dataclass
class KernelInputs:
    """Kernel inputs of one step on one rank (step_inputs.StepInputs fills them; fixed shapes)."""

    positions: torch.Tensor  # [rows] int64, position of each row's new token
    block_table: torch.Tensor  # [n_att, maxp] (the rows this rank attends)
    local_lens: torch.Tensor  # [n_att] tokens each attended row reads here (0: a padding row)
    max_pages: int
    own_rows: torch.Tensor | None = None  # DP, DPTP: [own_cap] batch rows this rank's group owns, padded with row 0
    own_valid: torch.Tensor | None = None  # DP, DPTP: [own_cap] 1 for an owned row, 0 for padding
    send_rows: torch.Tensor | None = None  # DOP: [T*own_cap] batch row for slot j of owner k at k*own_cap+j
    back_rows: torch.Tensor | None = None  # DOP: [rows] the slot each batch row's output comes back in
    own_cap: int = 0  # DP, DPTP, DOP: rows per owner group (the busiest group's count, padded to its bucket)
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


def attention_dptp(h, attn, heads, pool_l, sb, dims, g, kcfg=None) -> torch.Tensor:
    """DP attention with attention TP inside each group (module docstring): DP's own-rows attention
    with this rank's R-th of the heads, so the rows it adds are partial over heads; the one
    all-reduce sums them inside the group and adds zeros from the other groups."""
    return attention_dp(h, attn, heads, pool_l, sb, dims, g, kcfg)


ATTENTION = {"tp": attention_tp, "cp": attention_cp, "dp": attention_dp, "dop": attention_dop,
             "dptp": attention_dptp}


def kernel_heads(kind: "str | ExecLayout", num_heads: int, world_size: int) -> int:
    """Heads per request the attention kernel sees (placement_kind.ExecLayout.kernel_heads): TP its
    T-th, DPTP its R-th; CP, DP and DOP (its own requests, all heads after the all-to-all) every head."""
    return exec_layout(kind, world_size).kernel_heads(num_heads)


@dataclass
class LayoutState:
    """What one rank holds under one layout: its page table, head weights and weight slots.
    `kind`: the layout's name (given an ExecLayout, its name; the table keeps the ExecLayout)."""

    kind: "str | ExecLayout"
    table: PageTable
    heads: list[HeadWeights]  # per layer: all heads (CP, DP) or this rank's slice (TP, DOP: T ways; DPTP: R ways)
    weight_slots: list[int]  # page slots given up for head weights beyond the T-way shard

    def __post_init__(self) -> None:
        if isinstance(self.kind, ExecLayout):
            if self.table.layout is None:
                self.table.layout = self.kind
            self.kind = self.kind.name

    @property
    def layout(self) -> ExecLayout:
        """The ExecLayout (the table's; a state built from a name resolves it with `resolve`)."""
        return self.table.resolve()

    def resolve(self, world_size: int | None) -> ExecLayout:
        return self.table.resolve(world_size)


def weight_slots_needed(kind: "str | ExecLayout", heads_full_bytes: int, world_size: int, page_bytes: int) -> int:
    """Slots a layout's head weights take from the KV pool beyond the T-way shard (all layers): a
    rank keeps 1/weight_split of them where the T-way shard is 1/T (TP, DOP: none; CP, DP: all but
    the shard; DPTP: 1/R − 1/T).

    heads_full_bytes: per-head weights of every layer, all heads.
    """
    ws = exec_layout(kind, world_size).weight_split
    if ws >= world_size:
        return 0
    extra = heads_full_bytes // ws - heads_full_bytes // world_size
    return -(-extra // page_bytes)

