"""Bulk triage: every row of a profile placed against its datasheet floors with
`planner.triage.triage_floors` — overlap quality inside [max, sum], the residual above the sum and
whether to open a profiler (on which resource), or the floor a row beats (a spec or model error).
A serving row is placed against its TPOT's floors: the weighted sum of the floors of the steps
its engine runs per output token (calibration.costs).

With a calibration (`floorfirst triage --calibration`), the residual is read against the
calibrated prediction instead: (m − predicted)/predicted over the threshold means the engine did
worse than a calibrated expectation (profile the resource with the largest calibrated term);
under −threshold it did better than the calibration expects (the row is unlike the fit's data:
refit or check it); a datasheet floor violation is still reported as one.

`triage_profile(path, threshold)` returns a `ProfileTriage` (`to_json()` is its document);
`floorfirst triage --profile` renders it (cli/commands/triage.py).

Does not: fit anything, or print anything (nothing here imports cli); rows that can't be priced are
listed as issues with their line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from calibration.costs import price_profile
from calibration.loaders import load_profiles
from planner.errors import SpecError
from planner.resources.vector import TIMED_RESOURCES
from planner.triage import DEFAULT_THRESHOLD, triage_floors


@dataclass(frozen=True)
class CalibratedTriage:
    """Measurements [P] read against a calibrated prediction."""

    measured_s: np.ndarray
    predicted_s: np.ndarray
    residual_fraction: np.ndarray  # (m − predicted) / predicted
    verdict: np.ndarray  # 'below_prediction' | 'as_predicted' | 'above_prediction'
    profile: np.ndarray
    profile_resource: np.ndarray  # the largest calibrated term where profile, else ''
    threshold: float

    def explain(self, i: int = 0) -> str:
        r, v = self.residual_fraction[i], self.verdict[i]
        if v == "above_prediction":
            return (f"{r:.0%} above the calibrated prediction {self.predicted_s[i] * 1e3:.3f} ms (threshold "
                    f"{self.threshold:.0%}): profile {self.profile_resource[i]}, the largest calibrated term")
        if v == "below_prediction":
            return (f"{-r:.0%} below the calibrated prediction {self.predicted_s[i] * 1e3:.3f} ms: the calibration "
                    "doesn't describe this step (refit with it, or check it is like the fit's data)")
        return f"within {self.threshold:.0%} of the calibrated prediction {self.predicted_s[i] * 1e3:.3f} ms: no profiler needed"


def triage_calibrated(measured_s, predicted_s, terms_s, threshold: float = DEFAULT_THRESHOLD) -> CalibratedTriage:
    """Place measurements against calibrated predictions [P] with calibrated terms [4, P]."""
    m = np.asarray(measured_s, dtype=np.float64)
    p = np.asarray(predicted_s, dtype=np.float64)
    if not np.isfinite(threshold) or threshold < 0:
        raise SpecError(f"threshold={threshold} must be ≥ 0")
    r = (m - p) / p
    verdict = np.where(r > threshold, "above_prediction", np.where(r < -threshold, "below_prediction", "as_predicted"))
    profile = verdict == "above_prediction"
    largest = np.asarray(TIMED_RESOURCES, dtype=object)[np.argmax(np.asarray(terms_s), axis=0)]
    return CalibratedTriage(m, p, r, verdict, profile, np.where(profile, largest, ""), threshold)


@dataclass(frozen=True)
class ProfileTriage:
    threshold: float
    rows: list[dict]
    issues: list[str]
    notes: list[str] = field(default_factory=list)
    calibration: str | None = None

    def counts(self) -> dict[str, int]:
        c = Counter(r["verdict"] for r in self.rows)
        out = {"rows": len(self.rows), "inside": c.get("inside", 0), "above_sum": c.get("above_sum", 0),
               "below_floor": c.get("below_floor", 0), "profile": sum(r["profile"] for r in self.rows),
               "rejected": len(self.issues)}
        if self.calibration is not None:
            cc = Counter(r["calibrated"]["verdict"] for r in self.rows)
            out.update({k: cc.get(k, 0) for k in ("below_prediction", "as_predicted", "above_prediction")})
        return out

    def to_json(self) -> dict:
        return {"threshold_fraction": self.threshold, "calibration": self.calibration, "counts": self.counts(),
                "rows": self.rows, "issues": self.issues, "notes": self.notes}


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def triage_profile(path, threshold: float = DEFAULT_THRESHOLD, defaults: dict | None = None,
                   calibration=None, calibration_path: str | None = None) -> ProfileTriage:
    """Triage every row of one profile file (or a list of files); against `calibration`'s
    predictions where one is given (rows of other hardware become issues)."""
    paths = [path] if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__") else list(path)
    profile = load_profiles(paths, defaults)
    costs = price_profile(profile)
    issues = [str(i) for i in profile.issues + costs.issues]
    if calibration is not None and costs.size:
        other = np.flatnonzero(costs.hardware != calibration.rates.hardware)
        issues += [f"{costs.rows[i].source}:{costs.rows[i].line}: hardware {costs.hardware[i]} is not the "
                   f"calibration's {calibration.rates.hardware}" for i in other]
        costs = costs.take(np.flatnonzero(costs.hardware == calibration.rates.hardware))
    out: list[dict] = []
    if costs.size:
        tr = triage_floors(costs.measured_s, costs.floor_max_s, costs.floor_sum_s, costs.datasheet_times_s, threshold)
        cal = None
        if calibration is not None:
            x = calibration.params.vector()
            cal = triage_calibrated(costs.measured_s, costs.features.predict(x), costs.features.terms(x), threshold)
        for i, lr in enumerate(costs.rows):
            row = {
                "source": lr.source, "line": lr.line, "deployment": str(costs.labels[i]), "batch": lr.row.batch,
                "context_tokens": lr.row.context, "prefill_tokens": lr.row.prefill_tokens,
                "serving": lr.serving is not None,
                "measured_s": float(tr.measured_s[i]), "floor_max_s": float(tr.floor_max_s[i]),
                "floor_sum_s": float(tr.floor_sum_s[i]), "verdict": str(tr.verdict[i]),
                "overlap_quality": _f(tr.overlap_quality[i]), "residual_fraction": _f(tr.residual_fraction[i]),
                "violated_resources": tr.violated_resources[i], "profile": bool(tr.profile[i]),
                "profile_resource": str(tr.profile_resource[i]) or None, "explanation": tr.explain(i),
            }
            if cal is not None:
                row["calibrated"] = {"predicted_s": float(cal.predicted_s[i]),
                                     "residual_fraction": float(cal.residual_fraction[i]),
                                     "verdict": str(cal.verdict[i]), "explanation": cal.explain(i)}
                # NOTE: with a calibration, "profile" means worse than the calibrated expectation
                row["profile"] = bool(cal.profile[i])
                row["profile_resource"] = str(cal.profile_resource[i]) or None
            out.append(row)
    return ProfileTriage(threshold, out, issues, list(profile.notes), calibration_path)

