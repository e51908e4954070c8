"""benchmarks/disagg_ratio.py writes to the folder it is given, prints one JSON document last, and
agrees with the committed record (benchmarks/results/disagg_ratio/)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_benchmark_reproduces_its_record(tmp_path):
    r = subprocess.run([sys.executable, "benchmarks/disagg_ratio.py", "--out", str(tmp_path)], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    last = json.loads(r.stdout.strip().splitlines()[-1])
    new = json.loads((tmp_path / "disagg_ratio.json").read_text())
    old = json.loads((ROOT / "benchmarks/results/disagg_ratio/disagg_ratio.json").read_text())
    assert last["cases"] == new["cases"]
    for a, b in zip(new["cases"], old["cases"]):
        for ra, rb in zip(a["rows"], b["rows"]):
            assert ra["best_shape"] == rb["best_shape"], (a["model"], ra["input_tokens"], ra["output_tokens"])
    dsa = {(r["input_tokens"], r["output_tokens"]): r for r in new["cases"][0]["rows"]}
    # the reported shape: a second decode pool pays at short prompts, not at long ones
    assert dsa[1024, 1024]["second_decode_gain_pct"] > 40 and dsa[16384, 1024]["second_decode_gain_pct"] < 1
    assert dsa[1024, 1024]["best_prefill_share_fraction"] < 0.5 < dsa[32768, 1024]["best_prefill_share_fraction"]
