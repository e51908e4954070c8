"""floorfirst's planner: the five-resource step model, floors, capacity (as the engines in
planner.engines size it), walls, regimes, triage.

Pure numpy core. Imports nothing else of floorfirst and never torch, scipy, pandas or
matplotlib at import time (the CLI must start fast; plotting imports matplotlib lazily).
"""

from planner.deployment import ATTN_LAYOUTS, MOE_SPLITS, Deployment, make_deployment, replace_deployment
from planner.errors import SpecError
from planner.hardware.spec import HardwareSpec, builtin_hardware_names, load_hardware
from planner.load import DecodeLoad
from planner.models import ModelSpec, builtin_model_names, load_model
from planner.resources import RESOURCES, TIMED_RESOURCES, Pricing
from planner.step import StepCost, step_cost

__all__ = [
    "ATTN_LAYOUTS", "MOE_SPLITS", "RESOURCES", "TIMED_RESOURCES", "DecodeLoad", "Deployment", "HardwareSpec",
    "ModelSpec", "Pricing", "SpecError", "StepCost", "builtin_hardware_names", "builtin_model_names",
    "load_hardware", "load_model", "make_deployment", "replace_deployment", "step_cost",
]
