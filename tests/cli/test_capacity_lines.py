"""capacity's lines under the table: what a token costs past the windows, and the engine's cap on
running requests where it sits below what memory holds."""

from __future__ import annotations

import re

import pytest

from cli.main import main


def run(capsys, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out


def test_windows_are_a_per_request_constant_past_them(capsys, monkeypatch):
    code, out = run(capsys, monkeypatch, "capacity", "-m", "gpt-oss-120b", "-g", "8", "-c", "128k")
    assert code == 0
    # 18 full layers × 8 KV heads × 64 × (K + V) × 2 B = 36,864 B; windows 18 × 128 × 2,048 B = 4.5 MiB
    assert "tp/ep: 36.0 KiB/token past the windows + 4.5 MiB/request of windows; binds: full_attention_pool" in out


def test_the_engines_default_caps_on_running_requests_are_noted_where_memory_holds_more(capsys, monkeypatch):
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v4-flash", "-g", "8", "-c", "128k")
    assert code == 0
    # SGLang: 256 for the whole engine (apply_deepseek_v4_defaults); TP holds 215 at 128K, under it
    assert "note: by default sglang runs at most this many requests at once (--max-running-requests): cp/ep 256," in out
    assert not re.search(r"(?<![a-z])tp/ep 256", out)
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v4-flash", "-g", "8", "-c", "128k", "--engine", "vllm")
    # vLLM on a >= 70 GiB GPU: max_num_seqs 1024 per engine core, one per DP rank (dp: 8 × 1024)
    assert code == 0 and "(--max-num-seqs): cp/ep 1024" in out and "dp/ep" not in out.split("note:")[1]
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v3.2", "-g", "8", "-c", "128k")
    assert code == 0 and "runs at most" not in out
