"""`floorfirst simulate` as a function: serve a workload on a deployment with the simulated
executor (executor.sim) under a fixed layout or the dynamic layout policy, and one request
ordering; the document `simulate --json` prints (less its `schema` key), plus the per-request rows
(`per_request`, what `--requests-csv` writes) and the timeline (`timeline`, what `--plot` draws).

Does not: render, plot or write files (cli/commands/simulate.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import planner
from floorfirst.planning import make
from floorfirst.points import load_specs
from planner.errors import SpecError

if TYPE_CHECKING:  # the spec is only read here
    from floorfirst.knobs import DeploymentSpec

ORDERS = ("fcfs", "srpt-oracle", "boost")


def _any_kv_pool(spec: DeploymentSpec, m, hw, moe) -> bool:
    """Whether some layout the policy may pick leaves a KV pool (else every request would abort)."""
    from planner.step import kv_pool_bytes
    from runtime_policy.tables import LAYOUTS

    for a in LAYOUTS:
        try:
            d = make(spec.changed(page_tokens=64, reserve_gib=0.0), m, hw, a, moe)
        except SpecError:
            continue
        if kv_pool_bytes(d) > 0:
            return True
    return False


def simulate_document(spec: DeploymentSpec, workload: str = "chat", requests: int = 1000, seed: int = 0,
                      policy: str = "dynamic", order: str = "fcfs", calibration: str | None = None,
                      rate: float | None = None, noise: float = 0.0, boost: float | None = None, max_batch: int = 4096,
                      host_tier=None, tier_choice: bool = False,
                      progress: Callable[[int, int, int, int], None] | None = None) -> dict[str, Any]:
    """The serving metrics of `workload` on `spec` (its attn is not read: `policy` names a fixed
    layout, or "dynamic"). `progress(group, groups, done, total)` is called as requests finish."""
    from executor.sim import simulate
    from runtime_policy.loop import LoopConfig
    from runtime_policy.tables import calibrated_model, default_step_model, layout_names
    from runtime_policy.workloads import make_workload

    if order not in ORDERS:
        raise SpecError(f"order={order!r} is not one of {', '.join(ORDERS)}")
    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise SpecError(f"rate={rate} must be a positive number of requests per second")
    m, hw = load_specs(spec.model, spec.hardware)
    moe = spec.moe
    attn = policy if policy != "dynamic" else None
    dep, first_err = None, None
    for a in ([attn] if attn else list(layout_names())):
        try:
            dep = make(spec, m, hw, a, moe)
            break
        except SpecError as exc:
            first_err = first_err or exc
    if dep is None:
        raise first_err
    if attn is None and not _any_kv_pool(spec, m, hw, moe):
        raise SpecError(f"{m.name} on {spec.gpus} × {hw.name}: the weights leave no KV pool under any layout, so "
                        "nothing can be served (more GPUs, lower-precision weights or a higher --mem-fraction)")
    step_model = calibrated_model(calibration) if calibration else default_step_model(dep)
    w = make_workload(workload, requests, seed, rate)
    if tier_choice and (host_tier is None or attn is not None):
        raise SpecError(f"--tier-choice needs --host-tier and --policy dynamic (got --policy {policy}"
                        f"{'' if host_tier else ', no --host-tier'})")
    if host_tier is not None:
        # NOTE: the tier's walls as tokens are exact at one context: the workload's mean over a request's life
        ref = max(1, int(w.input_tokens.mean() + w.output_tokens.mean() / 2))
        dep = planner.replace_deployment(dep, host_tier=host_tier.model_copy(update={"reference_context_tokens": ref}))
    if max_batch < 1 or max_batch > 65536:
        raise SpecError(f"max_batch={max_batch} must be in [1, 65536]")
    # the dynamic policy starts on the layout planned for the load the workload states (its rate, per
    # replica, and mean lengths; PolicyKnobs.planned_*, docs/runtime-policy.md "The start")
    from runtime_policy.policy import PolicyKnobs, planned_knobs

    knobs = planned_knobs(PolicyKnobs(), w, dep.replicas) if attn is None else None
    doc = simulate(dep, w, policy, order, step_model, noise, seed, knobs=knobs, config=LoopConfig(max_batch=max_batch),
                   boost=boost, progress=progress, tier_choice=tier_choice)
    if doc["completed"] == 0 and doc["requests"] > 0:
        # NOTE: a run that served nothing has no throughput or latency to report: it is the deployment's
        # answer to this workload, said in one line (exit 2), not a table of zeros with exit 0
        raise SpecError(f"{m.name} on {spec.gpus} × {hw.name} served nothing: all {doc['aborted']} of {doc['requests']} "
                        f"requests were aborted, none fitting the KV pool of a layout the policy "
                        f"{policy} may use (more GPUs, --kv-dtype fp8, shorter requests or a higher --mem-fraction)")
    return {"model": m.name, "hardware": hw.name, "gpus": spec.gpus, "replicas": spec.replicas, "moe": dep.moe,
            "kv_dtype": dep.kv_dtype, "workload": w.name, "workload_params": w.params, "seed": seed,
            "policy": policy, "order": order, **doc}
