"""floorfirst's commands as Python functions: `plan` (the `floor` command), `compare`, `capacity`,
`simulate`. Each takes the command's options as keyword arguments (the CLI's names and defaults),
its deployment as knobs (`model`, `hardware`, `gpus`, `engine`, `kv_dtype`, …: DeploymentSpec's
fields), a `spec=DeploymentSpec(...)`, or an SGLang / vLLM launch line (`launch="vllm serve …"`),
and returns the command's document typed (floorfirst.results). A bad input raises
`planner.SpecError` with one line, as the CLI prints it.

With `launch`, the line fills every knob not given (a knob given that the line contradicts is an
error naming both); as on the CLI, `compare` and `capacity` still price every layout (the line's
layout is not a filter), and `simulate` runs the line's layout fixed unless `policy` says otherwise.

Does not: print, plot or write files (the CLI does), or log how a launch line was read
(`floorfirst explain-launch` shows it).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from floorfirst.knobs import DeploymentSpec, resolve
from floorfirst.points import context_text, host_tier_spec
from floorfirst.results import CapacityResult, CompareResult, PlanResult
from floorfirst.served import SimulateResult
from planner.errors import SpecError

Context = int | float | str | Sequence[float] | dict


def _given(model, hardware, gpus, knobs: dict[str, Any]) -> dict[str, Any]:
    for name, value in (("model", model), ("hardware", hardware), ("gpus", gpus)):
        if value is not None:
            knobs[name] = value
    return knobs


def _count(name: str, x, low: int = 1, none: bool = False):
    if x is None and none:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise SpecError(f"{name}={x!r} must be a whole number ≥ {low}")
    return x


def _number(name: str, x, none: bool = False):
    if x is None and none:
        return None
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise SpecError(f"{name}={x!r} must be a finite number")
    return float(x)


def _tier(host_tier: bool, hbm_budget_tokens: int, locality: float, host_page_rows: int):
    if not isinstance(host_tier, bool):
        raise SpecError(f"host_tier={host_tier!r} must be True or False")
    return host_tier_spec(host_tier, hbm_budget_tokens, locality, host_page_rows)


def plan(model: str | None = None, hardware: str | None = None, gpus: int | None = None, *,
         spec: DeploymentSpec | None = None, launch: str | None = None, batch: int | None = None,
         context: Context = "32k", prefill_tokens: float = 0.0, prefill_context: Context = "0",
         pricing: str = "datasheet", calibration: str | None = None, all_layouts: bool = False,
         **knobs: Any) -> PlanResult:
    """One operating point priced on one layout (`attn=`; default: compare's recommendation, the
    fastest layout whose KV fits and the engine launches, any that fits with `all_layouts=True`):
    the five resources of a step on the busiest rank, its floors, what binds, the predicted step
    and decode tokens/s — `floorfirst floor`. `context`: one length (32768 or "32k"), a list of
    per-request lengths, or a {length: requests} histogram; `batch` requests with one length."""
    from floorfirst.planning import floor_document

    s, _ = resolve(spec, launch, **_given(model, hardware, gpus, knobs))
    doc, _, _ = floor_document(s, _count("batch", batch, none=True), context_text(context),
                               _number("prefill_tokens", prefill_tokens), context_text(prefill_context, "prefill_context"),
                               pricing, calibration, bool(all_layouts))
    return PlanResult.model_validate(doc)


def compare(model: str | None = None, hardware: str | None = None, gpus: int | None = None, *,
            spec: DeploymentSpec | None = None, launch: str | None = None, batch: int | None = None,
            context: Context = "32k", prefill_tokens: float = 0.0, prefill_context: Context = "0",
            pricing: str = "datasheet", calibration: str | None = None, layouts: str | Sequence[str] | None = None,
            host_tier: bool = False, hbm_budget_tokens: int = 4096, locality: float = 0.8, host_page_rows: int = 1,
            all_layouts: bool = False, **knobs: Any) -> CompareResult:
    """Every layout the model can run, priced side by side at one operating point, those whose KV
    fits first, the engine's launchable ones first among them (all alike with `all_layouts=True`),
    fastest first by the step model (floor_max where none prices the deployment); `recommended` is
    the CLI's ★ with its launch line — `floorfirst compare`. `moe=` keeps one MoE split,
    `layouts=["tp/ep", "dp/ep"]` only those; a launch line's own layout narrows nothing."""
    from floorfirst.planning import compare_document

    narrow = knobs.get("moe")
    s, _ = resolve(spec, launch, **_given(model, hardware, gpus, knobs))
    if launch is None:
        narrow = s.moe
    if layouts is not None and not isinstance(layouts, str):
        layouts = ",".join(layouts)
    doc, _ = compare_document(s, _count("batch", batch, none=True), context_text(context),
                              _number("prefill_tokens", prefill_tokens), context_text(prefill_context, "prefill_context"),
                              pricing, calibration, narrow, layouts,
                              _tier(host_tier, hbm_budget_tokens, locality, host_page_rows), bool(all_layouts))
    return CompareResult.model_validate(doc)


def capacity(model: str | None = None, hardware: str | None = None, gpus: int | None = None, *,
             spec: DeploymentSpec | None = None, launch: str | None = None, context: Context = "32k",
             host_tier: bool = False, hbm_budget_tokens: int = 4096, locality: float = 0.8, host_page_rows: int = 1,
             **knobs: Any) -> CapacityResult:
    """The KV pool per GPU (as the engine sizes it), distinct tokens and max concurrency at a context
    (one length, a list or a histogram), every layout — `floorfirst capacity`."""
    from floorfirst.planning import capacity_document

    s, _ = resolve(spec, launch, **_given(model, hardware, gpus, knobs))
    doc, _ = capacity_document(s, context_text(context), _tier(host_tier, hbm_budget_tokens, locality, host_page_rows))
    return CapacityResult.model_validate(doc)


def simulate(model: str | None = None, hardware: str | None = None, gpus: int | None = None, *,
             spec: DeploymentSpec | None = None, launch: str | None = None, workload: str = "chat",
             requests: int = 1000, seed: int = 0, policy: str | None = None, order: str = "fcfs",
             calibration: str | None = None, rate: float | None = None, noise: float = 0.0,
             boost: float | None = None, max_batch: int = 4096, host_tier: bool = False,
             hbm_budget_tokens: int = 4096, locality: float = 0.8, host_page_rows: int = 1,
             tier_choice: bool = False, **knobs: Any) -> SimulateResult:
    """Serve a workload (a built-in name or a trace file) with the simulated executor under a fixed
    layout or the dynamic policy (`policy`: a layout, or "dynamic"; default: the spec's or launch
    line's layout when it names one, else "dynamic"), and a request ordering — `floorfirst
    simulate`. The result also carries `per_request` and `timeline`."""
    from floorfirst.serving import simulate_document

    s, _ = resolve(spec, launch, **_given(model, hardware, gpus, knobs))
    if policy is None:
        policy = s.attn or "dynamic"
    if not isinstance(policy, str) or not isinstance(order, str) or not isinstance(workload, str):
        raise SpecError("policy, order and workload are names (str)")
    if not isinstance(tier_choice, bool):
        raise SpecError(f"tier_choice={tier_choice!r} must be True or False")
    doc = simulate_document(s, workload, _count("requests", requests), _count("seed", seed, low=0), policy, order,
                            calibration, _number("rate", rate, none=True), _number("noise", noise),
                            _number("boost", boost, none=True), _count("max_batch", max_batch),
                            _tier(host_tier, hbm_budget_tokens, locality, host_page_rows), tier_choice)
    return SimulateResult.model_validate(doc)
