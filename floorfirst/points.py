"""Knobs into what the planner prices: a context given as text (one length, a list, a histogram)
into a `planner.DecodeLoad`, the knobs into a `planner.Deployment`, the pricing choice, the
calibration artifact, the host tier. Shared by the CLI (cli/common.py re-exports these) and the
Python API, so the two read the same input the same way.

Does not: price anything (planner.step_cost) or render (cli).
"""

from __future__ import annotations

import math
import re

import numpy as np

import planner
from planner.engines import DEFAULT_ENGINE
from planner.errors import SpecError
from planner.units import GiB

# the CLI's defaults, which the API's knobs take too (DeploymentSpec, cli/common.py)
DEFAULTS = dict(model="deepseek-v3.2", hardware="h200", gpus=8, batch=32, context="32k", mem_fraction=None,
                engine=DEFAULT_ENGINE)

_NUM = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmM]?)\s*$")


def parse_tokens(text: str, what: str = "context") -> float:
    """'32768', '32k' (×1024), '1M' (×1024²) → tokens."""
    m = _NUM.match(text)
    if not m:
        raise SpecError(f"{what}={text!r} is not a token count (e.g. 32768 or 32k)")
    v = float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    if not math.isfinite(v) or v <= 0:
        raise SpecError(f"{what}={text!r} must be positive")
    return v


def context_text(context, what: str = "context") -> str:
    """The CLI's --context text from what the API takes: that text, one length (32768), a list of
    per-request lengths ([4096, 4096, 65536]) or a histogram {length: requests}."""
    if isinstance(context, str):
        return context
    if isinstance(context, bool):
        raise SpecError(f"{what}={context!r} is not a token count")
    if isinstance(context, (int, float, np.integer, np.floating)):
        return _number(context, what)
    if isinstance(context, dict):
        if not context:
            raise SpecError(f"{what} histogram is empty")
        return ",".join(f"{_number(k, what)}*{_count(n, what)}" for k, n in context.items())
    if isinstance(context, (list, tuple, np.ndarray)):
        if len(context) == 0:
            raise SpecError(f"{what} is empty")
        return ",".join(_number(x, what) for x in context)
    raise SpecError(f"{what}={context!r} is not a token count, a list of them or a {{length: requests}} histogram")


def _number(x, what: str) -> str:
    if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating, str)):
        raise SpecError(f"{what}: {x!r} is not a token count")
    if isinstance(x, str):
        return x
    v = float(x)
    if not math.isfinite(v) or v <= 0:
        raise SpecError(f"{what}={x!r} must be a positive token count")
    return str(int(v)) if v == int(v) else repr(v)


def _count(n, what: str) -> str:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise SpecError(f"{what} histogram count {n!r} is not a whole number")
    return str(int(n))


def build_load(batch: int | None, context: str) -> planner.DecodeLoad:
    """One operating point from --batch and --context (equal lengths, a list, or a histogram)."""
    parts = [p for p in context.split(",") if p.strip()]
    if not parts:
        raise SpecError("context is empty")
    if len(parts) == 1 and "*" not in parts[0]:
        if batch is None:
            batch = DEFAULTS["batch"]
        if batch < 1:
            raise SpecError(f"batch={batch} must be ≥ 1")
        return planner.DecodeLoad.equal(batch, parse_tokens(parts[0]))
    if any("*" in p for p in parts):
        lengths, counts = [], []
        for p in parts:
            if "*" not in p:
                lengths.append(parse_tokens(p)); counts.append(1.0)
                continue
            l, _, n = p.partition("*")
            lengths.append(parse_tokens(l))
            try:
                counts.append(float(int(n)))
            except ValueError:
                raise SpecError(f"histogram item {p!r}: count {n!r} is not a whole number") from None
        load = planner.DecodeLoad.from_histogram(lengths, counts)
    else:
        load = planner.DecodeLoad.from_lengths([parse_tokens(p) for p in parts])
    if batch is not None and batch != int(load.batch[0]):
        raise SpecError(f"--batch {batch} disagrees with the {int(load.batch[0])} requests in --context")
    if load.batch[0] < 1:
        raise SpecError("the context histogram holds no requests")
    return load


def load_specs(model: str, hardware: str) -> tuple[planner.ModelSpec, planner.HardwareSpec]:
    return planner.load_model(model), planner.load_hardware(hardware)


def deployment(model, hw, attn: str, moe: str | None, gpus: int, replicas: int, weight_dtype, kv_dtype, mem_fraction,
               page_tokens, reserve_gib, engine=DEFAULT_ENGINE, nodes: int | None = None,
               host_tier=None, swa_ratio: float | None = None, attn_groups: int | None = None) -> planner.Deployment:
    if moe is None:
        moe = "ep" if model.has_moe else "tp"
    if reserve_gib is not None and not math.isfinite(reserve_gib):
        raise SpecError(f"reserve_gib={reserve_gib} must be a finite number")
    return planner.make_deployment(model, hw, attn=attn, moe=moe, gpus=gpus, replicas=replicas,
                                   weight_dtype=weight_dtype, kv_dtype=kv_dtype, mem_fraction=mem_fraction,
                                   page_tokens=page_tokens, reserve_bytes=None if reserve_gib is None else reserve_gib * GiB,
                                   engine=getattr(engine, "value", engine), nodes=nodes, host_tier=host_tier,
                                   swa_full_tokens_ratio=swa_ratio, attn_groups=attn_groups)


PRICINGS = ("datasheet", "achieved")


def pricing_for(hw: planner.HardwareSpec, choice) -> planner.Pricing:
    """Floors at the datasheet peaks, or at the hardware file's achieved efficiencies."""
    name = getattr(choice, "value", choice)
    if name not in PRICINGS:
        raise SpecError(f"pricing={name!r} must be one of {', '.join(PRICINGS)}")
    return planner.Pricing.achieved(hw) if name == "achieved" else planner.Pricing.datasheet(hw)


def load_calibration(path: str | None):
    """The calibration artifact, or None. Imported lazily: calibration is optional here."""
    if path is None:
        return None
    try:
        from calibration.artifact import load_calibration as _load
    except ImportError:
        raise SpecError("--calibration needs the calibration package, which is not installed") from None
    return _load(path)


def select_layouts(deps, layouts: str | None):
    """`deps` narrowed to the comma list of attn/moe in `layouts`, in its order (None: all)."""
    if not layouts:
        return deps
    want = [x.strip() for x in layouts.split(",") if x.strip()]
    have = {f"{d.attn}/{d.moe}": d for d in deps}
    missing = [w for w in want if w not in have]
    if missing:
        raise SpecError(f"layout {missing[0]!r} is not available; choose from {', '.join(have)}")
    return [have[w] for w in want]


def host_tier_spec(enabled: bool, budget: int | None = None, locality: float | None = None, page_rows: int = 1):
    """The host KV tier the knobs describe (planner.host_tier.HostTierSpec), or None when off; one
    SpecError line if invalid."""
    if not enabled:
        return None
    from pydantic import ValidationError

    from planner.host_tier import DEFAULT_BUDGET_TOKENS, DEFAULT_LOCALITY, HostTierSpec
    from planner.inputs import field_error

    try:
        return HostTierSpec(hbm_budget_tokens=DEFAULT_BUDGET_TOKENS if budget is None else budget,
                            locality=DEFAULT_LOCALITY if locality is None else locality, page_rows=page_rows)
    except ValidationError as exc:
        raise SpecError(f"--host-tier: {field_error(exc)}") from None


def scalar(a) -> float:
    return float(np.asarray(a).ravel()[0])
