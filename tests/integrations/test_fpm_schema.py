"""SGLang's forward-pass record read as SGLang's code writes it (integrations.fpm_schema): the
msgspec structs of python/sglang/srt/observability/forward_pass_metrics.py, copied field for field
below, encode to bytes floorfirst decodes into the same numbers; a missing or bad field is refused
with its name."""

from __future__ import annotations

import pytest

from integrations.fpm_schema import (QUEUED_FIELDS, SCHEDULED_FIELDS, TOP_FIELDS, RecordError, decode_payload,
                                     parse_record)

msgspec = pytest.importorskip("msgspec")


# sgl-project/sglang python/sglang/srt/observability/forward_pass_metrics.py (FPM_VERSION 1), verbatim fields
class ScheduledRequestMetrics(msgspec.Struct, frozen=True, gc=False):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    sum_prefill_kv_tokens: int = 0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class QueuedRequestMetrics(msgspec.Struct, frozen=True, gc=False):
    num_prefill_requests: int = 0
    sum_prefill_tokens: int = 0
    var_prefill_length: float = 0.0
    num_decode_requests: int = 0
    sum_decode_kv_tokens: int = 0
    var_decode_kv_tokens: float = 0.0


class ForwardPassMetrics(msgspec.Struct, frozen=True, gc=False):
    version: int = 1
    worker_id: str = ""
    dp_rank: int = 0
    counter_id: int = 0
    wall_time: float = 0.0
    scheduled_requests: ScheduledRequestMetrics = ScheduledRequestMetrics()
    queued_requests: QueuedRequestMetrics = QueuedRequestMetrics()


class ArrayLike(ForwardPassMetrics, array_like=True):  # the positional encoding SGLang's comment warns of
    pass


def _sglang(**kw) -> ForwardPassMetrics:
    return ForwardPassMetrics(worker_id="w-7", dp_rank=3, counter_id=41, wall_time=0.0123,
                              scheduled_requests=ScheduledRequestMetrics(2, 12, 4.0, 5, 1, 8, 0.0),
                              queued_requests=QueuedRequestMetrics(1, 6, 0.0, 1, 9, 0.0), **kw)


def test_field_names_are_sglangs():
    assert TOP_FIELDS == ForwardPassMetrics.__struct_fields__
    assert SCHEDULED_FIELDS == ScheduledRequestMetrics.__struct_fields__
    assert QUEUED_FIELDS == QueuedRequestMetrics.__struct_fields__


@pytest.mark.parametrize("struct", [ForwardPassMetrics, ArrayLike])
def test_sglang_bytes_decode_to_the_same_numbers(struct):
    m = _sglang()
    payload = msgspec.msgpack.encode(struct(**{f: getattr(m, f) for f in m.__struct_fields__}))
    r = decode_payload(payload)
    assert (r.worker_id, r.dp_rank, r.counter_id, r.wall_time_s) == ("w-7", 3, 41, 0.0123)
    assert (r.prefill_requests, r.prefill_tokens, r.prefill_kv_tokens) == (2, 12, 5)
    assert (r.decode_requests, r.decode_kv_tokens) == (1, 8)
    assert (r.queued_prefill_requests, r.queued_prefill_tokens, r.queued_decode_requests) == (1, 6, 1)


def test_heartbeat_and_the_first_revision_without_version():
    assert decode_payload(msgspec.msgpack.encode(ForwardPassMetrics(worker_id="w", dp_rank=1))).is_heartbeat
    v0 = {"worker_id": "w", "dp_rank": 0, "wall_time": 0.01,
          "scheduled_requests": {k: 1 for k in SCHEDULED_FIELDS}, "queued_requests": {}}
    assert parse_record(v0).decode_requests == 1


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["scheduled_requests"].pop("sum_decode_kv_tokens"), "missing field scheduled_requests.sum_decode_kv_tokens"),
    (lambda d: d.pop("wall_time"), "missing field wall_time"),
    (lambda d: d.pop("scheduled_requests"), "missing field scheduled_requests"),
    (lambda d: d.update(wall_time="fast"), "field wall_time='fast' is not a number"),
    (lambda d: d.update(wall_time=float("nan")), "must be finite"),
    (lambda d: d["scheduled_requests"].update(num_decode_requests=-1), "num_decode_requests=-1 must be finite and ≥ 0"),
    (lambda d: d["scheduled_requests"].update(num_decode_requests=1.5), "is not a whole number"),
    (lambda d: d.update(version=2), "schema version 2"),
    (lambda d: d.update(scheduled_requests=[1] * 9), "9 positional fields"),
    (lambda d: d.update(wall_time=0.0), "wall_time 0 for a pass that scheduled requests"),
])
def test_a_bad_record_is_refused_naming_the_field(mutate, message):
    d = msgspec.to_builtins(_sglang())
    mutate(d)
    with pytest.raises(RecordError) as exc:
        parse_record(d)
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_payload_that_is_not_msgpack():
    with pytest.raises(RecordError, match="not msgpack"):
        decode_payload(b"\xc1")
