"""What `LayoutPolicy.compile` validates before anything runs: the knobs (finite, in range, a
non-empty subset of the registry's layouts) and the compiled step-time tables (finite, and the
base and per-token terms ≥ 0). Each failure is one SpecError line naming the field and the value.

Does not: check a state (the policy's `decide` does that at its boundary, cheaply).
"""

from __future__ import annotations

import math

import numpy as np

from planner.errors import SpecError
from runtime_policy.decision import PolicyKnobs
from runtime_policy.tables import StepTimeTable


def check_knobs(knobs: PolicyKnobs, names: tuple[str, ...]) -> None:
    """SpecError (one line) unless every knob is in range."""
    for name in ("margin", "min_gain_fraction", "kv_headroom_fraction", "dwell_fraction"):
        v = getattr(knobs, name)
        if not math.isfinite(v) or v < 0:
            raise SpecError(f"{name}={v} must be a finite number ≥ 0")
    for name in ("payback_horizon_s", "max_switches_per_minute", "stats_half_life_steps"):
        v = getattr(knobs, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecError(f"{name}={v} must be a finite number > 0")
    for name in ("planned_rate_per_s", "planned_input_tokens", "planned_output_tokens"):
        v = getattr(knobs, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise SpecError(f"{name}={v} must be a finite number ≥ 0 (0: not stated)")
    if knobs.kv_headroom_fraction >= 1:
        raise SpecError(f"kv_headroom_fraction={knobs.kv_headroom_fraction} must be < 1")
    for name in ("min_dwell_steps", "max_dwell_steps", "initial_dwell_steps"):
        if not math.isfinite(getattr(knobs, name)):
            raise SpecError(f"{name}={getattr(knobs, name)} must be finite")
    if not (0 < knobs.min_dwell_steps <= knobs.max_dwell_steps):
        raise SpecError(f"min_dwell_steps={knobs.min_dwell_steps} must be in (0, max_dwell_steps]")
    if isinstance(knobs.cooldown_steps, bool) or not isinstance(knobs.cooldown_steps, int) or knobs.cooldown_steps < 0:
        raise SpecError(f"cooldown_steps={knobs.cooldown_steps} must be a whole number ≥ 0")
    if isinstance(knobs.max_batch, bool) or not isinstance(knobs.max_batch, int) or not 1 <= knobs.max_batch <= 1 << 20:
        raise SpecError(f"max_batch={knobs.max_batch} must be a whole number in [1, {1 << 20}]")
    allowed = names if knobs.allowed is None else knobs.allowed
    bad = [a for a in allowed if a not in names]
    if bad or not allowed:
        raise SpecError(f"allowed layouts {knobs.allowed} must be a non-empty subset of {', '.join(names)}")


def check_tables(tables: StepTimeTable) -> None:
    """SpecError (one line) unless every usable layout's step terms are finite (and the base and
    per-token terms ≥ 0; a chunk's terms are differences from decode tokens, which may be
    negative): a calibration that makes a step time NaN or infinite (an efficiency of 1e-320, a
    zero rate) would otherwise make every decision and simulated time NaN."""
    for i, name in enumerate(tables.layouts):
        if tables.info.kv_pool_bytes[i] <= 0:
            continue
        parts = (("base", tables.base_s[1:, i], True), ("prefill", tables.chunk_rows_s[:, i], False),
                 ("per-token", tables.c1_s[i], True), ("per-token", tables.c2_s[i], True))
        for part, a, nonneg in parts:
            if not np.all(np.isfinite(a)) or (nonneg and np.any(a < 0)):
                raise SpecError(f"the step-time model gives non-finite or negative {part} step times for layout "
                                f"{name} ({tables.model_label})")
    for name in ("alpha", "overhead_s", "kv_bytes_per_token", "link_bytes_per_s", "hbm_bytes_per_s"):
        v = float(getattr(tables, name))
        if not math.isfinite(v) or v < 0:
            raise SpecError(f"{name}={v} of the step-time tables must be finite and ≥ 0")
