"""Multi-process CPU checks of the torch executor (gloo, tiny dims, T = 2, 4 and 8; T = 8 ~45 s on 2 cores).

One spawned process group per world size runs every scenario (executor_scenarios.py); these
tests assert on what it returns: every layout against the reference, decode batches changing inside
their bucket, chunked prefill in mixed and prefill-only steps (and during a switch), the 12 switches. Every scenario also checks after every step that each logical
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


@pytest.mark.parametrize("kind", sc.LAYOUTS)
def test_a_batch_change_inside_a_bucket_reuses_its_executable(results, kind):
    """Requests leave and join every step; the batch (7, 8, then 9-10) pads to SGLang's buckets 8
    and 12: the same executable runs every step of a bucket (on CUDA: the same graph replayed, no
    recapture), each key is built once, and every step matches the reference."""
    execs = results[f"bucket_execs/{kind}"]
    assert [shape[0] for _, shape in execs] == [8] * 6 + [12] * 6
    assert all(b <= shape[0] for b, shape in execs)
    # one executable per shape (rows, owner rows, block-table width), built once and reused: the
    # width doubles once here (the 30-token request passes 8 pages of 4), DP/DOP also key on the
    # busiest owner's bucket
    assert results[f"bucket_distinct/{kind}"] == results[f"bucket_shapes/{kind}"] == results[f"bucket_built/{kind}"]
    assert results[f"bucket_distinct/{kind}"] <= (3 if kind in ("tp", "cp") else 5)
    assert results[f"bucket_err/{kind}"] <= FP32_TOL


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


@pytest.mark.parametrize("kind", sc.LAYOUTS)
def test_prefill_and_mixed_steps_match_the_reference(results, kind):
    """Chunked prefill on the real layers: mixed steps (one piece, then two requests' pieces in one
    chunk) and a prefill-only step, then decoding from the prefilled KV, against the fp32 reference
    stepping each prompt token by token; the KV the chunks wrote is the reference's."""
    assert results[f"prefill_err/{kind}"] <= FP32_TOL
    assert results[f"prefill_kv_err/{kind}"] <= FP32_TOL


@pytest.mark.parametrize("pair", sc.PREFILL_PAIRS, ids=lambda p: f"{p[0]}-{p[1]}")
def test_a_switch_while_prefilling_keeps_outputs_and_kv(results, pair):
    key = f"{pair[0]}->{pair[1]}"
    assert results[f"prefill_switch_state/{key}"] == "committed"
    assert results[f"prefill_switch_layout/{key}"] == pair[1]
    assert results[f"prefill_switch_err/{key}"] <= FP32_TOL
    assert results[f"prefill_switch_kv_err/{key}"] <= FP32_TOL


def test_prefill_at_one_rank():
    """The same prefill checks at T = 1 (every layout is then one placement, each its own code path)."""
    out = spawn_ranks(sc.scenario_prefill, 1, None)[0]
    for kind in sc.LAYOUTS:
        assert out[f"prefill_err/{kind}"] <= FP32_TOL and out[f"prefill_kv_err/{kind}"] <= FP32_TOL
