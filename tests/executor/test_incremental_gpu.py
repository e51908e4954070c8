"""Incremental moves on one CUDA GPU (Issue 27 item 1, "CUDA at T = 1"): the scenarios of
test_incremental_moves.py (incremental_scenarios.py) at T = 1 on the GPU, with CUDA graphs by batch
bucket — so a step whose decode rows serve in two layouts replays two graphs, the landed requests'
in the destination's executable and the rest in the source's. Skipped without a CUDA GPU.

fp32 on the GPU: the decode kernel's dots run in TF32, so outputs match the fp32 reference to 1e-2
(test_executor_gpu.py says why), and each group's pages are the plan's exactly."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import incremental_scenarios as sc  # noqa: E402
from executor.torch_executor import tiny_dims  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

GPU_TOL = 1e-2


@pytest.fixture(scope="module")
def inc1():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    # widths >= 16 (Triton's dot minimum), as test_executor_gpu.py
    dims = dataclasses.replace(tiny_dims(num_heads=16, page_size=16), qk_rope_head_dim=16)
    return spawn_ranks(sc.scenario_incremental, 1, dims, use_cuda=True)[0]


@pytest.mark.gpu
@pytest.mark.parametrize("pair", sc._inc_pairs(1), ids=lambda p: f"{p[0]}-{p[1]}")
def test_gpu_move_in_groups_completes_at_one_rank(inc1, pair):
    tag = f"{pair[0]}->{pair[1]}"
    assert inc1[f"state/{tag}"] == "committed"
    assert inc1[f"layout/{tag}"] == pair[1]
    assert inc1[f"groups/{tag}"] == sc.INC_GROUPS
    assert inc1[f"mixed_steps/{tag}"] >= 2  # steps whose rows served in both layouts' graphs
    assert inc1[f"err/{tag}"] < GPU_TOL


@pytest.mark.gpu
def test_gpu_fault_scenario_keeps_every_request_whole(inc1):
    assert inc1["fault/requests_whole"] is True
    assert inc1["fault/state"] == "committed"
    assert inc1["fault/err"] < GPU_TOL
