"""Single-process checks: dimensions, the attention kernels, page tables and transition plans."""

import math
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import (DEEPSEEK_V32, MLADims, deepseek_v32, merge_partials,  # noqa: E402
                                     mla_decode_torch, plan_page_moves, tiny_dims)
from executor.torch_executor.kv_pages import (LAYOUT_KINDS, OutOfPages, PageTable, SlotAllocator,  # noqa: E402
                                              balance_owners, holders, pages_for)


def test_deepseek_dims_from_models_md():
    d = deepseek_v32(4)
    assert (d.hidden_size, d.num_heads, d.q_lora_rank, d.kv_lora_rank) == (7168, 128, 1536, 512)
    assert d.latent_dim == 576 and d.num_layers == 4 and DEEPSEEK_V32.num_layers == 61
    assert d.kv_bytes_per_page(2) == 4 * 64 * 576 * 2


def test_from_model_spec_reads_attribute_names():
    attn = SimpleNamespace(num_heads=64, q_lora_rank=2048, kv_lora_rank=512, qk_nope_head_dim=192,
                           qk_rope_head_dim=64, v_head_dim=256)
    spec = SimpleNamespace(hidden_size=6144, num_layers=78, vocab_size=154880, intermediate_size=12288,
                           attention=attn)
    d = MLADims.from_model_spec(spec, num_layers=2)
    assert (d.num_heads, d.v_head_dim, d.num_layers, d.intermediate_size) == (64, 256, 2, 12288)
    with pytest.raises(ValueError, match="not MLA"):
        MLADims.from_model_spec(SimpleNamespace(hidden_size=1, num_layers=1, intermediate_size=1,
                                                attention=SimpleNamespace(num_heads=8)))


def test_world_size_errors_are_one_line():
    with pytest.raises(ValueError, match=r"^num_heads=8 is not divisible by world_size=3$"):
        tiny_dims(num_heads=8).check_world_size(3)
    with pytest.raises(ValueError, match="page_size"):
        MLADims(1, 1, 1, 1, 1, 2, 1, 1, 1, page_size=0)


def _paged_inputs(b=3, h=4, c=16, r=8, page=4, lens=(5, 13, 1), slots=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    pool = torch.randn(slots, page, c + r, generator=g)
    q = torch.randn(b, h, c + r, generator=g)
    maxp = max(pages_for(n, page) for n in lens)
    bt = torch.stack([torch.randperm(slots, generator=g)[:maxp] for _ in range(b)]).int()
    return q, pool, bt, torch.tensor(lens, dtype=torch.int32)


def test_torch_kernel_matches_dense_softmax():
    q, pool, bt, lens = _paged_inputs()
    o, lse = mla_decode_torch(q, pool, bt, lens, 0.3, 16)
    for i, n in enumerate(lens.tolist()):
        kv = pool[bt[i].long()].reshape(-1, pool.shape[-1])[:n].double()
        s = q[i].double() @ kv.t() * 0.3
        ref = torch.softmax(s, -1) @ kv[:, :16]
        assert torch.allclose(o[i].double(), ref, rtol=1e-5, atol=1e-6)
        assert torch.allclose(lse[i].double(), torch.logsumexp(s, -1), atol=1e-5)


def test_merge_of_disjoint_page_sets_is_exact():
    q, pool, bt, lens = _paged_inputs(lens=(8, 12, 4))
    full_o, full_lse = mla_decode_torch(q, pool, bt, lens, 0.3, 16)
    # split each request's pages: even logical pages vs odd (all full pages here)
    parts = []
    for sel in (slice(0, None, 2), slice(1, None, 2)):
        sub = bt[:, sel].contiguous()
        sub_lens = torch.tensor([min(sub.shape[1] * 4, 4 * len(range(*sel.indices(pages_for(n, 4)))))
                                 for n in lens.tolist()], dtype=torch.int32)
        parts.append(mla_decode_torch(q, pool, sub, sub_lens, 0.3, 16))
    o, lse = merge_partials(torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts]))
    assert torch.allclose(o, full_o, rtol=1e-5, atol=1e-6)
    assert torch.allclose(lse, full_lse, atol=1e-5)


def test_empty_local_sequence_gives_zero_weight():
    q, pool, bt, _ = _paged_inputs(lens=(0, 4, 0))
    o, lse = mla_decode_torch(q, pool, bt, torch.tensor([0, 4, 0], dtype=torch.int32), 0.3, 16)
    assert torch.isinf(lse[0]).all() and (o[0] == 0).all() and torch.isfinite(lse[1]).all()


def test_slot_allocator_and_page_table():
    a = SlotAllocator(4)
    got = a.alloc(3)
    assert len(set(got)) == 3 and a.num_free == 1
    with pytest.raises(OutOfPages, match="need 2 page slots, 1 free of 4"):
        a.alloc(2)
    t = PageTable("cp", {})
    t.add(7, 2, 5)
    t.add(7, 0, 3)  # out of order insert keeps logical order
    bt, maxp = t.block_table([7, 8], 4)
    assert maxp == 2 and bt[0].tolist() == [3, 5] and bt[1].tolist() == [0, 0]
    assert t.local_len(7, 10, 4) == 4 + 2  # page 0 full, page 2 holds tokens 8..9


@pytest.mark.parametrize("src", LAYOUT_KINDS)
@pytest.mark.parametrize("dst", LAYOUT_KINDS)
@pytest.mark.parametrize("t", [2, 4])
def test_plan_moves_each_new_holding_exactly_once(src, dst, t):
    if src == dst:
        return
    dims = tiny_dims(num_heads=8)
    seq = {0: 5, 1: 17, 2: 1, 3: 30}
    owners = balance_owners(seq, t)
    limit = 2 * dims.kv_bytes_per_page(4)
    plan = plan_page_moves(src, dst, t, seq, owners if src in ("dp", "dop") else {}, dims, 4, 10_000, 0, limit)
    src_owners = owners if src in ("dp", "dop") else {}
    want = {(q, lp, d) for q, n in seq.items() for lp in range(pages_for(n, 4))
            for d in holders(dst, t, q, lp, plan.dst_owners) if d not in holders(src, t, q, lp, src_owners)}
    got = list(zip(plan.move_req.tolist(), plan.move_lp.tolist(), plan.move_dst.tolist()))
    assert sorted(got) == sorted(want)
    for i in range(len(got)):  # the sender holds the page under the old layout
        assert int(plan.move_src[i]) in holders(src, t, got[i][0], got[i][1], src_owners)
    token_bytes = dims.num_layers * dims.latent_dim * 4
    for k in range(plan.num_chunks):  # rate limit per receiving rank (page moves)
        sel = plan.move_chunk == k
        for d in range(t):
            b = int((plan.move_tokens[sel & (plan.move_dst == d)] * token_bytes).sum())
            assert b <= limit or int((sel & (plan.move_dst == d)).sum()) == 1
    if dst == "tp":  # TP needs every page on every rank
        assert sum(plan.dest_pages) == sum((t - len(holders(src, t, q, lp, src_owners)))
                                           for q, n in seq.items() for lp in range(pages_for(n, 4)))
    assert plan.commit_step == plan.num_chunks + 1
    assert plan.weights == ("keep" if (src in ("tp", "dop")) == (dst in ("tp", "dop"))
                            else "gather" if src in ("tp", "dop") else "slice")


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [None, False, True])
def test_triton_kernel_matches_fp32_reference_bf16(tma):
    """Every pool row past a request's length is NaN: the kernel must never read one unmasked."""
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    from executor.torch_executor.kernels import KernelConfig, mla_decode_triton
    g = torch.Generator(device="cuda").manual_seed(1)
    cases = ((4, 128, (1, 64, 1000, 4097), True), (16, 64, tuple(range(1, 16 * 300, 300)), True),
             (13, 64, (65536,) + (0,) * 2 + (700,) * 10, True), (13, 64, (65536,) + (0,) * 2 + (700,) * 10, False),
             (6, 16, (3, 64, 65, 20000, 1, 129), True),
             (1, 16, (65536 + 17,), True))  # hundreds of units for one request: the merge's wide path
    for b, h, lens, balance in cases:
        maxp = max(pages_for(n, 64) for n in lens)
        slots = b * maxp + 8
        pool = torch.randn(slots, 64, 576, device="cuda", generator=g).bfloat16()
        q = torch.randn(b, h, 576, device="cuda", generator=g).bfloat16()
        bt = torch.randperm(slots, device="cuda")[:b * maxp].view(b, maxp).int()
        for i, n in enumerate(lens):
            if n % 64:
                pool[bt[i, n // 64], n % 64:] = float("nan")
            if pages_for(n, 64) < maxp:
                pool[bt[i, pages_for(n, 64):]] = float("nan")
        lt = torch.tensor(lens, dtype=torch.int32, device="cuda")
        scale = 192 ** -0.5
        o, lse = mla_decode_triton(q, pool, bt, lt, scale, 512, maxp, KernelConfig(balance=balance, tma=tma))
        clean = torch.nan_to_num(pool.float(), nan=0.0)
        ro, rl = mla_decode_torch(q.float(), clean, bt, lt, scale, 512)
        assert float((o.float() - ro).norm() / ro.norm()) < 1e-2, (b, h, lens)
        fin = torch.isfinite(rl)
        assert torch.equal(torch.isfinite(lse), fin)  # requests with no tokens: lse -inf, o 0
        assert float((lse[fin] - rl[fin]).abs().max()) < 2e-2 * math.log(max(lens))


@pytest.mark.parametrize("card, heads, v_dim", [("deepseek-v3.2", 128, 128), ("glm-5", 64, 256), ("kimi-k2", 64, 128)])
def test_dims_come_from_the_planners_real_model_cards(card, heads, v_dim):
    import planner

    d = MLADims.from_model_spec(planner.load_model(card))
    assert (d.num_heads, d.v_head_dim, d.kv_lora_rank, d.qk_rope_head_dim) == (heads, v_dim, 512, 64)
    with pytest.raises(ValueError, match="not MLA"):
        MLADims.from_model_spec(planner.load_model("llama-3.1-70b"))


@pytest.mark.parametrize("kind", ["tp", "cp", "dp", "dop"])
def test_bucket_key_is_the_same_on_every_rank(kind):
    """A new key runs collectives (warm-up and capture), so every rank must pick the same one at the
    same step: a DP/DOP rank that owns none of the requests, or a CP rank holding fewer pages, must
    agree. The key moves only when the batch leaves its bucket or the longest request doubles."""
    from types import SimpleNamespace

    from executor.torch_executor.buckets import ExecCache, sglang_buckets
    from executor.torch_executor.layouts import LayoutState

    page, t = 4, 2
    order = [7, 8, 9]
    seq = {7: 8 * page - 1, 8: 3, 9: 10}  # request 7's next token still fits its 8th page
    keys = []
    for rank in range(t):
        table = PageTable(kind, owners={7: 0, 8: 0, 9: 0, 10: 1})  # rank 1 owns none of 7-9 under DP/DOP
        for q in order:
            for lp in range(pages_for(seq[q] + 1, page)):
                if table.holds(rank, t, q, lp):
                    table.add(q, lp, 100 * q + lp)
        runner = SimpleNamespace(use_graphs=False, g=SimpleNamespace(is_cuda=False), buckets=sglang_buckets(64),
                                 dims=tiny_dims(page_size=page))
        cache = ExecCache(runner, LayoutState(kind, table, [], []))
        keys.append((cache.key(order, seq), cache.key(order + [10], {**seq, 10: 1}),
                     cache.key(order, {**seq, 7: seq[7] + 1})))
    owner_rows = 4 if kind in ("dp", "dop") else 0  # three requests on rank 0: the bucket of 3
    # a 4th request (on rank 1) stays in the bucket of 4; request 7 growing into a 9th page doubles the width
    want = (((4, owner_rows, 8), True), ((4, owner_rows, 8), True), ((4, owner_rows, 16), True))
    assert keys == [want] * t


def test_batch_buckets_are_the_engines():
    from executor.torch_executor.buckets import bucket_for, cap_bucket, sglang_buckets, vllm_buckets

    sg = sglang_buckets(512)
    assert sg[:7] == [1, 2, 4, 8, 12, 16, 24] and sg[-3:] == [480, 496, 512] and len(sg) == 5 + 31 + 15 + 1
    assert sglang_buckets(100)[-2:] == [96, 100]  # max_bs itself is a bucket
    vl = vllm_buckets(256)
    assert vl[:5] == [1, 2, 4, 8, 16] and vl[-2:] == [496, 512] and len(vl) == 3 + 31 + 17
    assert bucket_for(13, sg) == (16, True) and bucket_for(12, sg) == (12, True)
    assert bucket_for(600, sg) == (600, False)  # past the largest graph: its own size, eager
    assert (cap_bucket(1), cap_bucket(9), cap_bucket(16), cap_bucket(17)) == (8, 16, 16, 32)


# ---- issue 19 item 5: what a switch reserves, and the checksum of moved pages -------------------

def test_switch_growth_pages_counts_both_layouts_new_tokens():
    """T = 2, 4-token pages, DP (request 0 on rank 0, request 1 on rank 1) -> TP over 4 steps.
    Request 0 (5 tokens) writes positions 5..8: pages 0-1 exist, page 8 // 4 = 2 is new; request 1
    (8 tokens) writes 8..11: page 2 is new. Rank 0 holds request 0's page 2 under DP (the source's)
    and request 1's under TP alone (the destination's): (1, 1); rank 1 the mirror image. Over 3
    steps request 0 reaches position 7 only: no new page; request 1 still needs page 2."""
    from executor.torch_executor.move_plan import switch_growth_pages

    dims = tiny_dims(num_heads=8)
    seq = {0: 5, 1: 8}
    owners = {0: 0, 1: 1}
    plan = plan_page_moves("dp", "tp", 2, seq, owners, dims, 4, 1000, 0, 1 << 20)
    assert switch_growth_pages(plan, 0, seq, owners, 4, 4) == (1, 1)
    assert switch_growth_pages(plan, 1, seq, owners, 4, 4) == (1, 1)
    assert switch_growth_pages(plan, 0, seq, owners, 4, 3) == (0, 1)
    # 9 steps: request 0 writes 5..13 (pages 2, 3), request 1 writes 8..16 (pages 2, 3, 4)
    assert switch_growth_pages(plan, 0, seq, owners, 4, 9) == (2, 3)


def test_payload_checksum_arithmetic_and_what_it_catches():
    from executor.torch_executor.transfer import payload_checksum

    def signed(v: int) -> int:
        v %= 1 << 64
        return v - (1 << 64) if v >= 1 << 63 else v

    k, c = 0x9E3779B97F4A7C15, 0x632BE59BD9B4E019
    # 1.0 and 2.0 in fp32 are the bit patterns 0x3F800000 and 0x40000000; weights (j·K + C) | 1
    want = signed(0x3F800000 * ((0 * k + c) | 1) + 0x40000000 * ((1 * k + c) | 1))
    x = torch.tensor([1.0, 2.0])
    assert int(payload_checksum(x)) == want
    y = torch.randn(3, 5, 7)
    base = int(payload_checksum(y))
    flipped = y.clone()
    flipped.view(-1)[17:18].view(torch.int32).bitwise_xor_(1)  # one bit of one element
    assert int(payload_checksum(flipped)) != base
    swapped = y.clone()
    swapped[0, 0, 0], swapped[2, 4, 6] = y[2, 4, 6], y[0, 0, 0]  # same values, other places
    assert int(payload_checksum(swapped)) != base
    # a tensor's checksum is the sum of its parts' at their offsets (what the weight gather checks)
    a, b = y[:1], y[1:]
    assert signed(int(payload_checksum(a)) + int(payload_checksum(b, a.numel()))) == base
    assert int(payload_checksum(y.to(torch.bfloat16))) != int(payload_checksum(y))  # widths differ
