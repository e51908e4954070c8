"""`floorfirst simulate --disagg xPyD` as a function: serve a workload on x prefill instances and y
decode instances with the simulated executor (runtime_policy/disagg.py runs it), each pool on one
fixed layout with its engine's role memory (planner/disagg/roles.py); the document `simulate --disagg
--json` prints: the colocated simulate's metrics of the merged record plus the pools, the GPUs and the
hand-off (queue wait, transfer, TTFT's parts).

`simulate_disagg` is the same as the public API's function (floorfirst.simulate_disagg): the CLI's
options as keyword arguments, the deployment as knobs, a `spec=` or a `launch=` line, the typed
document returned (floorfirst.served.SimulateDisaggResult; `per_request` and `timeline` ride along,
out of the document, as for floorfirst.simulate).

Does not: render or plot (cli/commands/simulate.py), or search splits (`floorfirst disagg`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from floorfirst.planning import make
from floorfirst.points import load_specs
from planner.errors import SpecError

if TYPE_CHECKING:
    from floorfirst.knobs import DeploymentSpec
    from floorfirst.served import SimulateDisaggResult


def disagg_inputs(spec: "DeploymentSpec", policy: str | None, prefill_layout: str | None, decode_layout: str | None,
                  prefill_gpus: int | None, decode_gpus: int | None) -> tuple[str, str]:
    """The pools' layouts (each: its own, else `policy` if it names a layout, else the spec's attn,
    else tp), after the checks the CLI and the API share (SpecError: one line)."""
    if spec.replicas != 1:
        raise SpecError(f"--replicas {spec.replicas} with --disagg: the split says the instances (xPyD)")
    for name, v in (("--prefill-gpus", prefill_gpus), ("--decode-gpus", decode_gpus)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise SpecError(f"{name} {v} must be a whole number ≥ 1")
    # NOTE: each pool runs one layout (no switching across pools), so "dynamic" names none
    fixed = policy if policy not in (None, "dynamic") else (spec.attn or "tp")
    return prefill_layout or fixed, decode_layout or fixed


def role_deployment(spec: "DeploymentSpec", m, hw, role: str, attn: str, gpus: int):
    """One instance of a pool: `spec` on `gpus` GPUs and layout `attn`, with the engine's memory rule for
    `role` (planner.disagg.roles.make_role_deployment, through the spec's knobs)."""
    from planner.disagg.roles import role_memory

    one = spec.changed(gpus=gpus, replicas=1, attn=None)
    dep = make(one, m, hw, attn, spec.moe)
    mem = role_memory(dep, role)
    if mem.reserve_bytes is not None:
        dep = make(one.changed(reserve_gib=mem.reserve_bytes / 2**30), m, hw, attn, spec.moe)
    return dep, mem


def simulate_disagg_document(spec: "DeploymentSpec", disagg: str, prefill_layout: str = "tp", decode_layout: str = "tp",
                             prefill_gpus: int | None = None, decode_gpus: int | None = None, workload: str = "chat",
                             requests: int = 1000, seed: int = 0, order: str = "fcfs", calibration: str | None = None,
                             rate: float | None = None, noise: float = 0.0, boost: float | None = None,
                             max_batch: int = 4096,
                             progress: Callable[[str, int, int, int], None] | None = None) -> dict[str, Any]:
    """The serving metrics of `workload` on the xPyD split `disagg` (module docstring); each instance
    has `prefill_gpus` / `decode_gpus` GPUs (None: the spec's gpus)."""
    from dataclasses import replace

    from executor.sim import SimExecutor, engine_chunk_tokens
    from planner.resources.vector import Pricing
    from runtime_policy.disagg import Pool, parse_xpyd, serve_disagg, summarize_disagg
    from runtime_policy.ordering import DEFAULT_BOOST
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.serving_types import LoopConfig
    from runtime_policy.tables import calibrated_model, default_step_model, layout_names
    from runtime_policy.workloads import make_workload

    x, y = parse_xpyd(disagg)
    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise SpecError(f"rate={rate} must be a positive number of requests per second")
    if max_batch < 1 or max_batch > 65536:
        raise SpecError(f"max_batch={max_batch} must be in [1, 65536]")
    for name, lay in (("prefill", prefill_layout), ("decode", decode_layout)):
        if lay not in layout_names():
            raise SpecError(f"--{name}-layout {lay!r} is not one of {', '.join(layout_names())} (a pool runs one layout)")
    m, hw = load_specs(spec.model, spec.hardware)
    config = LoopConfig(max_batch=max_batch)
    knobs = PolicyKnobs(max_batch=max_batch)
    pools, labels, memories = [], [], []
    for role, lay, g, count in (("prefill", prefill_layout, prefill_gpus, x), ("decode", decode_layout, decode_gpus, y)):
        gpus = int(g or spec.gpus)
        try:
            dep, mem = role_deployment(spec, m, hw, role, lay, gpus)
        except SpecError as exc:
            raise SpecError(f"the {role} pool ({gpus} × {hw.name}, {lay}): {exc}") from None
        step_model = calibrated_model(calibration) if calibration else default_step_model(dep)
        lp = LayoutPolicy.compile(dep, step_model, replace(knobs), max_prefill_tokens=engine_chunk_tokens(dep, config))
        pools.append(Pool(role, dep, lp.tables, lay, count))
        labels.append(step_model.label)
        memories.append(mem)
    prefill, decode = pools
    if prefill.dep.kv_dtype != decode.dep.kv_dtype:
        raise SpecError(f"prefill stores {prefill.dep.kv_dtype} KV but decode {decode.dep.kv_dtype}: one --kv-dtype")
    w = make_workload(workload, requests, seed, rate)
    pricing = Pricing.datasheet(hw)
    run = serve_disagg(w.arrival_s, w.input_tokens, w.output_tokens, prefill, decode,
                       lambda tables, k: SimExecutor(tables, noise, seed + k), pricing, order,
                       DEFAULT_BOOST if boost is None else boost, config, progress)
    doc = summarize_disagg(run)
    if doc["completed"] == 0:
        raise SpecError(f"{m.name} on {disagg} served nothing: all {doc['aborted']} of {doc['requests']} requests were "
                        "aborted, none fitting a pool's KV (more GPUs per instance, --kv-dtype fp8 or shorter requests)")
    doc["timeline"] = run.result.timeline
    pool_docs = {}
    for p, mem, label in zip(pools, memories, labels):
        i = p.tables.layouts.index(p.layout)
        pool_docs[p.role] = {"instances_count": p.instances, "gpus_per_instance": int(p.dep.gpus), "gpus": p.gpus,
                             "layout": p.layout, "moe": p.dep.moe,
                             "kv_pool_bytes_per_rank": float(p.tables.info.kv_pool_bytes[i]),
                             "memory_rule": mem.rule, "step_time_model": label}
    from planner.disagg.handoff import BACKENDS

    be = BACKENDS[decode.dep.engine]
    return {"model": m.name, "hardware": hw.name, "disagg": f"{x}P{y}D", "gpus": prefill.gpus + decode.gpus,
            "engine": decode.dep.engine, "kv_dtype": decode.dep.kv_dtype, "handoff_backend": be.name,
            "handoff_overlap": be.overlap, "prefill_pool": pool_docs["prefill"], "decode_pool": pool_docs["decode"],
            "workload": w.name, "workload_params": w.params, "seed": seed, "policy": f"{prefill.layout}>{decode.layout}",
            "order": order, "step_time_model": labels[1], **{k: v for k, v in doc.items() if k != "step_time_model"}}


def simulate_disagg(model: str | None = None, hardware: str | None = None, gpus: int | None = None, *,
                    disagg: str, spec: "DeploymentSpec | None" = None, launch: str | None = None,
                    prefill_layout: str | None = None, decode_layout: str | None = None,
                    prefill_gpus: int | None = None, decode_gpus: int | None = None, workload: str = "chat",
                    requests: int = 1000, seed: int = 0, policy: str | None = None, order: str = "fcfs",
                    calibration: str | None = None, rate: float | None = None, noise: float = 0.0,
                    boost: float | None = None, max_batch: int = 4096, **knobs: Any) -> "SimulateDisaggResult":
    """Serve a workload on x prefill and y decode instances (`disagg="1P3D"`), each of `gpus` GPUs
    (or `prefill_gpus` / `decode_gpus`) on one fixed layout (`prefill_layout`, `decode_layout`;
    default `policy` if it names a layout, else the spec's or launch line's, else tp) — `floorfirst
    simulate --disagg xPyD`: the same document `--json` prints for the same arguments. The result
    also carries `per_request` (what --requests-csv writes) and `timeline` (the first decode
    instance's, what --plot draws)."""
    from floorfirst.api import _count, _given, _number
    from floorfirst.knobs import resolve
    from floorfirst.served import SimulateDisaggResult

    s, _ = resolve(spec, launch, **_given(model, hardware, gpus, knobs))
    for name, v in (("disagg", disagg), ("order", order), ("workload", workload)):
        if not isinstance(v, str):
            raise SpecError(f"{name}={v!r} must be a name (str)")
    for name, v in (("policy", policy), ("prefill_layout", prefill_layout), ("decode_layout", decode_layout)):
        if v is not None and not isinstance(v, str):
            raise SpecError(f"{name}={v!r} must be a layout name (str)")
    p_lay, d_lay = disagg_inputs(s, policy, prefill_layout, decode_layout, prefill_gpus, decode_gpus)
    doc = simulate_disagg_document(s, disagg, p_lay, d_lay, prefill_gpus, decode_gpus, workload,
                                   _count("requests", requests), _count("seed", seed, low=0), order, calibration,
                                   _number("rate", rate, none=True), _number("noise", noise),
                                   _number("boost", boost, none=True), _count("max_batch", max_batch))
    return SimulateDisaggResult.model_validate(doc)
