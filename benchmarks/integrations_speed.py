"""How fast the integrations answer (issue 28), on DeepSeek-V3.2 / SGLang TP8 / 8 × H200:

- predictor: a bulk call of 100 endpoints (`POST /predict/bulk/strict`, llm-d's client caps a bulk
  call at 100) to `floorfirst predictor`'s app on uvicorn over loopback, TCP_NODELAY on both ends as
  llm-d's Go client and uvicorn's own sockets have it; round trip and the server's
  `processing_time_ms`, with and without a calibration (target: answered within 50 ms);
- follow: SGLang forward-pass records priced, predicted and kept per second by `Follower.ingest`
  (batches of 512, no refit), and one refit on a 512-step window;
- thresholds: both crossovers and the by-batch table of the launch line, one call.

Writes integrations_speed.json and .txt under --out (default: a fresh temporary folder, printed;
`--out benchmarks/results` refreshes the committed copies) and prints one JSON document last.

Run: python benchmarks/integrations_speed.py [--out DIR] [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from conditions import cpu_name, git_commit

LINE = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
ROOT = Path(__file__).resolve().parents[1]
CAL = "calibration/data/h200-probe-calibration.json"  # relative to the checkout's root


def _versions() -> dict:
    from importlib.metadata import version

    return {n: version(n) for n in ("numpy", "scipy", "starlette", "uvicorn", "httpx", "pyzmq", "msgspec")}


def _pct(x, q) -> float:
    return float(np.percentile(np.asarray(x), q))


def bench_predictor(launched, calibration: str | None, repeats: int) -> dict:
    import httpx
    import uvicorn

    from integrations.predictor_app import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(launched, calibration), log_level="warning"))
    th = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    th.start()
    while not server.started:
        time.sleep(0.01)
    rng = np.random.default_rng(0)
    body = {"requests": [{"kv_cache_percentage": float(rng.uniform(0, 0.95)), "input_token_length": int(rng.integers(64, 32768)),
                          "num_request_waiting": int(rng.integers(0, 16)), "num_request_running": int(rng.integers(0, 128)),
                          "num_tokens_generated": 0, "prefix_cache_score": float(rng.uniform(0, 1)),
                          "encoder_input_size": 0, "encoder_matched_size": 0, "prefill_tokens_in_flight": 0,
                          "decode_tokens_in_flight": 0} for _ in range(100)]}
    transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    rtt, proc = [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}", transport=transport) as c:
        for i in range(repeats + 5):
            t0 = time.perf_counter()
            r = c.post("/predict/bulk/strict", json=body)
            dt = time.perf_counter() - t0
            assert r.status_code == 200, r.text
            if i >= 5:  # warm-up: first calls compile nothing, but fill caches
                rtt.append(dt * 1e3)
                proc.append(r.json()["processing_time_ms"])
    server.should_exit = True
    th.join()
    return {"calibration": CAL if calibration else None, "endpoints": 100, "calls": repeats,
            "round_trip_ms": {"p50": _pct(rtt, 50), "p90": _pct(rtt, 90), "p99": _pct(rtt, 99), "max": max(rtt)},
            "processing_ms": {"p50": _pct(proc, 50), "p90": _pct(proc, 90), "p99": _pct(proc, 99)},
            "within_50_ms_fraction": float(np.mean(np.asarray(rtt) <= 50.0))}


def bench_follow(launched) -> dict:
    from integrations.follow import Follower
    from integrations.fpm_publisher import synthetic_records

    recs = synthetic_records(launched, 20_480, seed=1)
    f = Follower(launched, window=512, refit_every=10**9, tables=False)
    t0 = time.perf_counter()
    for i in range(0, len(recs), 512):
        f.ingest(recs[i:i + 512])
    ingest_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    entry = f.refit()
    refit_s = time.perf_counter() - t0
    return {"records": len(recs), "records_per_s": len(recs) / ingest_s, "refit_window_steps": entry["window_steps"],
            "refit_s": refit_s, "refit_taken": entry["taken"]}


def bench_thresholds(launched) -> dict:
    from integrations.thresholds import thresholds

    t0 = time.perf_counter()
    th = thresholds(launched, "max")
    return {"seconds": time.perf_counter() - t0, "flags": th.flags()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--repeats", type=int, default=200)
    a = ap.parse_args()
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="integrations_speed_"))
    out.mkdir(parents=True, exist_ok=True)
    from integrations.launch import launched_deployment

    launched = launched_deployment(LINE)
    doc = {"benchmark": "integrations_speed", "launch": LINE, "hardware_modelled": "8 × H200 (datasheet; the calibrated "
           "run: the committed H200 probe calibration)", "conditions": "a shared 2-core CI-class VM, loopback HTTP, "
           "uvicorn 1 worker (h11), one httpx client", "cpu": cpu_name(), "python": platform.python_version(),
           "commit": git_commit(), "versions": _versions(), "predictor_datasheet": bench_predictor(launched, None, a.repeats),
           "predictor_calibrated": bench_predictor(launched, str(ROOT / CAL), a.repeats),
           "follow": bench_follow(launched), "thresholds": bench_thresholds(launched)}
    lines = [f"integrations speed on {doc['cpu']} (Python {doc['python']}, commit {doc['commit']}), {LINE}"]
    for k in ("predictor_datasheet", "predictor_calibrated"):
        p = doc[k]
        lines.append(f"{k}: bulk of 100 endpoints over loopback HTTP, {p['calls']} calls: round trip p50 "
                     f"{p['round_trip_ms']['p50']:.1f} ms, p90 {p['round_trip_ms']['p90']:.1f}, p99 {p['round_trip_ms']['p99']:.1f}; "
                     f"server processing p50 {p['processing_ms']['p50']:.2f} ms; within 50 ms: {p['within_50_ms_fraction']:.1%}")
    fo = doc["follow"]
    lines.append(f"follow: {fo['records_per_s']:,.0f} records/s priced and predicted; a refit on {fo['refit_window_steps']} "
                 f"steps {fo['refit_s']:.2f} s")
    lines.append(f"thresholds: {doc['thresholds']['seconds']:.2f} s -> {' '.join(doc['thresholds']['flags'])}")
    text = "\n".join(lines) + "\n"
    (out / "integrations_speed.txt").write_text(text)
    (out / "integrations_speed.json").write_text(json.dumps(doc, indent=1) + "\n")
    sys.stdout.write(text + f"written to {out}\n" + json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
