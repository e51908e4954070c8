"""The 2026 built-in cards: each is a fixture config.json (source in planner/models/card_sources.json),
its parameter split summed from the per-layer parts, and its bytes per token and per request
checked against shared/reference/frontier-models-and-engines.md §1 ("[derived]" numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import planner
from planner.models.loader import CARD_SOURCES, CARDS_DIR, card_for_repo

ROOT = Path(__file__).resolve().parents[2]
M = 1e6


def test_every_card_names_its_source_and_new_cards_are_the_fixture_files():
    sources = json.loads(CARD_SOURCES.read_text())
    assert set(sources) == set(planner.builtin_model_names())
    for card, src in sources.items():
        assert "/" in src["repo"]
        if "fixture" in src:
            assert json.loads((CARDS_DIR / f"{card}.json").read_text()) == json.loads((ROOT / src["fixture"]).read_text())


def test_a_hugging_face_repo_id_finds_its_card():
    assert card_for_repo("Qwen/Qwen3.5-397B-A17B") == "qwen3.5-397b-a17b"
    assert planner.load_model("deepseek-ai/DeepSeek-V4-Flash").name == "deepseek-v4-flash"
    with pytest.raises(planner.SpecError, match="nor a Hugging Face repo id of a built-in card"):
        planner.load_model("someone/not-a-card")


def _layer_params(model, kind):
    """{per-layer params (M): layers} of the groups whose mixer or mlp has this kind."""
    out = {}
    for v, n in (*model.mixers, *model.mlps):
        if v.kind == kind:
            out[round(sum(v.weight_params().values()) / M, 2)] = n
    return out


def test_qwen35_397b_split_and_memory():
    m = planner.load_model("qwen3.5-397b-a17b")
    h = 4096
    gdn = h * (2 * 16 * 128 + 2 * 64 * 128) + h * 2 * 64 + 12_288 * 4 + 64 * 128 * h + 2 * 64  # qkvz, ba, conv, out, A/dt
    att = h * 32 * 256 * 2 + 2 * h * 2 * 256 + 32 * 256 * h  # gated q (2x), k and v (2 KV heads), o
    experts, shared = 512 * 3 * h * 1024, 3 * h * 1024
    assert (gdn / M, att / M) == pytest.approx((118.01, 104.86), abs=0.01)  # reference: 118.0 M, 104.9 M
    total = 45 * gdn + 15 * att + 60 * (experts + shared) + 2 * 248_320 * h
    assert m.total_params() == pytest.approx(total) and total / 1e9 == pytest.approx(396.2, abs=0.05)  # card: 397 B
    active = 45 * gdn + 15 * att + 60 * 11 * 3 * h * 1024 + 248_320 * h  # 10 routed + 1 shared per MoE layer
    assert m.active_params_per_token() == pytest.approx(active) and active / 1e9 == pytest.approx(16.2, abs=0.05)
    # KV: 15 full layers × 2 KV heads × (256 + 256) × 2 B = 30,720 B/token; GDN state per layer
    # 12,288 × 3 × 2 B (conv) + 64 × 128 × 128 × 4 B (fp32 ssm) = 4,268,032 B → 183.2 MiB per request
    assert m.kv_bytes_per_token("bf16") == 15 * 2 * 512 * 2 == 30_720
    assert m.state_bytes_per_request("bf16") == 45 * (12_288 * 3 * 2 + 64 * 128 * 128 * 4) == 45 * 4_268_032
    assert m.state_bytes_per_request("bf16") / 2**20 == pytest.approx(183.2, abs=0.05)


def test_qwen35_35b_memory():
    m = planner.load_model("qwen3.5-35b-a3b")
    assert m.kv_bytes_per_token("bf16") == 10 * 2 * 512 * 2 == 20_480
    # (2·16·128 + 32·128) × 3 × 2 + 32 × 128 × 128 × 4 = 2,146,304 B per GDN layer (reference: 61.4 MiB / request)
    assert m.state_bytes_per_request("bf16") == 30 * 2_146_304
    assert m.total_params() / 1e9 == pytest.approx(34.6, abs=0.05) and m.active_params_per_token() / 1e9 == pytest.approx(2.9, abs=0.05)


@pytest.mark.parametrize("card, per_token, window, state, total_b, active_b", [
    # Flash: 21 C4 · (584 + 132) / 4 + 20 C128 · 584 / 128 = 3,850.25 B/token; window 43 · 128 · 584;
    # rings 21 · (8 · 8,192 + 8 · 2,048) + 20 · 128 · 4,096 = 12,206,080 B
    ("deepseek-v4-flash", 21 * 716 / 4 + 20 * 584 / 128, 43 * 128 * 584, 21 * 81_920 + 20 * 524_288, 284.25, 13.19),
    # Pro: 30 C4, 31 C128: 5,511.4 B/token
    ("deepseek-v4-pro", 30 * 716 / 4 + 31 * 584 / 128, 61 * 128 * 584, 30 * 81_920 + 31 * 524_288, 1572.74, 48.60),
])
def test_deepseek_v4_cards(card, per_token, window, state, total_b, active_b):
    m = planner.load_model(card)
    assert m.token_bytes_per_token("fp8") == pytest.approx(per_token)
    mem = m.memory_bytes(np.array([1e6]), "fp8")
    assert mem["window"][0] == window and mem["state"][0] == state
    assert mem["token"][0] == pytest.approx(per_token * 1e6)
    assert m.total_params() / 1e9 == pytest.approx(total_b, abs=0.01)  # reference: ≈284 B, ≈1.57 T
    assert m.active_params_per_token() / 1e9 == pytest.approx(active_b, abs=0.01)


def test_deepseek_v4_flash_split():
    m = planner.load_model("deepseek-v4-flash")
    h, n, d = 4096, 64, 512
    core = h * 1024 + h * d + 1024 * n * d + 8 * (n // 8) * d * 1024 + 8 * 1024 * h  # wq_a, wkv, wq_b, wo_a, wo_b
    c4 = 2 * h * 2 * d + 1024 * 64 * 128 + h * 64 + 2 * h * 2 * 128  # compressor, indexer wq_b, weights_proj, its compressor
    c128 = 2 * h * 1 * d
    assert (core / M, c4 / M, c128 / M) == pytest.approx((106.95, 19.14, 4.19), abs=0.01)  # reference 107.0, 19.1, 4.2
    experts, shared = 256 * 3 * h * 2048, 3 * h * 2048
    total = 43 * core + 21 * c4 + 20 * c128 + 43 * (experts + shared) + 2 * 129_280 * h
    assert m.total_params() == pytest.approx(total)
    assert m.layer_counts()["mixer:dsv4"] == 43 and "hash-routed" in m.layers[0].mlp.describe()


def test_kimi_k3_split_and_memory():
    m = planner.load_model("kimi-k3")
    h, p = 7168, 96 * 128
    kda = 4 * h * p + (h * 128 + 128 * p) + h * p + h * 96 + 3 * p * 4 + 2 * 96  # q,k,v,o; decay; full-rank gate; beta; convs
    mla = h * (1536 + 512 + 64) + 1536 * 96 * 192 + 512 * 96 * 256 + 96 * 128 * h + h * 96 * 128  # + output gate
    experts = 896 * 3 * 3584 * 3072  # latent MoE: the experts work on the 3,584-wide latent
    latent, shared, dense = 2 * h * 3584, 2 * 3 * h * 3072, 3 * h * 33_792
    assert (experts / 1e9, latent / M, shared / M, dense / M) == pytest.approx((29.6, 51.4, 132.1, 726.7), abs=0.05)
    total = 69 * kda + 24 * mla + 92 * (experts + latent + shared) + dense + 2 * 163_840 * h
    assert m.total_params() == pytest.approx(total)
    active = 69 * kda + 24 * mla + 92 * (16 * 3 * 3584 * 3072 + latent + shared) + dense + 163_840 * h
    assert m.active_params_per_token() == pytest.approx(active)
    # MLA 576 elements × 2 B × 24 layers; KDA 3 × 36,864 × 2 B + 96 × 128 × 128 × 4 B per layer (428.6 MiB)
    assert m.kv_bytes_per_token("bf16") == 24 * 1152 == 27_648
    assert m.state_bytes_per_request("bf16") == 69 * (221_184 + 6_291_456)
    assert m.state_bytes_per_request("bf16") / 2**20 == pytest.approx(428.6, abs=0.05)


def test_nemotron_3_ultra_split_and_memory():
    m = planner.load_model("nemotron-3-ultra")
    h = 8192
    mamba = h * (2 * 256 * 64 + 2 * 8 * 128 + 256) + 18_432 * 4 + 256 * 64 * h + 3 * 256
    att = h * 64 * 128 * 2 + 2 * h * 2 * 128
    moe = 512 * 2 * 2048 * 5120 + 2 * h * 2048 + 2 * h * 10_240  # relu2 latent experts, latent proj, shared
    assert (mamba / M, att / M) == pytest.approx((421.6, 138.4), abs=0.05)
    assert m.layer_counts() == {"mixer:mamba2": 48, "mlp:none": 60, "mixer:none": 48, "mlp:moe": 48, "mixer:gqa": 12}
    total = 48 * mamba + 12 * att + 48 * moe + 2 * 131_072 * h
    assert m.total_params() == pytest.approx(total) and total / 1e9 == pytest.approx(549.1, abs=0.05)
    assert m.active_params_per_token() / 1e9 == pytest.approx(54.8, abs=0.05)  # "A55B"
    assert m.kv_bytes_per_token("bf16") == 12 * 2 * 256 * 2 == 12_288
    assert m.state_bytes_per_request("bf16") == 48 * (18_432 * 3 * 2 + 256 * 64 * 128 * 4) == 48 * 8_499_200


def test_gemma_4_split_and_memory():
    m = planner.load_model("gemma-4-26b-a4b")
    h = 2816
    sliding = h * 16 * 256 + 2 * h * 8 * 256 + 16 * 256 * h
    full = h * 16 * 512 + h * 2 * 512 + 16 * 512 * h  # K = V: no v_proj weights
    assert _layer_params(m, "sliding") == {round(sliding / M, 2): 25} and _layer_params(m, "gqa") == {round(full / M, 2): 5}
    layer_mlp = 3 * h * 2112 + 128 * 3 * h * 704
    assert m.total_params() == pytest.approx(25 * sliding + 5 * full + 30 * layer_mlp + 262_144 * h)  # tied embeddings
    assert m.total_params() / 1e9 == pytest.approx(25.2, abs=0.05) and m.active_params_per_token() / 1e9 == pytest.approx(3.8, abs=0.05)
    # V is still cached (vLLM gemma4.py loads K into both slots): full 2 × 512 × 2 × 2 B = 4,096 B/token/layer
    mem = m.memory_bytes(np.array([32_768.0]), "bf16")
    assert mem["token"][0] == 5 * 4096 * 32_768 and mem["window"][0] == 25 * 8 * 512 * 2 * 1024


def test_minimax_m3_block_sparse_memory_and_reads():
    m = planner.load_model("minimax-m3")
    assert m.kv_bytes_per_token("bf16") == 60 * 2048 + 57 * 128 * 2 == 137_472
    sparse = next(v for v, _ in m.mixers if v.kind == "block_sparse")
    r = sparse.kv_read_bytes(np.array([32_768.0]), "bf16")
    assert r["indexer"][0] == 32_768 * 256 and r["kv"][0] == 17 * 128 * 2048  # 16 top-k + 1 local block
    assert m.total_params() / 1e9 == pytest.approx(426.1, abs=0.05)


def test_mimo_v2_flash_and_llama_4_maverick_memory():
    mimo = planner.load_model("mimo-v2-flash")
    mem = mimo.memory_bytes(np.array([32_768.0]), "bf16")
    assert mem["token"][0] == 9 * 4 * (192 + 128) * 2 * 32_768 and mem["window"][0] == 39 * 8 * 320 * 2 * 128
    mav = planner.load_model("llama-4-maverick")
    assert mav.total_params() / 1e9 == pytest.approx(400.7, abs=0.05) and mav.active_params_per_token() / 1e9 == pytest.approx(16.1, abs=0.05)
    # 36 chunked layers keep at most the current 8,192-token chunk; 12 NoPE layers keep everything
    mem = mav.memory_bytes(np.array([20_000.0]), "bf16")
    assert mem["token"][0] == 12 * 8 * 256 * 2 * 20_000 and mem["window"][0] == 36 * 8 * 256 * 2 * (20_000 - 2 * 8192)


NEW_CARDS = [c for c, s in json.loads(CARD_SOURCES.read_text()).items() if "fixture" in s]


@pytest.mark.parametrize("hardware", ["h200", "b200"])
@pytest.mark.parametrize("card", NEW_CARDS)
def test_compare_and_capacity_run_on_every_new_card_at_8_gpus(card, hardware, capsys):
    """Every layout the model admits is priced; the others are skipped in one line naming why."""
    from cli.main import main

    docs = []
    for cmd in (["compare", "--batch", "32", "--context", "32k"], ["capacity", "--context", "128k"]):
        with pytest.raises(SystemExit) as exc:
            main([*cmd, "--model", card, "--hardware", hardware, "--gpus", "8", "--json"])
        out = capsys.readouterr()
        assert exc.value.code == 0, out.err
        docs.append(json.loads(out.out))
    compare, capacity = docs
    priced = {x["attn"] for x in compare["layouts"]}
    assert "dp" in priced and "dop" in priced  # owner layouts run every variant
    for s in compare["skipped"]:
        assert "\n" not in s["reason"] and s["attn"] in s["reason"]
    assert {x["attn"] for x in capacity["layouts"]} == priced
