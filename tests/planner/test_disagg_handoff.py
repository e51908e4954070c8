"""The KV hand-off's arithmetic per attention variant (MLA, DSA, GQA) and per (prefill layout,
decode layout) pair, each figure written out from the engines' rules (planner/disagg/handoff.py):

- bytes: the decode pool's record × the prompt's pages × layers (DSA: SGLang's bf16 record on
  Hopper, (512 + 64)·2 B + the 132-B index key; fp8: 656 + 132; MLA: (512 + 64)·2; GQA: 8 KV heads
  × 128 × 2 (K, V) × 2 B);
- ranks: decode rank j reads from prefill rank j // (R_d/R_p), or from [j·s, (j+1)·s) with only the
  first of identical copies sending (SGLang common/conn.py CommonKVManager._resolve_rank_mapping;
  vLLM kv_connector/utils.py TpKVTopology.get_target_remote_ranks, nixl_connector.py
  _read_blocks_for_req);
- messages: SGLang Mooncake one block per layer, buffer and page, per token on the head-sliced path
  (mooncake/conn.py _send_kvcache_generic, send_kvcache_slice), one batch per chunk and destination
  (transfer_worker); vLLM NIXL one descriptor per (region, block), one READ (nixl_connector.py).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import planner
from planner.disagg.handoff import exposed_s, plan_handoff, request_bytes
from planner.disagg.roles import make_role_deployment
from planner.errors import SpecError
from planner.resources.vector import Pricing

PROMPT = 4096
DSA_BF16 = (512 + 64) * 2 + 132  # SGLang's bf16 DSA record on Hopper + the index key, bytes/token/layer
DSA_FP8 = 656 + 132  # kv_lora fp8 + 4 fp32 scales + rope bf16 (calculate_mla_kv_cache_dim) + the index key
MLA_BF16 = (512 + 64) * 2
GQA_BF16 = 8 * 128 * 2 * 2  # Llama-3.1-70B: 8 KV heads × head_dim 128 × (K, V) × bf16


@pytest.fixture(scope="module")
def specs():
    return {n: planner.load_model(n) for n in ("deepseek-v3.2", "deepseek-v3", "llama-3.1-70b", "qwen3-235b-a22b")}, \
        planner.load_hardware("h200")


def pool(specs, name, role, attn, gpus=8, engine="sglang", moe=None, **kw):
    models, hw = specs
    m = models[name]
    return make_role_deployment(m, hw, role, attn=attn, moe=moe or ("ep" if m.has_moe else "tp"), gpus=gpus,
                                engine=engine, **kw)[0]


def plan(specs, name, p, d, engine="sglang", pg=8, dg=8, prompt=PROMPT, **kw):
    return plan_handoff(pool(specs, name, "prefill", p, pg, engine, **kw), pool(specs, name, "decode", d, dg, engine, **kw),
                        prompt)


# --- bytes per request, per variant --------------------------------------------------------------

@pytest.mark.parametrize("name,kv,per_token_layer,layers", [
    ("deepseek-v3.2", None, DSA_BF16, 61),  # SGLang's default on Hopper: bf16 DSA
    ("deepseek-v3.2", "fp8_e4m3", DSA_FP8, 61),
    ("deepseek-v3", None, MLA_BF16, 61),
    ("llama-3.1-70b", None, GQA_BF16, 80),
])
def test_request_bytes_are_the_decode_record_times_the_prompt(specs, name, kv, per_token_layer, layers):
    d = pool(specs, name, "decode", "tp", kv_dtype=kv)
    # 4096 tokens are whole pages of 64 (DSA) and of 1 (SGLang's default elsewhere)
    assert request_bytes(d, PROMPT) == per_token_layer * layers * PROMPT


def test_a_partial_page_moves_whole(specs):
    d = pool(specs, "deepseek-v3.2", "decode", "tp")
    assert request_bytes(d, 4097) == DSA_BF16 * 61 * (4096 + 64)  # 65 pages of 64


# --- rank matrices, per (prefill, decode) pair ---------------------------------------------------

REQ_DSA = DSA_BF16 * 61 * PROMPT


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_mla_tp_into_tp_sends_a_full_latent_rank_to_rank(specs, engine):
    """MLA's latent is on every TP rank and every decode TP rank needs it whole: rank i → rank i,
    8 copies on the wire."""
    h = plan(specs, "deepseek-v3.2", "tp", "tp", engine)
    assert h.supported and h.mapped
    assert np.allclose(h.rank_bytes, np.eye(8) * REQ_DSA)
    assert h.wire_bytes == 8 * REQ_DSA and h.senders == 8 and h.receivers == 8


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_mla_tp_into_dp_attention_is_sent_by_prefill_rank_0_alone(specs, engine):
    """Decode DP attention: attention TP 1 per owner, so decode rank 0 of the owner group maps to the
    span [0, 8) of prefill ranks; they hold copies of one latent, only the first sends."""
    h = plan(specs, "deepseek-v3.2", "tp", "dp", engine)
    assert h.rank_bytes.shape == (8, 1)
    assert h.rank_bytes[0, 0] == REQ_DSA and h.rank_bytes[1:].sum() == 0
    assert h.wire_bytes == REQ_DSA and h.senders == 1


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_dp_attention_prefill_into_tp_fans_one_owner_out_to_every_decode_rank(specs, engine):
    """R_p = 1 < R_d = 8: every decode rank reads its whole latent from the prefill owner, whose NIC
    carries 8 copies."""
    h = plan(specs, "deepseek-v3.2", "dp", "tp", engine)
    assert h.supported and h.mapped and h.rank_bytes.shape == (1, 8)
    assert h.busiest_send_bytes == 8 * REQ_DSA and h.busiest_recv_bytes == REQ_DSA


def test_mla_tp_into_dp_with_attention_tp_sends_from_the_first_rank_of_each_span(specs):
    """dptp decode of 2 groups × 4 ranks: decode rank j ← prefill ranks [2j, 2j + 2), first sends."""
    h = plan(specs, "deepseek-v3.2", "tp", "dptp")
    want = np.zeros((8, 4))
    for j in range(4):
        want[2 * j, j] = REQ_DSA
    assert np.allclose(h.rank_bytes, want)
    assert h.wire_bytes == 4 * REQ_DSA


def test_mla_tp_into_dcp_sends_each_rank_its_interleaved_tokens(specs):
    """SGLang's DCP relayout (send_kvcache_dcp): decode rank j keeps tokens ≡ j mod 8, from prefill rank j."""
    h = plan(specs, "deepseek-v3.2", "tp", "dcp")
    assert np.allclose(h.rank_bytes, np.eye(8) * REQ_DSA / 8)
    assert h.wire_bytes == REQ_DSA  # one copy in all


def test_token_split_prefill_into_dcp_sends_from_every_rank(specs):
    """SPLASH CP prefill (each rank 1/8 of the tokens) into DCP decode (each rank tokens ≡ j mod 8): the
    two interleavings are independent, so decode rank j's eighth is spread over all 8 prefill ranks,
    1/64 of the request from each — more than the TP ratio maps (rank j alone), so every CP rank
    sends: SGLang's all-CP-ranks pull; vLLM has none."""
    h = plan(specs, "deepseek-v3.2", "cp", "dcp")
    assert not h.mapped and h.supported
    assert np.allclose(h.rank_bytes, np.full((8, 8), REQ_DSA / 64))
    assert not plan(specs, "deepseek-v3.2", "cp", "tp", "vllm").supported


def test_vllm_has_no_dcp_relayout_and_sglang_none_for_gqa(specs):
    assert not plan(specs, "deepseek-v3.2", "tp", "dcp", "vllm").supported
    h = plan(specs, "llama-3.1-70b", "tp", "dcp", pg=4, dg=4)
    assert not h.supported and "DCP" in h.reason


REQ_GQA = GQA_BF16 * 80 * PROMPT


def test_gqa_tp8_into_tp4_pulls_two_head_slices_per_decode_rank(specs):
    """8 KV heads: a prefill rank of TP8 holds 1 head, a decode rank of TP4 needs 2 = prefill ranks 2j, 2j+1."""
    h = plan(specs, "llama-3.1-70b", "tp", "tp", pg=8, dg=4)
    assert h.supported and h.mapped
    want = np.zeros((8, 4))
    for j in range(4):
        want[2 * j, j] = want[2 * j + 1, j] = REQ_GQA / 8
    assert np.allclose(h.rank_bytes, want)
    assert h.wire_bytes == REQ_GQA and h.busiest_recv_bytes == REQ_GQA / 4


def test_gqa_tp4_into_tp8_splits_each_prefill_rank_over_two_decode_ranks(specs):
    h = plan(specs, "llama-3.1-70b", "tp", "tp", pg=4, dg=8)
    assert h.supported and h.mapped
    want = np.zeros((4, 8))
    for j in range(8):
        want[j // 2, j] = REQ_GQA / 8
    assert np.allclose(h.rank_bytes, want)
    assert h.busiest_send_bytes == REQ_GQA / 4


def test_gqa_into_one_owner_gathers_every_head_on_one_nic(specs):
    """TP8 → DP attention (one owner per request): all 8 prefill ranks hold distinct heads, all send."""
    h = plan(specs, "llama-3.1-70b", "tp", "dp", pg=8, dg=8, moe="tp")
    assert np.allclose(h.rank_bytes[:, 0], REQ_GQA / 8) and h.busiest_recv_bytes == REQ_GQA


def test_vllm_refuses_a_replicated_gqa_cache_from_a_larger_prefill_group(specs):
    """Qwen3-235B has 4 KV heads: TP8 replicates each twice; vLLM asserts against P TP > D TP then
    (nixl_connector.py _validate_remote_agent_handshake); SGLang sends from the first copy."""
    assert not plan(specs, "qwen3-235b-a22b", "tp", "tp", "vllm", pg=8, dg=4).supported
    h = plan(specs, "qwen3-235b-a22b", "tp", "tp", "sglang", pg=8, dg=4)
    assert h.supported and h.senders == 4
    assert h.wire_bytes == request_bytes(pool(specs, "qwen3-235b-a22b", "decode", "tp", 4), PROMPT)


# --- messages and round trips ---------------------------------------------------------------------

def test_sglang_dsa_messages_are_two_buffers_per_page_per_layer(specs):
    """Latent + index key (StateType.DSA), 4096/64 = 64 pages, per (sender, receiver) pair."""
    h = plan(specs, "deepseek-v3.2", "tp", "tp")
    assert np.allclose(h.messages_per_layer, np.eye(8) * 2 * 64)
    assert h.round_trips == 1  # one chunk of 4096 ≤ 8192, one destination per sender


def test_sglang_head_sliced_gqa_goes_token_by_token_vllm_block_by_block(specs):
    """SGLang send_kvcache_slice: "the transfer engine for each token slot within each page" (pages of
    16 here, so per page would be 256); vLLM cuts the heads inside each block's descriptor."""
    s = plan(specs, "llama-3.1-70b", "tp", "tp", "sglang", pg=4, dg=8, page_tokens=16)
    v = plan(specs, "llama-3.1-70b", "tp", "tp", "vllm", pg=4, dg=8)  # vLLM's block of 16
    assert s.messages_per_layer.sum() == 8 * 2 * PROMPT  # 8 pairs × (K, V) × 4096 tokens
    assert v.messages_per_layer.sum() == 8 * 2 * PROMPT / 16
    assert s.round_trips == 2 and v.round_trips == 1  # one chunk × two destinations per sender; one READ


def test_round_trips_are_chunks_times_destinations_for_sglang(specs):
    """DP8 prefill: SGLang's chunk per DP rank is 8192 // 8 = 1024, so 4 chunks, each sent to 8 decode ranks."""
    h = plan(specs, "deepseek-v3.2", "dp", "tp")
    assert h.chunks == 4 and h.round_trips == 32


def test_transfer_time_is_the_busiest_nic_plus_the_round_trips(specs):
    hw = specs[1]
    pr = Pricing.datasheet(hw)
    h = plan(specs, "deepseek-v3.2", "dp", "tp")
    want = 8 * REQ_DSA / 50e9 + 32 * 46e-6  # ConnectX-7 NDR 50 GB/s per GPU, 46 µs cross-node latency (h200.yaml)
    assert math.isclose(h.transfer_s(pr), want, rel_tol=1e-12)
    assert math.isclose(h.transfer_s(pr, 0.5), 2 * 8 * REQ_DSA / 50e9 + 32 * 46e-6, rel_tol=1e-12)


# --- overlap with prefill ------------------------------------------------------------------------

def test_per_chunk_transfer_hides_behind_the_next_chunks():
    """Chunks of 1 s compute each; 1.5 s of transfer in three equal parts: each part leaves when its
    chunk ends (1 → 1.5, 2 → 2.5, 3 → 3.5): 0.5 s exposed. 6 s of transfer: 1 → 3, 3 → 5, 5 → 7: 4 s."""
    assert math.isclose(exposed_s(1.5, [1, 1, 1], [1, 1, 1], "per_chunk"), 0.5)
    assert math.isclose(exposed_s(6.0, [1, 1, 1], [1, 1, 1], "per_chunk"), 4.0)
    # a short last chunk carries its share of the bytes: parts 2 s and 1 s of 3 s: 1 → 3, max(3, 2) → 4: 2 s
    assert math.isclose(exposed_s(3.0, [1, 1], [2, 1], "per_chunk"), 2.0)
    assert exposed_s(1.5, [1, 1, 1], [1, 1, 1], "after_prefill") == 1.5


def test_pairs_the_engines_cannot_map_are_refused(specs):
    with pytest.raises(SpecError, match="whole ratios"):
        from planner.disagg.handoff import target_ranks

        target_ranks(3, 2, 0)
