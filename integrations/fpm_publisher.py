"""A test publisher of SGLang forward-pass records on loopback, and synthetic streams to send.

`LoopbackPublisher` is SGLang's `_FpmPublisherThread._run` on the wire
(sgl-project/sglang python/sglang/srt/observability/forward_pass_metrics.py): a PUB socket bound at
an endpoint, each record a multipart `(b"", 8-byte big-endian sequence, msgpack payload)`, the
payload the msgspec encoding of `ForwardPassMetrics` (a map, fields in declaration order); it
sends synchronously and can also send raw (malformed) payloads for tests.

`synthetic_records` makes a stream of a deployment whose steps take what a given step model says
(a "true" engine, with multiplicative noise): decode steps of 1–64 requests at 0.5K–32K context,
and prefill chunks, in SGLang's record schema. `python -m integrations.fpm_publisher FILE
--endpoint tcp://127.0.0.1:5557` replays a recorded stream (JSONL, one record per line).

Does not: run an engine; it is what tests, docs and benchmarks feed `floorfirst follow` with.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

from calibration.artifact import PARAM_NAMES, predict_from_features, step_features
from calibration.costs import rates_for
from integrations.fpm_schema import FPM_VERSION, encode_record
from integrations.launch import LaunchedDeployment

# A "true" engine unlike the hardware file's priors (H200: 0.879 HBM, 0.806 FLOPs, 0.876 link,
# 12 µs, α 0.5, no overhead): what a refit should find.
TRUE_ENGINE = {"hbm_weight_efficiency": 0.72, "hbm_kv_efficiency": 0.55, "compute_linear_efficiency": 0.6,
               "compute_attention_efficiency": 0.45, "network_efficiency": 0.6, "message_latency_s": 2.0e-5,
               "overlap_alpha": 0.3, "overhead_s": 1.5e-3, "prefill_step_overhead_s": 0.0,
               "mixed_step_overhead_s": 0.0, "host_overlap_alpha": 1.0}


def record_map(worker_id: str, dp_rank: int, counter_id: int, wall_time_s: float, decode_requests: int,
               decode_kv_tokens: int, prefill_requests: int = 0, prefill_tokens: int = 0,
               prefill_kv_tokens: int = 0, queued_prefill: int = 0, queued_tokens: int = 0) -> dict:
    """One ForwardPassMetrics as SGLang's encoder writes it: every field, in declaration order."""
    return {"version": FPM_VERSION, "worker_id": worker_id, "dp_rank": dp_rank, "counter_id": counter_id,
            "wall_time": float(wall_time_s),
            "scheduled_requests": {"num_prefill_requests": prefill_requests, "sum_prefill_tokens": prefill_tokens,
                                   "var_prefill_length": 0.0, "sum_prefill_kv_tokens": prefill_kv_tokens,
                                   "num_decode_requests": decode_requests, "sum_decode_kv_tokens": decode_kv_tokens,
                                   "var_decode_kv_tokens": 0.0},
            "queued_requests": {"num_prefill_requests": queued_prefill, "sum_prefill_tokens": queued_tokens,
                                "var_prefill_length": 0.0, "num_decode_requests": 0, "sum_decode_kv_tokens": 0,
                                "var_decode_kv_tokens": 0.0}}


def synthetic_records(launched: LaunchedDeployment, n: int, truth: dict | None = None, seed: int = 0,
                      noise: float = 0.02, start_counter: int = 0, worker_id: str = "synthetic-0",
                      prefill_fraction: float = 0.2) -> list[dict]:
    """`n` records of `launched`'s deployment whose wall times follow the step model `truth`
    (PARAM_NAMES → value; default TRUE_ENGINE) with lognormal noise of σ `noise`."""
    import planner
    from integrations.follow import schedulers

    dep = launched.deployment
    rng = np.random.default_rng(seed)
    x = np.array([(truth or TRUE_ENGINE)[k] for k in PARAM_NAMES])
    dec = rng.integers(1, 65, n)
    ctx = np.round(np.exp(rng.uniform(np.log(512), np.log(32768), n)))
    has_pre = rng.random(n) < prefill_fraction
    pre = np.where(has_pre, rng.integers(256, max(257, launched.chunk_tokens + 1), n), 0)
    pre_ctx = np.where(has_pre, rng.integers(0, 16384, n), 0)
    dec = np.where(has_pre & (rng.random(n) < 0.5), 0, dec)  # half the prefill passes run alone
    k = schedulers(dep)
    cost = planner.step_cost(dep, planner.DecodeLoad.equal(dec * k, np.where(dec > 0, ctx, 1.0)), prefill_tokens=pre,
                             prefill_context=pre_ctx)
    wall = predict_from_features(step_features(cost, rates_for(dep.hardware)), x) * np.exp(rng.normal(0, noise, n))
    return [record_map(worker_id, 0, start_counter + i, float(wall[i]), int(dec[i]), int(dec[i] * ctx[i]) if dec[i] else 0,
                       1 if pre[i] else 0, int(pre[i]), int(pre_ctx[i])) for i in range(n)]


class LoopbackPublisher:
    """A PUB socket as SGLang binds it; `send` publishes one record map, `send_raw` any payload."""

    def __init__(self, endpoint: str, start_seq: int = 0):
        import zmq

        self._zmq = zmq
        self._ctx = zmq.Context()
        self.sock = self._ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.SNDHWM, 100_000)
        self.sock.bind(endpoint)
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.seq = start_seq

    def send_raw(self, payload: bytes, seq: int | None = None) -> None:
        s = self.seq if seq is None else seq
        self.sock.send_multipart((b"", s.to_bytes(8, "big"), payload))
        self.seq = s + 1

    def send(self, record: dict) -> None:
        self.send_raw(encode_record(record))

    def close(self) -> None:
        self.sock.close(linger=0)
        self._ctx.term()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Replay a recorded FPM stream (JSONL) on a ZMQ PUB endpoint.")
    ap.add_argument("file")
    ap.add_argument("--endpoint", default="tcp://127.0.0.1:5557")
    ap.add_argument("--rate", type=float, default=1000.0, help="records per second")
    ap.add_argument("--wait-s", type=float, default=0.5, help="seconds to let subscribers connect first")
    a = ap.parse_args(argv)
    pub = LoopbackPublisher(a.endpoint)
    time.sleep(a.wait_s)
    sent = 0
    with open(a.file, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                pub.send(json.loads(line))
                sent += 1
                time.sleep(1.0 / a.rate)
    pub.close()
    sys.stdout.write(json.dumps({"sent": sent, "endpoint": pub.endpoint}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
