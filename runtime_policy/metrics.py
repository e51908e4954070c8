"""Serving metrics from a `ServeResult`: throughput, TTFT / TPOT / time-to-last-token
percentiles, switches and their cost, time per layout — one flat dict with units in the keys.

Does not: run or render anything.
"""

from __future__ import annotations

import numpy as np

from runtime_policy.loop import ABORTED, DONE, ServeResult

PERCENTILES = (50, 90, 99)


def _pcts(name: str, x: np.ndarray) -> dict[str, float | None]:
    if x.size == 0:
        return {f"{name}_p{p}_s": None for p in PERCENTILES}
    return {f"{name}_p{p}_s": float(np.percentile(x, p)) for p in PERCENTILES}


def summarize(res: ServeResult) -> dict:
    done = res.status == DONE
    arr, first, fin = res.arrival_s[done], res.first_token_s[done], res.finish_s[done]
    out = res.output_tokens[done]
    t0 = float(res.arrival_s.min())
    makespan = float(np.nanmax(res.finish_s) - t0) if np.isfinite(res.finish_s).any() else 0.0
    tokens = int(out.sum())
    multi = out > 1
    tpot = (fin[multi] - first[multi]) / (out[multi] - 1)
    d = {
        "requests": int(res.status.size),
        "completed": int(done.sum()),
        "aborted": int((res.status == ABORTED).sum()),
        "output_tokens": tokens,
        "makespan_s": makespan,
        "throughput_tokens_per_s": tokens / makespan if makespan > 0 else 0.0,
        "requests_per_s": float(done.sum()) / makespan if makespan > 0 else 0.0,
    }
    d.update(_pcts("ttft", first - arr))
    d.update(_pcts("tpot", tpot))
    d.update(_pcts("ttlt", fin - arr))
    d["ttlt_mean_s"] = float((fin - arr).mean()) if done.any() else None
    d["preemptions"] = int(res.preemptions.sum())
    d["steps"] = res.steps
    d["decode_steps"] = res.decode_steps
    d["layout_time_s"] = dict(res.layout_time_s)
    d["switches"] = [{"from": s.from_layout, "to": s.to_layout, "started_s": s.started_s, "at_s": s.at_s,
                      "link_s": s.link_s, "cost_s": s.cost_s, "reason": s.reason, "stall_s": s.stall_s}
                     for s in res.switches]
    d["switch_cost_total_s"] = float(sum(s.cost_s for s in res.switches))
    d["aborted_switches"] = [{"from": s.from_layout, "to": s.to_layout, "started_s": s.started_s, "at_s": s.at_s,
                              "reason": s.reason, "why": s.aborted} for s in res.aborted_switches]
    d["cant_decide"] = int(res.cant_decide)
    return d
