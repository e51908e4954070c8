"""Serving metrics from a `ServeResult`: throughput, TTFT / TPOT / time-to-last-token
percentiles, switches and their cost, time per layout, offered against served load, the queue and
the overload verdict — one flat dict with units in the keys — and the per-request rows
(`request_rows`, what `simulate --requests-csv` writes).

The verdict (`load_verdict`): a load is "overloaded" when the queue grows without bound, which a
finite run shows as waits rising across it: the median wait for the first token of the last quarter
of the requests (by arrival) more than `WAIT_RISE_FACTOR` × that of the second quarter and at least
`WAIT_RISE_MIN_S` longer (the first quarter is left out: it meets an empty server). NOTE: served
against offered rate is reported, not judged: completed / makespan counts the drain after the last
arrival, which a heavy-tailed output mix stretches far past the arrival window of a server that
keeps up (chat at 12 requests/s on DeepSeek-V3.2, 8 × H200: 8.6 served of 11.7 offered, waits flat at
0.05 s), and a decode-bound overload first slows every request down rather than queueing them.
Fewer than `VERDICT_MIN_REQUESTS` requests, or every request at once (a batch, no rate), are not
judged.

The queue is the requests that arrived and have no first token yet (waiting, or in their prefill;
`ServeResult` records no admission time, so the wait is arrival → first token, i.e. TTFT), as a
time-weighted distribution over the run.

Does not: run or render anything.
"""

from __future__ import annotations

import numpy as np

from runtime_policy.serving_types import ServeResult
from runtime_policy.waiting import ABORTED, DECODE, DONE, PENDING, PREFILL, WAITING

PERCENTILES = (50, 90, 99)
WAIT_RISE_FACTOR = 2.0  # last quarter's median wait over the second quarter's
WAIT_RISE_MIN_S = 1.0  # and at least this much longer
VERDICT_MIN_REQUESTS = 20
STATUS_NAMES = {PENDING: "pending", WAITING: "waiting", PREFILL: "prefill", DECODE: "decode", DONE: "done",
                ABORTED: "aborted"}


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
    d.update(load_verdict(res))
    d["per_request"] = request_rows(res)  # NOTE: for --requests-csv; the commands drop it from --json
    return d


def _rate(count: float, span_s: float) -> float | None:
    return float(count / span_s) if span_s > 0 else None


def queue_lengths(res: ServeResult) -> dict:
    """Requests arrived with no first token yet, time-weighted over the run: p50/p90/p99, the
    largest, and the number at the last arrival."""
    first = np.where(np.isfinite(res.first_token_s), res.first_token_s, res.finish_s)  # aborted before a token
    first = np.where(np.isfinite(first), first, np.inf)
    t = np.concatenate([res.arrival_s, first])
    step = np.concatenate([np.ones(res.arrival_s.size), -np.ones(first.size)])
    order = np.lexsort((step, t))  # at equal times a first token counts before an arrival: no phantom peak
    t, level = t[order], np.cumsum(step[order])
    dur = np.diff(t)
    keep = np.isfinite(dur) & (dur > 0)
    out: dict = {}
    if keep.any():
        vals, w = level[:-1][keep], dur[keep]
        by = np.argsort(vals, kind="stable")
        cum = np.cumsum(w[by]) / w.sum()
        for p in PERCENTILES:
            out[f"queue_p{p}_requests"] = float(vals[by][np.searchsorted(cum, p / 100.0)])
    else:
        out.update({f"queue_p{p}_requests": 0.0 for p in PERCENTILES})
    out["queue_max_requests"] = int(level.max()) if level.size else 0
    last = res.arrival_s.max() if res.arrival_s.size else 0.0
    out["queue_at_last_arrival_requests"] = int(np.sum(res.arrival_s <= last) - np.sum(first <= last))
    return out


def load_verdict(res: ServeResult) -> dict:
    """Offered against served load, the queue, the median wait by arrival quarter and the verdict
    (the rule in the module docstring)."""
    n = int(res.status.size)
    done = res.status == DONE
    arr = res.arrival_s
    span = float(arr.max() - arr.min()) if n else 0.0
    makespan = float(np.nanmax(res.finish_s) - arr.min()) if np.isfinite(res.finish_s).any() else 0.0
    offered = _rate(n - 1, span)  # arrival gaps per second
    d: dict = {
        "offered_requests_per_s": offered,
        "served_requests_per_s": _rate(float(done.sum()), makespan) or 0.0,
        "offered_input_tokens_per_s": None if offered is None else offered * float(res.input_tokens.mean()),
        "served_input_tokens_per_s": _rate(float(res.input_tokens[done].sum()), makespan) or 0.0,
        "offered_output_tokens_per_s": None if offered is None else offered * float(res.output_tokens.mean()),
        "served_output_tokens_per_s": _rate(float(res.output_tokens[done].sum()), makespan) or 0.0,
        "arrival_span_s": span,
    }
    d.update(queue_lengths(res))
    wait = res.first_token_s - arr
    quarters = []
    for q in np.array_split(np.argsort(arr, kind="stable"), 4):
        w = wait[q][np.isfinite(wait[q])]
        quarters.append(float(np.median(w)) if w.size else None)
    d["ttft_p50_by_arrival_quarter_s"] = quarters
    d["kv_full_time_fraction"] = kv_full_time_fraction(res.timeline)
    if n < VERDICT_MIN_REQUESTS or offered is None:
        d["overloaded"] = None
        d["verdict"] = (f"not judged: {n} requests (at least {VERDICT_MIN_REQUESTS} needed)" if n < VERDICT_MIN_REQUESTS
                        else "not judged: every request arrives at once (a batch, no offered rate)")
        return d
    q2, q4 = quarters[1], quarters[3]
    d["overloaded"] = bool(q4 is None or (q2 is not None and q4 > WAIT_RISE_FACTOR * q2 and q4 - q2 >= WAIT_RISE_MIN_S))
    waits = ("no request of the last quarter of arrivals got a first token" if q4 is None else
             f"median wait for a first token {q2:.3g} s in the 2nd quarter of arrivals, {q4:.3g} s in the last")
    d["verdict"] = f"overloaded: the queue grows without bound ({waits})" if d["overloaded"] else f"keeps up ({waits})"
    return d


KV_FULL_FRACTION = 0.99  # a pool this used admits nothing new


def kv_full_time_fraction(timeline: dict) -> float | None:
    """The share of the run's time the KV pool was at least `KV_FULL_FRACTION` used (each timeline
    point holds until the next; with replicas, the first group's timeline), or None without one."""
    t = np.asarray(timeline.get("t_s", ()), dtype=float)
    kv = np.asarray(timeline.get("kv_used_fraction", ()), dtype=float)
    if t.size < 2 or t[-1] <= t[0]:
        return None
    dur = np.diff(t)
    return float(dur[kv[:-1] >= KV_FULL_FRACTION].sum() / (t[-1] - t[0]))


def request_rows(res: ServeResult) -> dict[str, list]:
    """One column per field (request, arrival, first token, finish, input and output tokens, status,
    preemptions), rows in arrival order (replicas' results are concatenated group by group); a time
    never reached is None."""
    by = np.argsort(res.arrival_s, kind="stable")

    def times(x):
        return [float(v) if np.isfinite(v) else None for v in x[by]]

    return {"request": list(range(by.size)), "arrival_s": times(res.arrival_s),
            "first_token_s": times(res.first_token_s), "finish_s": times(res.finish_s),
            "input_tokens": res.input_tokens[by].astype(int).tolist(),
            "output_tokens": res.output_tokens[by].astype(int).tolist(),
            "status": [STATUS_NAMES.get(int(v), str(int(v))) for v in res.status[by]],
            "preemptions": res.preemptions[by].astype(int).tolist()}
