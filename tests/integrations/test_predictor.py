"""`floorfirst predictor` over real HTTP (httpx against uvicorn on loopback): llm-d's
latency-predictor routes, request and response fields exactly as llm-d's Go client types define
them, a bulk call of 100 endpoints, malformed requests refused with a 4xx and one line, and the
calibration it serves (and re-reads) named by /status."""

from __future__ import annotations

import json
import os
import shutil
import socket
import threading
import time

import pytest

pytest.importorskip("starlette")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from integrations.predictor_app import create_app  # noqa: E402
from tests.integrations.conftest import CAL  # noqa: E402

# llm-d/llm-d-router (formerly llm-d-inference-scheduler) at 808ec6e,
# pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/latencypredictorclient/types.go:
# the json tags of PredictionRequest, PredictionResponse, BulkPredictionResponseWithErrors,
# BulkPredictionResponse, BulkPredictionError and ServerStatusResponse.
GO_REQUEST = {"kv_cache_percentage", "input_token_length", "num_request_waiting", "num_request_running",
              "num_tokens_generated", "prefix_cache_score", "encoder_input_size", "encoder_matched_size", "pod_type",
              "prefill_tokens_in_flight", "decode_tokens_in_flight"}
GO_RESPONSE = {"ttft_ms", "tpot_ms", "ttft_uncertainty", "tpot_uncertainty", "ttft_prediction_bounds",
               "tpot_prediction_bounds", "predicted_at", "model_type", "objective_type", "quantile", "last_model_load"}
GO_BULK_WITH_ERRORS = {"predictions", "errors", "total_requests", "successful_predictions", "failed_predictions",
                       "processing_time_ms"}
GO_BULK = {"predictions", "total_requests", "successful_predictions", "failed_predictions", "processing_time_ms"}
GO_BULK_ERROR = {"index", "error", "request"}
GO_STATUS = {"is_ready", "model_type", "objective_type", "quantile", "last_model_load", "training_server_url", "models_exist"}


def request(**kw) -> dict:
    """A PredictionRequest as Go's encoding/json writes it: every field (pod_type omitted when empty)."""
    r = {"kv_cache_percentage": 0.3, "input_token_length": 2000, "num_request_waiting": 2, "num_request_running": 16,
         "num_tokens_generated": 0, "prefix_cache_score": 0.5, "encoder_input_size": 0, "encoder_matched_size": 0,
         "prefill_tokens_in_flight": 0, "decode_tokens_in_flight": 0}
    r.update(kw)
    return r


class Server:
    def __init__(self, app):
        # NOTE: a socket made with proto IPPROTO_TCP gets TCP_NODELAY from asyncio (uvicorn's own
        # sockets do); without it each response waits on the client's delayed ACK (~40 ms)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self.sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.01)
        # llm-d's Go client (net/http) writes with TCP_NODELAY, as this client does
        transport = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.sock.getsockname()[1]}", transport=transport, timeout=30)

    def close(self):
        self.client.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def server(launched):
    s = Server(create_app(launched))
    yield s
    s.close()


def test_status_is_llm_d_s_and_says_which_model(server):
    r = server.client.get("/status")
    assert r.status_code == 200
    doc = r.json()
    assert set(doc) == GO_STATUS | {"floorfirst"}
    assert doc["is_ready"] is True and doc["model_type"] == "lightgbm" and doc["models_exist"] == {"ttft": True, "tpot": True}
    ff = doc["floorfirst"]
    # no --calibration: the shipped prior of (h200, sglang) prices it, and the status says so (issue 26)
    assert ff["calibration"] is None and "prior" in ff["model"] and ff["chunk_tokens"] == 8192
    assert ff["deployment"] == "deepseek-v3.2 on 8 × h200, tp/tp (sglang)"


def test_predict_answers_go_s_response_fields(server):
    r = server.client.post("/predict", json=request())
    assert r.status_code == 200
    doc = r.json()
    assert set(doc) == GO_RESPONSE
    assert isinstance(doc["ttft_ms"], float) and isinstance(doc["tpot_ms"], float)
    lo, hi = doc["ttft_prediction_bounds"]
    # without a calibration the shipped prior prices it: at or above the optimistic floor, and (its
    # efficiencies and overhead) possibly above the pessimistic one (issue 26)
    assert 0 < lo <= doc["ttft_ms"]
    assert doc["ttft_uncertainty"] == pytest.approx((hi - lo) / 2)
    lo, hi = doc["tpot_prediction_bounds"]
    assert 0 < lo <= doc["tpot_ms"]
    assert doc["predicted_at"].endswith("Z") and doc["last_model_load"].endswith("Z")


def _ttft_tpot(server, **kw):
    d = server.client.post("/predict", json=request(**kw)).json()
    return d["ttft_ms"], d["tpot_ms"]


def test_predictions_move_with_the_endpoint_s_state(server):
    base = _ttft_tpot(server)
    assert _ttft_tpot(server, input_token_length=16000)[0] > base[0] * 2  # a longer prompt: more chunks
    assert _ttft_tpot(server, num_request_waiting=8)[0] > base[0]  # a longer queue ahead
    assert _ttft_tpot(server, prefix_cache_score=0.95)[0] < base[0]  # most of it cached
    assert _ttft_tpot(server, prefill_tokens_in_flight=40000)[0] > base[0]
    assert _ttft_tpot(server, num_request_running=64)[1] > base[1]  # a bigger decode batch
    assert _ttft_tpot(server, kv_cache_percentage=0.9)[1] > base[1]  # longer contexts
    assert _ttft_tpot(server, pod_type="prefill")[1] == 0.0  # a prefill pod decodes nothing
    assert _ttft_tpot(server, pod_type="decode")[0] < base[0]  # the prefill ran elsewhere


def test_bulk_of_100_endpoints(server):
    body = {"requests": [request(num_request_running=i % 64, kv_cache_percentage=(i % 10) / 10) for i in range(100)]}
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        r = server.client.post("/predict/bulk/strict", json=body)
        best = min(best, time.perf_counter() - t0)
        assert r.status_code == 200
    doc = r.json()
    assert set(doc) == GO_BULK and doc["total_requests"] == doc["successful_predictions"] == 100
    assert all(set(p) == GO_RESPONSE for p in doc["predictions"])
    # benchmarks/predictor_latency.py measures it; here only loosely (a shared 2-core CI machine)
    assert doc["processing_time_ms"] < 50 and best < 0.25
    doc = server.client.post("/predict/bulk", json=body).json()
    assert set(doc) == GO_BULK_WITH_ERRORS and doc["errors"] == [] and doc["failed_predictions"] == 0


def test_bulk_answers_the_good_entries_and_lists_the_bad(server):
    r = server.client.post("/predict/bulk", json={"requests": [request(), {"kv_cache_percentage": 0.1}, request()]})
    assert r.status_code == 200
    doc = r.json()
    assert doc["successful_predictions"] == 2 and doc["failed_predictions"] == 1
    assert doc["predictions"][1] is None and set(doc["predictions"][0]) == GO_RESPONSE
    (err,) = doc["errors"]
    assert set(err) == GO_BULK_ERROR and err["index"] == 1
    assert err["error"] == "missing field requests[1].input_token_length"


@pytest.mark.parametrize("path, content, status, detail", [
    ("/predict", b"{nope", 400, "request body is not JSON"),
    ("/predict", b"\xff\xfe", 400, "not UTF-8"),
    ("/predict", b"[1, 2]", 422, "must be a JSON object"),
    ("/predict", b'{"kv_cache_percentage": 0.5}', 422, "missing field input_token_length"),
    ("/predict", None, 422, "kv_cache_percentage must be between 0.0 and 1.0, got 1.5"),
    ("/predict", b'{"kv_cache_percentage": NaN}', 400, "not a number"),
    ("/predict/bulk/strict", b'{"requests": []}', 422, "no prediction requests provided"),
    ("/predict/bulk/strict", b'{"reqs": []}', 422, '{"requests": [PredictionRequest, ...]}'),
    ("/predict/bulk/strict", "strict-one-bad", 422, "requests[1].num_request_running must be non-negative, got -3"),
    ("/predict/bulk", b'{"requests": 5}', 422, '{"requests": [PredictionRequest, ...]}'),
    ("/predict", "huge", 413, "over"),
])
def test_malformed_requests_get_a_4xx_and_one_line(server, path, content, status, detail):
    if content is None:
        content = json.dumps(request(kv_cache_percentage=1.5)).encode()
    elif content == "strict-one-bad":
        content = json.dumps({"requests": [request(), request(num_request_running=-3)]}).encode()
    elif content == "huge":
        content = b" " * (5 << 20)
    r = server.client.post(path, content=content, headers={"content-type": "application/json"})
    assert r.status_code == status
    doc = r.json()
    assert set(doc) == {"detail"} and detail in doc["detail"] and "\n" not in doc["detail"]


def test_wrong_method_and_unknown_route(server):
    assert server.client.get("/predict").status_code == 405
    assert server.client.post("/add_training_data_bulk", json={"entries": []}).status_code == 404


def test_a_calibration_is_served_named_and_re_read(launched, tmp_path):
    cal = tmp_path / "cal.json"
    shutil.copy(CAL, cal)
    s = Server(create_app(launched, str(cal)))
    try:
        st = s.client.get("/status").json()["floorfirst"]
        assert st["calibration"] == str(cal) and st["calibration_created_utc"] and st["model"].startswith("calibrated")
        first = s.client.post("/predict", json=request()).json()
        assert first["ttft_ms"] > 0
        # a refit written over it (follow --out) is served after the next check
        doc = json.loads(cal.read_text())
        doc["params"]["overhead_s"] += 0.002
        doc["created_utc"] = "2030-01-01T00:00:00Z"
        cal.write_text(json.dumps(doc))
        os.utime(cal, ns=(time.time_ns(), time.time_ns() + 10**9))
        time.sleep(1.1)
        st = s.client.get("/status").json()["floorfirst"]
        assert st["calibration_created_utc"] == "2030-01-01T00:00:00Z" and st["reload_error"] is None
        again = s.client.post("/predict", json=request()).json()
        assert again["tpot_ms"] == pytest.approx(first["tpot_ms"] + 2.0, abs=0.01)
        # a broken file keeps the last good calibration served, and says why
        cal.write_text("{broken")
        time.sleep(1.1)
        st = s.client.get("/status").json()["floorfirst"]
        assert "serving the last good calibration" in st["reload_error"]
        assert s.client.post("/predict", json=request()).json()["tpot_ms"] == pytest.approx(again["tpot_ms"])
    finally:
        s.close()


@pytest.mark.parametrize("argv, message", [
    (["--port", "0"], "--port=0"),
    (["--calibration", "/nonexistent.json"], "/nonexistent.json"),
    (["--model-type", "forest"], "model_type='forest'"),
    (["--hardware", "nope"], "nope"),
])
def test_predictor_refuses_bad_options_before_serving(capsys, argv, message):
    from cli.main import main
    from tests.integrations.conftest import LINE

    with pytest.raises(SystemExit) as exc:
        main(["predictor", "--engine-args", LINE, *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and message in err and err.count("\n") == 1, err
