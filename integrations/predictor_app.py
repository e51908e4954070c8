"""llm-d's latency-predictor HTTP API as a Starlette (ASGI) app, answered by
integrations.predictor's LatencyModel.

Routes and shapes follow llm-d's Go client (llm-d/llm-d-router, formerly llm-d-inference-scheduler,
pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/latencypredictorclient/):
- `POST /predict`: a `PredictionRequest` → a `PredictionResponse` (types.go) — `ttft_ms`, `tpot_ms`,
  `ttft_uncertainty`, `tpot_uncertainty`, `ttft_prediction_bounds`, `tpot_prediction_bounds`,
  `predicted_at`, `model_type`, `objective_type`, `quantile`, `last_model_load`;
- `POST /predict/bulk`: `{"requests": [...]}` → `BulkPredictionResponseWithErrors` (a bad entry is
  an error entry `{index, error, request}` and a null prediction; the rest are answered);
- `POST /predict/bulk/strict`: the same request → `BulkPredictionResponse`; one bad entry fails all
  (prediction.go `PredictBulkStrict`: "fail if any single prediction fails");
- `GET /status`: `ServerStatusResponse` (`is_ready`, `model_type`, `objective_type`, `quantile`,
  `last_model_load`, `training_server_url`, `models_exist`) plus a `floorfirst` object saying which
  calibration is loaded (Go's decoder ignores keys it doesn't know);
- `GET /healthz`, `GET /readyz`.
A body that isn't JSON is 400, a body over MAX_BODY_BYTES 413, a request that breaks the contract
(a missing or out-of-range field, as `ValidatePredictionRequest` checks them) 422; each with
`{"detail": "<one line>"}`.

NOTE: the Go client's `Predict` sends single predictions over HTTP only when `/status` reports
model_type `xgboost` or `lightgbm` (prediction.go; `bayesian_ridge` is evaluated from coefficients
in the router), so `model_type` is configurable and defaults to `lightgbm` (a name that routes
over HTTP without the native-XGBoost download path); bulk calls don't read it. `objective_type` is
`quantile` at 0.5: the calibration is fitted by a robust loss on log(predicted/measured), a
median-seeking fit.

The calibration file is re-read when it changes (checked at most once a second), so `floorfirst
follow --out cal.json` next to `floorfirst predictor --calibration cal.json` serves each refit; a
file that fails to load keeps the last good calibration served, and /status says why.

Does not: train (`/add_training_data_bulk` is not served: the model learns from the engine's own
forward passes, `floorfirst follow`). starlette is imported here only (the `predictor` extra).
"""

from __future__ import annotations

import os
import threading
import time
from datetime import datetime, timezone

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from integrations.launch import LaunchedDeployment
from integrations.predictor import LatencyModel, RequestError, check_request
from planner.errors import SpecError
from planner.inputs import json_value

MAX_BODY_BYTES = 4 << 20
MAX_BULK = 1000  # the Go client caps a bulk call at 100 (MaxBulkSize); coalesced calls may hold more
MODEL_TYPES = ("lightgbm", "xgboost", "bayesian_ridge", "floorfirst")
RELOAD_CHECK_S = 1.0


def _utc(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Served:
    """The model being served and where its calibration came from; re-read when the file changes."""

    def __init__(self, launched: LaunchedDeployment, calibration_path: str | None):
        from calibration.artifact import load_calibration

        self._load = load_calibration
        self.launched = launched
        self.path = calibration_path
        self.lock = threading.Lock()
        self.reload_error: str | None = None
        self._checked = 0.0
        self._stamp = None
        cal = self._read() if calibration_path else None
        self.model = LatencyModel(launched, cal)
        self.loaded_at = time.time()

    def _read(self):
        cal = self._load(self.path)  # SpecError (one line) for a missing or bad file
        st = os.stat(self.path)
        self._stamp = (st.st_mtime_ns, st.st_size)
        return cal

    def current(self) -> LatencyModel:
        if self.path is None:
            return self.model
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.model
        with self.lock:
            self._checked = now
            try:
                st = os.stat(self.path)
                if (st.st_mtime_ns, st.st_size) != self._stamp:
                    self.model = LatencyModel(self.launched, self._read())
                    self.loaded_at = time.time()
                    self.reload_error = None
            except (OSError, SpecError) as exc:
                self.reload_error = f"{self.path}: {str(exc).splitlines()[0]}; serving the last good calibration"
                self._stamp = None
            return self.model

    def describe(self) -> dict:
        m = self.model
        cal = m.calibration
        given = cal is not None and self.path is not None
        prior = cal is not None and not given
        return {"deployment": self.launched.label(), "engine_args": self.launched.text, "chunk_tokens": m.chunk,
                "kv_pool_tokens": m.pool_tokens, "calibration": self.path if given else None,
                "calibration_created_utc": cal.created_utc if given else None,
                "calibration_hardware": cal.rates.hardware if given else None,
                "model": ("calibrated: overhead + max + α·(sum − max) of the calibrated terms" if given else
                          f"prior: the shipped {cal.rates.hardware} × {cal.engine} prior (per-kernel tables): overhead + max + "
                          "α·(sum − max)" if prior else "datasheet floors' midpoint: max + 0.5·(sum − max)"),
                "bounds": "[Σ floor_max, Σ floor_sum] of the steps priced (datasheet)",
                "reload_error": self.reload_error}


def _error(status: int, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail.splitlines()[0]}, status_code=status)


async def _body(request: Request):
    size = request.headers.get("content-length")
    if size is not None and size.isdigit() and int(size) > MAX_BODY_BYTES:
        raise _Reply(_error(413, f"request body of {size} bytes is over {MAX_BODY_BYTES}"))
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise _Reply(_error(413, f"request body of {len(raw)} bytes is over {MAX_BODY_BYTES}"))
    try:
        return json_value(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise _Reply(_error(400, "request body is not UTF-8 JSON")) from None
    except SpecError as exc:
        raise _Reply(_error(400, f"request body is not JSON: {exc}")) from None


class _Reply(Exception):
    def __init__(self, response: JSONResponse):
        self.response = response


def create_app(launched: LaunchedDeployment, calibration_path: str | None = None, model_type: str = "lightgbm") -> Starlette:
    """The ASGI app; SpecError if the deployment or the calibration can't be read."""
    if model_type not in MODEL_TYPES:
        raise SpecError(f"model_type={model_type!r}: choose one of {', '.join(MODEL_TYPES)}")
    served = Served(launched, calibration_path)
    started = time.time()

    def response_items(model: LatencyModel, reqs: list[dict]) -> list[dict]:
        p = model.predict(reqs)
        at = _utc(time.time())
        last = _utc(served.loaded_at)
        ms = 1e3
        out = []
        for i in range(len(reqs)):
            tb, pb = p.ttft_bounds_s[i] * ms, p.tpot_bounds_s[i] * ms
            out.append({"ttft_ms": float(p.ttft_s[i] * ms), "tpot_ms": float(p.tpot_s[i] * ms),
                        "ttft_uncertainty": float((tb[1] - tb[0]) / 2), "tpot_uncertainty": float((pb[1] - pb[0]) / 2),
                        "ttft_prediction_bounds": [float(tb[0]), float(tb[1])],
                        "tpot_prediction_bounds": [float(pb[0]), float(pb[1])],
                        "predicted_at": at, "model_type": model_type, "objective_type": "quantile", "quantile": 0.5,
                        "last_model_load": last})
        return out

    async def predict(request: Request):
        try:
            body = await _body(request)
            req = check_request(body)
        except _Reply as r:
            return r.response
        except RequestError as exc:
            return _error(422, str(exc))
        return JSONResponse(response_items(served.current(), [req])[0])

    def _requests(body) -> list:
        if not isinstance(body, dict) or not isinstance(body.get("requests"), list):
            raise RequestError('the body must be {"requests": [PredictionRequest, ...]}')
        reqs = body["requests"]
        if not reqs:
            raise RequestError("no prediction requests provided")
        if len(reqs) > MAX_BULK:
            raise RequestError(f"too many requests: {len(reqs)} (max: {MAX_BULK})")
        return reqs

    async def bulk(request: Request):
        t0 = time.perf_counter()
        try:
            reqs = _requests(await _body(request))
        except _Reply as r:
            return r.response
        except RequestError as exc:
            return _error(422, str(exc))
        good, errors, idx = [], [], []
        for i, r in enumerate(reqs):
            try:
                good.append(check_request(r, f"requests[{i}]"))
                idx.append(i)
            except RequestError as exc:
                errors.append({"index": i, "error": str(exc), "request": r if isinstance(r, dict) else {}})
        preds: list = [None] * len(reqs)
        if good:
            for i, item in zip(idx, response_items(served.current(), good)):
                preds[i] = item
        return JSONResponse({"predictions": preds, "errors": errors, "total_requests": len(reqs),
                             "successful_predictions": len(good), "failed_predictions": len(errors),
                             "processing_time_ms": (time.perf_counter() - t0) * 1e3})

    async def strict(request: Request):
        t0 = time.perf_counter()
        try:
            reqs = _requests(await _body(request))
            good = [check_request(r, f"requests[{i}]") for i, r in enumerate(reqs)]
        except _Reply as r:
            return r.response
        except RequestError as exc:
            return _error(422, str(exc))
        items = response_items(served.current(), good)
        return JSONResponse({"predictions": items, "total_requests": len(reqs), "successful_predictions": len(items),
                             "failed_predictions": 0, "processing_time_ms": (time.perf_counter() - t0) * 1e3})

    async def status(request: Request):
        served.current()
        return JSONResponse({"is_ready": True, "model_type": model_type, "objective_type": "quantile", "quantile": 0.5,
                             "last_model_load": _utc(served.loaded_at), "training_server_url": "",
                             "models_exist": {"ttft": True, "tpot": True},
                             "floorfirst": {**served.describe(), "started_utc": _utc(started)}})

    async def healthz(request: Request):
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[Route("/predict", predict, methods=["POST"]), Route("/predict/bulk", bulk, methods=["POST"]),
                             Route("/predict/bulk/strict", strict, methods=["POST"]), Route("/status", status, methods=["GET"]),
                             Route("/healthz", healthz, methods=["GET"]), Route("/readyz", healthz, methods=["GET"])])
