"""Validate a calibration: per-row residuals of a given calibration on a profile, k-fold
cross-validation (refit on k−1 folds, predict the held-out fold) so the error quoted is the error
on rows the fit did not see, and hold-out by group (`holdout`: model, gpus or layout): refit on
every other group, predict the held-out one. Random folds over a concurrency sweep put a row's
neighbours in the training set and flatter any fit; a held-out group says whether the fit
generalises to a model, a GPU count or a layout it never saw. Both are reported.

Figures: median and p90 absolute % error, the fraction of rows inside their datasheet
[floor_max, floor_sum], and every row *below* the uncalibrated floor_max listed with the
resources whose time alone exceeds the measurement — a floor can't be beaten, so such a row means
a spec or the cost model is wrong.

Does not: change the calibration it is given; the cross-validation refits copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.artifact import PARAM_NAMES, Calibration
from calibration.costs import ProfileCosts
from calibration.artifact import engine_code
from calibration.fit import DEFAULT_F_SCALE, DEFAULT_LOSS, abs_pct_errors, engines_of, fit_params
from planner.errors import SpecError
from planner.resources.vector import TIMED_RESOURCES

DEFAULT_FOLDS = 5
HOLDOUT_GROUPS = {  # what a hold-out group is, per row
    "model": lambda lr: str(lr.row.model),
    "gpus": lambda lr: str(lr.row.gpus),
    "layout": lambda lr: f"{lr.row.attn}/{lr.row.moe}",
    # NOTE: a held-out engine is priced with its own kernels (planner.engines.kernels) at the shared
    # parameters the other engines' rows fit: its efficiencies and overhead are what it never showed
    "engine": lambda lr: row_engine(lr) or "bare",
}


def row_engine(lr) -> str | None:
    """The engine a measured row ran on (None: outside any engine)."""
    if lr.serving is not None:
        return lr.serving.engine or "sglang"
    return lr.row.engine


@dataclass(frozen=True)
class FloorViolation:
    source: str
    line: int
    measured_s: float
    floor_max_s: float
    resources: list[str]


@dataclass(frozen=True)
class ValidationReport:
    rows: int
    folds: int
    cv_median_abs_pct_error: float
    cv_p90_abs_pct_error: float
    median_abs_pct_error: float  # the given calibration, in-sample on this profile
    p90_abs_pct_error: float
    fraction_inside_floors: float
    rows_below_floor: list[FloorViolation]
    residuals: list[dict] = field(default_factory=list)  # per row
    holdout: list[dict] = field(default_factory=list)  # per grouping: HoldoutResult.to_json()

    def to_json(self) -> dict:
        return {
            "rows": self.rows, "folds": self.folds,
            "cv_median_abs_pct_error": self.cv_median_abs_pct_error, "cv_p90_abs_pct_error": self.cv_p90_abs_pct_error,
            "median_abs_pct_error": self.median_abs_pct_error, "p90_abs_pct_error": self.p90_abs_pct_error,
            "fraction_inside_floors": self.fraction_inside_floors,
            "rows_below_floor": [v.__dict__ for v in self.rows_below_floor],
            "residuals": self.residuals,
            "holdout": self.holdout,
        }


@dataclass(frozen=True)
class HoldoutResult:
    """Hold-out by one grouping: each group predicted by a fit on all the others."""

    by: str
    predicted_s: np.ndarray  # [R], NaN where the group could not be held out
    abs_pct_errors: np.ndarray  # of the rows that were predicted
    groups: list[dict]  # group, rows, median/p90 |error| %, or the reason it was skipped

    def to_json(self) -> dict:
        e = self.abs_pct_errors
        return {"by": self.by, "groups": self.groups, "rows_predicted": int(e.size),
                "median_abs_pct_error": float(np.median(e)) if e.size else None,
                "p90_abs_pct_error": float(np.percentile(e, 90)) if e.size else None}


def floor_violations(costs: ProfileCosts) -> list[FloorViolation]:
    out = []
    for i in np.flatnonzero(costs.measured_s < costs.floor_max_s):
        lr = costs.rows[i]
        res = [TIMED_RESOURCES[r] for r in range(len(TIMED_RESOURCES)) if costs.datasheet_times_s[r, i] > costs.measured_s[i]]
        out.append(FloorViolation(lr.source, lr.line, float(costs.measured_s[i]), float(costs.floor_max_s[i]), res))
    return out


def kfold_predictions(costs: ProfileCosts, priors: dict[str, float], folds: int = DEFAULT_FOLDS, seed: int = 0,
                      loss: str = DEFAULT_LOSS, f_scale: float = DEFAULT_F_SCALE, fixed: set[str] | None = None,
                      progress=None) -> np.ndarray:
    """Out-of-fold predicted seconds [P]. Folds are a seeded shuffle (reproducible)."""
    n = costs.size
    if folds < 2:
        raise SpecError(f"folds={folds} must be ≥ 2")
    if n < 2 * folds:
        raise SpecError(f"{n} rows are too few for {folds}-fold cross-validation")
    order = np.random.default_rng(seed).permutation(n)
    pred = np.empty(n)
    for k, test in enumerate(np.array_split(order, folds)):
        if progress:
            progress(k)
        train = np.setdiff1d(order, test)
        pred[test] = _fit_predict(costs, train, test, priors, loss, f_scale, fixed)
    return pred


def holdout_predictions(costs: ProfileCosts, priors: dict[str, float], by: str, loss: str = DEFAULT_LOSS,
                        f_scale: float = DEFAULT_F_SCALE, fixed: set[str] | None = None) -> HoldoutResult:
    """Refit without each group of `by` (model, gpus, layout) and predict it. A grouping with one
    group, or a group whose complement can't be fitted (too few rows), is reported, not raised."""
    if by not in HOLDOUT_GROUPS:
        raise SpecError(f"holdout={by!r} is not one of {', '.join(HOLDOUT_GROUPS)}")
    key = np.array([HOLDOUT_GROUPS[by](lr) for lr in costs.rows], dtype=object)
    pred = np.full(costs.size, np.nan)
    groups: list[dict] = []
    names = sorted(set(key.tolist()))
    for name in names:
        test = np.flatnonzero(key == name)
        train = np.flatnonzero(key != name)
        g: dict = {"group": name, "rows": int(test.size), "trained_on_rows": int(train.size)}
        if len(names) < 2:
            g["skipped"] = f"the profile has one {by} group: nothing to hold it out from"
        else:
            try:
                pred[test] = _fit_predict(costs, train, test, priors, loss, f_scale, fixed)
            except SpecError as exc:
                g["skipped"] = str(exc)
            else:
                e = abs_pct_errors(pred[test], costs.measured_s[test])
                g.update(median_abs_pct_error=float(np.median(e)), p90_abs_pct_error=float(np.percentile(e, 90)))
        groups.append(g)
    ok = np.isfinite(pred)
    return HoldoutResult(by, pred, abs_pct_errors(pred[ok], costs.measured_s[ok]), groups)


def _fit_predict(costs: ProfileCosts, train, test, priors, loss, f_scale, fixed) -> np.ndarray:
    """Fit on rows `train` (each engine among them beyond the first with its own parameters,
    calibration.fit) and predict rows `test`; an engine the training rows lack gets the shared ones."""
    sub = costs.take(train)
    _, own = engines_of(sub)
    x, *_ = fit_params(sub.features, sub.measured_s, priors, loss, f_scale, fixed, own_engines=own)
    return costs.features.take(test).with_blocks(tuple(engine_code(e) for e in own)).predict(x)


def validate(cal: Calibration, costs: ProfileCosts, folds: int = DEFAULT_FOLDS, seed: int = 0,
             progress=None, holdout: tuple[str, ...] = ()) -> ValidationReport:
    """Residuals of `cal` on the profile, plus k-fold CV refitting with `cal`'s fixed values as priors."""
    if costs.size == 0:
        from calibration.fit import _no_rows

        raise _no_rows(costs, "validate")
    hws = set(costs.hardware.tolist())
    if hws != {cal.rates.hardware}:
        raise SpecError(f"calibration is for {cal.rates.hardware}; the profile has {', '.join(sorted(hws))}")
    x = cal.params.vector()
    blocks = tuple(engine_code(e) for e in cal.engines)
    full = np.concatenate([x] + [np.array([getattr(p, n) for n in p.model_fields]) for p in cal.engines.values()])
    pred = costs.features.with_blocks(blocks).predict(full)
    # NOTE: folds restart from the fit's own priors, not from its answer, so no fold starts from a
    # solution that saw its held-out rows.
    priors = {**dict(zip(PARAM_NAMES, x)), **{k: v for k, v in cal.priors.items() if k not in cal.fixed}}
    cv = kfold_predictions(costs, priors, folds, seed, cal.fit.loss, cal.fit.f_scale, set(cal.fixed), progress)
    err, cv_err = abs_pct_errors(pred, costs.measured_s), abs_pct_errors(cv, costs.measured_s)
    inside = (costs.measured_s >= costs.floor_max_s) & (costs.measured_s <= costs.floor_sum_s)
    residuals = [
        {"source": lr.source, "line": lr.line, "gpus": lr.row.gpus, "attn": lr.row.attn, "moe": lr.row.moe,
         "batch": lr.row.batch, "context_tokens": lr.row.context, "prefill_tokens": lr.row.prefill_tokens,
         "measured_s": float(m), "predicted_s": float(p), "cv_predicted_s": float(c),
         "floor_max_s": float(lo), "floor_sum_s": float(hi), "error_pct": float((p - m) / m * 100),
         "cv_error_pct": float((c - m) / m * 100)}
        for lr, m, p, c, lo, hi in zip(costs.rows, costs.measured_s, pred, cv, costs.floor_max_s, costs.floor_sum_s)
    ]
    held = [holdout_predictions(costs, priors, by, cal.fit.loss, cal.fit.f_scale, set(cal.fixed)) for by in holdout]
    for h in held:
        for r, p in zip(residuals, h.predicted_s):
            r[f"holdout_{h.by}_predicted_s"] = float(p) if np.isfinite(p) else None
    return ValidationReport(
        rows=costs.size, folds=folds,
        cv_median_abs_pct_error=float(np.median(cv_err)), cv_p90_abs_pct_error=float(np.percentile(cv_err, 90)),
        median_abs_pct_error=float(np.median(err)), p90_abs_pct_error=float(np.percentile(err, 90)),
        fraction_inside_floors=float(np.mean(inside)), rows_below_floor=floor_violations(costs), residuals=residuals,
        holdout=[h.to_json() for h in held])
