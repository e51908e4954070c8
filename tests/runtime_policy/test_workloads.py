"""Workloads are seeded and reproducible; trace CSVs report bad rows by line."""

import numpy as np
import pytest

from planner.errors import SpecError
from runtime_policy.workloads import (BUILTIN_WORKLOADS, MAX_RESPONSE_TOKENS, ROLLOUT_GROUP, agentic, bursty, chat,
                                     from_csv, longprompt, make_workload, rollout, shrinking)


@pytest.mark.parametrize("name", BUILTIN_WORKLOADS)
def test_seeded_and_sorted(name):
    a, b, c = (make_workload(name, 200, s) for s in (7, 7, 8))
    assert a.name == name and a.requests == 200
    assert np.array_equal(a.output_tokens, b.output_tokens) and np.array_equal(a.arrival_s, b.arrival_s)
    assert not np.array_equal(a.output_tokens, c.output_tokens)
    assert np.all(np.diff(a.arrival_s) >= 0) and a.output_tokens.min() >= 1 and a.input_tokens.min() >= 1


def test_shrinking_all_at_once_and_heavy_tailed():
    w = shrinking(2000, 0)
    assert np.all(w.arrival_s == 0)
    assert w.output_tokens.max() > 10 * np.median(w.output_tokens)


def test_csv_round_trip_and_bad_rows(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n0.5,100,20\n0.1,50,10\n")
    w = from_csv(p)
    assert list(w.arrival_s) == [0.1, 0.5] and list(w.input_tokens) == [50, 100]
    for body, line in (("0.1,50,x\n", 2), ("0.1,50,10\n0.2,-1,3\n", 3), ("0.1,50\n", 2), ("1,2,3.5\n", 2)):
        p.write_text("arrival_s,input_tokens,output_tokens\n" + body)
        with pytest.raises(SpecError, match=f"line {line}"):
            from_csv(p)
    p.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(SpecError, match="header"):
        from_csv(p)
    with pytest.raises(SpecError):
        make_workload("nope", 10)
    with pytest.raises(SpecError):
        chat(0)


def test_longprompt_prompts_are_long():
    w = make_workload("longprompt", 500, 0)
    assert w.input_tokens.min() >= 16384 and w.input_tokens.max() <= 65536
    assert np.median(w.output_tokens) < 0.05 * np.median(w.input_tokens)


def test_rollout_is_one_batch_of_groups_with_a_capped_long_tail():
    w = rollout(4096, 0)
    assert np.all(w.arrival_s == 0)
    # a group's samples share their prompt
    g = w.input_tokens[: 4096 // ROLLOUT_GROUP * ROLLOUT_GROUP].reshape(-1, ROLLOUT_GROUP)
    assert np.all(g == g[:, :1]) and len(np.unique(g[:, 0])) > 100
    # log-normal σ 1.2, median 2048, capped: the top 5 % carry ~1 − Φ(0.445) = 33 % of the tokens
    # before the cap, a little less after
    o = np.sort(w.output_tokens)[::-1]
    assert o.max() == MAX_RESPONSE_TOKENS and 1800 < np.median(o) < 2300
    assert 0.24 < o[: len(o) // 20].sum() / o.sum() < 0.34


def test_agentic_sessions_grow_their_prompts_while_they_end():
    w = agentic(2000, 0)
    early = w.arrival_s <= np.quantile(w.arrival_s, 0.2)
    late = w.arrival_s >= np.quantile(w.arrival_s, 0.8)
    # early turns are tasks of a few thousand tokens; late turns carry their session's history
    assert np.median(w.input_tokens[early]) < 5000 < 2 * np.median(w.input_tokens[early]) < np.median(w.input_tokens[late])
    assert np.median(w.output_tokens) == pytest.approx(256, rel=0.15)
    # the sessions start within the first 2 s (2000 / 8 ≈ 250 first turns), and end one by one: the
    # last tenth of the run's time sees a small share of its requests
    span = w.arrival_s.max()
    assert np.sum(w.arrival_s < 2.0) > 200
    assert np.sum(w.arrival_s > 0.9 * span) < 0.02 * w.requests < 0.2 * np.sum(w.arrival_s < 0.1 * span)


def test_batch_workloads_take_no_rate():
    for name in ("rollout", "agentic"):
        with pytest.raises(SpecError, match="takes no rate"):
            make_workload(name, 10, 0, 2.0)
    assert make_workload("reasoning", 10, 0, 5.0).params["rate_per_s"] == 5.0
