"""The host tier in torch on CPU (plain tensors stand in for pinned memory): the same resolver state
as the numpy core step by step, attention outputs bit-identical to the all-resident path (with
decoded tokens written through between steps), and overflow surfacing as an error."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.host_cache import HostCacheSpec, HostTierCache, WorkingSetTooLarge, pages_for  # noqa: E402
from executor.sparse_trace import TopKTraceSpec, topk_trace  # noqa: E402
from executor.torch_executor.host_fetch import copy_units, words  # noqa: E402
from executor.torch_executor.host_tier import (HostKVTier, chunk_bounds, resident_layer,  # noqa: E402
                                               sparse_mla_attention, tiered_layer)

C, R, H = 16, 8, 4  # latent, rope, heads: a row is C + R = 24 elements


def build(page_rows, ctx, budgets, layers=2, topk=12, slots_spare=3, dtype=torch.float32, preload=2):
    rows = len(ctx)
    max_pages = pages_for(max(ctx) + 16, page_rows)
    spec = HostCacheSpec(num_layers=layers, max_requests=rows, page_rows=page_rows, max_pages=max_pages,
                         max_budget_pages=max(budgets), topk=topk)
    total = sum(budgets) + slots_spare
    host = torch.randn(layers, rows * spec.max_rows, C + R, generator=torch.Generator().manual_seed(1)).to(dtype)
    cache = torch.full((layers, total * page_rows, C + R), float("nan"), dtype=dtype)
    tier = HostKVTier(spec, total, host, cache)
    for b, (n, bud) in enumerate(zip(ctx, budgets)):
        last = pages_for(n, page_rows)
        tier.admit(b, n, bud, preload_pages=np.arange(max(0, last - preload), last))
    return tier


@pytest.mark.parametrize("page_rows, chunks, dtype", [(1, 1, torch.float32), (4, 3, torch.float32),
                                                      (4, 2, torch.bfloat16)])
def test_tiered_attention_equals_the_all_resident_path_bit_for_bit(page_rows, chunks, dtype):
    ctx, k, layers = [90, 41, 130], 12, 2
    budgets = [max(k + 2, pages_for(n, page_rows) // 2) for n in ctx]
    tier = build(page_rows, ctx, budgets, layers, k, dtype=dtype)
    spec, B = tier.spec, len(ctx)
    row0 = torch.arange(B) * spec.max_rows
    q = torch.randn(layers, B, H, C + R, generator=torch.Generator().manual_seed(2)).to(dtype)
    lens = list(ctx)
    gen = torch.Generator().manual_seed(3)
    for t in range(12):
        trace = topk_trace(TopKTraceSpec(topk=k, reuse=0.6, cluster_rows=2, seed=t), lens, layers, 1)[0]
        for layer in range(layers):
            idx = torch.as_tensor(trace[layer])
            got, want = torch.empty(B, H, C, dtype=dtype), torch.empty(B, H, C, dtype=dtype)
            tiered_layer(tier, layer, q[layer], idx, got, chunk_bounds(B, chunks), 0.2, C)
            resident_layer(tier.host[layer], row0, q[layer], idx, want, chunk_bounds(B, chunks), 0.2, C)
            assert torch.equal(got, want), (t, layer)
            assert not torch.isnan(got).any()
        tier.cache.advance()
        # decode one token per request: host always, the cache where its page is resident
        tier.append(torch.randn(layers, B, C + R, generator=gen).to(dtype))
        lens = [n + 1 for n in lens]
    tier.cache.check()
    assert tier.cache.ctx_rows.tolist() == lens
    assert int(tier.cache.stats[:, 2].sum()) > 0  # the trace did fetch


def test_torch_backend_keeps_the_numpy_state():
    ctx, k, layers, page_rows = [200, 150, 64], 16, 2, 4
    budgets = [k + 2] * 3
    tier = build(page_rows, ctx, budgets, layers, k, preload=3)
    ref = HostTierCache(tier.spec, tier.cache.total_slots)
    for b, n in enumerate(ctx):
        ref.admit(b, n, budgets[b])
        last = pages_for(n, page_rows)
        ref.preload(b, np.arange(last - 3, last))
    trace = topk_trace(TopKTraceSpec(topk=k, reuse=0.7, cluster_rows=2, seed=1), ctx, layers, 15)
    for t in range(len(trace)):
        for layer in range(layers):
            res = tier.cache.resolve(layer, torch.as_tensor(trace[t, layer]))
            want = ref.resolve(layer, trace[t, layer])
            for name in ("row_loc", "miss_src_row", "miss_dst_row", "miss_bounds"):
                assert (getattr(res, name).numpy() == getattr(want, name)).all(), (t, layer, name)
        for name in ("directory", "slot_page", "slot_last", "stats"):
            assert (getattr(tier.cache, name).numpy() == getattr(ref, name)).all(), (t, name)
        tier.cache.advance()
        ref.advance()


def test_overflow_is_counted_on_device_and_raised_by_check():
    tier = build(1, [40], [2], layers=1, topk=3, preload=0)
    res = tier.cache.resolve(0, torch.tensor([[5, 6, 7]]))
    assert tier.cache.stats[0].tolist() == [0, 3, 3, 1]  # 3 distinct misses, 2 slots: one unit has none
    assert (res.row_loc >= 0).sum() == 2 and res.miss_bounds.tolist() == [0, 2]
    with pytest.raises(WorkingSetTooLarge, match="1 missing pages had no free or evictable slot"):
        tier.cache.check()


def test_copy_units_torch_backend_and_word_views():
    src = torch.arange(10 * 6, dtype=torch.int32).view(10, 6)  # 10 rows of 6 words
    dst = torch.full((8, 6), -1, dtype=torch.int32)
    copy_units(words(src), words(dst), torch.tensor([4, -1, 0]), torch.tensor([2, 5, 6]), torch.tensor([0, 3]),
               0, 1, 2 * 6, 6, max_units=3, backend="torch")  # units of 2 rows; the -1 entry is skipped
    assert torch.equal(dst[2:4], src[4:6]) and torch.equal(dst[6:8], src[0:2])
    assert (dst[[0, 1, 4, 5]] == -1).all()
    assert words(torch.zeros(3, 2, dtype=torch.bfloat16)).shape == (3,)
    with pytest.raises(ValueError, match="whole number of 4-byte words"):
        words(torch.zeros(3, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="backend='cuda'"):
        copy_units(words(src), words(dst), torch.tensor([0]), torch.tensor([0]), torch.tensor([0, 1]), 0, 1, 6, 6,
                   max_units=1, backend="cuda")


def test_attention_masks_missing_indices_and_chunks_cover_the_batch():
    kv = torch.randn(10, C + R)
    q = torch.randn(2, H, C + R)
    o, lse = sparse_mla_attention(q, kv, torch.tensor([[3, -1, 5], [-1, -1, -1]]), 0.3, C)
    o_ref, lse_ref = sparse_mla_attention(q[:1], kv, torch.tensor([[3, 5]]), 0.3, C)
    assert torch.allclose(o[0], o_ref[0], atol=1e-6) and torch.allclose(lse[0], lse_ref[0], atol=1e-6)
    assert (o[1] == 0).all() and torch.isinf(lse[1]).all()
    assert chunk_bounds(10, 4) == [(0, 2), (2, 5), (5, 8), (8, 10)] and chunk_bounds(2, 5) == [(0, 1), (1, 2)]


def test_tier_shapes_are_checked():
    spec = HostCacheSpec(num_layers=1, max_requests=2, page_rows=4, max_pages=4, max_budget_pages=2, topk=2)
    with pytest.raises(ValueError, match=r"host pool \(1, 16, 24\) must be \[L=1, >= 32, E\]"):
        HostKVTier(spec, 4, torch.zeros(1, 16, 24), torch.zeros(1, 16, 24))
    with pytest.raises(ValueError, match=r"device cache \(1, 8, 24\) must be \[L=1, >= 16, E=24\]"):
        HostKVTier(spec, 4, torch.zeros(1, 32, 24), torch.zeros(1, 8, 24))
