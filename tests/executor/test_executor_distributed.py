"""Multi-process CPU checks of the torch executor (gloo, tiny dims, T = 2, 4 and 8; T = 8 ~45 s on 2 cores).

One spawned process group per world size runs every scenario (executor_scenarios.py); these
tests assert on what it returns. Every scenario also checks after every step that each logical
page is held by exactly its layout's ranks and that every slot is free, reserved or used once.
Injected faults run once, at T = 4, with the group-wide ones (test_executor_faults.py).
"""

import pytest

torch = pytest.importorskip("torch")

import executor_scenarios as sc  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

FP32_TOL = 1e-5


@pytest.fixture(scope="module", params=[2, 4, 8], ids=lambda t: f"T{t}")
def results(request):
    per_rank = spawn_ranks(sc.scenario_all, request.param, None, False)
    for other in per_rank[1:]:  # every rank saw the same outcomes
        assert {k: v for k, v in other.items() if "reason" not in k and "free_after" not in k} == \
            {k: v for k, v in per_rank[0].items() if "reason" not in k and "free_after" not in k}
    return per_rank[0]


@pytest.mark.parametrize("kind", sc.LAYOUTS)
def test_layout_matches_single_device_reference(results, kind):
    assert results[f"layout_err/{kind}"] <= FP32_TOL
    assert results[f"ranks_agree/{kind}"]
    assert results[f"single_request_err/{kind}"] <= FP32_TOL  # ranks that own no request


def test_replaced_executables_do_not_accumulate(results):
    # CPU work is synchronous: what a step replaced is dropped at the next step's start
    assert results["retired_per_step/dp"] == [0] + [1] * (sc.STEPS - 1)  # the first step replaced nothing


@pytest.mark.parametrize("pair", sc.PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_switch_mid_decode_keeps_outputs_and_kv(results, pair):
    key = f"{pair[0]}->{pair[1]}"
    assert results[f"switch_states/{key}"] == ["copying", "committed"]
    assert results[f"switch_layout/{key}"] == pair[1]
    assert results[f"switch_err/{key}"] <= FP32_TOL  # vs the never-switched run
    assert results[f"switch_ref_err/{key}"] <= FP32_TOL
    assert results[f"switch_kv_identical/{key}"] is True  # logical-order checksum across the commit


def test_switches_move_in_several_rate_limited_chunks(results):
    assert results["switch_chunks/cp->tp"] >= 2
    assert results["switch_chunks/tp->dop"] == 0  # TP already holds every page, weights stay sharded
