"""capacity's lines under the table: what a token costs past the windows, and the engine's cap on
running requests where it sits below what memory holds."""

from __future__ import annotations

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


def test_sglang_caps_deepseek_v4_at_256_running_requests(capsys, monkeypatch):
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v4-flash", "-g", "8", "-c", "128k")
    assert code == 0
    assert "note: sglang runs at most 256 requests by default for deepseek-v4-flash" in out
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v4-flash", "-g", "8", "-c", "128k", "--engine", "vllm")
    assert code == 0 and "runs at most" not in out
    code, out = run(capsys, monkeypatch, "capacity", "-m", "deepseek-v3.2", "-g", "8", "-c", "128k")
    assert code == 0 and "runs at most" not in out
