"""The kernel seam on CPU: which backend `choose_backend` picks, the FlashInfer CSR metadata, the
host plan hook in StepInputs.upload, the roofline arithmetic, and that the CPU path never imports
flashinfer (a poisoned stand-in package on the path proves it)."""

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import KernelConfig  # noqa: E402
from executor.torch_executor import kernels  # noqa: E402
from executor.torch_executor.kv_pages import PageTable  # noqa: E402
from executor.torch_executor.layouts import LayoutState, kernel_heads  # noqa: E402
from executor.torch_executor.mla_flashinfer import csr_from_block_table  # noqa: E402
from executor.torch_executor.step_inputs import StepInputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def test_backend_field_is_checked():
    with pytest.raises(ValueError, match=r"KernelConfig.backend='cuda' must be one of auto, flashinfer, triton"):
        KernelConfig(backend="cuda")


def test_auto_takes_the_kernel_measured_faster(monkeypatch):
    monkeypatch.setattr(kernels, "flashinfer_unsupported", lambda *a: None)
    auto = KernelConfig()
    assert (auto.flashinfer_min_heads, auto.flashinfer_few_heads_max_tokens) == (32, 1 << 20)

    def pick(h, n, ctx):  # n requests of ctx tokens in 64-token pages
        return kernels.choose_backend(auto, h, torch.bfloat16, 512, 64, "cuda", n, n * (ctx // 64) * 64)
    # from 32 heads: FlashInfer at every shape, B = 1 and 64 x 64K included
    assert {pick(h, n, c) for h in (32, 64, 128) for n in (1, 64) for c in (1024, 65536)} == {"flashinfer"}
    # 16 heads: Triton at B = 1 and from 1M table tokens (16 x 64K = 64 x 16K = 1048576), FlashInfer below
    assert [pick(16, 1, 4096), pick(16, 16, 65536), pick(16, 64, 16384), pick(16, 32, 32768)] == ["triton"] * 4
    assert [pick(16, 4, 65536), pick(16, 16, 32768), pick(16, 64, 4096)] == ["flashinfer"] * 3
    assert pick(16, 3, 1024) == "triton"
    assert kernels.choose_backend(KernelConfig(backend="triton"), 128, torch.bfloat16, 512, 64, "cuda") == "triton"
    explicit = KernelConfig(backend="flashinfer")
    assert kernels.choose_backend(explicit, 16, torch.bfloat16, 512, 64, "cuda") == "flashinfer"


def test_auto_falls_back_and_explicit_flashinfer_refuses(monkeypatch):
    monkeypatch.setattr(kernels, "flashinfer_unsupported", lambda *a: "flashinfer is not installed")
    assert kernels.choose_backend(KernelConfig(), 128, torch.bfloat16, 512, 64, "cuda") == "triton"
    with pytest.raises(ValueError, match="backend='flashinfer' can't run here: flashinfer is not installed"):
        kernels.choose_backend(KernelConfig(backend="flashinfer"), 128, torch.bfloat16, 512, 64, "cuda")


def test_flashinfer_refusals_follow_fa3_limits():
    assert kernels.flashinfer_unsupported(torch.bfloat16, 512, 64, "cpu") == "not a CUDA device"
    # on CPU the torch path runs whatever the setting: no kernel object, nothing to plan
    assert kernels.decode_kernel(KernelConfig(backend="flashinfer"), 128, 4, 8, _dims(), torch.bfloat16, "cpu") is None


def _dims():
    from executor.torch_executor import deepseek_v32
    return deepseek_v32(2)


def test_kernel_heads_per_layout():
    assert [kernel_heads(k, 128, 2) for k in ("tp", "cp", "dp", "dop")] == [64, 128, 128, 128]


def test_csr_drops_padding_and_keeps_page_order():
    bt = np.array([[5, 6, 7, 0], [1, 2, 0, 0], [9, 0, 0, 0], [3, 4, 8, 0]])
    # 129 tokens = 2 full pages + 1; 64 = 1 page; 0 = none; 130 = 3 pages
    indptr, indices = csr_from_block_table(bt, np.array([129, 64, 0, 130]), 64)
    assert indptr.tolist() == [0, 3, 4, 4, 7]
    assert indices.tolist() == [5, 6, 7, 1, 3, 4, 8]
    with pytest.raises(ValueError, match="needs 5 pages, the block table holds 4"):
        csr_from_block_table(bt, np.array([257, 1, 1, 1]), 64)


def test_flashinfer_decode_of_no_requests_launches_nothing():
    """A DP rank owning no request: no wrapper (flashinfer is not even imported), empty outputs."""
    from executor.torch_executor.mla_flashinfer import FlashInferDecode
    fi = FlashInferDecode(0, 8, 128, 512, 64, 64, 0.07, torch.bfloat16, "cpu")
    fi.plan(np.zeros((0, 8), dtype=np.int64), np.zeros(0, dtype=np.int64))
    o, lse = fi(torch.zeros(0, 128, 576, dtype=torch.bfloat16), torch.zeros(4, 64, 576, dtype=torch.bfloat16))
    assert fi.wrapper is None and o.shape == (0, 128, 512) and lse.shape == (0, 128) and lse.dtype == torch.float32


def test_fill_plans_the_kernel_on_host_lengths():
    table = PageTable("tp", {})
    for req, lp, slot in ((0, 0, 5), (0, 1, 7), (1, 0, 2)):
        table.add(req, lp, slot)
    inp = StepInputs(LayoutState("tp", table, [], []), 4, 0, 3, 0, 1, 4, 99, torch.device("cpu"))
    calls = []
    inp.batch.kernel = type("Rec", (), {"plan": lambda self, bt, lens: calls.append((bt.copy(), lens.copy()))})()
    inp.fill([0, 1], {0: 5, 1: 3}, [], [])  # lengths after this step's token: 6 and 4 (pages of 4)
    bt, lens = calls[0]
    # a bucket of 4 rows: the two padding rows attend nothing (length 0)
    assert bt[:2].tolist() == [[5, 7, 0], [2, 0, 0]] and lens.tolist() == [6, 4, 0, 0]
    assert inp.batch.local_lens.tolist() == [6, 4, 0, 0]
    assert inp.wtoks.tolist() == [99] * 8  # no writes given: every slot aims at the trash token


def test_decode_work_and_roofline_arithmetic():
    # one token, 128 heads, DeepSeek 512 + 64: KV 576*2 = 1152 B, q 128*576*2 = 147456 B,
    # o 128*512*2 = 131072 B, lse 128*4 = 512 B; FLOPs 128 * (2*576 + 2*512) = 278528
    assert kernels.mla_decode_work(1, 1, 128, 512, 64, 2) == (1152 + 147456 + 131072 + 512, 278528)
    # B = 64 x 64K at 128 heads: KV 4194304 * 1152 = 4831838208 B; FLOPs 128 * 4194304 * 2176
    nbytes, flops = kernels.mla_decode_work(64 * 65536, 64, 128, 512, 64, 2)
    assert nbytes == 4831838208 + 64 * (147456 + 131072 + 512) and flops == 1168231104512
    # 242 FLOP/B is past the ridge 797e12 / 4.22e12 = 189: compute-bound, 1.466 ms at 797 TFLOP/s
    assert kernels.roofline_s(nbytes, flops, 4.22e12, 797e12) == pytest.approx(flops / 797e12)
    assert kernels.roofline_s(1e9, 1.0, 4.0e12, 797e12) == pytest.approx(2.5e-4)


def test_decode_flops_match_the_planner():
    from planner.models.attention.mla import MLA
    mla = MLA(num_heads=128)
    _, flops = kernels.mla_decode_work(1000, 1, 128, mla.kv_lora_rank, mla.qk_rope_head_dim, 2)
    assert flops == pytest.approx(float(mla.decode_flops(np.array(1000.0))))
    kv = float(mla.kv_read_bytes(np.array(1000.0), "bf16")["kv"])
    assert kv == 1000 * 1152


def test_cpu_path_never_imports_flashinfer(tmp_path):
    """A flashinfer stand-in that leaves a mark and raises on import sits first on the path; the CPU
    executor's kernel seam (decode_kernel and mla_decode under every backend setting, the FlashInfer
    module itself) imports and runs without touching it. (The planner and CLI never import torch.)"""
    (tmp_path / "flashinfer").mkdir()
    mark = tmp_path / "imported"
    (tmp_path / "flashinfer" / "__init__.py").write_text(  # marks even an import whose error is swallowed
        f"open({str(mark)!r}, 'w').close()\nraise RuntimeError('flashinfer imported')\n")
    code = textwrap.dedent("""
        import sys
        import torch
        from executor.torch_executor import KernelConfig, deepseek_v32, tiny_dims
        from executor.torch_executor.kernels import decode_kernel, mla_decode
        import executor.torch_executor.mla_flashinfer  # noqa: F401
        for be in ("auto", "flashinfer", "triton"):
            assert decode_kernel(KernelConfig(backend=be), 128, 2, 4, deepseek_v32(1), torch.bfloat16, "cpu") is None
        q = torch.randn(2, 8, 40); pool = torch.randn(6, 4, 40)
        o, lse = mla_decode(q, pool, torch.tensor([[0, 1], [2, 3]]), torch.tensor([5, 8]), 0.1, 32, 2,
                            KernelConfig(backend="flashinfer"))
        assert o.shape == (2, 8, 32)
        assert "flashinfer" not in sys.modules, "flashinfer was imported"
        print("ok")
    """)
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
    assert not mark.exists(), "something tried to import flashinfer"
