"""The host tier's gather path on a CUDA GPU: the zero-copy kernel reading pinned host memory and the
batched copies move exactly the listed units for the benchmark's row sizes, and the tiered sparse-MLA
step (eager and in a CUDA graph, with the fetch on a copy stream) is bit-identical to the all-in-HBM
step while keeping the numpy manager's counts. Skipped without CUDA (and the kernel without Triton)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.host_cache import HostCacheSpec, HostTierCache, pages_for  # noqa: E402
from executor.sparse_trace import TopKTraceSpec, topk_trace  # noqa: E402
from executor.torch_executor.host_fetch import BatchCopier, copy_units, pinned_empty, words  # noqa: E402
from executor.torch_executor.host_tier import HostKVTier, chunk_bounds, resident_layer, tiered_layer  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("row_bytes", [132, 584, 656, 1152])
@pytest.mark.parametrize("unit_rows", [1, 64])
def test_copy_kernel_reads_pinned_host_rows(row_bytes, unit_rows):
    pytest.importorskip("triton")
    n_host, n_dev, n = 600, 400, 300
    src = pinned_empty((n_host * unit_rows, row_bytes // 4), torch.int32, "cuda")
    src.copy_(torch.randint(-2**31, 2**31 - 1, src.shape, dtype=torch.int32))
    dst = torch.full((n_dev * unit_rows, row_bytes // 4), -7, dtype=torch.int32, device="cuda")
    su = torch.randperm(n_host)[:n]
    du = torch.randperm(n_dev)[:n]
    s_row, d_row = (su * unit_rows).cuda(), (du * unit_rows).cuda()
    bounds = torch.tensor([0, n], device="cuda")
    copy_units(words(src), words(dst), s_row, d_row, bounds, 0, 1, unit_rows * row_bytes // 4, row_bytes // 4,
               max_units=n, row_align=unit_rows)
    got = dst.view(n_dev, unit_rows, -1)[du.cuda()].cpu()
    assert torch.equal(got, src.view(n_host, unit_rows, -1)[su])
    untouched = torch.ones(n_dev, dtype=torch.bool)
    untouched[du] = False
    assert (dst.view(n_dev, -1)[untouched.cuda()] == -7).all()


def test_batched_copies_move_the_listed_units():
    unit = 64 * 656
    src = pinned_empty((100, unit), torch.uint8, "cuda")
    src.copy_(torch.randint(0, 255, src.shape, dtype=torch.uint8))
    dst = torch.zeros(50, unit, dtype=torch.uint8, device="cuda")
    su, du = np.random.default_rng(0).permutation(100)[:40], np.random.default_rng(1).permutation(50)[:40]
    stream = torch.cuda.Stream()
    copier = BatchCopier()
    copier.batch(dst.data_ptr() + du.astype(np.uint64) * unit, src.data_ptr() + su.astype(np.uint64) * unit,
                 np.full(40, unit, dtype=np.uint64), stream)
    stream.synchronize()
    assert torch.equal(dst[torch.as_tensor(du).cuda()].cpu(), src[torch.as_tensor(su)])


@pytest.mark.parametrize("page_rows", [1, 64])
def test_tiered_step_is_bit_identical_to_all_in_hbm_eager_and_in_a_graph(page_rows):
    torch.manual_seed(0)
    L, B, K, H, C, E, ctx = 2, 4, 256, 16, 512, 576, 8192
    max_pages = pages_for(ctx, page_rows)
    budget = max(pages_for(ctx, page_rows) // 4, 64 if page_rows == 64 else K + 1)
    spec = HostCacheSpec(num_layers=L, max_requests=B, page_rows=page_rows, max_pages=max_pages,
                         max_budget_pages=budget, topk=K)
    pool = torch.randn(L, B * ctx, E, device="cuda").to(torch.bfloat16)
    host = pinned_empty(pool.shape, torch.bfloat16, "cuda")
    host.copy_(pool)
    cache = torch.full((L, B * budget * page_rows, E), float("nan"), dtype=torch.bfloat16, device="cuda")
    tier = HostKVTier(spec, B * budget, host, cache)
    ref = HostTierCache(spec, B * budget)
    for b in range(B):
        tail = np.arange(max_pages - budget // 2, max_pages)
        tier.admit(b, ctx, budget, preload_pages=tail, source=pool)
        ref.admit(b, ctx, budget)
        ref.preload(b, tail)
    trace = topk_trace(TopKTraceSpec(topk=K, reuse=0.8, cluster_rows=16, seed=page_rows), [ctx] * B, L, 8)
    trace_dev = torch.as_tensor(trace, device="cuda")
    q = torch.randn(L, B, H, E, device="cuda").to(torch.bfloat16)
    row0 = torch.arange(B, device="cuda") * ctx
    chunks = chunk_bounds(B, 2)
    copy_stream = torch.cuda.Stream()
    events = [[torch.cuda.Event() for _ in chunks] for _ in range(L)]
    idx = torch.empty_like(trace_dev[0])
    out_t, out_r = (torch.empty(L, B, H, C, dtype=torch.bfloat16, device="cuda") for _ in range(2))

    def tiered():
        for layer in range(L):
            tiered_layer(tier, layer, q[layer], idx[layer], out_t[layer], chunks, 0.04, C, copy_stream, events[layer])
        tier.cache.advance()

    def resident():
        for layer in range(L):
            resident_layer(pool[layer], row0, q[layer], idx[layer], out_r[layer], chunks, 0.04, C)

    def step_ref(t):
        for layer in range(L):
            ref.resolve(layer, trace[t, layer])
        ref.advance()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # eager steps on the stream the graphs are captured on (warms cuBLAS there)
        for t in range(3):
            idx.copy_(trace_dev[t])
            tiered()
            resident()
            step_ref(t)
            side.synchronize()
            assert torch.equal(out_t, out_r), t
    graphs = []
    for fn in (tiered, resident):  # capturing runs nothing: the first replay is step 3
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=side):
            fn()
        graphs.append(g)
    for t in range(3, 8):
        idx.copy_(trace_dev[t])
        graphs[0].replay()
        graphs[1].replay()
        step_ref(t)
        torch.cuda.synchronize()
        assert torch.equal(out_t, out_r), t
    tier.cache.check()
    assert (tier.cache.stats.cpu().numpy() == ref.stats).all()
    assert (tier.cache.directory.cpu().numpy() == ref.directory).all()
