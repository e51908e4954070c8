"""floorfirst's planner: the five-resource step model, floors, capacity (as the engines in
planner.engines size it), walls, regimes, triage.

Pure numpy core. Imports nothing else of floorfirst and never torch, scipy, pandas or
matplotlib at import time (the CLI must start fast; plotting imports matplotlib lazily).

`import planner` (and so `import planner.errors`, or any submodule) imports nothing else: each
name below is loaded the first time it is used. NOTE: importing every name here cost a call that
needs one submodule ~0.2 s (numpy, pydantic, the hardware and model specs; python -X importtime).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "ATTN_LAYOUTS": "planner.deployment", "MOE_SPLITS": "planner.deployment", "Deployment": "planner.deployment",
    "make_deployment": "planner.deployment", "replace_deployment": "planner.deployment",
    "SpecError": "planner.errors",
    "HardwareSpec": "planner.hardware.spec", "builtin_hardware_names": "planner.hardware.spec",
    "load_hardware": "planner.hardware.spec",
    "DecodeLoad": "planner.load",
    "ModelSpec": "planner.models", "builtin_model_names": "planner.models", "load_model": "planner.models",
    "RESOURCES": "planner.resources", "TIMED_RESOURCES": "planner.resources", "Pricing": "planner.resources",
    "StepCost": "planner.step", "step_cost": "planner.step",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # for type checkers and IDEs; at run time __getattr__ loads each name
    from planner.deployment import ATTN_LAYOUTS, MOE_SPLITS, Deployment, make_deployment, replace_deployment
    from planner.errors import SpecError
    from planner.hardware.spec import HardwareSpec, builtin_hardware_names, load_hardware
    from planner.load import DecodeLoad
    from planner.models import ModelSpec, builtin_model_names, load_model
    from planner.resources import RESOURCES, TIMED_RESOURCES, Pricing
    from planner.step import StepCost, step_cost


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'planner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
