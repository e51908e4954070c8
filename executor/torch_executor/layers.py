"""MLA decode layer pieces: synthetic weights, RMSNorm, RoPE, projections, dense FFN.

What it does: seeded synthetic weights at realistic scale (std 1/sqrt(fan_in)) for one layer,
stored head-major so a head shard is a contiguous slice; the absorbed-MLA projections of a
decode step (q, latent KV with post-RoPE key, output); the SwiGLU FFN on a column/row shard.
Every function is pure: tensors in, tensors out.
What it does not do: attention itself (kernels.py), collectives (layouts.py), caching
(kv_pages.py). No MoE: the FFN is dense; no YaRN mscale; no DSA indexer.

Shapes: B requests, D hidden, H heads (Hs on this rank), N nope, R rope, C kv_lora,
V v_head, Q q_lora, I FFN width (Is on this rank).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import MLADims


@dataclass
class ReplicatedAttnWeights:
    """Attention weights every layout keeps whole on every rank (small: ~15M params)."""

    attn_norm: torch.Tensor  # [D]
    w_qa: torch.Tensor  # [Q, D]
    q_norm: torch.Tensor  # [Q]
    w_kva: torch.Tensor  # [C+R, D]
    kv_norm: torch.Tensor  # [C]


@dataclass
class HeadWeights:
    """Per-head attention weights for heads [head_start, head_start + num_heads)."""

    head_start: int
    w_qb: torch.Tensor  # [Hs, N+R, Q]
    w_uk: torch.Tensor  # [Hs, N, C]   (kv_b's key half, absorbed into q)
    w_uv: torch.Tensor  # [Hs, C, V]   (kv_b's value half, absorbed after attention)
    w_o: torch.Tensor  # [Hs, V, D]

    @property
    def num_heads(self) -> int:
        return int(self.w_qb.shape[0])

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.w_qb, self.w_uk, self.w_uv, self.w_o)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors())

    def slice_heads(self, start: int, count: int) -> "HeadWeights":
        """A contiguous copy of heads [start, start+count) (global head ids)."""
        lo = start - self.head_start
        if lo < 0 or lo + count > self.num_heads:
            raise ValueError(
                f"heads [{start}, {start + count}) not inside held heads "
                f"[{self.head_start}, {self.head_start + self.num_heads})"
            )
        return HeadWeights(start, *(t[lo:lo + count].clone() for t in self.tensors()))


@dataclass
class FFNShard:
    """SwiGLU FFN columns [col_start, col_start + Is) of the intermediate width."""

    ffn_norm: torch.Tensor  # [D]
    w_gate: torch.Tensor  # [Is, D]
    w_up: torch.Tensor  # [Is, D]
    w_down: torch.Tensor  # [Is, D]


@dataclass
class LayerWeights:
    """One layer as held by one rank."""

    attn: ReplicatedAttnWeights
    heads: HeadWeights
    ffn: FFNShard


def _randn(shape: tuple[int, ...], fan_in: int, gen: torch.Generator, device, dtype) -> torch.Tensor:
    t = torch.randn(shape, generator=gen, device=device, dtype=torch.float32)
    return (t * fan_in ** -0.5).to(dtype)


def _norm_weight(n: int, gen: torch.Generator, device, dtype) -> torch.Tensor:
    return (1.0 + 0.1 * torch.randn((n,), generator=gen, device=device, dtype=torch.float32)).to(dtype)


def make_layer_weights(
    dims: MLADims,
    layer: int,
    seed: int,
    head_start: int,
    head_count: int,
    ffn_rank: int,
    ffn_ranks: int,
    device: torch.device | str,
    dtype: torch.dtype,
) -> LayerWeights:
    """Seeded synthetic weights of one layer, keeping heads and FFN columns this rank holds.

    Every rank draws the full layer from the same seed (on its own device type), so shards of
    different ranks are slices of one model and a gathered shard equals the replicated one.
    """
    d, h = dims.hidden_size, dims.num_heads
    n, r, c, v, q = (dims.qk_nope_head_dim, dims.qk_rope_head_dim, dims.kv_lora_rank,
                     dims.v_head_dim, dims.q_lora_rank)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed * 1_000_003 + layer)
    attn = ReplicatedAttnWeights(
        attn_norm=_norm_weight(d, gen, device, dtype),
        w_qa=_randn((q, d), d, gen, device, dtype),
        q_norm=_norm_weight(q, gen, device, dtype),
        w_kva=_randn((c + r, d), d, gen, device, dtype),
        kv_norm=_norm_weight(c, gen, device, dtype),
    )
    hs = slice(head_start, head_start + head_count)
    heads = HeadWeights(
        head_start,
        _randn((h, n + r, q), q, gen, device, dtype)[hs].clone(),
        _randn((h, n, c), c, gen, device, dtype)[hs].clone(),
        _randn((h, c, v), c, gen, device, dtype)[hs].clone(),
        _randn((h, v, d), h * v, gen, device, dtype)[hs].clone(),
    )
    i_s = dims.intermediate_size // ffn_ranks
    cols = slice(ffn_rank * i_s, (ffn_rank + 1) * i_s)
    ffn = FFNShard(
        ffn_norm=_norm_weight(d, gen, device, dtype),
        w_gate=_randn((dims.intermediate_size, d), d, gen, device, dtype)[cols].clone(),
        w_up=_randn((dims.intermediate_size, d), d, gen, device, dtype)[cols].clone(),
        w_down=_randn((dims.intermediate_size, d), dims.intermediate_size, gen, device, dtype)[cols].clone(),
    )
    return LayerWeights(attn, heads, ffn)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm in fp32, returned in x's dtype. x [..., n], weight [n]."""
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


def rope_rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, half-split pairing (x[:R/2], x[R/2:]). x [B, ..., R], positions [B]."""
    rdim = x.shape[-1]
    inv_freq = theta ** (-torch.arange(0, rdim, 2, device=x.device, dtype=torch.float32) / rdim)  # [R/2]
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # [B, R/2]
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (rdim // 2,)
    cos, sin = angles.cos().view(shape), angles.sin().view(shape)
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def kv_latent(h: torch.Tensor, attn: ReplicatedAttnWeights, positions: torch.Tensor, dims: MLADims) -> torch.Tensor:
    """The token's cached row: normed latent and post-RoPE key. h [B, D] -> [B, C+R].

    NOTE: the key is stored after RoPE so a page is position-independent bytes: a move is an
    exact copy and attention needs no position of cached tokens.
    """
    kv = h @ attn.w_kva.t()  # [B, C+R]
    c = rms_norm(kv[:, :dims.kv_lora_rank], attn.kv_norm, dims.rms_eps)  # [B, C]
    k_pe = rope_rotate(kv[:, dims.kv_lora_rank:], positions, dims.rope_theta)  # [B, R]
    return torch.cat((c, k_pe), dim=-1)


def q_latent(h: torch.Tensor, attn: ReplicatedAttnWeights, dims: MLADims) -> torch.Tensor:
    """Normed query low-rank activation. h [B, D] -> [B, Q]."""
    return rms_norm(h @ attn.w_qa.t(), attn.q_norm, dims.rms_eps)


def absorbed_queries(q_lat: torch.Tensor, heads: HeadWeights, positions: torch.Tensor, dims: MLADims) -> torch.Tensor:
    """Absorbed MLA queries for the held heads. q_lat [B, Q] -> [B, Hs, C+R].

    q_nope is multiplied into the latent space by w_uk, so attention scores against the cached
    latent equal q·k of the unabsorbed form.
    """
    b, hs, n = q_lat.shape[0], heads.num_heads, dims.qk_nope_head_dim
    q = (q_lat @ heads.w_qb.reshape(hs * (n + dims.qk_rope_head_dim), -1).t()).view(b, hs, n + dims.qk_rope_head_dim)  # [B, Hs, N+R]
    q_nope, q_pe = q[..., :n], q[..., n:]
    q_abs = torch.bmm(q_nope.transpose(0, 1), heads.w_uk).transpose(0, 1)  # [B, Hs, C]
    q_pe = rope_rotate(q_pe, positions, dims.rope_theta)  # [B, Hs, R]
    return torch.cat((q_abs, q_pe), dim=-1).contiguous()


def attention_output(o_lat: torch.Tensor, heads: HeadWeights) -> torch.Tensor:
    """Un-absorb values and project out, partial over held heads. o_lat [B, Hs, C] -> [B, D]."""
    b, hs = o_lat.shape[0], heads.num_heads
    o = torch.bmm(o_lat.to(heads.w_uv.dtype).transpose(0, 1), heads.w_uv).transpose(0, 1)  # [B, Hs, V]
    return o.reshape(b, hs * heads.w_o.shape[1]) @ heads.w_o.reshape(-1, heads.w_o.shape[-1])  # [B, D]


def ffn_partial(x: torch.Tensor, ffn: FFNShard, dims: MLADims) -> torch.Tensor:
    """SwiGLU on this rank's FFN columns; summing over ranks gives the full FFN. x [B, D] -> [B, D]."""
    h = rms_norm(x, ffn.ffn_norm, dims.rms_eps)
    a = torch.nn.functional.silu(h @ ffn.w_gate.t()) * (h @ ffn.w_up.t())  # [B, Is]
    return a @ ffn.w_down  # [B, D]


def token_embeddings(request_ids: torch.Tensor, positions: torch.Tensor, hidden_size: int, seed: int) -> torch.Tensor:
    """Deterministic synthetic input rows for (request, position). [B] ints -> [B, D] fp32.

    NOTE: decode inputs are a function of (request, position) rather than of the previous
    step's sampled token, so layouts that differ by float rounding cannot diverge by argmax
    flips; the KV cache still carries every earlier step's computation.
    """
    k = torch.arange(hidden_size, device=request_ids.device, dtype=torch.float32)  # [D]
    phase = (request_ids.to(torch.float32) * 0.7548776662 + positions.to(torch.float32) * 0.5698402910
             + seed * 0.1234567)[:, None]
    return torch.sin(phase * (k[None, :] * 0.0137 + 1.0) + k[None, :] * 0.31)
