"""Workloads are seeded and reproducible; trace CSVs report bad rows by line."""

import numpy as np
import pytest

from planner.errors import SpecError
from runtime_policy.workloads import bursty, chat, from_csv, longprompt, make_workload, shrinking


@pytest.mark.parametrize("fn", [chat, shrinking, bursty, longprompt])
def test_seeded_and_sorted(fn):
    a, b, c = fn(200, 7), fn(200, 7), fn(200, 8)
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
