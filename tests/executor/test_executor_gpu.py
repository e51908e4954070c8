"""The executor's scenarios (executor_scenarios.py: every layout vs the reference, the 12 switches
mid-decode, injected faults) on 2 CUDA GPUs over NCCL with CUDA graphs and the Triton kernel.
Skipped with fewer than 2 GPUs. Set NCCL_NVLS_ENABLE=0 on machines whose NVLink multicast is off.

fp32 on GPUs: the kernel's dots run in TF32, so outputs match the fp32 reference to 1e-2, not the
CPU tests' 1e-5; page moves are still exact copies (KV checksums bit-identical), and a failed switch
leaves the old layout computing exactly as if never switched.
"""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import executor_scenarios as sc  # noqa: E402
from executor.torch_executor import tiny_dims  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

GPU_TOL = 1e-2


@pytest.fixture(scope="module")
def results():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    # widths >= 16 (Triton's dot minimum): 16-token pages, latent 32, rope 16, 16 heads (8 per TP rank,
    # padded to the kernel's 16-head block)
    dims = dataclasses.replace(tiny_dims(num_heads=16, page_size=16), qk_rope_head_dim=16)
    per_rank = spawn_ranks(sc.scenario_all, 2, dims, use_cuda=True)
    return per_rank[0]


@pytest.mark.gpu
@pytest.mark.parametrize("kind", sc.LAYOUTS)
def test_gpu_layout_matches_reference(results, kind):
    assert results[f"layout_err/{kind}"] <= GPU_TOL
    assert results[f"ranks_agree/{kind}"]
    assert results[f"single_request_err/{kind}"] <= GPU_TOL


@pytest.mark.gpu
@pytest.mark.parametrize("pair", sc.PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_gpu_switch_mid_decode_keeps_outputs_and_kv(results, pair):
    key = f"{pair[0]}->{pair[1]}"
    assert results[f"switch_states/{key}"] == ["copying", "committed"]
    assert results[f"switch_layout/{key}"] == pair[1]
    assert results[f"switch_err/{key}"] <= GPU_TOL
    assert results[f"switch_ref_err/{key}"] <= GPU_TOL
    assert results[f"switch_kv_identical/{key}"] is True


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["transfer", "transfer_weights", "deny_pages", "small_pool"])
def test_gpu_faults_abort_cleanly(results, name):
    assert results[f"fault_state/{name}"] == "aborted"
    src = {"transfer": "cp", "transfer_weights": "dop", "deny_pages": "dp", "small_pool": "cp"}[name]
    assert results[f"fault_layout/{name}"] == src
    assert results[f"fault_err/{name}"] == 0.0  # the old layout kept computing exactly as never switched
    assert results[f"fault_kv_prefix_identical/{name}"]
    assert results[f"fault_pages_accounted/{name}"]
    if name != "small_pool":
        assert results[f"fault_retry/{name}"] == "committed"
