"""The typed documents of the measuring commands: `MicrobenchResult` (`floorfirst microbench --json`)
and `KernelDbResult` (`floorfirst calibrate --from-kernel-db … --json`). As floorfirst/results.py's:
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
