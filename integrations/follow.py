"""Follow a running deployment: SGLang's forward-pass records (integrations.fpm_schema) as measured
steps, the calibration refit online over a rolling window, drift reported as `triage` reports a
step against a calibration, and the policy's tables kept current in the background.

Per batch of records (`Follower.ingest`):
1. each record is read (a malformed one is dropped, counted under its reason, and the rest go on);
   an idle heartbeat is counted and skipped;
2. the records are priced as steps of the launch line's deployment in one `planner.step_cost` call
   (`record_steps`): the decode requests at their mean context, the prefill chunk with its mean
   cached prefix; a record is one scheduler's pass, so under attention DP (an owner layout, one
   scheduler per rank) and with replicas the deployment's load is that scheduler's times the
   schedulers (NOTE: balanced: the busiest owner is priced with this record's requests);
3. each step is predicted by the calibration being served (the loaded one, else the hardware
   file's priors: `calibration.fit.priors_from`), and placed against it with
   `calibration.triage.triage_calibrated`: a step slower than the prediction by more than the
   margin (default `planner.triage.DEFAULT_THRESHOLD`, 15 %) is drift, reported with the resource
   of the largest calibrated term — the one `floorfirst triage --calibration` would profile;
4. the residual (m − p)/p per binding resource is kept for the records since the last refit;
5. every `refit_every` accepted steps, `calibration.fit.fit_calibration` refits on the last
   `window` steps (priced rows handed over as `calibration.costs.ProfileCosts`). A refit that
   fails (too few rows, a fit error) or predicts the window worse than the served calibration is
   not taken (worse: by more than REFIT_SLACK_PCT points of median error): the last good
   calibration stays served, and the reason is reported;
6. a taken refit is compiled into the runtime policy's tables
   (`runtime_policy.tables.compile_tables`) on a background thread; the tables served are the last
   compiled ones.

Does not: open sockets (integrations.fpm_stream does), or print (cli/commands/follow.py does).
NOTE: a step's cached-prefix attention is priced at the chunk's mean prefix
(sum_prefill_kv_tokens / num_prefill_requests): SGLang publishes no per-request prefix.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

import planner
from calibration.artifact import (PARAM_NAMES, Calibration, RowFeatures, StepFeatures, calibrated_terms_s,
                                  predict_from_features, step_features)
from calibration.costs import ProfileCosts, rates_for
from calibration.fit import fit_calibration, priors_from
from calibration.schema import LoadedRow, StepRow
from calibration.triage import triage_calibrated
from integrations.fpm_schema import FpmRecord, RecordError, parse_record
from integrations.launch import LaunchedDeployment
from planner.errors import SpecError
from planner.resources.vector import TIMED_RESOURCES
from planner.triage import DEFAULT_THRESHOLD

DEFAULT_WINDOW = 512
DEFAULT_REFIT_EVERY = 64
DRIFT_EVENTS_KEPT = 20
EXAMPLES_KEPT = 3
# A refit is taken unless it predicts its own window worse than the served model by more than this
# (percentage points of median error): two fits of one window differ by noise, a bad fit by more.
REFIT_SLACK_PCT = 0.5


@dataclass(frozen=True)
class PricedSteps:
    """Records priced as steps of the deployment, arrays [N]."""

    records: list[FpmRecord]
    batch: np.ndarray  # decode requests, whole deployment
    context: np.ndarray  # mean decode context, tokens
    prefill_tokens: np.ndarray
    prefill_context: np.ndarray
    measured_s: np.ndarray
    features: StepFeatures
    floor_max_s: np.ndarray
    floor_sum_s: np.ndarray
    datasheet_terms_s: np.ndarray  # [R, N]


def schedulers(dep: planner.Deployment) -> int:
    """Schedulers that publish records for one deployment step: one per owner group of the layout's
    placement (SGLang's DP attention: one per attention-DP rank; attention TP inside DP groups: one per
    group), per replica (planner.engines.scheduling)."""
    return dep.replicas * dep.placement.owner_groups


def record_steps(recs: list[FpmRecord], dep: planner.Deployment) -> PricedSteps:
    """Price records (none a heartbeat) as steps of `dep` in one call; SpecError if the planner refuses them."""
    n = schedulers(dep)
    dec = np.array([r.decode_requests for r in recs], dtype=np.float64)
    ctx = np.array([r.decode_kv_tokens / r.decode_requests if r.decode_requests else 1.0 for r in recs])
    pre = np.array([r.prefill_tokens for r in recs], dtype=np.float64)
    pre_ctx = np.array([r.prefill_kv_tokens / r.prefill_requests if r.prefill_requests else 0.0 for r in recs])
    meas = np.array([r.wall_time_s for r in recs], dtype=np.float64)
    cost = planner.step_cost(dep, planner.DecodeLoad.equal(dec * n, np.maximum(ctx, 1.0)), prefill_tokens=pre,
                             prefill_context=pre_ctx)
    feats = step_features(cost, rates_for(dep.hardware))
    return PricedSteps(recs, dec * n, ctx, pre, pre_ctx, meas, feats, np.asarray(cost.floor_max_s, dtype=np.float64),
                       np.asarray(cost.floor_sum_s, dtype=np.float64), feats.datasheet_terms_s())


@dataclass(frozen=True)
class Served:
    """The step model being served: a calibration, or the hardware's priors before the first one."""

    x: np.ndarray  # PARAM_NAMES order
    label: str
    calibration: Calibration | None = None
    source: str = "prior"  # 'prior' | 'loaded' | 'refit'

    def predict_s(self, f: StepFeatures) -> np.ndarray:
        return predict_from_features(f, self.x)

    def terms_s(self, f: StepFeatures) -> np.ndarray:
        return calibrated_terms_s(f, self.x)


def prior_model(dep: planner.Deployment) -> Served:
    """Before the first fit: the shipped prior of the deployment's (GPU, engine) (calibration/priors,
    issue 26), else the hardware file's efficiency defaults."""
    from calibration.priors import prior_for

    cal = prior_for(dep.hardware.name, dep.engine) if dep.engine_kernels else None
    if cal is not None:
        return Served(cal.vector_for(dep.engine), f"prior: the shipped {dep.hardware.name} × {dep.engine} prior "
                      "(per-kernel tables)", cal, "prior")
    vals, src = priors_from(dep.hardware.name, None)
    return Served(np.array([vals[n] for n in PARAM_NAMES]), f"prior: {src['hbm_weight_efficiency']}, α 0.5, no overhead")


def served_calibration(cal: Calibration, label: str, source: str) -> Served:
    return Served(cal.params.vector(), label, cal, source)


@dataclass
class Intake:
    """What came in and what was dropped, by reason (with a few example lines per reason)."""

    received: int = 0
    heartbeats: int = 0
    accepted: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)

    def drop(self, reason: str, count: int = 1, example: str | None = None) -> None:
        self.dropped[reason] += count
        if example is not None:
            ex = self.examples.setdefault(reason, [])
            if len(ex) < EXAMPLES_KEPT and example not in ex:
                ex.append(example)

    def to_json(self) -> dict:
        return {"received": self.received, "accepted": self.accepted, "heartbeats": self.heartbeats,
                "dropped_total": int(sum(self.dropped.values())),
                "dropped": {k: int(v) for k, v in sorted(self.dropped.items())},
                "drop_examples": {k: list(v) for k, v in sorted(self.examples.items())}}


def residual_by_resource(measured: np.ndarray, predicted: np.ndarray, terms: np.ndarray) -> dict[str, dict]:
    """(m − p)/p of the steps each resource binds (the largest calibrated term): count, median, p90 of |·|."""
    out = {}
    if measured.size == 0:
        return out
    r = (measured - predicted) / predicted
    binding = np.argmax(terms, axis=0)
    for k, name in enumerate(TIMED_RESOURCES):
        sel = binding == k
        if sel.any():
            out[name] = {"steps": int(sel.sum()), "median_residual_fraction": float(np.median(r[sel])),
                         "p90_abs_residual_fraction": float(np.percentile(np.abs(r[sel]), 90))}
    return out


class Follower:
    """The online loop's state; `ingest` is called with batches of decoded records (or raw maps)."""

    def __init__(self, launched: LaunchedDeployment, calibration: Calibration | None = None,
                 calibration_label: str = "", window: int = DEFAULT_WINDOW, refit_every: int = DEFAULT_REFIT_EVERY,
                 margin: float = DEFAULT_THRESHOLD, tables: bool = True, table_max_batch: int = 256,
                 source: str = "fpm", on_refit=None):
        if window < 8 or refit_every < 1:
            raise SpecError(f"window={window} must be ≥ 8 and refit_every={refit_every} ≥ 1")
        if not np.isfinite(margin) or margin < 0:
            raise SpecError(f"margin={margin} must be ≥ 0")
        self.launched = launched
        self.dep = launched.deployment
        self.window = window
        self.refit_every = refit_every
        self.margin = margin
        self.source = source
        self.on_refit = on_refit  # called with the taken Calibration (e.g. to write it out)
        if calibration is not None and calibration.rates.hardware != self.dep.hardware.name:
            raise SpecError(f"calibration is for {calibration.rates.hardware}, the deployment runs on {self.dep.hardware.name}")
        self.served = (served_calibration(calibration, calibration_label or "loaded calibration", "loaded")
                       if calibration is not None else prior_model(self.dep))
        self.intake = Intake()
        self._win: deque = deque(maxlen=window)  # per step: (StepRow fields, feature row, measured, fmax, fsum, terms)
        self._since_refit: list[tuple[float, float, np.ndarray]] = []  # (measured, predicted, terms [R]) since last refit
        self.drift_steps = 0
        self.drift_by_resource: Counter = Counter()
        self.drift_events: deque = deque(maxlen=DRIFT_EVENTS_KEPT)
        self.refits: list[dict] = []
        self.last_residuals: dict = {}
        self.abs_errors: list[float] = []  # |m − p|/p of every accepted step, as served on arrival
        self._tables_on = tables
        self._table_max_batch = table_max_batch
        self._tables_lock = threading.Lock()
        self.tables = None  # runtime_policy.tables.StepTimeTable of the last compiled model
        self.tables_status: dict = {"state": "off" if not tables else "not compiled", "model": None}
        self._compile_thread: threading.Thread | None = None
        self._compile_next: Served | None = None
        if tables:
            self._request_tables(self.served)

    # --- intake ---------------------------------------------------------------------------
    def ingest(self, items) -> list[dict]:
        """Read, price, predict and keep a batch of records (FpmRecord, decoded maps, or
        RecordError for payloads that didn't decode); return the drift events of this batch."""
        recs: list[FpmRecord] = []
        for it in items:
            self.intake.received += 1
            if isinstance(it, RecordError):
                self.intake.drop("malformed", example=str(it))
                continue
            try:
                rec = it if isinstance(it, FpmRecord) else parse_record(it)
            except RecordError as exc:
                self.intake.drop("malformed", example=str(exc))
                continue
            if rec.is_heartbeat:
                self.intake.heartbeats += 1
                continue
            recs.append(rec)
        if not recs:
            return []
        priced = self._price(recs)
        if priced is None:
            return []
        return self._take(priced)

    def _price(self, recs: list[FpmRecord]) -> PricedSteps | None:
        try:
            return record_steps(recs, self.dep)
        except SpecError:
            good = []
            for r in recs:  # isolate the record the planner refuses
                try:
                    record_steps([r], self.dep)
                    good.append(r)
                except SpecError as exc:
                    self.intake.drop("not_priced", example=f"dp_rank {r.dp_rank} counter {r.counter_id}: {exc}")
            return record_steps(good, self.dep) if good else None

    def _take(self, p: PricedSteps) -> list[dict]:
        """Keep priced steps; each is predicted by the model served when it arrives (a refit inside
        a batch serves the rest of it)."""
        events: list[dict] = []
        i = 0
        n = len(p.records)
        while i < n:
            j = min(n, i + max(1, self.refit_every - len(self._since_refit)))
            events += self._take_segment(p, np.arange(i, j))
            if len(self._since_refit) >= self.refit_every:
                self.refit()
            i = j
        return events

    def _take_segment(self, p: PricedSteps, idx: np.ndarray) -> list[dict]:
        f = p.features.take(idx)
        pred = self.served.predict_s(f)
        terms = self.served.terms_s(f)
        tr = triage_calibrated(p.measured_s[idx], pred, terms, self.margin)
        events = []
        for k, i in enumerate(idx):
            rec = p.records[i]
            self.intake.accepted += 1
            row = StepRow(model=self.dep.model.name, hardware=self.dep.hardware.name, gpus=self.dep.gpus,
                          attn=self.dep.attn, moe=self.dep.moe, replicas=self.dep.replicas,
                          batch=int(p.batch[i]), context=float(max(p.context[i], 1.0)),
                          prefill_tokens=float(p.prefill_tokens[i]), step_ms=float(p.measured_s[i] * 1e3))
            feat = tuple(float(getattr(p.features, name)[i]) for name in StepFeatures.__dataclass_fields__)
            self._win.append((row, rec, feat, float(p.measured_s[i]), float(p.floor_max_s[i]), float(p.floor_sum_s[i]),
                              p.datasheet_terms_s[:, i].copy()))
            self._since_refit.append((float(p.measured_s[i]), float(pred[k]), terms[:, k].copy()))
            self.abs_errors.append(abs(float(tr.residual_fraction[k])))
            if tr.profile[k]:
                self.drift_steps += 1
                res = str(tr.profile_resource[k])
                self.drift_by_resource[res] += 1
                ev = {"worker_id": rec.worker_id, "dp_rank": rec.dp_rank, "counter_id": rec.counter_id,
                      "batch": int(p.batch[i]), "context_tokens": float(p.context[i]),
                      "prefill_tokens": float(p.prefill_tokens[i]), "measured_s": float(p.measured_s[i]),
                      "predicted_s": float(pred[k]), "residual_fraction": float(tr.residual_fraction[k]),
                      "resource": res, "explanation": tr.explain(k)}
                self.drift_events.append(ev)
                events.append(ev)
        return events

    # --- refit ----------------------------------------------------------------------------
    def _window_costs(self) -> ProfileCosts:
        rows = list(self._win)
        feats = StepFeatures(*(np.array([r[2][k] for r in rows]) for k in range(len(StepFeatures.__dataclass_fields__))))
        hw = self.dep.hardware.name
        loaded = [LoadedRow(r[0], self.source, i + 1) for i, r in enumerate(rows)]
        return ProfileCosts(loaded, RowFeatures.one_step_per_row(feats), np.array([r[3] for r in rows]),
                            np.array([r[4] for r in rows]), np.array([r[5] for r in rows]),
                            np.stack([r[6] for r in rows], axis=1), [], {hw: rates_for(self.dep.hardware)},
                            np.array([hw] * len(rows), dtype=object), [],
                            np.array([self.dep.label()] * len(rows), dtype=object))

    def refit(self) -> dict:
        """Refit on the window; take it if it fits and predicts the window no worse than the served model."""
        m, p, t = (np.array([s[0] for s in self._since_refit]), np.array([s[1] for s in self._since_refit]),
                   np.stack([s[2] for s in self._since_refit], axis=1) if self._since_refit else np.zeros((len(TIMED_RESOURCES), 0)))
        self.last_residuals = residual_by_resource(m, p, t)
        self._since_refit = []
        costs = self._window_costs()
        served_err = float(np.median(np.abs(self.served.predict_s(costs.features.steps) / costs.measured_s - 1.0)))
        digest = hashlib.sha256(json.dumps([r[1].to_json() for r in self._win], sort_keys=True).encode()).hexdigest()
        src = {"path": self.source, "sha256": digest, "kind": "sglang_fpm", "rows": costs.size, "rows_rejected": 0}
        entry = {"at_steps": self.intake.accepted, "window_steps": costs.size,
                 "served_median_abs_pct_error": served_err * 100.0, "taken": False, "reason": None,
                 "median_abs_pct_error": None, "residual_by_resource": self.last_residuals}
        t0 = time.perf_counter()
        try:
            cal = fit_calibration(costs, [src], priors={n: float(v) for n, v in zip(PARAM_NAMES, self.served.x)},
                                  prior_sources={n: self.served.label for n in PARAM_NAMES})
        except (SpecError, ValueError, np.linalg.LinAlgError) as exc:
            entry["reason"] = f"refit refused: {str(exc).splitlines()[0]}; serving the last good calibration"
        else:
            entry["median_abs_pct_error"] = cal.fit.median_abs_pct_error
            if not np.isfinite(cal.fit.median_abs_pct_error) or cal.fit.median_abs_pct_error > served_err * 100.0 + REFIT_SLACK_PCT:
                entry["reason"] = (f"refit predicts the window worse ({cal.fit.median_abs_pct_error:.2f} % median) than the "
                                   f"served calibration ({served_err * 100:.2f} %): kept the served one")
            else:
                entry["taken"] = True
                self.served = served_calibration(cal, f"refit at step {self.intake.accepted} on {costs.size} steps "
                                                      f"({cal.fit.median_abs_pct_error:.2f} % median error)", "refit")
                self._request_tables(self.served)
                if self.on_refit is not None:
                    self.on_refit(cal)
        entry["fit_s"] = time.perf_counter() - t0
        self.refits.append(entry)
        return entry

    # --- tables in the background -----------------------------------------------------------
    def _request_tables(self, served: Served) -> None:
        if not self._tables_on:
            return
        with self._tables_lock:
            self._compile_next = served
            if self._compile_thread is not None and self._compile_thread.is_alive():
                return  # the running compile picks the newest model up when it ends
            self._compile_thread = threading.Thread(target=self._compile_loop, name="floorfirst-tables", daemon=True)
            self._compile_thread.start()

    def _compile_loop(self) -> None:
        from runtime_policy.tables import StepTimeModel, compile_tables

        while True:
            with self._tables_lock:
                served, self._compile_next = self._compile_next, None
                if served is None:
                    return
                self.tables_status = {**self.tables_status, "state": "compiling"}
            x = served.x
            model = StepTimeModel(served.label, float(x[PARAM_NAMES.index("overlap_alpha")]),
                                  float(x[PARAM_NAMES.index("overhead_s")]), served.calibration,
                                  float(x[PARAM_NAMES.index("prefill_step_overhead_s")]),
                                  float(x[PARAM_NAMES.index("mixed_step_overhead_s")]),
                                  float(x[PARAM_NAMES.index("host_overlap_alpha")]))
            t0 = time.perf_counter()
            try:
                table = compile_tables(self.dep, model if served.calibration is not None else None,
                                       max_batch=self._table_max_batch,
                                       max_prefill_tokens=max(1, int(self.launched.chunk_tokens)))
            except SpecError as exc:
                with self._tables_lock:
                    self.tables_status = {**self.tables_status, "state": "failed", "error": str(exc)}
                continue
            with self._tables_lock:
                self.tables = table
                self.tables_status = {"state": "current" if self._compile_next is None else "compiling",
                                      "model": table.model_label, "compile_s": time.perf_counter() - t0,
                                      "layouts": list(table.layouts), "max_batch_requests": self._table_max_batch}

    def wait_tables(self, timeout_s: float = 60.0) -> None:
        """Block until the background compile (if any) is done."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._tables_lock:
                th = self._compile_thread
            if th is None or not th.is_alive():
                return
            th.join(max(0.0, deadline - time.monotonic()))
            if time.monotonic() >= deadline:
                return

    # --- report ---------------------------------------------------------------------------------
    def report(self) -> dict:
        err = np.array(self.abs_errors) if self.abs_errors else np.zeros(0)
        since = self._since_refit
        current = (residual_by_resource(np.array([s[0] for s in since]), np.array([s[1] for s in since]),
                                        np.stack([s[2] for s in since], axis=1)) if since else {})
        cal = self.served.calibration
        with self._tables_lock:
            tables = dict(self.tables_status)
        return {
            "deployment": self.launched.label(), "engine_args": self.launched.text,
            "margin_fraction": self.margin, "window_steps": self.window, "refit_every_steps": self.refit_every,
            "records": self.intake.to_json(),
            "served": {"source": self.served.source, "label": self.served.label,
                       "params": {n: float(v) for n, v in zip(PARAM_NAMES, self.served.x)},
                       "created_utc": cal.created_utc if cal is not None else None},
            "refits": self.refits,
            "residual_by_resource": self.last_residuals, "residual_by_resource_since_refit": current,
            "median_abs_pct_error": float(np.median(err) * 100.0) if err.size else None,
            "drift": {"steps": self.drift_steps, "steps_by_resource": dict(self.drift_by_resource),
                      "events": list(self.drift_events)},
            "tables": tables,
        }
