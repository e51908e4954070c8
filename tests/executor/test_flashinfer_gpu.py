"""FlashInfer's FA3 MLA decode as the executor's kernel (mla_flashinfer.FlashInferDecode) on a Hopper
GPU: against the fp32 torch reference over head counts, page sizes and lengths that end mid-page
(pool rows past every length hold NaN), inside a CUDA graph re-planned between replays, CP's
merge of partial outputs by the returned log-sum-exp, the sparse (top-k token indices) form, and
a one-rank RankRunner step with graphs vs the reference decoder and vs the Triton kernel.
Skipped without CUDA, an SM90 GPU or flashinfer. bf16 inputs: kernel outputs match to 1e-2 (measured
~2e-3), log-sum-exps to 1e-2; the 2-layer stack to 3e-2 of the fp32 reference and 1e-2 of Triton.
"""

import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import KernelConfig, merge_partials, mla_decode_torch  # noqa: E402
from executor.torch_executor.kernels import flashinfer_unsupported  # noqa: E402

C, R = 512, 64
SCALE = 192 ** -0.5
TOL = 1e-2
STACK_TOL = 3e-2  # a 2-layer bf16 stack vs the fp32 reference decoder (the kernel alone: TOL)

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_flashinfer():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    why = flashinfer_unsupported(torch.bfloat16, C, R, "cuda")
    if why:
        pytest.skip(why)


def _decoder(n, max_pages, heads, page):
    from executor.torch_executor.mla_flashinfer import FlashInferDecode
    return FlashInferDecode(n, max_pages, heads, C, R, page, SCALE, torch.bfloat16, "cuda")


def _case(lengths, heads, page, seed=0):
    """q, a NaN-poisoned pool with valid rows only below each length, a block table of distinct random slots."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    n, cap = len(lengths), max(1, max(-(-x // page) for x in lengths)) + 2
    pool = torch.full((n * cap + 3, page, C + R), float("nan"), device="cuda", dtype=torch.bfloat16)
    bt = torch.randperm(pool.shape[0], device="cuda", generator=g)[:n * cap].view(n, cap).int()
    for i, x in enumerate(lengths):
        rows = torch.randn(x, C + R, device="cuda", generator=g).to(torch.bfloat16)
        pool.view(-1, C + R)[(bt[i].long()[:, None] * page + torch.arange(page, device="cuda")).view(-1)[:x]] = rows
    q = torch.randn(n, heads, C + R, device="cuda", generator=g, dtype=torch.float32).to(torch.bfloat16)
    return q, pool, bt, torch.tensor(lengths, dtype=torch.int32, device="cuda")


def _check(o, lse, q, pool, bt, lens):
    ro, rl = mla_decode_torch(q.float(), pool.float().nan_to_num(0.0), bt, lens, SCALE, C)
    live = lens > 0
    assert not torch.isnan(o).any()
    if live.any():
        err = float((o[live].float() - ro[live]).norm() / ro[live].norm())
        assert err < TOL, err
        assert float((lse[live] - rl[live]).abs().max()) < TOL
    assert torch.all(o[~live] == 0) and torch.all(lse[~live] == -math.inf)  # no local tokens: o = 0, lse = -inf


@pytest.mark.parametrize("heads", [16, 32, 64, 128])
@pytest.mark.parametrize("page", [1, 16, 64])
def test_matches_fp32_reference(heads, page):
    lengths = [1, 63, 64, 65, 200, 0, 1000 if page > 1 else 300]
    q, pool, bt, lens = _case(lengths, heads, page, seed=heads + page)
    fi = _decoder(len(lengths), bt.shape[1], heads, page)
    fi.plan(bt.cpu().numpy(), lens.cpu().numpy())
    o, lse = fi(q, pool)
    assert o.shape == (len(lengths), heads, C) and o.dtype == torch.bfloat16 and lse.dtype == torch.float32
    _check(o, lse, q, pool, bt, lens)


def test_graph_replays_follow_each_plan():
    """Captured once; lengths then grow across page boundaries (new block-table pages): each step is
    planned on the host and replayed, and matches the reference on that step's lengths."""
    lengths = [60, 130, 1, 0]
    heads, page, steps = 128, 64, 5
    final = [x + 4 * steps for x in lengths]
    q, pool, bt, _ = _case(final, heads, page, seed=3)
    fi = _decoder(len(lengths), bt.shape[1], heads, page)
    lens = torch.tensor(lengths, dtype=torch.int32, device="cuda")
    fi.plan(bt.cpu().numpy(), lens.cpu().numpy())
    fi(q, pool)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        o, lse = fi(q, pool)
    for _ in range(steps):
        lens = torch.where(lens > 0, lens + 4, lens)
        fi.plan(bt.cpu().numpy(), lens.cpu().numpy())
        graph.replay()
        _check(o, lse, q, pool, bt, lens)
    assert fi._fast  # plans after the first went straight to the native scheduler


def test_partials_merge_by_lse_like_cp():
    """Two ranks' disjoint pages (even / odd logical pages) attended apart and merged by their
    log-sum-exps equal attention over all pages."""
    lengths, heads, page = [130, 64, 1, 300], 128, 64
    q, pool, bt, lens = _case(lengths, heads, page, seed=5)
    parts_o, parts_l = [], []
    for parity in (0, 1):
        sub_bt = torch.zeros_like(bt)
        sub_len = []
        for i, x in enumerate(lengths):
            mine = [lp for lp in range(-(-x // page)) if lp % 2 == parity]
            sub_bt[i, :len(mine)] = bt[i, mine] if mine else 0
            sub_len.append(sum(min(page, x - lp * page) for lp in mine))
        fi = _decoder(len(lengths), bt.shape[1], heads, page)
        fi.plan(sub_bt.cpu().numpy(), np.array(sub_len))
        o, lse = fi(q, pool)
        parts_o.append(o.clone())
        parts_l.append(lse.clone())
    o, lse = merge_partials(torch.stack(parts_o), torch.stack(parts_l))
    _check(o, lse, q, pool, bt, lens)


def test_sparse_topk_indices():
    """1-token pages over top-k token slots written on device (what an indexer does in-graph)."""
    heads, topk, ctx = 128, 96, 1000
    lengths = [ctx, ctx, 50]
    q, pool, bt, _ = _case(lengths, heads, 64, seed=9)
    flat = pool.view(-1, 1, C + R)
    g = torch.Generator().manual_seed(1)
    slots, kept = [], []
    for i, x in enumerate(lengths):
        pos = torch.randperm(x, generator=g)[:topk]
        slots.append((bt[i].long().cpu()[pos // 64] * 64 + pos % 64).int())
        kept.append(len(pos))
    fi = _decoder(len(lengths), topk, heads, 1)
    fi.plan_indices(np.array(kept))
    indptr = np.concatenate([[0], np.cumsum(kept)])
    fi.kv_indices[:indptr[-1]].copy_(torch.cat(slots).cuda())
    o, lse = fi(q, flat)
    ref_bt = torch.zeros(len(lengths), topk, dtype=torch.int32)
    for i, s in enumerate(slots):
        ref_bt[i, :len(s)] = s
    _check(o, lse, q, flat, ref_bt.cuda(), torch.tensor(kept, dtype=torch.int32, device="cuda"))


def _runner_case(g, backend):
    from executor.torch_executor import RankRunner
    from executor.torch_executor.config import MLADims
    from executor.torch_executor.reference import ReferenceDecoder
    dims = MLADims(hidden_size=256, num_heads=64, q_lora_rank=128, kv_lora_rank=C, qk_nope_head_dim=64,
                   qk_rope_head_dim=R, v_head_dim=64, intermediate_size=256, num_layers=2, page_size=64)
    lengths = {0: 70, 1: 1, 2: 127, 3: 300}
    ref = ReferenceDecoder(dims, seed=4, device=g.device, dtype=torch.float32, stored_dtype=torch.bfloat16)
    ref.add_requests(dict(lengths))
    r = RankRunner(dims, g, "tp", num_slots=64, dtype=torch.bfloat16, seed=4,
                   kernel_config=KernelConfig(backend=backend))
    r.add_requests(dict(lengths))
    outs, errs = [], []
    for _ in range(6):  # request 3 crosses into its 6th page, request 1 stays in its first
        out = r.step().clone()
        rf = ref.step()
        outs.append(out.float().cpu())
        errs.append(float((out.float() - rf).norm() / rf.norm()))
    return {"errs": errs, "outs": outs, "graph": r.last_exec.graph is not None,
            "flashinfer": r.last_exec.inputs.batch.kernel is not None}


def _runner_both(g):
    return {be: _runner_case(g, be) for be in ("flashinfer", "triton")}


def test_runner_step_with_flashinfer_in_graph():
    from executor.torch_executor.dist import spawn_ranks
    res = spawn_ranks(_runner_both, 1, use_cuda=True)[0]
    fi, tr = res["flashinfer"], res["triton"]
    assert fi["flashinfer"] and fi["graph"] and not tr["flashinfer"]
    assert max(fi["errs"]) < STACK_TOL and max(tr["errs"]) < STACK_TOL, (fi["errs"], tr["errs"])
    for a, b in zip(fi["outs"], tr["outs"]):
        assert float((a - b).norm() / b.norm()) < TOL


def test_explicit_flashinfer_refused_where_it_cannot_run():
    from executor.torch_executor.kernels import decode_kernel
    from executor.torch_executor.config import tiny_dims
    dims = dataclasses.replace(tiny_dims(num_heads=16, page_size=16), qk_rope_head_dim=16)
    with pytest.raises(ValueError, match="flashinfer"):
        decode_kernel(KernelConfig(backend="flashinfer"), 16, 4, 8, dims, torch.bfloat16, "cuda")
    assert decode_kernel(KernelConfig(), 16, 4, 8, dims, torch.bfloat16, "cuda") is None  # auto: Triton
