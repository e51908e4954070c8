"""A running deployment from its engine's launch line (planner.launch reads the flags), plus the
hardware (a launch line doesn't name it) and the prefill chunk the engine runs per step.

Does not: read flags itself (planner.launch does, and refuses what floorfirst can't represent).
"""

from __future__ import annotations

from dataclasses import dataclass

import planner
from planner.errors import SpecError
from planner.launch import LaunchReading, parse_launch

CHUNK_FLAGS = ("--chunked-prefill-size", "--max-num-batched-tokens")  # SGLang / vLLM


@dataclass(frozen=True)
class LaunchedDeployment:
    """What a launch line runs: the deployment, how its flags were read, and its prefill chunk."""

    deployment: planner.Deployment
    reading: LaunchReading
    chunk_tokens: int  # prefill tokens per step: the line's chunk flag, else the engine's default
    text: str

    def label(self) -> str:
        d = self.deployment
        return f"{d.model.name} on {d.gpus} × {d.hardware.name}, {d.attn}/{d.moe} ({d.engine})"


def launched_deployment(text: str, hardware: str = "h200", model: str | None = None) -> LaunchedDeployment:
    """Read `text` (an SGLang or vLLM launch command) into a deployment on `hardware`; SpecError
    (one line) when the line or the deployment can't be read."""
    from calibration.serving import default_chunk_tokens  # the engines' default chunk (planner.engines)

    reading = parse_launch(text, model)
    opts = dict(reading.options)
    name = opts.pop("model", None) or model
    if name is None:
        raise SpecError("--engine-args names no model (--model-path / serve MODEL): pass --model too")
    engine = opts.pop("engine")
    dep = planner.make_deployment(planner.load_model(name), planner.load_hardware(hardware), engine=engine, **opts)
    chunk = next((int(r.value) for r in reading.readings if r.flag in CHUNK_FLAGS and str(r.value).isdigit()), None)
    if chunk is None or chunk <= 0:
        chunk = default_chunk_tokens(engine, dep)
    return LaunchedDeployment(dep, reading, chunk, text)
