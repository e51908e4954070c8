"""The executor as an engine on one CUDA GPU (bf16, 64 heads, DeepSeek's latent 512 + rope 64, pages of
64, 2 layers), with FlashInfer's decode where it runs and the Triton kernel: chunked prefill on the
real layers (a mixed step, a chunk packing two prompts, a prefill-only step), then decoding from the
KV the chunks wrote, against the fp32 reference decoder stepping each prompt token by token; decode
graphs captured once per batch bucket at start-up and replayed when the batch changes inside its
bucket (no recapture), and a batch past the largest bucket run eagerly. Skipped without CUDA.
bf16: outputs to 3e-2 of the fp32 reference (as test_flashinfer_gpu's stack), KV to 2e-2.
"""

import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import KernelConfig  # noqa: E402
from executor.torch_executor.kernels import flashinfer_unsupported  # noqa: E402

STACK_TOL = 3e-2
KV_TOL = 2e-2

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


def _rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def _engine_case(g, backend):
    from executor.torch_executor import RankRunner
    from executor.torch_executor.checks import collect_logical_kv
    from executor.torch_executor.config import MLADims
    from executor.torch_executor.reference import ReferenceDecoder

    dims = MLADims(hidden_size=256, num_heads=64, q_lora_rank=128, kv_lora_rank=512, qk_nope_head_dim=64,
                   qk_rope_head_dim=64, v_head_dim=64, intermediate_size=256, num_layers=2, page_size=64)
    ref = ReferenceDecoder(dims, seed=5, device=g.device, dtype=torch.float32, stored_dtype=torch.bfloat16)
    ref.add_requests({0: 70, 1: 1, 2: 0, 3: 0})
    r = RankRunner(dims, g, "tp", num_slots=128, dtype=torch.bfloat16, seed=5,
                   kernel_config=KernelConfig(backend=backend), max_batch=16)
    captured = r.prepare_buckets(16, 1024)
    r.add_requests({0: 70, 1: 1})
    r.begin_prefill(2)
    r.begin_prefill(3)
    errs = []
    for pieces, decode in ((((2, 100),), True), (((2, 40), (3, 30)), True), (((3, 90),), False)):
        out = r.step(list(pieces), decode=decode)
        if decode:
            errs.append(_rel(out, ref.step([0, 1])))
        want = torch.stack([ref.step([q])[0] for q, n in pieces for _ in range(n)])
        errs.append(_rel(r.last_chunk_out, want))
    r.finish_prefill(2)
    r.finish_prefill(3)
    ids = []
    for s in range(6):  # 4 requests, then 3 (one leaves), then 5 (two join): buckets 4, 4, 8
        if s == 2:
            r.finish_request(1)
            ref.order.remove(1)
        if s == 4:
            r.add_requests({7: 10, 8: 20})
            ref.add_requests({7: 10, 8: 20})
        out = r.step()
        errs.append(_rel(out, ref.step(list(r.order))))
        ids.append((r.last_exec.inputs.rows, id(r.last_exec), r.last_exec.graph is not None))
    kv = collect_logical_kv(r)
    kv_err = max(_rel(kv[q], torch.stack(ref.kv[q])) for q in (2, 3))
    # past the largest bucket (16): its own size, eagerly
    r.add_requests({100 + i: 5 for i in range(14)})
    r.step()
    big = (r.last_exec.inputs.rows, r.last_exec.graph is not None)
    return {"errs": errs, "kv_err": kv_err, "captured": captured, "captures_after": r.exec.captures, "ids": ids,
            "big": big, "flashinfer": r.last_exec.inputs.batch.kernel is not None}


def _engine_both(g):
    backends = ["triton"]
    if flashinfer_unsupported(torch.bfloat16, 512, 64, g.device) is None:
        backends.append("flashinfer")
    return {be: _engine_case(g, be) for be in backends}


@pytest.fixture(scope="module")
def engine():
    from executor.torch_executor.dist import spawn_ranks
    return spawn_ranks(_engine_both, 1, use_cuda=True)[0]


def test_prefill_mixed_and_decode_match_the_reference(engine):
    for be, res in engine.items():
        assert max(res["errs"]) < STACK_TOL, (be, res["errs"])
        assert res["kv_err"] < KV_TOL, (be, res["kv_err"])
    if "flashinfer" in engine:
        assert engine["flashinfer"]["flashinfer"]


def test_graphs_captured_once_per_bucket_and_replayed(engine):
    for be, res in engine.items():
        assert res["captured"] == 6  # SGLang's buckets up to 16: 1, 2, 4, 8, 12, 16
        assert res["captures_after"] == res["captured"]  # every later batch replayed a start-up graph
        rows = [x[0] for x in res["ids"]]
        assert rows == [4, 4, 4, 4, 8, 8]
        assert len({x[1] for x in res["ids"][:4]}) == 1 and all(x[2] for x in res["ids"])
        assert res["big"] == (19, False)  # 19 requests: past the largest bucket (16), eager
