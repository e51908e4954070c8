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
def test_rebuild_decision_is_the_same_on_every_rank(kind):
    """A rebuild runs collectives, so every rank must decide it at the same step: a DP/DOP rank
    that owns none of the growing requests, or a CP rank holding fewer pages, must agree."""
    from executor.torch_executor.layouts import LayoutState
    from executor.torch_executor.step_inputs import StepInputs

    page, t, order = 4, 2, [7]
    seq = {7: 4 * page - 1}  # the next token still fits the 4th page; one more step needs a 5th
    verdicts = []
    for rank in range(t):
        table = PageTable(kind, owners={7: 0})  # rank 1 owns nothing under DP/DOP
        for lp in range(pages_for(seq[7] + 1, page)):
            if table.holds(rank, t, 7, lp):
                table.add(7, lp, lp)
        state = LayoutState(kind, table, [], [])
        inp = StepInputs(state, order, rank, t, page, cap_pages=pages_for(seq[7] + 1, page), trash_token=0,
                         device=torch.device("cpu"))
        verdicts.append((inp.fits(state, order, seq), inp.fits(state, order, {7: seq[7] + 1})))
    assert verdicts == [(True, False)] * t
