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


@pytest.fixture(autouse=True, scope="session")
def _spec_cache_in_a_temporary_folder(tmp_path_factory):
    """planner.spec_cache keeps built-in specs between calls under the user's cache folder: the tests
    (and the CLI processes they start, which inherit the environment) use a folder of their own."""
    import os

    old = os.environ.get("FLOORFIRST_CACHE_DIR")
    os.environ["FLOORFIRST_CACHE_DIR"] = str(tmp_path_factory.mktemp("floorfirst_cache"))
    yield
    if old is None:
        os.environ.pop("FLOORFIRST_CACHE_DIR", None)
    else:
        os.environ["FLOORFIRST_CACHE_DIR"] = old
