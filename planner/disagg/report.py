"""A search's answer as plain values (units in every key): what `floorfirst disagg --json` prints
(schemas/disagg.schema.json) and what the benchmark records. No computing here beyond ratios of
figures the search produced."""

from __future__ import annotations

import math

from planner.disagg.launch import sglang_lines, vllm_lines
from planner.disagg.search import ColocatedOption, DisaggOption, SearchResult, best_per_shape, gain_fraction
from planner.resources.vector import Pricing


def _pool(dep, memory=None) -> dict:
    d = {"gpus_per_instance": dep.gpus, "nodes": dep.nodes, "attn": dep.attn, "moe": dep.moe,
         "owner_groups_count": dep.placement.owner_groups, "label": dep.label(),
         "kv_pool_bytes_per_gpu": dep.memory.kv_pool_bytes, "mem_fraction": dep.memory.fraction}
    if memory is not None:
        d["memory"] = memory.describe()
    return d


def _nullable(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def option_doc(o: DisaggOption, pricing: Pricing, full: bool = True) -> dict:
    """One xPyD split (full: with its pools' walls and the hand-off's rank matrix)."""
    dd = o.deployment
    per_gpu = o.output_tokens_per_s / dd.gpus
    doc = {"label": dd.label(), "gpus": dd.gpus, "prefill_gpus": dd.prefill_gpus, "decode_gpus": dd.decode_gpus,
           "prefill_instance_count": dd.prefill_instances, "decode_instance_count": dd.decode_instances,
           "prefill_label": dd.prefill.label(), "decode_label": dd.decode.label(),
           "rate_requests_per_s": o.rate_requests_per_s, "output_tokens_per_s": o.output_tokens_per_s,
           "output_tokens_per_s_per_gpu": per_gpu, "ttft_s": o.ttft_s, "tpot_s": _nullable(o.decode.step_s),
           "binding": o.binding, "handoff_exposed_s": o.exposed_s,
           "handoff_share_of_ttft_fraction": o.exposed_s / o.ttft_s if o.ttft_s > 0 else 0.0,
           "handoff_nic_utilization_fraction": o.nic_utilization_fraction,
           "feasible": o.feasible, "infeasible_reason": o.reason or None}
    if not full:
        return doc
    p, d = o.prefill, o.decode
    doc["prefill"] = {**_pool(dd.prefill, dd.prefill_memory), "instance_count": dd.prefill_instances,
                      "rate_requests_per_s_per_instance": o.prefill_instance_rate, "binding": o.prefill_binding,
                      "request_s": p.request_s, "step_s": [float(x) for x in p.step_s],
                      "chunk_tokens_per_group": p.chunk_tokens_per_group, "packed_prompts_count": p.prompts_per_step,
                      "kv_request_bytes": p.kv_request_bytes, "max_in_flight_requests": _nullable(p.max_in_flight_requests),
                      "nic_busy_fraction": p.nic_busy_fraction}
    doc["decode"] = {**_pool(dd.decode, dd.decode_memory), "instance_count": dd.decode_instances,
                     "rate_requests_per_s_per_instance": d.rate_requests_per_s, "binding": d.binding,
                     "batch": d.batch, "step_s": _nullable(d.step_s), "context_tokens": d.context_tokens,
                     "kv_wall_requests": d.kv_wall_requests, "running_cap_requests": _nullable(d.running_cap_requests),
                     "nic_busy_fraction": d.nic_busy_fraction}
    doc["handoff"] = {**o.handoff.describe(pricing), "transfer_s": o.transfer_s, "exposed_s": o.exposed_s,
                      "supported": o.handoff.supported, "unsupported_reason": o.handoff.reason or None,
                      "nic_rate_prefill_requests_per_s_per_instance": _nullable(o.nic_prefill_rate),
                      "nic_rate_decode_requests_per_s_per_instance": _nullable(o.nic_decode_rate)}
    return doc


def colocated_doc(c: ColocatedOption) -> dict:
    return {"label": f"{c.replicas}× {c.dep.label()}", "gpus": c.gpus, "replica_count": c.replicas,
            "group": _pool(c.dep), "rate_requests_per_s": c.rate_requests_per_s,
            "output_tokens_per_s": c.output_tokens_per_s, "output_tokens_per_s_per_gpu": c.output_tokens_per_s / c.gpus,
            "ttft_s": c.ttft_s, "tpot_s": c.tpot_s if c.decode.feasible else None, "batch": c.decode.batch,
            "decode_step_s": c.decode.step_s if c.decode.feasible else None,
            "prefill_s_per_request": 1.0 / c.prefill.compute_rate_requests_per_s,
            "binding": c.binding, "feasible": c.feasible, "infeasible_reason": c.reason or None}


def result_doc(r: SearchResult, pricing: Pricing, top: int = 8) -> dict:
    """The search's answer (module docstring)."""
    wl = r.workload
    gain = gain_fraction(r)
    out = {"gpus": r.gpus, "engine": r.engine, "floor": r.floor, "pricing": pricing.label,
           "input_tokens": wl.prompt_tokens, "output_tokens": wl.output_tokens,
           "ttft_target_s": wl.ttft_s, "tpot_target_s": wl.tpot_s, "rate_target_requests_per_s": wl.rate_requests_per_s,
           "best": option_doc(r.best, pricing) if r.best else None,
           "colocated": colocated_doc(r.colocated) if r.colocated else None,
           "gain_over_colocated_pct": gain * 100.0 if math.isfinite(gain) else None,
           "options": [option_doc(o, pricing, full=False) for o in best_per_shape(r.options)[:top]],
           "colocated_options": [colocated_doc(c) for c in r.colocated_options[:top]]}
    if r.best is not None:
        dd = r.best.deployment
        args = (dd.prefill, dd.decode, dd.prefill_instances, dd.decode_instances)
        out["launch"] = {"sglang": sglang_lines(*args), "vllm": vllm_lines(*args)}
    else:
        out["launch"] = None
    return out


def sweep_row(r: SearchResult) -> dict:
    """One (input, output) point of the ratio sweep."""
    b, c = r.best, r.colocated
    g = gain_fraction(r)
    return {"input_tokens": r.workload.prompt_tokens, "output_tokens": r.workload.output_tokens,
            "best_label": b.deployment.label() if b else None,
            "prefill_gpus": b.deployment.prefill_gpus if b else None, "decode_gpus": b.deployment.decode_gpus if b else None,
            "output_tokens_per_s_per_gpu": b.output_tokens_per_s / b.gpus if b else None,
            "binding": b.binding if b else None,
            "handoff_share_of_ttft_fraction": b.exposed_s / b.ttft_s if b and b.ttft_s > 0 else None,
            "colocated_label": f"{c.replicas}× {c.dep.label()}" if c else None,
            "colocated_output_tokens_per_s_per_gpu": c.output_tokens_per_s / c.gpus if c else None,
            "gain_over_colocated_pct": g * 100.0 if math.isfinite(g) else None}
