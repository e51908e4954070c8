"""The synthetic top-k traces (executor.sparse_trace): runs that stay or move, short contexts, overlap."""

import numpy as np
import pytest

from executor.sparse_trace import TopKTraceSpec, step_overlap, topk_trace


def test_runs_stay_or_move_and_short_contexts_select_everything():
    spec = TopKTraceSpec(topk=256, reuse=0.75, cluster_rows=16, seed=3)
    tr = topk_trace(spec, [50_000, 100, 40_000], num_layers=2, num_steps=6)
    assert tr.shape == (6, 2, 3, 256)
    assert (tr[:, :, 1, :100] == np.arange(100)).all() and (tr[:, :, 1, 100:] == -1).all()
    assert (tr[:, :, 0] < 50_000).all() and (tr[:, :, 2] < 40_000).all() and (tr[:, :, [0, 2]] >= 0).all()
    long = tr[:, :, [0, 2]]
    assert 0.75 <= step_overlap(long) <= 0.8  # reuse plus chance collisions
    fresh = np.sort(long[1:, ..., 192:], axis=-1)  # the fresh quarter: runs of 16
    assert (np.diff(fresh, axis=-1) == 1).mean() > 0.85
    with pytest.raises(ValueError, match=r"TopKTraceSpec.reuse=1.5 must be in \[0, 1\]"):
        TopKTraceSpec(reuse=1.5)


def test_overlap_counts_pages_of_consecutive_steps():
    # step 0 pages {0, 1}, step 1 pages {1, 2}: half of step 1's pages were touched before
    tr = np.array([[[[0, 70]]], [[[65, 130]]]])  # [T=2, L=1, B=1, K=2], 64-row pages
    assert step_overlap(tr, 64) == 0.5 and step_overlap(tr, 1) == 0.0
