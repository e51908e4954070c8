"""Bulk triage: every row of a profile placed against its datasheet floors with
`planner.triage.triage_step` — overlap quality inside [max, sum], the residual above the sum and
whether to open a profiler (on which resource), or the floor a row beats (a spec or model error).

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
from planner.triage import DEFAULT_THRESHOLD, triage_step


@dataclass(frozen=True)
class ProfileTriage:
    threshold: float
    rows: list[dict]
    issues: list[str]
    notes: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        c = Counter(r["verdict"] for r in self.rows)
        return {"rows": len(self.rows), "inside": c.get("inside", 0), "above_sum": c.get("above_sum", 0),
                "below_floor": c.get("below_floor", 0), "profile": sum(r["profile"] for r in self.rows),
                "rejected": len(self.issues)}

    def to_json(self) -> dict:
        return {"threshold_fraction": self.threshold, "counts": self.counts(), "rows": self.rows,
                "issues": self.issues, "notes": self.notes}


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


def triage_profile(path, threshold: float = DEFAULT_THRESHOLD, defaults: dict | None = None) -> ProfileTriage:
    """Triage every row of one profile file (or a list of files)."""
    paths = [path] if isinstance(path, (str, bytes)) or hasattr(path, "__fspath__") else list(path)
    profile = load_profiles(paths, defaults)
    costs = price_profile(profile)
    out: list[dict] = [{}] * costs.size
    for g in costs.groups:
        tr = triage_step(g.cost, costs.measured_s[g.index], threshold)
        for j, i in enumerate(g.index):
            lr = costs.rows[i]
            out[i] = {
                "source": lr.source, "line": lr.line, "deployment": g.label, "batch": lr.row.batch,
                "context_tokens": lr.row.context, "prefill_tokens": lr.row.prefill_tokens,
                "measured_s": float(tr.measured_s[j]), "floor_max_s": float(tr.floor_max_s[j]),
                "floor_sum_s": float(tr.floor_sum_s[j]), "verdict": str(tr.verdict[j]),
                "overlap_quality": _f(tr.overlap_quality[j]), "residual_fraction": _f(tr.residual_fraction[j]),
                "violated_resources": tr.violated_resources[j], "profile": bool(tr.profile[j]),
                "profile_resource": str(tr.profile_resource[j]) or None, "explanation": tr.explain(j),
            }
    issues = [str(i) for i in profile.issues + costs.issues]
    return ProfileTriage(threshold, out, issues, list(profile.notes))
