"""TTFT and TPOT of a request on an endpoint, from floorfirst's (calibrated) step model of the
endpoint's deployment, its queue and its KV use: the prediction behind `floorfirst predictor`,
which answers llm-d's latency-predictor API (integrations.predictor_app).

The request fields are llm-d's `PredictionRequest` (llm-d/llm-d-router, formerly
llm-d-inference-scheduler: pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/
latencypredictorclient/types.go), checked with the ranges its `ValidatePredictionRequest`
(prediction.go) enforces. How each is read, for one endpoint running the launch line's deployment:
- `num_request_running` B decodes; `kv_cache_percentage` the fraction of the engine's KV pool in
  use, so their mean context is kv × pool tokens / B (the pool as the engine sizes it:
  planner.capacity, per replica-group of the endpoint); the new request joins at its
  `input_token_length` + `num_tokens_generated`;
- TPOT: one decode step of B + 1 requests at that mean context;
- TTFT on a monolithic or prefill endpoint: the prefill of the request's uncached tokens
  (`input_token_length` × (1 − `prefix_cache_score`), attending to the cached rest), cut into the
  engine's chunks (the launch line's `--chunked-prefill-size`, else the engine's default), after
  the prefill queued ahead of it (`prefill_tokens_in_flight`, else `num_request_waiting` prompts
  like this one) in full chunks. SGLang runs a prefill batch as a step of its own (no decode in
  it; `enable_mixed_chunk` off by default, calibration.serving); vLLM and TensorRT-LLM put each
  chunk into a decode step of the B running requests (the budget left after the decodes);
- on a decode endpoint (`pod_type` "decode"), TTFT is its first decode step (the KV transfer from
  the prefill pod is not modelled), and a prefill endpoint's TPOT is 0 (it decodes nothing).

Each prediction is the calibration's (calibration.artifact), or without one the shipped prior of the
endpoint's (GPU, engine) (calibration/priors), or where none ships the midpoint of the datasheet
floors, max + 0.5·(sum − max) (runtime_policy.tables' DATASHEET_MODEL); its bounds are
[Σ floor_max, Σ floor_sum] of the same steps (a calibrated prediction can sit above the sum: the
engine is slower than the pessimistic floor), and its uncertainty half their width.

Not read: `encoder_input_size`/`encoder_matched_size` (multimodal encoders are not modelled),
`decode_tokens_in_flight` (the KV fraction says the same from the engine's own count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

import planner
from calibration.artifact import Calibration
from calibration.costs import rates_for
from calibration.serving import MIXED_CHUNK_ENGINES
from integrations.launch import LaunchedDeployment
from planner.capacity import capacity

# llm-d's PredictionRequest (types.go): field → (kind, required). The six its NewPredictionRequest
# sets are required; the later fields default to 0 / "" as Go's zero values (an older client omits them).
REQUEST_FIELDS: dict[str, tuple[str, bool]] = {
    "kv_cache_percentage": ("fraction", True), "input_token_length": ("count", True),
    "num_request_waiting": ("count", True), "num_request_running": ("count", True),
    "num_tokens_generated": ("count", True), "prefix_cache_score": ("fraction", True),
    "encoder_input_size": ("count", False), "encoder_matched_size": ("count", False),
    "pod_type": ("pod", False), "prefill_tokens_in_flight": ("count", False), "decode_tokens_in_flight": ("count", False),
}
POD_TYPES = ("", "prefill", "decode")  # types.go: "prefill", "decode", or "" for monolithic
MAX_TOKENS = 1 << 26  # a prompt or queue past 64 M tokens is no request this model prices
MAX_REQUESTS = 1 << 20


class RequestError(ValueError):
    """A malformed prediction request; the message is one line naming the field."""


def check_request(req, where: str = "") -> dict:
    """One request map → its fields with Go's zero values filled; RequestError naming the field."""
    if not isinstance(req, dict):
        raise RequestError(f"{where or 'request'} must be a JSON object, got {type(req).__name__}")
    out = {}
    for name, (kind, required) in REQUEST_FIELDS.items():
        at = f"{where}.{name}" if where else name
        if name not in req:
            if required:
                raise RequestError(f"missing field {at}")
            out[name] = "" if kind == "pod" else 0
            continue
        v = req[name]
        if kind == "pod":
            if v not in POD_TYPES:
                raise RequestError(f"{at}={v!r} must be \"prefill\", \"decode\" or \"\"")
            out[name] = v
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise RequestError(f"{at}={v!r} is not a number")
        if kind == "fraction":
            if not 0.0 <= v <= 1.0:
                raise RequestError(f"{at} must be between 0.0 and 1.0, got {v}")
            out[name] = float(v)
        else:
            if v != int(v):
                raise RequestError(f"{at}={v!r} is not a whole number")
            if v < 0:
                raise RequestError(f"{at} must be non-negative, got {v}")
            limit = MAX_REQUESTS if name.startswith("num_request") else MAX_TOKENS
            if v > limit:
                raise RequestError(f"{at}={v} is above {limit}")
            out[name] = int(v)
    return out


@dataclass(frozen=True)
class Prediction:
    ttft_s: np.ndarray  # [N]
    tpot_s: np.ndarray
    ttft_bounds_s: np.ndarray  # [N, 2]: Σ floor_max, Σ floor_sum
    tpot_bounds_s: np.ndarray


class LatencyModel:
    """One endpoint deployment's TTFT/TPOT predictor (module docstring)."""

    def __init__(self, launched: LaunchedDeployment, calibration: Calibration | None = None):
        dep = launched.deployment
        if calibration is not None and calibration.rates.hardware != dep.hardware.name:
            raise planner.SpecError(f"calibration is for {calibration.rates.hardware}, the endpoint runs on {dep.hardware.name}")
        self.launched = launched
        self.dep = dep
        if calibration is None and dep.engine_kernels:
            # NOTE: the shipped prior of the endpoint's (GPU, engine) by default (issue 26); the
            # datasheet midpoint only where none ships
            from calibration.priors import prior_for

            calibration = prior_for(dep.hardware.name, dep.engine)
        self.calibration = calibration
        self.chunk = int(launched.chunk_tokens)
        self.mixed = dep.engine in MIXED_CHUNK_ENGINES
        self.pool_tokens = float(capacity(dep, 1.0).distinct_tokens) / dep.replicas
        self._rates = rates_for(dep.hardware)

    def _times(self, batch, ctx, pre, pre_ctx) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(prediction, floor_max, floor_sum) seconds of steps [S]."""
        cost = planner.step_cost(self.dep, planner.DecodeLoad.equal(batch, np.maximum(ctx, 1.0)),
                                 prefill_tokens=pre, prefill_context=pre_ctx)
        lo = np.asarray(cost.floor_max_s, dtype=np.float64)
        hi = np.asarray(cost.floor_sum_s, dtype=np.float64)
        if self.calibration is None:
            return lo + 0.5 * (hi - lo), lo, hi
        return self.calibration.predict_s(cost), lo, hi

    def predict(self, reqs: list[dict]) -> Prediction:
        """Checked request maps (check_request) → TTFT/TPOT [N] with bounds, in one planner call."""
        n = len(reqs)
        kv = np.array([r["kv_cache_percentage"] for r in reqs], dtype=np.float64)
        isl = np.array([r["input_token_length"] for r in reqs], dtype=np.float64)
        wait = np.array([r["num_request_waiting"] for r in reqs], dtype=np.float64)
        run = np.array([r["num_request_running"] for r in reqs], dtype=np.float64)
        gen = np.array([r["num_tokens_generated"] for r in reqs], dtype=np.float64)
        hit = np.array([r["prefix_cache_score"] for r in reqs], dtype=np.float64)
        queued = np.array([r["prefill_tokens_in_flight"] for r in reqs], dtype=np.float64)
        pod = [r["pod_type"] for r in reqs]
        used = kv * self.pool_tokens
        dec_b = run + 1.0
        dec_ctx = (used + isl + gen) / dec_b
        new = np.maximum(np.ceil(isl * (1.0 - hit)), 1.0)  # an engine extends at least one token
        cached = np.maximum(isl - new, 0.0)
        queue_tokens = np.where(queued > 0, queued, wait * isl)
        c = float(self.chunk)
        # steps: per request one decode step, one full queue chunk (weighted by queue/chunk), and its own chunks
        rows, owner, kind, weight = [], [], [], []
        budget = np.maximum(c - dec_b, 1.0) if self.mixed else np.full(n, c)
        for i in range(n):
            b_pre = run[i] if self.mixed else 0.0
            rows.append((dec_b[i], dec_ctx[i], 0.0, 0.0))
            owner.append(i), kind.append(1), weight.append(1.0)
            if pod[i] == "decode":
                rows.append((dec_b[i], dec_ctx[i], 0.0, 0.0))
                owner.append(i), kind.append(0), weight.append(1.0)
                continue
            if queue_tokens[i] > 0:
                rows.append((b_pre, dec_ctx[i], budget[i], 0.0))
                owner.append(i), kind.append(0), weight.append(queue_tokens[i] / budget[i])
            k = int(math.ceil(new[i] / budget[i]))
            for j in range(k):
                size = min(budget[i], new[i] - j * budget[i])
                rows.append((b_pre, dec_ctx[i], size, cached[i] + j * budget[i]))
                owner.append(i), kind.append(0), weight.append(1.0)
        a = np.array(rows, dtype=np.float64)
        pred, lo, hi = self._times(a[:, 0], a[:, 1], a[:, 2], a[:, 3])
        owner_a, kind_a, w = np.array(owner), np.array(kind), np.array(weight)
        slot = owner_a * 2 + kind_a  # 0: ttft, 1: tpot

        def total(v):
            return np.bincount(slot, weights=w * v, minlength=2 * n).reshape(n, 2)

        t, l, h = total(pred), total(lo), total(hi)
        prefill_pod = np.array([p == "prefill" for p in pod])
        for arr in (t, l, h):
            arr[prefill_pod, 1] = 0.0
        return Prediction(t[:, 0], t[:, 1], np.stack([l[:, 0], h[:, 0]], axis=1), np.stack([l[:, 1], h[:, 1]], axis=1))
