"""The calibration artifact: a frozen, versioned JSON document holding fitted parameters, the
datasheet rates they are relative to, and the data they came from — and the prediction it makes.

Prediction for one step (all terms priced from the step's own bytes, FLOPs and messages):

  hbm_s      = weight_bytes / (e_w · B_hbm) + other_hbm_bytes / (e_kv · B_hbm)
  compute_s  = linear FLOPs_d / (e_lin · F_d) summed over dtypes + attention FLOPs / (e_att · F_bf16)
               + fixed latencies (DSA's top-k: a measured engine latency, not a datasheet rate, so unscaled)
  network_s  = network_bytes / (e_net · B_link)
  messages_s = network_messages · message_latency_s
  host_link_s = host-link contiguous-equivalent bytes / B_host   (a host KV tier's misses; not fitted:
               no measured row has a tier yet, so the term is the datasheet floor, efficiency 1)
  D          = max(terms) + α · (sum(terms) − max(terms))          (the device's time)
  E          = e_p·[the step carries prefill tokens] + e_m·[… and decode rows too]   (eager host time)
  t          = overhead_s + max(E, D) + α_h · min(E, D)

e_p (`prefill_step_overhead_s`) and e_m (`mixed_step_overhead_s`) are the fixed host costs of a step
that no full CUDA graph runs. NOTE: engines capture graphs of decode batches only, so a step with a
prompt chunk launches its kernels one by one: SGLang (python/sglang/srt/model_executor/
cuda_graph_runner.py, `CudaGraphRunner.can_run`: decode, target-verify and idle batches; an extend or
mixed-chunk batch runs eagerly unless --enable-piecewise-cuda-graph), TensorRT-LLM's PyTorch backend
(tensorrt_llm/_torch/pyexecutor/cuda_graph_runner.py, generation-only batches; the context phase's
piecewise graphs are opt-in, `prefill_cuda_graph_backend`), vLLM V1 (docs/design/cuda_graphs.md:
FULL_AND_PIECEWISE runs uniform-decode batches as one full graph and prefill or mixed batches as
piecewise graphs with attention outside them). A mixed step's decode rows then leave their graph too
(e_m; the torch executor runs their paged-attention path beside the chunk's). Both are fitted per
engine where rows with prompt chunks exist, else held at 0 (the shipped priors: no measured step).

α_h (`host_overlap_alpha`) is how much of the shorter of E and D the other does not hide. NOTE: a
kernel launch returns before the kernel runs, so an eager step's host launches and its device work
overlap: a step of short kernels waits on its launches (host-bound), a step of long ones on the
device. The torch executor shows both on H100 (benchmarks/results/executor_gpu/twin_1gpu/
gpu_h100_eager/engine_rows.json): a prefill-only step takes 14.2–16.1 ms from 64 to 1,024 tokens,
flat (its launches, ~14 ms, outlast the device work) and 26.6 ms at 2,048 (the device's time). An
added E (α_h = 1, the serial formula) can't fit both: it read the flat part as host time and left
the device's growth unpriced. α_h = 1 where no row tells it apart (no chunk rows: E = 0), so every
shipped prior and every step without a chunk prices exactly as before.

The step's engine terms (planner.step EngineStepCost: the engine's own collectives, its thin expert
GEMMs' extra streaming, CUDA-graph padding) enter these parts where the step carries them. A fit
over rows of several engines gives each engine beyond the first its own efficiencies and overhead
(`engines`, ENGINE_PARAM_NAMES); link, message latency and α are shared. `engine` names the engine
`params` price, `origin` whether the artifact was fitted or is a shipped prior (calibration/priors).

e_* ∈ (0, 1] are achieved fractions of the datasheet rates, so a calibrated prediction is never
below the datasheet floor max (the floors themselves stay untouched: this module only reads a
`StepCost`). α = 0 is perfect overlap, α = 1 none.

Validated at load, once (`load_calibration`), to the same ranges the fit is bounded to: every number
finite, efficiencies in [EFF_MIN, 1], message latency in [0, MAX_LATENCY_S], overhead in
[0, MAX_OVERHEAD_S], datasheet rates at least a byte (or FLOP) per second (and a bf16 rate present);
outside them a prediction is infinite or NaN (an efficiency of 1e-320 divides a time by it) and a
simulation priced by it never ends.

Imports numpy, pydantic and json only: the CLI and the runtime policy load this module on
every start. Fitting lives in `calibration.fit`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from planner.errors import SpecError
from planner.inputs import CALIBRATION_MAX_BYTES, field_error, load_json_file, shown, write_text_file

SCHEMA_VERSION = 1
ARTIFACT_KIND = "floorfirst.calibration"

# Parameter order used by the fit's vector; names carry their unit (efficiencies are fractions).
PARAM_NAMES: tuple[str, ...] = (
    "hbm_weight_efficiency", "hbm_kv_efficiency", "compute_linear_efficiency", "compute_attention_efficiency",
    "network_efficiency", "message_latency_s", "overlap_alpha", "overhead_s",
    "prefill_step_overhead_s", "mixed_step_overhead_s", "host_overlap_alpha",
)


# Parameters one engine may hold of its own when a fit spans several engines (calibration.fit):
# its kernels' efficiencies and its overhead; the link, the message latency and α are the
# hardware's, shared by every engine.
ENGINE_PARAM_NAMES: tuple[str, ...] = (
    "hbm_weight_efficiency", "hbm_kv_efficiency", "compute_linear_efficiency", "compute_attention_efficiency", "overhead_s",
    "prefill_step_overhead_s", "mixed_step_overhead_s", "host_overlap_alpha",
)
ENGINE_PARAM_INDEX: tuple[int, ...] = tuple(PARAM_NAMES.index(n) for n in ENGINE_PARAM_NAMES)
# Codes a step's features carry for the engine whose kernels priced it (StepFeatures.engine_code);
# 'bare' is a row measured outside any engine (the layout's ideal kernels).
ENGINE_CODES: tuple[str, ...] = ("bare", "sglang", "vllm", "trtllm")


def engine_code(name: str | None) -> float:
    """The feature code of an engine (ENGINE_CODES; an engine registered later gets its own)."""
    name = name or "bare"
    return float(ENGINE_CODES.index(name)) if name in ENGINE_CODES else float(100 + sum(map(ord, name)))


# NOTE: the fit's own bounds (calibration.fit bounds its parameters by these same names): an
# artifact the fit could not have written is refused. Overhead is bounded by the fit at the fastest
# measured step; 10 s per step is far past any decode step and keeps predictions meaningful.
EFF_MIN = 1e-3
MAX_LATENCY_S = 1e-2
MAX_OVERHEAD_S = 10.0
MIN_RATE_PER_S = 1.0


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)  # built on first use (planner.spec_cache)


class FittedParams(_Frozen):
    """The fitted step model's parameters (see the module docstring for the formula)."""

    hbm_weight_efficiency: float = Field(ge=EFF_MIN, le=1, description="Achieved/datasheet HBM rate when streaming weights.")
    hbm_kv_efficiency: float = Field(ge=EFF_MIN, le=1, description="Achieved/datasheet HBM rate for KV and other non-weight bytes.")
    compute_linear_efficiency: float = Field(ge=EFF_MIN, le=1, description="Achieved/datasheet FLOP/s of projection, MLP and LM-head GEMMs.")
    compute_attention_efficiency: float = Field(ge=EFF_MIN, le=1, description="Achieved/datasheet bf16 FLOP/s of the attention core.")
    network_efficiency: float = Field(ge=EFF_MIN, le=1, description="Achieved/datasheet link bandwidth of collectives.")
    message_latency_s: float = Field(ge=0, le=MAX_LATENCY_S, description="Seconds per collective launch (per latency step).")
    overlap_alpha: float = Field(ge=0, le=1, description="α in t = overhead + max + α·(sum − max); 0 = perfect overlap.")
    overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S, description="Fixed per-step overhead (launch gaps, sampling, scheduling), seconds.")
    prefill_step_overhead_s: float = Field(0.0, ge=0, le=MAX_OVERHEAD_S, description="Extra fixed seconds of a step carrying prefill tokens (no full CUDA graph runs it).")
    mixed_step_overhead_s: float = Field(0.0, ge=0, le=MAX_OVERHEAD_S, description="Extra fixed seconds when that step also carries decode rows (their path leaves the graph too).")
    host_overlap_alpha: float = Field(1.0, ge=0, le=1, description="α_h: the share of the shorter of a chunk step's eager host time and its device time that does not overlap the other (1: they add; 0: the step takes the longer).")

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, n) for n in PARAM_NAMES], dtype=np.float64)

    @classmethod
    def from_vector(cls, x) -> "FittedParams":
        return cls(**{n: float(v) for n, v in zip(PARAM_NAMES, x)})


class EngineParams(_Frozen):
    """One engine's own parameters in a fit over several engines (ENGINE_PARAM_NAMES); the shared
    ones (link, message latency, α) are the calibration's `params`."""

    hbm_weight_efficiency: float = Field(ge=EFF_MIN, le=1)
    hbm_kv_efficiency: float = Field(ge=EFF_MIN, le=1)
    compute_linear_efficiency: float = Field(ge=EFF_MIN, le=1)
    compute_attention_efficiency: float = Field(ge=EFF_MIN, le=1)
    overhead_s: float = Field(ge=0, le=MAX_OVERHEAD_S)
    prefill_step_overhead_s: float = Field(0.0, ge=0, le=MAX_OVERHEAD_S)
    mixed_step_overhead_s: float = Field(0.0, ge=0, le=MAX_OVERHEAD_S)
    host_overlap_alpha: float = Field(1.0, ge=0, le=1)


class DatasheetRates(_Frozen):
    """The datasheet rates of the hardware the fit was made on (copied from its spec, never changed)."""

    hardware: str = Field(description="Hardware spec name, e.g. 'h200'.")
    hbm_bytes_per_s: float = Field(ge=MIN_RATE_PER_S)
    flops_per_s: dict[str, Annotated[float, Field(ge=MIN_RATE_PER_S)]] = Field(description="Dense peak FLOP/s by compute dtype; bf16 required.")
    link_bytes_per_s: float = Field(ge=MIN_RATE_PER_S, description="Scale-up bandwidth per direction.")

    @field_validator("flops_per_s")
    @classmethod
    def _has_bf16(cls, v: dict[str, float]) -> dict[str, float]:
        if "bf16" not in v:
            raise ValueError("needs a 'bf16' rate (the attention core is priced at it)")
        return v


class DataSource(_Frozen):
    """One input file the calibration was fitted on."""

    path: str
    sha256: str
    kind: str = Field(description="Loader that read it: profile_csv, profile_jsonl, vllm, sglang, executor, microbench…")
    rows: int = Field(ge=0, description="Rows used.")
    rows_rejected: int = Field(ge=0, description="Rows reported bad and not used.")


class FitSummary(_Frozen):
    """How the fit went, in-sample (cross-validated figures come from `floorfirst validate`)."""

    rows: int
    loss: str = Field(description="scipy least_squares robust loss.")
    f_scale: float = Field(description="Residual scale (log-ratio units) where the robust loss turns linear.")
    median_abs_pct_error: float
    p90_abs_pct_error: float
    rows_below_floor: int = Field(description="Rows measured below their datasheet floor_max (a spec or model error).")


class Calibration(_Frozen):
    """A fitted step model. Frozen; written once by `calibration.fit`, read by everything else."""

    kind: Literal["floorfirst.calibration"] = ARTIFACT_KIND
    schema_version: Literal[1] = SCHEMA_VERSION
    created_utc: str
    rates: DatasheetRates
    params: FittedParams
    fitted: tuple[str, ...] = Field(description="Parameters the data determined.")
    fixed: dict[str, str] = Field(default_factory=dict, description="Parameters held fixed -> where their value came from.")
    param_std: dict[str, float] = Field(default_factory=dict, description="Approximate 1σ of fitted parameters (Jacobian).")
    priors: dict[str, float] = Field(default_factory=dict, description="Starting values of the fit (cross-validation restarts from these).")
    sources: tuple[DataSource, ...]
    microbench: DataSource | None = None
    fit: FitSummary
    notes: tuple[str, ...] = ()
    # the engine `params` were fitted on (None: rows measured outside any engine, or an older artifact)
    engine: str | None = None
    # per-engine parameters of a fit over several engines (the others use `params`)
    engines: dict[str, EngineParams] = Field(default_factory=dict)
    # what the model is: 'fit' (measured rows) or 'prior' (per-kernel tables, no measured row)
    origin: Literal["fit", "prior"] = "fit"

    def vector_for(self, engine: str | None) -> np.ndarray:
        """The parameter vector (PARAM_NAMES order) that prices steps run by `engine`."""
        x = self.params.vector()
        own = self.engines.get(engine or "")
        if own is not None:
            for i, n in zip(ENGINE_PARAM_INDEX, ENGINE_PARAM_NAMES):
                x[i] = getattr(own, n)
        return x

    def predict_terms_s(self, cost) -> dict[str, np.ndarray]:
        """Calibrated per-resource times [P], keyed by planner.TIMED_RESOURCES."""
        f = step_features(cost, self.rates)
        t = calibrated_terms_s(f, self.vector_for(_cost_engine(cost)))
        return {"hbm": t[0], "compute": t[1], "network_bytes": t[2], "network_messages": t[3], "host_link": t[4]}

    def overhead_for(self, engine: str | None) -> float:
        return float(self.vector_for(engine)[7])

    def eager_overheads_for(self, engine: str | None) -> tuple[float, float]:
        """(prefill_step_overhead_s, mixed_step_overhead_s) of steps run by `engine`."""
        x = self.vector_for(engine)
        return float(x[8]), float(x[9])

    def host_overlap_alpha_for(self, engine: str | None) -> float:
        return float(self.vector_for(engine)[10])

    def alpha_for(self, engine: str | None) -> float:
        return float(self.vector_for(engine)[6])

    def predict_s(self, cost) -> np.ndarray:
        """Predicted step seconds [P] for a `planner.StepCost` of this calibration's hardware."""
        return predict_from_features(step_features(cost, self.rates), self.vector_for(_cost_engine(cost)))

    def summary(self) -> dict:
        return {"hardware": self.rates.hardware, "engine": self.engine, "origin": self.origin,
                "engines": {k: v.model_dump() for k, v in self.engines.items()},
                "params": self.params.model_dump(), "fitted": list(self.fitted),
                "fixed": dict(self.fixed), "rows": self.fit.rows,
                "in_sample_median_abs_pct_error": self.fit.median_abs_pct_error,
                "in_sample_p90_abs_pct_error": self.fit.p90_abs_pct_error,
                "sources": [s.path for s in self.sources]}


@dataclass(frozen=True)
class StepFeatures:
    """Datasheet-priced times of a step's parts, arrays [P]: what the fit scales."""

    weight_hbm_s: np.ndarray
    other_hbm_s: np.ndarray  # KV read/write, indexer, anything not '*_weights'
    linear_compute_s: np.ndarray
    attention_compute_s: np.ndarray
    network_bytes_s: np.ndarray
    network_messages: np.ndarray  # a count, priced by the fitted latency
    latency_s: np.ndarray  # fixed latencies inside the compute term (top-k), taken as declared
    host_link_s: np.ndarray  # a host KV tier's fetches at the datasheet host-link rate (0 without a tier)
    engine_code: np.ndarray  # whose kernels ran the step (ENGINE_CODES), for fits over several engines
    prefill_step: np.ndarray  # 1.0 where the step carries prefill tokens (no full CUDA graph), else 0.0
    mixed_step: np.ndarray  # 1.0 where it carries decode rows too, else 0.0

    def take(self, idx) -> "StepFeatures":
        return StepFeatures(*(getattr(self, n)[idx] for n in self.__dataclass_fields__))

    @classmethod
    def concat(cls, parts: list["StepFeatures"]) -> "StepFeatures":
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in cls.__dataclass_fields__))

    def datasheet_terms_s(self) -> np.ndarray:
        """[R, P] datasheet times per resource in planner.TIMED_RESOURCES order (efficiency 1, the
        hardware file's latency not applied)."""
        return np.stack([self.weight_hbm_s + self.other_hbm_s, self.linear_compute_s + self.attention_compute_s + self.latency_s,
                         self.network_bytes_s, np.zeros_like(self.network_bytes_s), self.host_link_s])


ATTENTION_FLOP_COMPONENTS = ("attention_core", "indexer", "head_padding")  # bf16 attention work (planner.step)


def _cost_engine(cost) -> str | None:
    e = getattr(cost, "engine", None)
    return None if e is None or e.engine == "bare" else e.engine


def step_features(cost, rates: DatasheetRates) -> StepFeatures:
    """Split a StepCost into the parts the calibrated model prices. The attention work (core,
    DSA's indexer scores, padded head rows) is bf16 (planner.step prices it so); everything else in
    flops_by_dtype is linear work. The engine's terms (planner.step EngineStepCost) are priced
    where the step carries them: its narrow expert GEMMs as weight streaming, its CUDA-graph padding
    as linear work, its own collectives in place of the layout's ideal ones."""
    hbm = cost.components.get("hbm_bytes", {})
    weight_b = sum((v for k, v in hbm.items() if k.endswith("_weights")), np.zeros_like(cost.hbm_bytes))
    other_b = cost.hbm_bytes - weight_b
    if cost.pricing == "datasheet":
        # NOTE: a datasheet-priced cost carries its hardware's HBM time; if it disagrees with our
        # rates the step belongs to other hardware and the fitted efficiencies don't apply.
        expect = cost.hbm_bytes / rates.hbm_bytes_per_s
        if not np.allclose(cost.times.hbm_s, expect, rtol=1e-6, atol=0.0):
            raise SpecError(f"calibration is for {rates.hardware} ({rates.hbm_bytes_per_s / 1e12:g} TB/s HBM); "
                            "this step was priced for other hardware")
    fl = cost.components.get("flops", {})
    att_flops = sum((fl[k] for k in ATTENTION_FLOP_COMPONENTS if k in fl), np.zeros_like(cost.hbm_bytes))
    bf16 = rates.flops_per_s.get("bf16")
    lin = np.zeros_like(cost.hbm_bytes)
    for dtype, f in cost.flops_by_dtype.items():
        rate = rates.flops_per_s.get(dtype)
        if rate is None:
            raise SpecError(f"calibration for {rates.hardware} has no {dtype} FLOP/s rate")
        lin = lin + np.asarray(f, dtype=np.float64) / rate
    att_s = np.asarray(att_flops, dtype=np.float64) / bf16
    eng = getattr(cost, "engine", None)
    pad_s = 0.0
    if eng is not None:
        weight_b = weight_b + eng.extra_hbm_bytes
        for dtype, f in eng.flops_by_dtype.items():
            pad_s = pad_s + np.asarray(f, dtype=np.float64) / rates.flops_per_s.get(dtype, bf16)
    # NOTE: a group spanning nodes has NIC bytes and messages too; they enter as the scale-up bytes
    # and messages that take as long on the datasheet (planner.step.StepCost), so one fitted link
    # efficiency and one latency scale both tiers.
    if hasattr(cost, "engine_network_scaleup_equivalent"):
        net_b, net_m = cost.engine_network_scaleup_equivalent()
    else:
        net_b, net_m = cost.network_bytes_scaleup_equivalent, cost.network_messages_scaleup_equivalent
    code = engine_code(_cost_engine(cost))
    shape = np.shape(np.asarray(cost.hbm_bytes))
    prefill = np.broadcast_to(np.asarray(cost.prefill_tokens, dtype=np.float64) > 0, shape)
    mixed = prefill & np.broadcast_to(np.asarray(cost.batch, dtype=np.float64) > 0, shape)
    return StepFeatures(
        weight_hbm_s=np.asarray(weight_b / rates.hbm_bytes_per_s, dtype=np.float64),
        other_hbm_s=np.asarray(other_b / rates.hbm_bytes_per_s, dtype=np.float64),
        linear_compute_s=np.maximum(lin - att_s, 0.0) + pad_s,
        attention_compute_s=att_s,
        network_bytes_s=np.asarray(net_b / rates.link_bytes_per_s, dtype=np.float64),
        network_messages=np.asarray(net_m, dtype=np.float64),
        latency_s=np.asarray(cost.fixed_latency_s, dtype=np.float64),
        # NOTE: at the cost's own pricing (datasheet in the fit and the checks): the tier is not fitted
        host_link_s=np.zeros_like(np.asarray(cost.hbm_bytes, dtype=np.float64)) + cost.times.host_link_s,
        engine_code=np.full(shape, code),
        prefill_step=prefill.astype(np.float64),
        mixed_step=mixed.astype(np.float64),
    )


def calibrated_terms_s(f: StepFeatures, x: np.ndarray) -> np.ndarray:
    """[R, P] calibrated per-resource seconds in planner.TIMED_RESOURCES order."""
    e_w, e_kv, e_lin, e_att, e_net, lat = x[:6]
    return np.stack([
        f.weight_hbm_s / e_w + f.other_hbm_s / e_kv,
        f.linear_compute_s / e_lin + f.attention_compute_s / e_att + f.latency_s,
        f.network_bytes_s / e_net,
        f.network_messages * lat,
        f.host_link_s,
    ])


def per_step_params(x: np.ndarray, codes: np.ndarray, blocks: tuple[float, ...]) -> np.ndarray:
    """[N, S] the parameters each step is priced at: `x` = the N shared parameters (PARAM_NAMES)
    then, per engine code in `blocks`, its own ENGINE_PARAM_NAMES; steps of other engines use the
    shared ones."""
    out = np.repeat(np.asarray(x[: len(PARAM_NAMES)], dtype=np.float64)[:, None], codes.size, axis=1)
    for j, code in enumerate(blocks):
        sel = codes == code
        lo = len(PARAM_NAMES) + j * len(ENGINE_PARAM_NAMES)
        for i, v in zip(ENGINE_PARAM_INDEX, x[lo: lo + len(ENGINE_PARAM_NAMES)]):
            out[i, sel] = v
    return out


def predict_from_features(f: StepFeatures, x: np.ndarray) -> np.ndarray:
    """t = overhead (+ the eager-step overheads where the step has them) + max + α(sum − max) for
    parameter vector `x` in PARAM_NAMES order (or [N, P]: one column per step); where α_h < 1, a step
    with eager host time E = e_p + e_m and device time D = max + α(sum − max) takes
    overhead + max(E, D) + α_h·min(E, D) (the module docstring)."""
    alpha, over = x[6], x[7] + x[8] * f.prefill_step + x[9] * f.mixed_step
    terms = calibrated_terms_s(f, x)
    mx = terms.max(axis=0)
    serial = over + mx + alpha * (terms.sum(axis=0) - mx)
    ah = x[10]
    if np.all(ah == 1.0):  # the serial formula, bit for bit (every shipped prior)
        return serial
    eager = x[8] * f.prefill_step + x[9] * f.mixed_step
    d = mx + alpha * (terms.sum(axis=0) - mx)
    overlapped = x[7] + np.maximum(eager, d) + ah * np.minimum(eager, d)
    return np.where(ah == 1.0, serial, overlapped)


@dataclass(frozen=True)
class RowFeatures:
    """Measured rows as weighted sums of priced steps: a step row is one step; a serving row's
    TPOT is Σ weight·step time over the steps its engine runs per output token
    (calibration.serving). The fit and every check predict rows through this."""

    steps: StepFeatures  # [S]
    step_row: np.ndarray  # [S] int, the row each step belongs to
    weight: np.ndarray  # [S] steps per measured unit of its row
    rows: int
    blocks: tuple[float, ...] = ()  # engine codes with their own parameters (calibration.fit, several engines)

    @classmethod
    def one_step_per_row(cls, steps: StepFeatures) -> "RowFeatures":
        n = steps.weight_hbm_s.size
        return cls(steps, np.arange(n), np.ones(n), n)

    def sum_rows(self, per_step: np.ndarray) -> np.ndarray:
        """[..., R] weighted row sums of [..., S] per-step values."""
        per_step = np.asarray(per_step, dtype=np.float64)
        if per_step.ndim == 1:
            return np.bincount(self.step_row, weights=self.weight * per_step, minlength=self.rows)
        return np.stack([self.sum_rows(v) for v in per_step])

    def params(self, x: np.ndarray) -> np.ndarray:
        """The parameters each step is priced at ([N] when no engine has its own, else [N, S])."""
        return per_step_params(x, self.steps.engine_code, self.blocks) if self.blocks else x

    def predict(self, x: np.ndarray) -> np.ndarray:
        """[R] predicted seconds per row."""
        return self.sum_rows(predict_from_features(self.steps, self.params(x)))

    def terms(self, x: np.ndarray) -> np.ndarray:
        """[R resources, rows] calibrated per-resource seconds per row."""
        return self.sum_rows(calibrated_terms_s(self.steps, self.params(x)))

    def with_blocks(self, blocks: tuple[float, ...]) -> "RowFeatures":
        return RowFeatures(self.steps, self.step_row, self.weight, self.rows, tuple(blocks))

    def take(self, idx) -> "RowFeatures":
        """Rows `idx` (in that order), with their steps."""
        idx = np.asarray(idx, dtype=np.int64)
        new_pos = np.full(self.rows, -1, dtype=np.int64)
        new_pos[idx] = np.arange(idx.size)
        keep = np.flatnonzero(new_pos[self.step_row] >= 0)
        return RowFeatures(self.steps.take(keep), new_pos[self.step_row[keep]], self.weight[keep], int(idx.size),
                           self.blocks)

    @classmethod
    def concat(cls, parts: list["RowFeatures"]) -> "RowFeatures":
        offs = np.cumsum([0] + [p.rows for p in parts])
        return cls(StepFeatures.concat([p.steps for p in parts]),
                   np.concatenate([p.step_row + o for p, o in zip(parts, offs)]),
                   np.concatenate([p.weight for p in parts]), int(offs[-1]))


def load_calibration(path) -> Calibration:
    """Read a calibration artifact; a missing, malformed or out-of-range file is one SpecError line."""
    raw = load_json_file(path, "calibration file", CALIBRATION_MAX_BYTES)
    if not isinstance(raw, dict) or raw.get("kind") != ARTIFACT_KIND:
        raise SpecError(f"calibration {path}: not a floorfirst calibration (kind={shown(raw.get('kind') if isinstance(raw, dict) else None)})")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise SpecError(f"calibration {path}: schema_version={shown(raw.get('schema_version'))}, this floorfirst reads {SCHEMA_VERSION}")
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        raise SpecError(f"calibration {path}: {field_error(exc)}") from None


def save_calibration(cal: Calibration, path) -> None:
    write_text_file(path, cal.model_dump_json(indent=1) + "\n", "calibration file")
