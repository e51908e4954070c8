"""The running set's expected KV peak: from the observed output lengths, per owner, with the Lindy
rule past the longest observed one, and nothing projected before the first completion."""

import numpy as np

from runtime_policy.projection import expected_kv_peak_growth

T = 8


def test_every_observed_request_ran_100_tokens():
    """A fresh request at context 10, all 4 observed outputs 100 long: still running at s = 16, 32,
    64 (context 26, 42, 74), done by s = 128; the peak on the grid is 74, growth 64."""
    assert expected_kv_peak_growth(np.full(4, 100.0), np.array([10.0]), np.array([0.0]), np.array([0]), T) == (64.0, 64.0)


def test_expected_kv_weighs_by_the_share_still_running():
    """Observed 10, 20, 30, 40; two fresh requests at contexts 100 and 10 (owners 0 and 1). At
    s = 16 three of four observed lengths exceed 16: 0.75 × (116 + 26) = 106.5 < 110 now; later
    less: no growth. One request at context 10 alone: 0.75 × 26 = 19.5 > 10 at s = 16, and
    0.25 × 42 = 10.5 at s = 32: growth 9.5."""
    lens = np.array([10.0, 20.0, 30.0, 40.0])
    assert expected_kv_peak_growth(lens, np.array([100.0, 10.0]), np.zeros(2), np.array([0, 1]), T) == (0.0, 0.0)
    assert expected_kv_peak_growth(lens, np.array([10.0]), np.zeros(1), np.array([1]), T) == (9.5, 9.5)


def test_longer_than_every_observed_is_as_likely_to_finish_as_to_grow():
    """Attained 200 > every observed 100: still running at s with probability (200 / (200 + s))²
    (mean residual life 200, the Lindy rule); context 210: at s = 16, 226 × 0.857 = 193.8 < 210,
    and less later: no growth."""
    assert expected_kv_peak_growth(np.full(4, 100.0), np.array([210.0]), np.array([200.0]), np.array([3]), T) \
        == (0.0, 0.0)


def test_busiest_owner_growth_is_its_own_peak():
    """Two requests on owner 2 and one on owner 5, all fresh at context 10, observed 100: owner 2
    peaks at 2 × 74 = 148 (now 20), owner 5 at 74: busiest owner growth 148 − 20 = 128; all ranks
    3 × 74 − 30 = 192."""
    g = expected_kv_peak_growth(np.full(4, 100.0), np.full(3, 10.0), np.zeros(3), np.array([2, 2, 5]), T)
    assert g == (192.0, 128.0)


def test_nothing_projected_before_a_completion():
    assert expected_kv_peak_growth(np.zeros(0), np.array([10.0]), np.array([0.0]), np.array([0]), T) == (0.0, 0.0)
