"""The Triton half of `kernels.py`: the paged split-KV MLA decode kernels (imported on first use
on CUDA, so the executor imports on machines without Triton). See `kernels.py` for what they compute."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def schedule_kernel(len_ptr, meta_ptr, B, SLOTS, FIXED_C, OVH, MIN_C, NU,
                    PAGE: tl.constexpr, BLOCK_B: tl.constexpr, LOG2_B: tl.constexpr, BLOCK_U: tl.constexpr):
    """One program: the unit size c (pages) from the step's lengths, and a map from each split
    program to its work, so the split programs only load their own entry (computing this in every
    program cost more than a short unit's work).

    meta (int32): [0] c, [1] units, then from 8 three arrays of NU (the grid's unit bound): request, unit
    index within it, output row (-1: a spare program); then four of BLOCK_B per request: running
    end of full units, full units, running end of partial units, first output row (a request's
    rows are adjacent, for the merge). Programs take the full-size units first (request order),
    then the partial ones: the longest start first, and a short one waits or doubles up on an SM.

    Candidates for c, in this order: the longest request whole; the longest request in SLOTS // B
    pieces (the old rule: what a uniform batch wants); ceil(total / (SLOTS * f/4)) for f = 4..8
    (up to 2 x SLOTS units plus one per request: the grid's bound). Each is priced as the time of
    the slowest slot, in pages, with W = total + units * OVH (each unit's partial output written
    and read back): at most SLOTS units each run alone, max(c, W / SLOTS); more are list-scheduled,
    W / SLOTS + c (the bound for any order; a uniform batch cut into SLOTS + 1 units takes two
    rounds, not 1.01). Ties keep the earlier candidate (fewer units).
    """
    offs_b = tl.arange(0, BLOCK_B)
    bmask = offs_b < B
    lens = tl.load(len_ptr + offs_b, mask=bmask, other=0)
    pages = (lens + PAGE - 1) // PAGE
    ptot = tl.sum(pages, axis=0)
    pmax = tl.maximum(tl.max(pages, axis=0), 1)
    best_c = pmax
    best_e = ptot * 0 + 2147483647
    for f in tl.static_range(2, 9):
        if f == 2:  # the longest request whole
            cc = pmax
        elif f == 3:  # the longest request in SLOTS // B pieces
            cc = tl.cdiv(pmax, tl.minimum(tl.maximum(SLOTS // B, 1), tl.maximum(pmax // MIN_C, 1)))
        else:
            cc = (4 * ptot + SLOTS * f - 1) // (SLOTS * f)
        cc = tl.minimum(tl.maximum(cc, MIN_C), pmax)
        n_u = tl.sum((pages + cc - 1) // cc, axis=0)
        w = ptot + n_u * OVH
        e = tl.where(n_u <= SLOTS, tl.maximum(cc * SLOTS, w), w + cc * SLOTS)  # priced times SLOTS
        better = e < best_e
        best_c = tl.where(better, cc, best_c)
        best_e = tl.where(better, e, best_e)
    c = tl.where(FIXED_C > 0, FIXED_C, best_c)
    n_full = pages // c
    n_part = (pages % c > 0).to(tl.int32)
    full_end = tl.cumsum(n_full, axis=0)
    part_end = tl.cumsum(n_part, axis=0)
    units = n_full + n_part
    f_tot = tl.sum(n_full, axis=0)
    total = f_tot + tl.sum(n_part, axis=0)
    req = meta_ptr + 8 + 3 * NU
    tl.store(req + offs_b, tl.where(bmask, full_end, 2147483647))
    tl.store(req + BLOCK_B + offs_b, n_full)
    tl.store(req + 2 * BLOCK_B + offs_b, tl.where(bmask, part_end, 2147483647))
    tl.store(req + 3 * BLOCK_B + offs_b, tl.cumsum(units, axis=0) - units)
    tl.store(meta_ptr + tl.arange(0, 2), tl.where(tl.arange(0, 2) == 0, c, total))
    tl.debug_barrier()  # the per-request arrays above are read back by other threads below
    for u0 in range(0, NU, BLOCK_U):
        u = u0 + tl.arange(0, BLOCK_U)
        is_full = u < f_tot
        key = tl.where(is_full, u, u - f_tot)
        ends = req + tl.where(is_full, 0, 2 * BLOCK_B)
        lo = tl.zeros([BLOCK_U], tl.int32)
        hi = lo + B
        for _ in tl.static_range(LOG2_B + 1):  # first request whose running end exceeds key
            open_ = lo < hi
            mid = (lo + hi) // 2
            end_mid = tl.load(ends + mid, mask=open_, other=0)
            right = open_ & (end_mid <= key)
            lo = tl.where(right, mid + 1, lo)
            hi = tl.where(open_ & ~right, mid, hi)
        rb = tl.minimum(lo, B - 1)
        nf = tl.load(req + BLOCK_B + rb)
        j = tl.where(is_full, key - (tl.load(req + rb) - nf), nf)
        row = tl.where(u < total, tl.load(req + 3 * BLOCK_B + rb) + j, -1)
        um = u < NU
        tl.store(meta_ptr + 8 + u, rb, mask=um)
        tl.store(meta_ptr + 8 + NU + u, j, mask=um)
        tl.store(meta_ptr + 8 + 2 * NU + u, row, mask=um)


@triton.jit
def _tile(q_lat, q_pe, kv, kpe, valid, m_i, l_i, acc, qk_scale_log2, MASK: tl.constexpr):
    """One KV tile into the online softmax (log2 domain). kv [BN, C] is also the value."""
    # NOTE: accumulate into the dot (acc= form): a separate dot result and add would hold a
    # second [BH, C] fp32 array in registers and spill.
    s = tl.dot(q_pe, tl.trans(kpe), tl.dot(q_lat, tl.trans(kv))) * qk_scale_log2  # [BH, BN] fp32
    if MASK:
        s = tl.where(valid[None, :], s, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    pr = tl.exp2(s - m_new[:, None])
    l_i = l_i * alpha + tl.sum(pr, axis=1)
    acc = tl.dot(pr.to(kv.dtype), kv, acc * alpha[:, None])  # [BH, C]
    return m_new, l_i, acc


@triton.jit
def split_kernel(
    q_ptr, pool_ptr, kv_desc, pe_desc, bt_ptr, len_ptr, meta_ptr, o_ptr, lse_ptr,
    H, NU, qk_scale_log2,
    stride_qb, stride_qh, stride_pp, stride_bt_b,
    stride_ou, stride_oh, stride_lu,
    C: tl.constexpr, R: tl.constexpr, PAGE: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, USE_TMA: tl.constexpr,
):
    # grid (head_blocks, NU): head blocks of one unit are adjacent program ids, so they run
    # together and read each KV tile from HBM once (then L2). Spare programs (output row -1)
    # load nothing and store nothing.
    # NOTE: a persistent grid (one wave, each program looping over units) avoided those spare
    # programs but ran up to 2x slower on 2 x H200 (the nested loop lost the inner pipeline).
    hb = tl.program_id(0)
    u = tl.program_id(1)
    c = tl.load(meta_ptr)
    b = tl.load(meta_ptr + 8 + u)  # request, unit within it, output row (schedule_kernel's map)
    j = tl.load(meta_ptr + 8 + NU + u)
    out_row = tl.load(meta_ptr + 8 + 2 * NU + u)
    active = out_row >= 0
    seq_len = tl.load(len_ptr + b)
    heads = hb * BLOCK_H + tl.arange(0, BLOCK_H)  # [BH]
    hmask = (heads < H) & active
    offs_c = tl.arange(0, C)
    offs_r = tl.arange(0, R)
    offs_t = tl.arange(0, BLOCK_N)
    q_base = q_ptr + b * stride_qb + heads[:, None] * stride_qh
    q_lat = tl.load(q_base + offs_c[None, :], mask=hmask[:, None], other=0.0)  # [BH, C]
    q_pe = tl.load(q_base + C + offs_r[None, :], mask=hmask[:, None], other=0.0)  # [BH, R]
    tiles_per_unit = c * (PAGE // BLOCK_N)
    t_lo = j * tiles_per_unit
    t_hi = tl.where(active, tl.minimum(t_lo + tiles_per_unit, tl.cdiv(seq_len, BLOCK_N)), t_lo)
    t_full = tl.maximum(tl.minimum(t_hi, seq_len // BLOCK_N), t_lo)  # tiles with every token valid
    m_i = tl.full([BLOCK_H], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, C], tl.float32)
    # full tiles: no masks (a tile lies inside one page: BLOCK_N divides PAGE; one block-table
    # lookup per tile); with USE_TMA the tile comes by tensor-memory-accelerator copies
    for it in range(t_lo, t_full):
        slot = tl.load(bt_ptr + b * stride_bt_b + (it * BLOCK_N) // PAGE).to(tl.int64)
        if USE_TMA:
            first = (slot * PAGE + (it * BLOCK_N) % PAGE).to(tl.int32)  # pool row of the tile
            kv = kv_desc.load([first, 0])  # [BN, C]
            kpe = pe_desc.load([first, C])  # [BN, R]
        else:
            kv_base = pool_ptr + slot * stride_pp + ((it * BLOCK_N) % PAGE + offs_t)[:, None] * (C + R)
            kv = tl.load(kv_base + offs_c[None, :])
            kpe = tl.load(kv_base + C + offs_r[None, :])
        m_i, l_i, acc = _tile(q_lat, q_pe, kv, kpe, offs_t, m_i, l_i, acc, qk_scale_log2, False)
    # the request's last, partial tile (0 or 1 iterations): masked loads, since the page's
    # rows past the length hold whatever was there (0 * NaN would poison the value dot)
    for it in range(t_full, t_hi):
        slot = tl.load(bt_ptr + b * stride_bt_b + (it * BLOCK_N) // PAGE).to(tl.int64)
        tmask = it * BLOCK_N + offs_t < seq_len
        kv_base = pool_ptr + slot * stride_pp + ((it * BLOCK_N) % PAGE + offs_t)[:, None] * (C + R)
        kv = tl.load(kv_base + offs_c[None, :], mask=tmask[:, None], other=0.0)
        kpe = tl.load(kv_base + C + offs_r[None, :], mask=tmask[:, None], other=0.0)
        m_i, l_i, acc = _tile(q_lat, q_pe, kv, kpe, tmask, m_i, l_i, acc, qk_scale_log2, True)
    has = l_i > 0
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    lse2 = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    o_rows = o_ptr + out_row * stride_ou + heads[:, None] * stride_oh + offs_c[None, :]
    tl.store(o_rows, out.to(o_ptr.dtype.element_ty), mask=hmask[:, None])
    tl.store(lse_ptr + out_row * stride_lu + heads, lse2, mask=hmask)


@triton.jit
def reduce_kernel(
    op_ptr, lp_ptr, len_ptr, meta_ptr, o_ptr, lse_ptr, NU,
    stride_pu, stride_ph, stride_lu, stride_ob, stride_oh,
    C: tl.constexpr, PAGE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_C: tl.constexpr,
    BLOCK_U: tl.constexpr, BLOCK_L: tl.constexpr,
):
    # grid (B, H, C // BLOCK_C): merge request b's units (adjacent output rows) for head h and
    # BLOCK_C of the latent columns by log-sum-exp (log2 domain). A request can have hundreds of
    # units: the max takes BLOCK_L log-sum-exps per load and the weighted sum BLOCK_U rows, so
    # the chain of dependent loads stays short (one program per (b, h) looping 8 units at a time
    # took 41 us for 256 units, longer than the split itself).
    b = tl.program_id(0)
    h = tl.program_id(1)
    cb = tl.program_id(2)
    c = tl.load(meta_ptr)
    u_lo = tl.load(meta_ptr + 8 + 3 * NU + 3 * BLOCK_B + b)
    u_hi = u_lo + tl.cdiv(tl.cdiv(tl.load(len_ptr + b), PAGE), c)
    offs_l = tl.arange(0, BLOCK_L)
    m = tl.full([BLOCK_L], float("-inf"), tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_L):
        uu = u0 + offs_l
        m = tl.maximum(m, tl.load(lp_ptr + uu * stride_lu + h, mask=uu < u_hi, other=float("-inf")))
    m_all = tl.max(m, axis=0)
    m_safe = tl.where(m_all == float("-inf"), 0.0, m_all)  # no units: weights 0, o = 0, lse = -inf
    offs_u = tl.arange(0, BLOCK_U)
    offs_c = cb * BLOCK_C + tl.arange(0, BLOCK_C)
    d = tl.zeros([BLOCK_U], tl.float32)
    acc = tl.zeros([BLOCK_C], tl.float32)
    for u0 in range(u_lo, u_hi, BLOCK_U):
        uu = u0 + offs_u
        um = uu < u_hi
        w = tl.exp2(tl.load(lp_ptr + uu * stride_lu + h, mask=um, other=float("-inf")) - m_safe)  # [U]
        part = tl.load(op_ptr + uu[:, None] * stride_pu + h * stride_ph + offs_c[None, :], mask=um[:, None],
                       other=0.0)  # [U, BLOCK_C]
        acc += tl.sum(part * w[:, None], axis=0)
        d += w
    den = tl.sum(d, axis=0)
    has = den > 0
    o = acc / tl.where(has, den, 1.0)
    tl.store(o_ptr + b * stride_ob + h * stride_oh + offs_c, o.to(o_ptr.dtype.element_ty))
    lse = tl.where(has, (m_safe + tl.log2(tl.where(has, den, 1.0))) / 1.4426950408889634, float("-inf"))
    tl.store(lse_ptr + b * tl.num_programs(1) + h, lse, mask=cb == 0)
