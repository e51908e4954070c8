"""Orderings: boost never reads output lengths, ages with waiting, and preempts cache-aware."""

import numpy as np
import pytest

from runtime_policy.ordering import Ordering


def boost(beta=1.0):
    o = Ordering("boost", beta)
    for x in (100, 200, 400, 800, 3000, 12000):  # observed completions (heavy-ish tail)
        o.stats.add(float(x))
    o.tpot_s, o.prefill_s_per_token = 0.02, 2e-5
    return o


def test_boost_is_prediction_free():
    o = boost()
    arr, tok, gen = np.array([0.0, 0.1, 0.2]), np.array([500, 9000, 700]), np.array([0, 0, 300])
    for a, b in ((np.array([5, 5, 5]), np.array([9000, 1, 40000])),):
        assert np.array_equal(o.keys(arr, tok, gen, a), o.keys(arr, tok, gen, b))
        assert o.victim(arr, tok.astype(float), gen, a) == o.victim(arr, tok.astype(float), gen, b)


@pytest.mark.parametrize("beta", [0.5, 1.0, 2.0])
def test_boost_preemption_is_cache_aware(beta):
    """Equal priority (same arrival, same attained): the victim is the one cheaper to recompute,
    at every β (at β = 1 charging running requests their prefill used to cancel this out)."""
    o = boost(beta)
    arr, gen = np.array([0.0, 0.0]), np.array([50, 50])
    assert o.victim(arr, np.array([60000.0, 1000.0]), gen, np.array([1, 1])) == 1
    assert o.victim(arr, np.array([1000.0, 60000.0]), gen, np.array([1, 1])) == 0
    # a much lower priority (arrived 100 s later) outweighs 1.2 s of recompute
    assert o.victim(np.array([0.0, 100.0]), np.array([1000.0, 60000.0]), gen, np.array([1, 1])) == 1


def test_boost_ages_requests_and_beta_zero_is_fcfs():
    o = boost()
    arr, tok, gen, out = np.array([0.0, 30.0]), np.array([60000, 100]), np.array([0, 0]), np.array([1, 1])
    assert np.argmin(o.keys(arr, tok, gen, out)) == 0  # 30 s of waiting outweighs ~1.2 s of prefill
    assert np.argmin(o.keys(np.array([0.0, 0.5]), tok, gen, out)) == 1  # but not 0.5 s
    assert np.array_equal(np.argsort(boost(0.0).keys(arr, tok, gen, out)), np.argsort(arr))


def test_baselines():
    arr, ctx, gen, out = np.array([0.0, 1.0, 2.0]), np.array([10.0, 10.0, 10.0]), np.array([5, 5, 5]), np.array([9, 99, 7])
    assert Ordering("fcfs").victim(arr, ctx, gen, out) == 2
    assert Ordering("srpt-oracle").victim(arr, ctx, gen, out) == 1
    assert list(np.argsort(Ordering("srpt-oracle").keys(arr, ctx, gen, out))) == [2, 0, 1]


def test_boost_ages_a_preempted_request_from_its_preemption():
    """All arrive at t = 0; one was preempted at 40 s after 450 tokens. Completions so far are
    100..600 tokens, so its expected remainder is 550 − 450 = 100 tokens (2.0 s + 0.02 s prefill)
    against a fresh request's 350 (7.0 s + 0.01 s): aged from arrival it would go first; aged from
    when it re-queued (40 + 2.0 > 0 + 7.0), the fresh request, whose first token is still owed,
    goes first. FCFS and the oracle ignore `queued_s`."""
    o = Ordering("boost", 1.0)
    for x in (100, 200, 300, 400, 500, 600):
        o.stats.add(float(x))
    o.tpot_s, o.prefill_s_per_token = 0.02, 2e-5
    arr, tok, gen, out = np.array([0.0, 0.0]), np.array([500, 950]), np.array([0, 450]), np.array([3000, 3000])
    queued = np.array([0.0, 40.0])
    assert np.argmin(o.keys(arr, tok, gen, out)) == 1
    assert np.argmin(o.keys(arr, tok, gen, out, queued)) == 0
    for name in ("fcfs", "srpt-oracle"):
        assert np.array_equal(Ordering(name).keys(arr, tok, gen, out, queued), Ordering(name).keys(arr, tok, gen, out))


def test_boost_displaces_a_long_running_request_of_no_earlier_arrival_only():
    """A full batch: a fresh head (E = the mean, 2,750 tokens ≈ 55 s) displaces a request that has
    run 3,000 tokens (E = 12,000 − 3,000 ≈ 180 s), not one that has run 50; never one that arrived
    before it; FCFS and the oracle never displace."""
    o = boost()
    head = float(o.keys(np.array([0.0]), np.array([500]), np.array([0]), np.array([1]))[0])
    arr, gen = np.array([0.0, 0.0]), np.array([50, 3000])
    ctx = np.array([550.0, 3500.0])
    assert o.displaces and o.displace(head, 0.0, arr, ctx, gen) == 1
    assert o.displace(head, 0.0, arr[:1], ctx[:1], gen[:1]) == -1  # the short one is due sooner
    assert o.displace(head, 0.5, arr, ctx, gen) == -1  # both arrived before the head
    assert not Ordering("fcfs").displaces and not Ordering("srpt-oracle").displaces


def test_displacement_at_a_full_batch_loses_no_request_and_preempts_each_at_most_once(dsv32):
    """The shrinking batch under a 32-request cap with boost: requests that ran long make way for
    fresh ones (preemptions happen), every request still ends once, and only requests owed their
    first token displace, so no request is displaced twice."""
    from executor.sim import SimExecutor
    from runtime_policy.loop import DONE, LoopConfig, serve
    from runtime_policy.policy import FixedPolicy
    from runtime_policy.tables import LAYOUTS
    from runtime_policy.workloads import shrinking

    _, pol = dsv32
    w = shrinking(200, seed=1)
    cfg = LoopConfig(max_batch=32, prefill_chunk_tokens=2048, max_run_steps=32)
    res = serve(w.arrival_s, w.input_tokens, w.output_tokens, pol.tables, FixedPolicy(LAYOUTS.index("dop")),
                Ordering("boost"), SimExecutor(pol.tables), cfg)
    assert np.all(res.status == DONE)
    assert 0 < res.preemptions.sum() and res.preemptions.max() == 1
    fcfs = serve(w.arrival_s, w.input_tokens, w.output_tokens, pol.tables, FixedPolicy(LAYOUTS.index("dop")),
                 Ordering("fcfs"), SimExecutor(pol.tables), cfg)
    assert fcfs.preemptions.sum() == 0
    ttft = lambda r: np.percentile(r.first_token_s - r.arrival_s, 99)  # noqa: E731
    assert ttft(res) < ttft(fcfs)
