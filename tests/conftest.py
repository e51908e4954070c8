"""Shared test setup: GPU tests are skipped where there is no CUDA device; the long fuzz run
(`fuzz` marker) runs only when asked for with `-m fuzz`."""

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if "fuzz" not in (config.getoption("-m") or ""):
        skip_fuzz = pytest.mark.skip(reason="the long fuzz run: python -m pytest -m fuzz tests/fuzz")
        for item in items:
            if item.get_closest_marker("fuzz") is not None:
                item.add_marker(skip_fuzz)
    if _cuda_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
