"""The calibration artifact: a frozen, versioned JSON document holding fitted parameters, the
datasheet rates they are relative to, and the data they came from — and the prediction it makes.

Prediction for one step (all terms priced from the step's own bytes, FLOPs and messages):

  hbm_s      = weight_bytes / (e_w · B_hbm) + other_hbm_bytes / (e_kv · B_hbm)
  compute_s  = linear FLOPs_d / (e_lin · F_d) summed over dtypes + attention-core FLOPs / (e_att · F_bf16)
  network_s  = network_bytes / (e_net · B_link)
  messages_s = network_messages · message_latency_s
  t          = overhead_s + max(terms) + α · (sum(terms) − max(terms))

e_* ∈ (0, 1] are achieved fractions of the datasheet rates, so a calibrated prediction is never
below the datasheet floor max (the floors themselves stay untouched: this module only reads a
`StepCost`). α = 0 is perfect overlap, α = 1 none.

Imports numpy, pydantic and json only: the CLI and the runtime policy load this module on
every start. Fitting lives in `calibration.fit`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.errors import SpecError

SCHEMA_VERSION = 1
ARTIFACT_KIND = "floorfirst.calibration"

# Parameter order used by the fit's vector; names carry their unit (efficiencies are fractions).
PARAM_NAMES: tuple[str, ...] = (
    "hbm_weight_efficiency", "hbm_kv_efficiency", "compute_linear_efficiency", "compute_attention_efficiency",
    "network_efficiency", "message_latency_s", "overlap_alpha", "overhead_s",
)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class FittedParams(_Frozen):
    """The fitted step model's parameters (see the module docstring for the formula)."""

    hbm_weight_efficiency: float = Field(gt=0, le=1, description="Achieved/datasheet HBM rate when streaming weights.")
    hbm_kv_efficiency: float = Field(gt=0, le=1, description="Achieved/datasheet HBM rate for KV and other non-weight bytes.")
    compute_linear_efficiency: float = Field(gt=0, le=1, description="Achieved/datasheet FLOP/s of projection, MLP and LM-head GEMMs.")
    compute_attention_efficiency: float = Field(gt=0, le=1, description="Achieved/datasheet bf16 FLOP/s of the attention core.")
    network_efficiency: float = Field(gt=0, le=1, description="Achieved/datasheet link bandwidth of collectives.")
    message_latency_s: float = Field(ge=0, description="Seconds per collective launch (per latency step).")
    overlap_alpha: float = Field(ge=0, le=1, description="α in t = overhead + max + α·(sum − max); 0 = perfect overlap.")
    overhead_s: float = Field(ge=0, description="Fixed per-step overhead (launch gaps, sampling, scheduling), seconds.")

    def vector(self) -> np.ndarray:
        return np.array([getattr(self, n) for n in PARAM_NAMES], dtype=np.float64)

    @classmethod
    def from_vector(cls, x) -> "FittedParams":
        return cls(**{n: float(v) for n, v in zip(PARAM_NAMES, x)})


class DatasheetRates(_Frozen):
    """The datasheet rates of the hardware the fit was made on (copied from its spec, never changed)."""

    hardware: str = Field(description="Hardware spec name, e.g. 'h200'.")
    hbm_bytes_per_s: float = Field(gt=0)
    flops_per_s: dict[str, float] = Field(description="Dense peak FLOP/s by compute dtype.")
    link_bytes_per_s: float = Field(gt=0, description="Scale-up bandwidth per direction.")


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

    def predict_terms_s(self, cost) -> dict[str, np.ndarray]:
        """Calibrated per-resource times [P] (hbm, compute, network_bytes, network_messages)."""
        f = step_features(cost, self.rates)
        p = self.params
        return {
            "hbm": f.weight_hbm_s / p.hbm_weight_efficiency + f.other_hbm_s / p.hbm_kv_efficiency,
            "compute": f.linear_compute_s / p.compute_linear_efficiency + f.attention_compute_s / p.compute_attention_efficiency,
            "network_bytes": f.network_bytes_s / p.network_efficiency,
            "network_messages": f.network_messages * p.message_latency_s,
        }

    def predict_s(self, cost) -> np.ndarray:
        """Predicted step seconds [P] for a `planner.StepCost` of this calibration's hardware."""
        return predict_from_features(step_features(cost, self.rates), self.params.vector())

    def summary(self) -> dict:
        return {"hardware": self.rates.hardware, "params": self.params.model_dump(), "fitted": list(self.fitted),
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

    def take(self, idx) -> "StepFeatures":
        return StepFeatures(*(getattr(self, n)[idx] for n in self.__dataclass_fields__))

    @classmethod
    def concat(cls, parts: list["StepFeatures"]) -> "StepFeatures":
        return cls(*(np.concatenate([getattr(p, n) for p in parts]) for n in cls.__dataclass_fields__))

    def datasheet_terms_s(self) -> np.ndarray:
        """[4, P] datasheet times per resource (efficiency 1, the hardware file's latency not applied)."""
        return np.stack([self.weight_hbm_s + self.other_hbm_s, self.linear_compute_s + self.attention_compute_s,
                         self.network_bytes_s, np.zeros_like(self.network_bytes_s)])


def step_features(cost, rates: DatasheetRates) -> StepFeatures:
    """Split a StepCost into the parts the calibrated model prices. The attention core is bf16
    (planner.step prices it so); everything else in flops_by_dtype is linear work."""
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
    att_flops = cost.components.get("flops", {}).get("attention_core", np.zeros_like(cost.hbm_bytes))
    bf16 = rates.flops_per_s.get("bf16")
    lin = np.zeros_like(cost.hbm_bytes)
    for dtype, f in cost.flops_by_dtype.items():
        rate = rates.flops_per_s.get(dtype)
        if rate is None:
            raise SpecError(f"calibration for {rates.hardware} has no {dtype} FLOP/s rate")
        lin = lin + np.asarray(f, dtype=np.float64) / rate
    att_s = np.asarray(att_flops, dtype=np.float64) / bf16
    return StepFeatures(
        weight_hbm_s=np.asarray(weight_b / rates.hbm_bytes_per_s, dtype=np.float64),
        other_hbm_s=np.asarray(other_b / rates.hbm_bytes_per_s, dtype=np.float64),
        linear_compute_s=np.maximum(lin - att_s, 0.0),
        attention_compute_s=att_s,
        # NOTE: a group spanning nodes has NIC bytes and messages too; they enter as the scale-up
        # bytes and messages that take as long on the datasheet (planner.step.StepCost), so one
        # fitted link efficiency and one latency scale both tiers.
        network_bytes_s=np.asarray(cost.network_bytes_scaleup_equivalent / rates.link_bytes_per_s, dtype=np.float64),
        network_messages=np.asarray(cost.network_messages_scaleup_equivalent, dtype=np.float64),
    )


def predict_from_features(f: StepFeatures, x: np.ndarray) -> np.ndarray:
    """t = overhead + max + α(sum − max) for parameter vector `x` in PARAM_NAMES order."""
    e_w, e_kv, e_lin, e_att, e_net, lat, alpha, over = x
    terms = np.stack([
        f.weight_hbm_s / e_w + f.other_hbm_s / e_kv,
        f.linear_compute_s / e_lin + f.attention_compute_s / e_att,
        f.network_bytes_s / e_net,
        f.network_messages * lat,
    ])
    mx = terms.max(axis=0)
    return over + mx + alpha * (terms.sum(axis=0) - mx)


def load_calibration(path) -> Calibration:
    """Read a calibration artifact; a missing or malformed file is one SpecError line."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text())
    except FileNotFoundError:
        raise SpecError(f"calibration file not found: {path}") from None
    except OSError as exc:
        raise SpecError(f"cannot read calibration {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"calibration {path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    if not isinstance(raw, dict) or raw.get("kind") != ARTIFACT_KIND:
        raise SpecError(f"calibration {path}: not a floorfirst calibration (kind={raw.get('kind') if isinstance(raw, dict) else None!r})")
    if raw.get("schema_version") != SCHEMA_VERSION:
        raise SpecError(f"calibration {path}: schema_version={raw.get('schema_version')!r}, this floorfirst reads {SCHEMA_VERSION}")
    try:
        return Calibration.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise SpecError(f"calibration {path}: field '{loc}': {err['msg']}") from None


def save_calibration(cal: Calibration, path) -> None:
    Path(path).write_text(cal.model_dump_json(indent=1) + "\n")
