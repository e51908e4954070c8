"""floorfirst's public Python API.

- `plan`, `compare`, `capacity`, `simulate`: the CLI's `floor`, `compare`, `capacity` and
  `simulate` as functions that take the same knobs (or `spec=DeploymentSpec(...)`, or
  `launch="<SGLang or vLLM launch line>"`) and return typed documents (floorfirst.results);
- `Policy.from_launch("<launch line>", hardware=...)`: the runtime layout policy for a server that
  embeds it, `decide(BatchState) -> Decision` in layout names and units (floorfirst.policy);
- `SpecError`: what a bad input raises, with one line.

docs/python-api.md has a worked example. `import floorfirst` imports nothing else: each name is
loaded the first time it is used (no torch, scipy or matplotlib, ever).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "plan": "floorfirst.api", "compare": "floorfirst.api", "capacity": "floorfirst.api", "simulate": "floorfirst.api",
    "DeploymentSpec": "floorfirst.knobs",
    "Policy": "floorfirst.policy", "BatchState": "floorfirst.policy", "Decision": "floorfirst.policy",
    "PlanResult": "floorfirst.results", "CompareResult": "floorfirst.results", "CapacityResult": "floorfirst.results",
    "SimulateResult": "floorfirst.served",
    "simulate_disagg": "floorfirst.disagg_serving", "SimulateDisaggResult": "floorfirst.served",
    "SpecError": "planner.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'floorfirst' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
