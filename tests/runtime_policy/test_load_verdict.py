"""Offered against served load, the queue and the overload verdict (runtime_policy.metrics), and
`simulate`'s report of them: the table, --json and --requests-csv."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from runtime_policy.metrics import (VERDICT_MIN_REQUESTS, WAIT_RISE_FACTOR, WAIT_RISE_MIN_S, load_verdict,
                                    queue_lengths, request_rows, summarize)
from runtime_policy.serving_types import ServeResult
from runtime_policy.waiting import ABORTED, DONE
from tests.agent.contracts import run_cli, validate


def _result(arrival, first, finish=None, status=None, out=None) -> ServeResult:
    arrival, first = np.asarray(arrival, float), np.asarray(first, float)
    n = arrival.size
    finish = first + 1.0 if finish is None else np.asarray(finish, float)
    return ServeResult(arrival, np.full(n, 100), np.full(n, 10) if out is None else np.asarray(out), first, finish,
                       np.full(n, DONE, np.int8) if status is None else np.asarray(status, np.int8),
                       np.zeros(n, np.int64))


def test_queue_lengths_are_time_weighted():
    # arrivals 0, 1, 2; first tokens 0.5, 3, 4. In the queue: [0, 0.5) 1, [0.5, 1) 0, [1, 2) 1, [2, 3) 2,
    # [3, 4) 1: level 0 for 0.5 s, 1 for 2.5 s, 2 for 1 s of 4 s → p50 1, p90 2; at t = 2, 3 arrived, 1 answered
    q = queue_lengths(_result([0, 1, 2], [0.5, 3, 4]))
    assert (q["queue_p50_requests"], q["queue_p90_requests"], q["queue_p99_requests"]) == (1.0, 2.0, 2.0)
    assert (q["queue_max_requests"], q["queue_at_last_arrival_requests"]) == (2, 2)


def test_a_first_token_and_an_arrival_at_one_time_make_no_peak():
    assert queue_lengths(_result([0, 1], [1, 2]))["queue_max_requests"] == 1


def test_an_aborted_request_leaves_the_queue_when_it_ends():
    q = queue_lengths(_result([0, 0], [np.nan, 1.0], finish=[2.0, 3.0], status=[ABORTED, DONE]))
    # [0, 1) 2, [1, 2) 1: the aborted one waits until its end at 2 s
    assert (q["queue_p50_requests"], q["queue_max_requests"]) == (1.0, 2)


N = 100
ARRIVAL = np.arange(N) * 0.1  # 10 requests/s


def test_flat_waits_keep_up():
    d = load_verdict(_result(ARRIVAL, ARRIVAL + 0.05))
    assert d["overloaded"] is False and d["verdict"].startswith("keeps up")
    assert d["offered_requests_per_s"] == pytest.approx(10.0)  # 99 gaps in 9.9 s
    assert d["ttft_p50_by_arrival_quarter_s"] == pytest.approx([0.05] * 4)


def test_rising_waits_are_overloaded():
    # a server that starts 5 of the 10 requests/s: request i gets its first token at 0.2 i, waiting 0.1 i
    d = load_verdict(_result(ARRIVAL, ARRIVAL * 2))
    # quarters of 25: median waits 0.1 × (12, 37, 62, 87) s → 3.7 s, then 8.7 s > 2 × 3.7 and 5 s longer
    assert d["ttft_p50_by_arrival_quarter_s"] == pytest.approx([1.2, 3.7, 6.2, 8.7])
    assert d["overloaded"] is True and "3.7 s in the 2nd quarter of arrivals, 8.7 s in the last" in d["verdict"]
    assert d["queue_at_last_arrival_requests"] == 50  # 100 arrived by 9.9 s, 50 answered (0.2 i ≤ 9.9)


@pytest.mark.parametrize("late_wait_s, overloaded", [
    (0.1 + WAIT_RISE_MIN_S * 0.9, False),  # more than 2× but under a second longer: not a trend worth a verdict
    (0.1 * WAIT_RISE_FACTOR * 0.95, False),
    (0.1 + WAIT_RISE_MIN_S * 1.1, True),
])
def test_the_rule_needs_both_a_factor_and_a_second(late_wait_s, overloaded):
    wait = np.where(np.arange(N) >= 75, late_wait_s, 0.1)
    assert load_verdict(_result(ARRIVAL, ARRIVAL + wait))["overloaded"] is overloaded


def test_few_requests_or_a_batch_are_not_judged():
    few = load_verdict(_result(ARRIVAL[:VERDICT_MIN_REQUESTS - 1], ARRIVAL[:VERDICT_MIN_REQUESTS - 1] * 3))
    batch = load_verdict(_result(np.zeros(N), np.linspace(1, 50, N)))
    assert few["overloaded"] is None and few["verdict"].startswith("not judged: 19 requests")
    assert batch["overloaded"] is None and batch["offered_requests_per_s"] is None and "at once" in batch["verdict"]


def test_served_load_counts_the_completed_requests_over_the_makespan():
    r = _result(ARRIVAL, ARRIVAL + 0.05, finish=ARRIVAL + 10.1, out=np.full(N, 20))  # makespan 9.9 + 10.1 = 20 s
    d = summarize(r)
    assert d["served_requests_per_s"] == d["requests_per_s"] == pytest.approx(100 / 20)
    assert d["served_output_tokens_per_s"] == pytest.approx(100 * 20 / 20)
    assert d["offered_output_tokens_per_s"] == pytest.approx(10.0 * 20)


def test_request_rows_are_in_arrival_order_with_empty_times_never_reached():
    r = _result([1.0, 0.0], [np.nan, 0.5], finish=[2.0, 1.5], status=[ABORTED, DONE])
    rows = request_rows(r)
    assert rows["arrival_s"] == [0.0, 1.0] and rows["first_token_s"] == [0.5, None]
    assert rows["status"] == ["done", "aborted"] and rows["request"] == [0, 1]


def test_simulate_says_overloaded_and_writes_one_row_per_request(tmp_path):
    csv_path = tmp_path / "requests.csv"
    over = run_cli(["simulate", "--json", "-n", "300", "--rate", "80", "--requests-csv", str(csv_path)])
    validate(over, "simulate")
    assert over["overloaded"] is True and over["verdict"].startswith("overloaded: the queue grows without bound")
    assert over["offered_requests_per_s"] > 3 * over["served_requests_per_s"]
    rows = list(csv.DictReader(csv_path.open()))
    assert len(rows) == 300 and list(rows[0]) == ["request", "arrival_s", "first_token_s", "finish_s", "input_tokens",
                                                  "output_tokens", "status", "preemptions"]
    assert sum(r["status"] == "done" for r in rows) == over["completed"]
    assert sum(int(r["preemptions"]) for r in rows) == over["preemptions"]
    calm = run_cli(["simulate", "--json", "-n", "300", "--rate", "5", "--policy", "tp"])
    assert calm["overloaded"] is False and calm["queue_p99_requests"] <= 3
    assert "per_request" not in calm


def test_the_table_prints_the_verdict(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "-n", "300", "--rate", "80"])
    out = capsys.readouterr().out
    assert exc.value.code == 0
    assert "queue (requests)" in out and "offered 69 requests/s" in out and "overloaded: the queue grows" in out


def test_a_requests_csv_path_is_checked_before_the_run(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--requests-csv", "out.txt"])
    assert exc.value.code == 2 and "--requests-csv out.txt: use a .csv file name" in capsys.readouterr().err


def test_serve_json_holds_no_per_request_rows():
    doc = run_cli(["serve", "--executor", "sim", "--json", "-n", "24"])
    validate(doc, "serve")
    assert "per_request" not in doc and doc["overloaded"] in (True, False)
    json.dumps(doc)
