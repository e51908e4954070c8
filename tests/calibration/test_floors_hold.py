"""No measured row beats its uncalibrated floor: the H200 probe's steps and the executor's steps,
each priced with the decode kernel that ran (a floor a real step beats is a model error)."""

from pathlib import Path

import numpy as np
import pytest

from calibration.costs import price_profile
from calibration.loaders import load_profiles

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("path,kernel", [("calibration/data/h200x2_step_profile.jsonl", "unpadded"),
                                         ("benchmarks/results/executor_gpu/step_profile.csv", "triton_executor"),
                                         ("benchmarks/results/executor_gpu/step_profile.csv", None)])
def test_no_measured_step_is_below_its_floor(path, kernel):
    defaults = {"attention_kernel": kernel} if kernel else None
    costs = price_profile(load_profiles([ROOT / path], defaults))
    assert costs.size > 100 and not costs.issues
    below = np.flatnonzero(costs.measured_s < costs.floor_max_s)
    assert below.size == 0, [costs.rows[i].line for i in below]
