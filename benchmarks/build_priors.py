"""Build the shipped per-(GPU, engine) priors from NVIDIA's aiconfigurator-core wheel's per-kernel
tables (calibration/kernel_db.py `read_kernel_db` + `prior_calibration`): H100, H200, B200, B300 and
GB200 × SGLang, vLLM and TensorRT-LLM. Only `*_perf.parquet` kernel tables are read; the wheel's
end-to-end rows are never opened (kernel_db `_member_ok`).

Writes `<hardware>-<engine>.json` (calibration artifacts, origin 'prior'), NOTICE.txt (the wheel's
Apache-2.0 notice and version) and priors.json (the summary) under `--out` (default: a fresh
temporary folder; `--out calibration/priors` refreshes the shipped copies).

Usage: python benchmarks/build_priors.py --wheel aiconfigurator_core-0.12.0-….whl [--out DIR]
(`pip download --no-deps aiconfigurator-core==0.12.0`; needs pyarrow). Prints a table, then one
JSON document as the last line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.artifact import save_calibration  # noqa: E402
from calibration.kernel_db import HARDWARE_BY_SYSTEM, prior_calibration, read_kernel_db  # noqa: E402

ENGINES = ("sglang", "vllm", "trtllm")
NOTICE = """Data in this folder (the *-sglang.json, *-vllm.json and *-trtllm.json priors) is derived from
the per-kernel performance tables of NVIDIA aiconfigurator-core {version}
(wheel {wheel}, sha256 {sha}), Copyright (c) NVIDIA CORPORATION & AFFILIATES, licensed under the
Apache License, Version 2.0 (License-Expression: Apache-2.0 in the wheel's metadata;
http://www.apache.org/licenses/LICENSE-2.0). floorfirst read only its `*_perf.parquet` kernel
tables (GEMM, attention, MLA, MoE, NCCL, custom all-reduce) and reduced them to achieved rates
(calibration/kernel_db.py); no end-to-end measured row of the wheel was read or fitted. The
derived values are distributed under the same license terms; the tables themselves are not copied.
"""


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", required=True, help="The aiconfigurator-core wheel file.")
    ap.add_argument("--out", type=Path, default=None, help="Folder to write into (default: a temporary one).")
    a = ap.parse_args(argv)
    out = (a.out if a.out is not None else Path(tempfile.mkdtemp(prefix="priors-"))).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"writing under {out}", file=sys.stderr)
    rows = []
    wheel_name, sha = "", ""
    for system, hw in HARDWARE_BY_SYSTEM.items():
        for engine in ENGINES:
            doc = read_kernel_db(system, engine, a.wheel)
            wheel_name, sha = doc["wheel"], doc["wheel_sha256"]
            cal = prior_calibration(doc)
            save_calibration(cal, out / f"{hw}-{engine}.json")
            p = cal.params
            rows.append({"hardware": hw, "engine": engine, "system": system, **p.model_dump(),
                         "moe_half_width_columns": doc["summary"].get("moe_half_width_columns"),
                         "tables": [f"{t['op']}/{t['table']} {t['version']}" for t in doc["tables"]],
                         "notes": list(cal.notes)})
            print(f"{hw:6} {engine:7} hbm_w {p.hbm_weight_efficiency:.3f} hbm_kv {p.hbm_kv_efficiency:.3f} "
                  f"lin {p.compute_linear_efficiency:.3f} att {p.compute_attention_efficiency:.3f} "
                  f"net {p.network_efficiency:.3f} msg {p.message_latency_s * 1e6:.1f} us")
    version = wheel_name.split("-")[1] if wheel_name.count("-") >= 2 else "?"
    (out / "NOTICE.txt").write_text(NOTICE.format(version=version, wheel=wheel_name, sha=sha))
    doc = {"wheel": wheel_name, "wheel_sha256": sha, "priors": rows}
    (out / "priors.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc))
    return doc


if __name__ == "__main__":
    main()
