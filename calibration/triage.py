"""Bulk triage: every row of a profile placed against its datasheet floors with
`planner.triage.triage_step` — overlap quality inside [max, sum], the residual above the sum and
whether to open a profiler (on which resource), or the floor a row beats (a spec or model error).

`triage_profile(path, threshold)` returns a `ProfileTriage`; `render_profile_triage(result,
json_out)` prints it (a table on stdout, or one JSON document). `floorfirst triage --profile`
calls exactly these two.

Does not: fit anything; rows that can't be priced are listed as issues with their line.
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


def render_profile_triage(result: ProfileTriage, json_out: bool = False) -> None:
    """Print a table (people) or one JSON document (programs) on stdout."""
    if json_out:
        from cli.common import emit_json

        emit_json("triage_profile", result.to_json())
        return
    from rich.table import Table

    from cli.common import console

    con = console()
    tab = Table(title=f"triage of {len(result.rows)} measured steps (profile threshold {result.threshold:.0%})")
    for col, just in (("line", "right"), ("deployment", "left"), ("B", "right"), ("ctx", "right"),
                      ("measured ms", "right"), ("max ms", "right"), ("sum ms", "right"), ("verdict", "left"),
                      ("q / residual", "right"), ("profile", "left")):
        tab.add_column(col, justify=just)
    for r in result.rows:
        q = (f"q={r['overlap_quality']:.2f}" if r["verdict"] == "inside" else
             f"+{r['residual_fraction']:.0%}" if r["verdict"] == "above_sum" else ",".join(r["violated_resources"]))
        tab.add_row(str(r["line"]), r["deployment"], str(r["batch"]), f"{r['context_tokens']:.0f}",
                    f"{r['measured_s'] * 1e3:.3f}", f"{r['floor_max_s'] * 1e3:.3f}", f"{r['floor_sum_s'] * 1e3:.3f}",
                    r["verdict"], q, r["profile_resource"] or "")
    con.print(tab)
    c = result.counts()
    con.print(f"{c['inside']} inside \\[max, sum], {c['above_sum']} above sum ({c['profile']} over the threshold: "
              f"profile), {c['below_floor']} below the floor (a spec or the model is wrong), {c['rejected']} rejected")
    for i in result.issues:
        con.print(f"[yellow]rejected[/] {i}")
    for n in result.notes:
        con.print(f"[dim]{n}[/]")
