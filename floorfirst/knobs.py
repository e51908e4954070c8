"""A deployment's knobs as one frozen object: what `--model`, `--gpus`, `--engine`, `--kv-dtype` …
say on the command line, what an SGLang or vLLM launch line says (planner.launch), and what a
Python caller passes. Every floorfirst function reads its deployment from a `DeploymentSpec`.

The names are the CLI's options (python spelling), with their defaults; a knob the deployment
leaves to the engine is None (the engine's default: its memory fraction, page size, KV dtype …).

Does not: check that the knobs make a deployment (planner.make_deployment does, when a command
builds one: a layout the model can't run is that command's answer, not the spec's error).
"""

from __future__ import annotations

from typing import Any, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from floorfirst.points import DEFAULTS
from planner.errors import SpecError


class DeploymentSpec(BaseModel):
    """One deployment: the model on `gpus` GPUs of `hardware`, run by `engine`, and how."""

    # NOTE: descriptions as Field(description=...), not attribute docstrings: use_attribute_docstrings reads
    # and parses this file's source when the class is built, ~20 ms of every CLI call's start (-X importtime)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    model: str = Field(DEFAULTS["model"], description="Built-in card name, a Hugging Face config.json (or its folder), or a repo id (its checkpoint's dtype).")
    hardware: str = Field(DEFAULTS["hardware"], description="Built-in GPU name or a hardware YAML file.")
    gpus: int = Field(DEFAULTS["gpus"], description="GPUs in the deployment, all replicas.")
    replicas: int = Field(1, description="Replicas of the whole group; a group is gpus / replicas GPUs.")
    engine: str = Field(DEFAULTS["engine"], description="Whose memory model, kernels, scheduler and shipped prior price the deployment (sglang, vllm).")
    attn: str | None = Field(None, description="The attention layout it runs (None: the command picks or prices every layout).")
    moe: str | None = Field(None, description="MoE split (None: ep for MoE models, tp for dense).")
    nodes: int | None = Field(None, description="Scale-up domains (nodes) the deployment spans (None: as few as hold the GPUs).")
    kv_dtype: str | None = Field(None, description="KV cache dtype as engines spell it (None: the engine's auto).")
    weight_dtype: str | None = Field(None, description="bf16, fp8 or fp4 (None: the checkpoint's).")
    mem_fraction: float | None = Field(None, description="The engine's memory fraction (SGLang mem_fraction_static, vLLM gpu_memory_utilization).")
    page_tokens: int | None = Field(None, description="KV page size, tokens (None: the engine's).")
    reserve_gib: float | None = Field(None, description="GiB per GPU the engine keeps out of weights + KV (None: the engine's estimate).")
    swa_full_tokens_ratio: float | None = Field(None, description="SGLang's --swa-full-tokens-ratio for hybrid sliding-window models.")
    attn_groups: int | None = Field(None, description="Owner groups of a layout that takes a count (dptp).")

    @classmethod
    def of(cls, **knobs: Any) -> "DeploymentSpec":
        """The spec of these knobs; a knob that isn't one, or a value of the wrong type, is one SpecError line.

        NOTE: knobs that are all of their field's exact type (what the CLI's options give) make the
        spec without pydantic's validation, which would return the same values (no field has a
        constraint or a converter): building the validator was ~20 ms of a CLI call's start. Any
        other value goes through the validation, with its error line."""
        values = {k: getattr(v, "value", v) for k, v in knobs.items()}
        if all(k in _KNOB_TYPES and type(v) in _KNOB_TYPES[k] for k, v in values.items()):
            return cls.model_construct(**values)
        try:
            return cls(**values)
        except ValidationError as exc:
            raise SpecError(_knob_error(exc)) from None

    @classmethod
    def from_launch(cls, launch: str, **knobs: Any) -> "DeploymentSpec":
        """The deployment an SGLang (`python -m sglang.launch_server …`) or vLLM (`vllm serve …`)
        launch line runs (planner.launch.parse_launch: its model, GPUs, layout, MoE split, memory
        fraction, KV dtype, page size), with `knobs` for what a launch line doesn't say
        (`hardware`, or `model` when the line names none). A knob that disagrees with the line is
        one SpecError line naming both."""
        return resolve(launch=launch, **knobs)[0]

    def changed(self, **knobs: Any) -> "DeploymentSpec":
        """A copy with these knobs changed (validated)."""
        return DeploymentSpec.of(**{**{k: getattr(self, k) for k in KNOBS}, **knobs})


KNOBS = tuple(DeploymentSpec.model_fields)
# knob -> the exact types its field holds (`int | None` -> (int, NoneType)): DeploymentSpec.of's fast path
_KNOB_TYPES: dict[str, tuple[type, ...]] = {
    k: tuple(get_args(f.annotation) or (f.annotation,)) for k, f in DeploymentSpec.model_fields.items()}


def _knob_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    name = ".".join(str(x) for x in err["loc"]) or "knobs"
    if err["type"] == "extra_forbidden":
        return f"{name!r} is not a deployment knob; the knobs are {', '.join(KNOBS)}"
    return f"{name}={err.get('input')!r}: {err['msg']}"


def resolve(spec: DeploymentSpec | None = None, launch: str | None = None,
            **knobs: Any) -> tuple[DeploymentSpec, Any]:
    """(the spec, the launch line's reading or None) from a spec, a launch line, or knobs.

    With `launch`, its options fill every knob not given; a knob given that the line sets to
    another value is a SpecError naming both (as `--engine-args` does on the CLI). With `spec`,
    the knobs given change it. `spec` and `launch` together are refused (one says the other)."""
    given = {k: getattr(v, "value", v) for k, v in knobs.items() if v is not None}
    if spec is not None and launch is not None:
        raise SpecError("give spec= or launch=, not both (DeploymentSpec.from_launch(launch, ...) makes a spec of a launch line)")
    if spec is not None:
        if not isinstance(spec, DeploymentSpec):
            raise SpecError(f"spec={type(spec).__name__} is not a floorfirst.DeploymentSpec")
        return (spec.changed(**given) if given else spec), None
    if launch is None:
        return DeploymentSpec.of(**given), None
    if not isinstance(launch, str):
        raise SpecError(f"launch={type(launch).__name__} is not a launch command line (a str)")
    bad = [k for k in given if k not in KNOBS]
    if bad:
        DeploymentSpec.of(**{bad[0]: given[bad[0]]})  # raises the unknown-knob line
    from planner.launch import parse_launch

    try:
        reading = parse_launch(launch, given.get("model"))
    except SpecError as exc:  # the CLI's option name, said as the API's argument
        msg = str(exc)
        raise SpecError("launch" + msg[len("--engine-args"):] if msg.startswith("--engine-args") else msg) from None
    out = dict(given)
    for name, value in reading.options.items():
        if name not in KNOBS:
            continue
        if name in given and given[name] != value and not (name == "model" and value == _card(given[name])):
            raise SpecError(f"{name}={given[name]!r} disagrees with the launch line, which reads as {name}={value!r}; "
                            "give one of them")
        out[name] = value
    return DeploymentSpec.of(**out), reading


def _card(model: str) -> str | None:
    from planner.launch import builtin_card

    return builtin_card(model)
