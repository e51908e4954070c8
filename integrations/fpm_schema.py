"""SGLang's forward-pass metrics (FPM): the record schema as SGLang's code defines it, read into a
plain frozen record, or refused with the reason.

Source (sgl-project/sglang, merged in PR #22789):
- `python/sglang/srt/observability/forward_pass_metrics.py`: the msgspec structs
  `ForwardPassMetrics(version: int = 1, worker_id: str, dp_rank: int, counter_id: int, wall_time:
  float, scheduled_requests: ScheduledRequestMetrics, queued_requests: QueuedRequestMetrics)`,
  `ScheduledRequestMetrics(num_prefill_requests, sum_prefill_tokens, var_prefill_length,
  sum_prefill_kv_tokens, num_decode_requests, sum_decode_kv_tokens, var_decode_kv_tokens)` and
  `QueuedRequestMetrics(num_prefill_requests, sum_prefill_tokens, var_prefill_length,
  num_decode_requests, sum_decode_kv_tokens, var_decode_kv_tokens)`; `FPM_VERSION = 1`. Encoded
  with `msgspec.msgpack.Encoder()` (a Struct is a map keyed by field name; the struct's comment
  warns of positional encoding, so an array in field order is read too). `_FpmPublisherThread`
  sends each as a ZMQ multipart `(topic b"", 8-byte big-endian sequence, payload)` on a PUB socket
  bound at `{--forward-pass-metrics-ipc-name}.{dp_rank}`; an idle heartbeat is a record of zeros
  with wall_time 0. The first revision of the struct had no `version` and `counter_id`; both are
  optional here.
- `python/sglang/srt/observability/scheduler_metrics_mixin.py` (`_build_scheduled_request_metrics`,
  `_emit_forward_pass_metrics`; `managers/scheduler_components/metrics_reporter.py` after the
  2026 refactor): `wall_time` is the iteration's GPU time from the DeviceTimer (seconds);
  `sum_prefill_tokens` is the batch's new input tokens (`prefill_stats.log_input_tokens`),
  `sum_prefill_kv_tokens` their cached prefix (Σ len(req.prefix_indices)); `num_decode_requests`,
  `sum_decode_kv_tokens` and `var_decode_kv_tokens` are count, sum and population variance of the
  decode requests' sequence lengths; a record is published only by attention-TP rank 0 of the last
  pipeline stage, one stream per attention-DP rank.

Does not: import msgspec or pyzmq at import time (`decode_payload` and `encode_record` do), or
price anything (integrations.follow does).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

FPM_VERSION = 1
TOP_FIELDS = ("version", "worker_id", "dp_rank", "counter_id", "wall_time", "scheduled_requests", "queued_requests")
TOP_FIELDS_V0 = ("worker_id", "dp_rank", "wall_time", "scheduled_requests", "queued_requests")  # before `version`
SCHEDULED_FIELDS = ("num_prefill_requests", "sum_prefill_tokens", "var_prefill_length", "sum_prefill_kv_tokens",
                    "num_decode_requests", "sum_decode_kv_tokens", "var_decode_kv_tokens")
QUEUED_FIELDS = ("num_prefill_requests", "sum_prefill_tokens", "var_prefill_length", "num_decode_requests",
                 "sum_decode_kv_tokens", "var_decode_kv_tokens")
# What a measured step needs; the rest (ids, variances, the queue) is read where present.
REQUIRED_SCHEDULED = ("num_prefill_requests", "sum_prefill_tokens", "sum_prefill_kv_tokens", "num_decode_requests",
                      "sum_decode_kv_tokens")
_FLOATS = {"wall_time", "var_prefill_length", "var_decode_kv_tokens"}


class RecordError(ValueError):
    """A record that can't be read; the message is one line naming the field."""


@dataclass(frozen=True)
class FpmRecord:
    """One forward pass of one scheduler (one attention-DP rank), in SGLang's terms."""

    worker_id: str
    dp_rank: int
    counter_id: int
    wall_time_s: float
    prefill_requests: int
    prefill_tokens: int  # new input tokens computed in this pass
    prefill_kv_tokens: int  # their cached prefix
    decode_requests: int
    decode_kv_tokens: int  # Σ sequence length of the decode requests
    decode_kv_var: float  # population variance of those lengths
    queued_prefill_requests: int = 0
    queued_prefill_tokens: int = 0
    queued_decode_requests: int = 0

    @property
    def is_heartbeat(self) -> bool:
        return self.wall_time_s == 0.0 and self.prefill_requests == 0 and self.decode_requests == 0

    def to_json(self) -> dict:
        """The record as SGLang's struct would encode it (msgspec.json), for a recorded stream."""
        return {"version": FPM_VERSION, "worker_id": self.worker_id, "dp_rank": self.dp_rank,
                "counter_id": self.counter_id, "wall_time": self.wall_time_s,
                "scheduled_requests": {"num_prefill_requests": self.prefill_requests,
                                       "sum_prefill_tokens": self.prefill_tokens, "var_prefill_length": 0.0,
                                       "sum_prefill_kv_tokens": self.prefill_kv_tokens,
                                       "num_decode_requests": self.decode_requests,
                                       "sum_decode_kv_tokens": self.decode_kv_tokens,
                                       "var_decode_kv_tokens": self.decode_kv_var},
                "queued_requests": {"num_prefill_requests": self.queued_prefill_requests,
                                    "sum_prefill_tokens": self.queued_prefill_tokens, "var_prefill_length": 0.0,
                                    "num_decode_requests": self.queued_decode_requests,
                                    "sum_decode_kv_tokens": 0, "var_decode_kv_tokens": 0.0}}


def _as_map(obj, fields: tuple[str, ...], where: str) -> dict:
    if isinstance(obj, dict):
        return obj
    if isinstance(obj, (list, tuple)):  # positional (array_like) encoding, in field order
        if len(obj) > len(fields):
            raise RecordError(f"{where}: {len(obj)} positional fields, the schema has {len(fields)}")
        return dict(zip(fields, obj))
    raise RecordError(f"{where}: a {type(obj).__name__}, not a map of fields")


def _number(m: dict, key: str, where: str, required: bool):
    if key not in m:
        if required:
            raise RecordError(f"missing field {where}{key}")
        return 0.0 if key in _FLOATS else 0
    v = m[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise RecordError(f"field {where}{key}={v!r} is not a number")
    if key not in _FLOATS and not (isinstance(v, int) or float(v).is_integer()):
        raise RecordError(f"field {where}{key}={v!r} is not a whole number")
    if not math.isfinite(v) or v < 0:
        raise RecordError(f"field {where}{key}={v!r} must be finite and ≥ 0")
    return float(v) if key in _FLOATS else int(v)


def parse_record(obj) -> FpmRecord:
    """A decoded record (a map, or an array in field order) → FpmRecord; RecordError naming the field."""
    if isinstance(obj, (list, tuple)):
        fields = TOP_FIELDS if obj and isinstance(obj[0], int) and not isinstance(obj[0], bool) else TOP_FIELDS_V0
    else:
        fields = TOP_FIELDS
    top = _as_map(obj, fields, "record")
    version = top.get("version", FPM_VERSION)
    if version != FPM_VERSION:
        raise RecordError(f"schema version {version!r}: floorfirst reads SGLang's FPM_VERSION {FPM_VERSION}")
    if "scheduled_requests" not in top:
        raise RecordError("missing field scheduled_requests")
    s = _as_map(top["scheduled_requests"], SCHEDULED_FIELDS, "scheduled_requests")
    q = _as_map(top.get("queued_requests", {}), QUEUED_FIELDS, "queued_requests")
    worker = top.get("worker_id", "")
    if not isinstance(worker, str):
        raise RecordError(f"field worker_id={worker!r} is not a string")
    sched = {k: _number(s, k, "scheduled_requests.", k in REQUIRED_SCHEDULED) for k in SCHEDULED_FIELDS}
    queued = {k: _number(q, k, "queued_requests.", False) for k in QUEUED_FIELDS}
    wall = _number(top, "wall_time", "", True)
    rec = FpmRecord(worker_id=worker, dp_rank=_number(top, "dp_rank", "", False),
                    counter_id=_number(top, "counter_id", "", False), wall_time_s=wall,
                    prefill_requests=sched["num_prefill_requests"], prefill_tokens=sched["sum_prefill_tokens"],
                    prefill_kv_tokens=sched["sum_prefill_kv_tokens"], decode_requests=sched["num_decode_requests"],
                    decode_kv_tokens=sched["sum_decode_kv_tokens"], decode_kv_var=sched["var_decode_kv_tokens"],
                    queued_prefill_requests=queued["num_prefill_requests"],
                    queued_prefill_tokens=queued["sum_prefill_tokens"],
                    queued_decode_requests=queued["num_decode_requests"])
    if rec.decode_requests == 0 and rec.decode_kv_tokens > 0:
        raise RecordError(f"scheduled_requests: sum_decode_kv_tokens={rec.decode_kv_tokens} with no decode request")
    if rec.prefill_tokens > 0 and rec.prefill_requests == 0:
        raise RecordError(f"scheduled_requests: sum_prefill_tokens={rec.prefill_tokens} with no prefill request")
    if wall == 0.0 and not rec.is_heartbeat:
        raise RecordError("wall_time 0 for a pass that scheduled requests")
    return rec


def decode_payload(payload: bytes) -> FpmRecord:
    """One msgpack payload (the third frame of SGLang's multipart message) → FpmRecord."""
    import msgspec  # the `follow` extra: SGLang's own codec

    try:
        obj = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise RecordError(f"payload is not msgpack: {str(exc).splitlines()[0]}") from None
    return parse_record(obj)


def encode_record(obj: dict) -> bytes:
    """A record map → the msgpack bytes SGLang's encoder writes for the struct (keys in field order)."""
    import msgspec

    return msgspec.msgpack.encode(obj)
