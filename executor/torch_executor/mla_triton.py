"""The Triton half of `kernels.py`: the paged split-KV MLA decode kernels (imported on first use
on CUDA, so the executor imports on machines without Triton). See `kernels.py` for what they compute."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _schedule(len_ptr, B, SLOTS, FIXED_C, OVH, MIN_C, PAGE: tl.constexpr, BLOCK_B: tl.constexpr):
    """Unit size c (pages), units per request and their running end, from the lengths on device.

    Candidates: the longest request whole, and ceil(total / (SLOTS * f/4)) for f = 4..8; each
    priced (times SLOTS) as max(c * SLOTS, total + units * OVH): the largest unit against the
    work spread over the slots with each unit's partial-output traffic. Ties keep fewer units.
    """
    offs_b = tl.arange(0, BLOCK_B)
    lens = tl.load(len_ptr + offs_b, mask=offs_b < B, other=0)
    pages = (lens + PAGE - 1) // PAGE
    ptot = tl.sum(pages, axis=0)
    pmax = tl.maximum(tl.max(pages, axis=0), 1)
    best_c = pmax
    best_e = tl.maximum(pmax * SLOTS, ptot + tl.sum((pages > 0).to(tl.int32), axis=0) * OVH)
    for f in tl.static_range(4, 9):
        cc = tl.minimum(tl.maximum((4 * ptot + SLOTS * f - 1) // (SLOTS * f), MIN_C), pmax)
        e = tl.maximum(cc * SLOTS, ptot + tl.sum((pages + cc - 1) // cc, axis=0) * OVH)
        better = e < best_e
        best_c = tl.where(better, cc, best_c)
        best_e = tl.where(better, e, best_e)
    c = tl.where(FIXED_C > 0, FIXED_C, best_c)
    units = (pages + c - 1) // c
    ends = tl.cumsum(units, axis=0)
    return c, units, ends, offs_b

@triton.jit
def split_kernel(
    q_ptr, pool_ptr, bt_ptr, len_ptr, o_ptr, lse_ptr,
    B, H, SLOTS, FIXED_C, OVH, MIN_C, qk_scale_log2,
    stride_qb, stride_qh, stride_pp, stride_bt_b,
    stride_ou, stride_oh, stride_lu,
    C: tl.constexpr, R: tl.constexpr, PAGE: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr,
):
    # grid (head_blocks, unit bound): head blocks of one unit are adjacent program ids, so
    # they run together and read each KV tile from HBM once (then L2). Programs past the unit
    # count load nothing and store nothing.
    # NOTE: a persistent grid (one wave, each program looping over units) avoided those spare
    # programs but ran up to 2x slower on 2 x H200 (the nested loop lost the inner pipeline).
    hb = tl.program_id(0)
    u = tl.program_id(1)
    c, units, ends, offs_b = _schedule(len_ptr, B, SLOTS, FIXED_C, OVH, MIN_C, PAGE, BLOCK_B)
    active = u < tl.sum(units, axis=0)
    b = tl.minimum(tl.sum((ends <= u).to(tl.int32), axis=0), B - 1)  # request holding unit u
    mine = offs_b == b
    j = u - (tl.sum(tl.where(mine, ends, 0), axis=0) - tl.sum(tl.where(mine, units, 0), axis=0))
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)  # [BH]
    hmask = (heads < H) & active
    offs_c = tl.arange(0, C)
    offs_r = tl.arange(0, R)
    offs_t = tl.arange(0, BLOCK_N)
    q_base = q_ptr + b * stride_qb + heads[:, None] * stride_qh
    q_lat = tl.load(q_base + offs_c[None, :], mask=hmask[:, None], other=0.0)  # [BH, C]
    q_pe = tl.load(q_base + C + offs_r[None, :], mask=hmask[:, None], other=0.0)  # [BH, R]
    seq_len = tl.load(len_ptr + b)
    tiles_per_unit = c * (PAGE // BLOCK_N)
    t_lo = j * tiles_per_unit
    t_hi = tl.where(active, tl.minimum(t_lo + tiles_per_unit, tl.cdiv(seq_len, BLOCK_N)), t_lo)
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
    tl.store(o_ptr + u * stride_ou + heads[:, None] * stride_oh + offs_c[None, :], out, mask=hmask[:, None])
    tl.store(lse_ptr + u * stride_lu + heads, lse2, mask=hmask)


@triton.jit
def reduce_kernel(
    op_ptr, lp_ptr, len_ptr, o_ptr, lse_ptr,
    B, SLOTS, FIXED_C, OVH, MIN_C,
    stride_pu, stride_ph, stride_lu, stride_ob, stride_oh,
    C: tl.constexpr, PAGE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_U: tl.constexpr,
):
    # grid (B, H): merge request b's units for head h by log-sum-exp (log2 domain), BLOCK_U
    # units per load (a request can have ~2 x SLOTS units: one at a time is a chain of loads)
    b = tl.program_id(0)
    h = tl.program_id(1)
    c, units, ends, offs_b = _schedule(len_ptr, B, SLOTS, FIXED_C, OVH, MIN_C, PAGE, BLOCK_B)
    mine = offs_b == b
    u_hi = tl.sum(tl.where(mine, ends, 0), axis=0)
    u_lo = u_hi - tl.sum(tl.where(mine, units, 0), axis=0)
    offs_u = tl.arange(0, BLOCK_U)
    offs_c = tl.arange(0, C)
    m = tl.full([BLOCK_U], float("-inf"), tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        uu = u0 + offs_u
        m = tl.maximum(m, tl.load(lp_ptr + uu * stride_lu + h, mask=uu < u_hi, other=float("-inf")))
    m_all = tl.max(m, axis=0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)  # no units: weights 0, o = 0, lse = -inf
    d = tl.zeros([BLOCK_U], tl.float32)
    acc = tl.zeros([C], tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        uu = u0 + offs_u
        um = uu < u_hi
        w = tl.exp2(tl.load(lp_ptr + uu * stride_lu + h, mask=um, other=float("-inf")) - m_safe)  # [U]
        part = tl.load(op_ptr + uu[:, None] * stride_pu + h * stride_ph + offs_c[None, :], mask=um[:, None],
                       other=0.0)  # [U, C]
        acc += tl.sum(part * w[:, None], axis=0)
        d += w
    den = tl.sum(d, axis=0)
    has = den > 0
    o = acc / tl.where(has, den, 1.0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_c, o.to(o_ptr.dtype.element_ty))
    lse = tl.where(has, (m_safe + tl.log2(tl.where(has, den, 1.0))) / 1.4426950408889634, float("-inf"))
    tl.store(lse_ptr + b * tl.num_programs(1) + h, lse)
