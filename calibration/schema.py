"""One schema for measured operating points, and the steady-state step a serving benchmark implies.

A step row: `model, hardware, gpus, attn, moe, batch, context` (mean decode context), optional
`prefill_tokens` (per group and step), `replicas`, `nodes` (scale-up domains the deployment
spans; default as few as hold `gpus`, so 16 GPUs of an 8-GPU node are 2 nodes), `weight_dtype`,
`kv_dtype`, `attention_kernel` (the decode kernel that ran, planner.models.attention.kernels), and
`step_ms`.
A serving row: the same deployment fields with `isl, osl, concurrency` (total over the
deployment), `tpot_ms` and optional `ttft_ms` in place of `batch, context, step_ms`, and how the
engine ran it: `engine` (sglang, vllm, trtllm: how it schedules prefill), `chunk_tokens` (its
prefill chunk; default the engine's), `spec_tokens` and `accept_len` (speculative decoding: k
draft tokens verified per step, τ tokens accepted per step on average).

A serving row is priced as the steps its engine runs per output token (calibration.serving):
decode steps at batch = concurrency and context isl + osl/2, and the chunked-prefill steps of
the requests admitted meanwhile; the measurement is the TPOT. `ServingRow.to_step()` is that
decode step alone, for display.

Does not: read files (calibration.loaders) or price anything (calibration.costs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from planner.inputs import shown

STEP_FIELDS = ("model", "hardware", "gpus", "attn", "moe", "batch", "context", "step_ms")
SERVING_FIELDS = ("model", "hardware", "gpus", "attn", "moe", "isl", "osl", "concurrency", "tpot_ms")
OPTIONAL_FIELDS = ("prefill_tokens", "replicas", "nodes", "weight_dtype", "kv_dtype", "num_layers", "ttft_ms",
                   "attention_kernel", "engine", "chunk_tokens", "spec_tokens", "accept_len")


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str = Field(min_length=1, description="Built-in model name or a config.json path.")
    hardware: str = Field(min_length=1, description="Built-in hardware name or a YAML path.")
    gpus: int = Field(ge=1)
    attn: str = Field(description="Attention layout: tp, cp, dp, dop.")
    moe: str = Field(description="MoE split: ep or tp.")
    replicas: int = Field(default=1, ge=1)
    nodes: int | None = Field(default=None, ge=1, description="Scale-up domains the deployment spans (default: as few as hold gpus).")
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    num_layers: int | None = Field(default=None, ge=1, description="Decoder layers the measured stack ran; must equal the model's (a reduced stack needs its own config.json).")
    attention_kernel: str | None = Field(default=None, description="Decode kernel that ran (its head tile); default the variant's engine default.")
    engine: Literal["sglang", "vllm", "trtllm"] | None = Field(default=None, description="The engine that ran it (its kernels and how it schedules); a step row without one ran outside any engine, a serving row defaults to sglang.")


class StepRow(_Row):
    """One measured step."""

    batch: int = Field(ge=0, description="Decode requests in the step, whole deployment.")
    context: float = Field(gt=0, description="Mean decode context, tokens.")
    prefill_tokens: float = Field(default=0.0, ge=0, description="Prefill tokens per group in the same step.")
    step_ms: float = Field(gt=0, description="Measured step time, ms.")

    def deployment_key(self) -> tuple:
        return (self.model, self.hardware, self.gpus, self.attn, self.moe, self.replicas, self.weight_dtype,
                self.kv_dtype, self.num_layers, self.attention_kernel, self.nodes, self.engine)


class ServingRow(_Row):
    """One serving-benchmark result (one concurrency level)."""

    isl: float = Field(gt=0, description="Mean input tokens per request.")
    osl: float = Field(gt=0, description="Mean output tokens per request.")
    concurrency: int = Field(ge=1, description="Requests in flight, whole deployment.")
    tpot_ms: float = Field(gt=0, description="Time per output token after the first, ms: (e2e − ttft)/(osl − 1) per request.")
    ttft_ms: float | None = Field(default=None, gt=0)
    chunk_tokens: int | None = Field(default=None, ge=1, description="Prefill tokens per step; default the engine's.")
    spec_tokens: int = Field(default=0, ge=0, description="Draft tokens verified per decode step (speculative decoding).")
    accept_len: float | None = Field(default=None, ge=1, description="Tokens accepted per decode step, mean (needs spec_tokens).")

    @model_validator(mode="after")
    def _spec(self) -> "ServingRow":
        if self.spec_tokens and self.accept_len is None:
            raise ValueError(f"spec_tokens={self.spec_tokens} needs accept_len (tokens accepted per step)")
        if self.accept_len is not None and self.accept_len > self.spec_tokens + 1:
            raise ValueError(f"accept_len={self.accept_len} exceeds spec_tokens + 1 = {self.spec_tokens + 1}")
        return self

    def to_step(self) -> StepRow:
        """The decode step of the steady state (display; pricing expands the row, calibration.serving)."""
        return StepRow(model=self.model, hardware=self.hardware, gpus=self.gpus, attn=self.attn, moe=self.moe,
                       replicas=self.replicas, nodes=self.nodes, weight_dtype=self.weight_dtype,
                       kv_dtype=self.kv_dtype, num_layers=self.num_layers, attention_kernel=self.attention_kernel,
                       engine=self.engine or "sglang", batch=self.concurrency, context=self.isl + self.osl / 2.0, prefill_tokens=0.0,
                       step_ms=self.tpot_ms)


@dataclass(frozen=True)
class RowIssue:
    """A row that could not be used: where it is and why."""

    source: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.message}"


@dataclass(frozen=True)
class LoadedRow:
    row: StepRow
    source: str
    line: int
    serving: ServingRow | None = None


@dataclass
class Profile:
    """Rows from one or more files, the rows rejected (with line numbers) and notes."""

    rows: list[LoadedRow] = field(default_factory=list)
    issues: list[RowIssue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    sources: list[dict] = field(default_factory=list)  # path, sha256, kind, rows, rows_rejected

    def extend(self, other: "Profile") -> None:
        self.rows += other.rows
        self.issues += other.issues
        self.notes += other.notes
        self.sources += other.sources


def _clean(raw: dict) -> dict:
    """Blank CSV cells mean 'not given'; numeric strings become numbers; floats that are whole
    numbers become ints (so 'batch=8.0' validates as an int field)."""
    out = {}
    for k, v in raw.items():
        if k is None:
            continue
        k = k.strip()
        if isinstance(v, str):
            v = v.strip()
            if v == "":
                continue
            try:
                v = float(v)
            except ValueError:
                pass
        if isinstance(v, float) and math.isfinite(v) and v == int(v) and k not in ("context", "prefill_tokens", "isl", "osl",
                                                                                 "accept_len"):
            v = int(v)
        out[k] = v
    return out


def parse_row(raw: dict, source: str, line: int, defaults: dict | None = None) -> tuple[LoadedRow | None, RowIssue | None, set[str]]:
    """A dict (from a CSV line or a JSON object) → a step row, or the issue that rejects it.
    Returns also the keys it ignored (metadata columns outside the schema)."""
    d = {**(defaults or {}), **_clean(raw)}
    serving = "tpot_ms" in d or "isl" in d
    known = set(ServingRow.model_fields if serving else StepRow.model_fields)
    ignored = set(d) - known
    d = {k: v for k, v in d.items() if k in known}
    need = SERVING_FIELDS if serving else STEP_FIELDS
    missing = [f for f in need if f not in d]
    if missing:
        return None, RowIssue(source, line, f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)}"), ignored
    for k, v in d.items():
        if isinstance(v, float) and not math.isfinite(v):
            return None, RowIssue(source, line, f"field '{k}' is {v}"), ignored
    try:
        if serving:
            s = ServingRow.model_validate(d)
            return LoadedRow(s.to_step(), source, line, s), None, ignored
        return LoadedRow(StepRow.model_validate(d), source, line), None, ignored
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        if not loc:  # a check across fields
            return None, RowIssue(source, line, err["msg"].removeprefix("Value error, ")), ignored
        return None, RowIssue(source, line, f"field '{loc}'={shown(err.get('input'))}: {err['msg']}"), ignored
