"""A benchmark script loaded as a module by its path (benchmarks/ is not a package), for tests of its
functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(name: str, alias: str | None = None):
    """benchmarks/<name>.py as a module named `alias` (default: `<name>_bench`)."""
    spec = importlib.util.spec_from_file_location(alias or f"{name}_bench", ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
