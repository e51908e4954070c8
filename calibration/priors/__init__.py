"""The shipped priors: one calibrated step model per (GPU, engine), built from NVIDIA's
aiconfigurator-core per-kernel tables by `calibrate --from-kernel-db` (calibration/kernel_db.py
`prior_calibration`; rebuilt with `python benchmarks/build_priors.py --wheel WHEEL --out
calibration/priors`), never from an end-to-end measured row. `<hardware>-<engine>.json` names the
built-in hardware spec and the engine; NOTICE.txt keeps the source's Apache-2.0 notice and names
the wheel version.

A deployment whose (hardware, engine) has a prior is priced by it by default (runtime_policy.tables
`default_step_model`, and every tokens/s figure); anything else by the datasheet midpoint; a
`--calibration` file overrides both.

Does not: fit anything, or read the wheel (the files here are its output).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

PRIOR_DIR = Path(__file__).parent
SOURCE_WHEEL = "aiconfigurator-core 0.12.0"


def prior_path(hardware: str, engine: str) -> Path | None:
    """The shipped prior of a built-in hardware name and an engine, or None."""
    p = PRIOR_DIR / f"{hardware}-{engine}.json"
    return p if p.is_file() else None


@lru_cache(maxsize=32)
def _load(path: str):
    """A shipped prior, kept between processes too (planner.spec_cache: validating one built every
    calibration model's validator on each CLI call)."""
    from calibration.artifact import load_calibration
    from planner.spec_cache import cached_spec

    return cached_spec("prior", Path(path), lambda: load_calibration(path), code=(Path(__file__).parents[1] / "artifact.py",))


def prior_for(hardware: str, engine: str):
    """The shipped prior (calibration.artifact.Calibration) of (hardware, engine), or None."""
    p = prior_path(hardware, engine)
    return None if p is None else _load(str(p))


def shipped() -> list[tuple[str, str]]:
    """(hardware, engine) of every shipped prior."""
    out = []
    for p in sorted(PRIOR_DIR.glob("*-*.json")):
        hw, _, eng = p.stem.rpartition("-")
        out.append((hw, eng))
    return out
