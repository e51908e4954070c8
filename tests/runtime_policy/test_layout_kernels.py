"""The policy's per-table kernels (step_time.layout_kernels: coefficients written in, zero terms left
out) equal the generic per-set kernels (themselves equal to the formula as written,
test_step_time.py) bit for bit: on the shipped tables with the host tier's twins, and on random
tables with zero columns, negative entries and −0.0 (where a layout keeps every term)."""

import numpy as np
import pytest

import planner
from planner.host_tier import HostTierSpec
from runtime_policy import step_time
from runtime_policy.policy import LayoutPolicy

R = 5


def _generic(mask, owner, rows, rows_n, crows_full, c1s, c2s, lo, hi, s1, s2, own, own_min, f, a, o, blend):
    """The generic kernels' answer for the layouts in `mask`, owner sums as the pricer made them."""
    n = len(owner)
    spread = tuple(i for i in range(n) if mask >> i & 1 and not owner[i])
    owned = tuple(i for i in range(n) if mask >> i & 1 and owner[i])
    sums = [None] * n
    for i in owned:
        fb = fl = 0.0
        if s2 > 0:
            fb, fl = min(own[i] / s2, 1.0), min(own_min[i] / s2, 1.0)
        sums[i] = (s1 * fb, s2 * fb, s1 * fl, s2 * fl)
    out, net = [0.0] * n, [0.0] * n
    if blend:
        step_time.blended_steps(spread, owned, rows, rows_n, crows_full, lo, hi, c1s, c2s, s1, s2, sums, f, a, o, out,
                                net)
    else:
        step_time.decode_steps(spread, owned, rows, c1s, c2s, s1, s2, sums, a, o, out, net)
    return out, net


def _check(base, chunk, c1, c2, owner, a, o, rng, trials):
    k = step_time.layout_kernels(base, chunk, c1, c2, owner, a, o)
    n = len(owner)
    c1s, c2s = c1.tolist(), c2.tolist()
    for _ in range(trials):
        bi, ni = (int(x) for x in rng.integers(0, base.shape[0], 2))
        pi = int(rng.integers(0, chunk.shape[0]))
        rows, rows_n = base[bi].tolist(), base[ni].tolist()
        crows_full = chunk[pi].tolist()
        crows = [[crows_full[i][c] for c in k.chunk_cols[i]] for i in range(n)]
        s1, s2, pfx = (float(x) for x in rng.integers(0, 10**6, 3))
        s1 = min(s1, s2)
        lo, hi = step_time.prefix_split(pfx, 2048.0)
        own = [float(x) for x in rng.integers(0, 10**6, n)]
        own_min = [min(x, float(y)) for x, y in zip(own, rng.integers(0, 10**6, n))]
        f = float(rng.random())
        mask = int(rng.integers(1, 1 << n))
        for blend in (False, True):
            want, want_net = _generic(mask, owner, rows, rows_n, crows_full, c1s, c2s, lo, hi, s1, s2, own, own_min,
                                      f, a, o, blend)
            out, net = [0.0] * n, [0.0] * n
            if blend:
                k.blended_steps(mask, rows, rows_n, crows, lo, hi, s1, s2, own, own_min, f, out, net)
            else:
                k.decode_steps(mask, rows, s1, s2, own, own_min, out, net)
            assert out == want and net == want_net
    return k


def test_the_shipped_tables_kernels_equal_the_generic_ones():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    dep = planner.replace_deployment(planner.make_deployment(m, hw, attn="tp", gpus=8),
                                     host_tier=HostTierSpec(reference_context_tokens=8192))
    t = LayoutPolicy.compile(dep, tier_choice=True, max_prefill_tokens=1024).tables
    owner = [int(g) > 1 for g in t.info.owner_groups]
    k = _check(t.base_s[:3000], t.chunk_rows_s, t.c1_s, t.c2_s, owner, t.alpha, t.overhead_s,
               np.random.default_rng(0), 300)
    # the zero terms did go: DS-V3.2's network and host-link columns carry no per-token cost
    assert all(len(c) < 3 * R for c in k.chunk_cols) and "s1 * 0.0" not in k.source


@pytest.mark.parametrize("seed", range(4))
def test_random_tables_with_zero_columns_negatives_and_negative_zero(seed):
    rng = np.random.default_rng(seed)
    n = 6
    base = rng.random((40, n, R)) * 1e-3
    chunk = rng.standard_normal((30, n, 3 * R)) * 1e-4  # negative entries: still folded
    c1, c2 = rng.random((n, R)) * 1e-8, rng.random((n, R)) * 1e-9
    for i in range(n):  # zero columns, different per layout
        cols = rng.choice(R, size=2, replace=False)
        c1[i, cols] = 0.0
        c2[i, cols[:1]] = 0.0
        chunk[:, i, rng.choice(3 * R, size=4, replace=False)] = 0.0
    base[:, :, R - 1] = 0.0
    base[3, 1, 2] = -0.0  # layout 1 keeps every term
    chunk[:, 2, R + 1] = -0.0  # layout 2 too
    owner = [bool(x) for x in rng.integers(0, 2, n)]
    k = _check(base, chunk, c1, c2, owner, 0.9, 6e-4, rng, 400)
    assert len(k.chunk_cols[1]) == len(k.chunk_cols[2]) == 3 * R
    assert len(k.chunk_cols[0]) < 3 * R


def test_a_table_whose_kernels_were_built_still_pickles(dsv32):
    """The torch executor pickles its tables to each rank process: the cached kernels stay behind."""
    import pickle

    _, pol = dsv32
    assert pol.pricer.kernels is pol.tables.layout_kernels  # built once per table, shared by its policies
    back = pickle.loads(pickle.dumps(pol.tables))
    assert "layout_kernels" not in back.__dict__ and back.layout_kernels.source == pol.tables.layout_kernels.source
