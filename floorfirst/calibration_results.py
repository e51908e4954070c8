"""The typed documents of the measuring commands: `MicrobenchResult` (`floorfirst microbench --json`),
`KernelDbResult` (`floorfirst calibrate --from-kernel-db … --json`) and `CalibrateResult`
(`floorfirst calibrate --json`; its parameters named and described by calibration/artifact.py's
FittedParams, not retyped here). As floorfirst/results.py's:
a field is a key of the document (units in the names), its docstring the key's description, and
schemas/from_models.py writes the command's JSON Schema from the model.

Does not: measure or read anything (calibration.microbench, calibration.kernel_db do), or validate
the rates (the hardware loader does when the YAML is used).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from floorfirst.results import Count, Document, Tally, _kw, _Part

Rate = Annotated[float, _kw(minimum=0)]


class MicrobenchResult(Document):
    """Achieved rates measured on a GPU (or read back with --from)."""

    command: ClassVar[str] = "microbench"

    out: str
    """Result file (written, or read with --from)."""
    yaml_out: str | None
    """Calibrated hardware YAML written (only with --yaml-out)."""
    device: str | None
    """GPU name."""
    gpus: Count | None
    """GPUs used for collectives."""
    summary: dict[str, Annotated[Rate, _kw(description="A rate (bytes/s or FLOP/s) or a latency (seconds), as the "
                                                   "key's unit says.")]]
    """Measured rates and latencies; units in the key names (…_bytes_per_s, …_flops_per_s, …_latency_s)."""


class KernelTable(_Part):
    """One table."""

    path: str
    """Member path inside the wheel."""
    op: str
    """Kernel family (gemm, mla, moe, comm)."""
    table: str
    """Table name."""
    version: str
    """The backend (or NCCL) version the table was measured with; the newest in the wheel."""
    rows_used: Tally
    """Rows that entered a rate."""
    sha256: str | None = None
    """SHA-256 of the table's bytes as read from the wheel."""


class KernelDbResult(Document):
    """Achieved rates per resource read from aiconfigurator-core's per-kernel tables (never its end-to-end
    rows), with the tables and versions they came from."""

    command: ClassVar[str] = "calibrate_kernel_db"

    out: str
    """Where the rates document was written."""
    yaml_out: str | None
    """Where the calibrated hardware YAML was written, or null."""
    system: str
    """The aiconfigurator-core system (h200_sxm, b200_sxm, …)."""
    backend: Literal["sglang", "vllm", "trtllm"]
    """Whose kernels."""
    hardware: str
    """The built-in (or given) hardware spec the rates are relative to."""
    wheel: str
    """The wheel file (or installed package) read."""
    tables: list[KernelTable]
    """Every table used."""
    summary: dict[str, Annotated[Rate, _kw(description="A rate or latency.")]]
    """Achieved rates (bytes/s, FLOP/s, seconds), the microbench summary's keys."""
    notes: list[Annotated[str, _kw(description="One note.")]]
    """Tables missing for this system/backend."""


def _params_model(name: str, doc: str, names) -> type[_Part]:
    """A document part with one number per parameter of `names`, described as the artifact's
    FittedParams describes it (calibration/artifact.py: the parameters are named there, not here)."""
    from pydantic import Field, create_model

    from calibration.artifact import FittedParams

    fields = {n: (Annotated[float, _kw(minimum=0)], Field(description=FittedParams.model_fields[n].description))
              for n in names}
    return create_model(name, __base__=_Part, __doc__=doc, **fields)


def _calibrate_parts():
    from calibration.artifact import ENGINE_PARAM_NAMES, PARAM_NAMES

    return (_params_model("CalibratedParams", "The calibrated parameters.", PARAM_NAMES),
            _params_model("EngineCalibratedParams", "One engine's own parameters.", ENGINE_PARAM_NAMES),
            Literal[tuple(PARAM_NAMES)])


CalibratedParams, EngineCalibratedParams, ParamName = _calibrate_parts()


class CalibrateResult(Document):
    """A calibration fitted to measured steps: achieved efficiencies, message latency, overlap α,
    per-step overhead (artifact written to out)."""

    command: ClassVar[str] = "calibrate"

    out: str
    """Path of the calibration artifact written."""
    hardware: str
    """GPU name (built-in or from the hardware YAML)."""
    engine: str | None
    """The engine whose rows `params` price (the one with the most rows); null: rows measured outside any
    engine."""
    origin: Literal["fit", "prior"]
    """'fit': fitted to measured rows; 'prior': from per-kernel tables, no measured row."""
    engines: dict[str, EngineCalibratedParams]
    """Per-engine parameters of a fit over rows of several engines: engine -> its kernels' efficiencies
    and its overhead (link, message latency and α are shared: `params`)."""
    params: CalibratedParams
    """The calibrated parameters."""
    fitted: list[ParamName]
    """Parameters the fit determined."""
    fixed: dict[str, Annotated[str, _kw(description="Where the fixed value came from.")]]
    """Parameters held fixed, with their source."""
    rows: Tally
    """Measured steps fitted."""
    in_sample_median_abs_pct_error: Annotated[float, _kw(minimum=0)]
    """Median |error| on the fitted rows, percent."""
    in_sample_p90_abs_pct_error: Annotated[float, _kw(minimum=0)]
    """90th percentile |error| on the fitted rows, percent."""
    sources: list[Annotated[str, _kw(description="Profile path.")]]
    """Profiles fitted."""
    param_std: dict[str, Annotated[float | None, _kw(description="±1σ in the parameter's unit.", minimum=0)]]
    """Standard error per fitted parameter."""
    rows_rejected: list[Annotated[str, _kw(description="A rejected row and why.")]]
    """Rows left out."""
    notes: list[Annotated[str, _kw(description="A note.")]]
    """Loader and fit notes."""
