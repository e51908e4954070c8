"""Issue 27 item 5: `projection.horizon_batch` (the window's projected batch, refreshed by the serving
loop) answers exactly what the array formula `horizon_batch_reference` answers, bit for bit: its
survival branches taken apart (every running request below the longest observed length, every one
past it, both), its top-k shortcuts (no context reaches top-k, every context past it, some), an
empty running set, a queue, arrivals, and the degenerate windows it hands to the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

from runtime_policy.projection import horizon_batch, horizon_batch_reference


def _case(rng, b: int, n: int, attained_hi: float, ctx_hi: float):
    lens = np.sort(rng.integers(1, 4000, n).astype(np.float64))
    attained = rng.integers(0, int(attained_hi) + 1, b).astype(np.float64)
    ctx = attained + rng.integers(1, int(ctx_hi) + 1, b).astype(np.float64)
    return lens, ctx, attained


@pytest.mark.parametrize("attained_hi", [10.0, 3000.0, 9000.0])  # below every length, mixed, past every one
@pytest.mark.parametrize("topk", [2048.0, 50.0, 1e6, math.inf])  # some contexts past it, all, none, uncapped
def test_the_fast_projection_is_the_reference_bit_for_bit(attained_hi, topk):
    rng = np.random.default_rng(int(attained_hi) + int(min(topk, 1e7)))
    for trial in range(60):
        b = int(rng.choice([0, 1, 3, 7, 8, 9, 40, 129, 300, 700]))
        n = int(rng.choice([1, 2, 25, 300, 1024]))
        lens, ctx, attained = _case(rng, b, n, attained_hi, 6000.0)
        window = float(rng.choice([1.0, 37.5, 812.25, 20000.0])) * float(rng.random() + 0.01)
        waiting = int(rng.choice([0, 3, 5000]))
        rate = float(rng.choice([0.0, 0.01, 2.5]))
        prompt = float(rng.choice([0.0, 300.0, 3000.0]))
        args = (lens, ctx, attained, window, waiting, rate, prompt, topk)
        got, want = horizon_batch(*args), horizon_batch_reference(*args)
        assert repr(got) == repr(want), (trial, b, n, window, waiting, rate, prompt)


def test_degenerate_windows_take_the_reference():
    lens = np.array([10.0, 20.0])
    ctx, att = np.array([100.0, 200.0]), np.array([5.0, 25.0])
    for window in (0.0, math.inf):
        with np.errstate(all="ignore"):
            want = _safe(horizon_batch_reference, lens, ctx, att, window)
            assert _safe(horizon_batch, lens, ctx, att, window) == want


def _safe(f, lens, ctx, att, window):
    try:
        return repr(f(lens, ctx, att, window, 0, 0.0, 0.0, 2048.0))
    except (ValueError, OverflowError) as e:
        return type(e).__name__
