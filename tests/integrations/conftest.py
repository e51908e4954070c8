"""Shared pieces of the integration tests: the deployment they follow (DeepSeek-V3.2 on 8 × H200,
SGLang TP8), its recorded stream, and a calibration to load."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINE = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
STREAM = ROOT / "tests" / "fixtures" / "fpm" / "dsv32_tp8_h200.jsonl"  # 160 records + 3 malformed lines
CAL = ROOT / "calibration" / "data" / "h200-probe-calibration.json"


@pytest.fixture(scope="session")
def launched():
    from integrations.launch import launched_deployment

    return launched_deployment(LINE)
