"""LayoutPolicy.decide: never raises, switches for capacity, refuses moves that don't fit, and
follows the table's best layout only when the gain pays for the move."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from runtime_policy.policy import Decision, PolicyState, Reason
from runtime_policy.tables import LAYOUTS

TP, CP, DP, DOP = (LAYOUTS.index(x) for x in ("tp", "cp", "dp", "dop"))
T = 8


def state(ctx, layout, waiting=(), policy=None, in_flight=False):
    ctx = np.asarray(ctx, dtype=np.float64)
    own = np.zeros(T)
    for i, c in enumerate(ctx):
        own[i % T] += c + 64
    pol = policy
    info, bpt = pol.tables.info, pol.tables.kv_bytes_per_token
    g = int(info.owner_groups[layout])
    groups = np.repeat(own.reshape(g, -1).sum(axis=1), T // g)  # [T] each rank's owner group's tokens
    free = info.kv_pool_bytes[layout] - groups * info.group_share[layout] * bpt
    return PolicyState(ctx, own, free, np.asarray(waiting, dtype=np.float64), layout, in_flight, 1 << 30, ctx.size)


def busiest_group(info, i, own):
    """(busiest, lightest) owner group's tokens of layout i, from per-rank tokens [T]."""
    g = int(info.owner_groups[i])
    sums = own.reshape(g, -1).sum(axis=1)
    return sums.max(), sums.min()


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@settings(max_examples=300, deadline=None)
@given(ctx=st.lists(st.one_of(floats, st.integers(0, 10**7).map(float)), max_size=40),
       owners=st.lists(floats, min_size=0, max_size=10), waiting=st.lists(floats, max_size=5),
       layout=st.integers(-3, 7), in_flight=st.booleans(), since=st.integers(-5, 10**6),
       growth=floats, prefill=st.tuples(floats, floats, floats, floats))
def test_decide_never_raises_on_fuzzed_states(dsv32, ctx, owners, waiting, layout, in_flight, since, growth, prefill):
    """Every answer is a Decision for a valid layout, and none came from the rules' catch-all:
    the boundary checks refuse what the rules can't handle (a CANT_DECIDE counted as refused)."""
    _, pol = dsv32
    pol.refused_states = pol.internal_errors = 0
    s = PolicyState(np.asarray(ctx), np.asarray(owners), np.asarray(owners), np.asarray(waiting), layout, in_flight,
                    since, len(ctx), kv_growth_tokens=growth, prefill_step_fraction=prefill[0],
                    prefill_tokens_per_step=prefill[1], prefill_context_tokens=prefill[2], prefill_owner_share=prefill[3])
    d = pol.decide(s)
    assert isinstance(d, Decision)
    assert 0 <= d.layout < len(LAYOUTS)
    assert pol.internal_errors == 0
    assert (d.reason == Reason.CANT_DECIDE) == (pol.refused_states == 1)


@settings(max_examples=150, deadline=None)
@given(ctx=st.lists(st.integers(1, 200_000).map(float), min_size=1, max_size=60), layout=st.integers(0, 3),
       waiting=st.lists(st.integers(1, 100_000).map(float), max_size=6), since=st.integers(0, 10**6),
       frac=st.floats(0, 1), tok=st.floats(0, 8192), pfx=st.floats(0, 1e5), share=st.floats(0, 1))
def test_valid_states_are_always_decided(dsv32, ctx, layout, waiting, since, frac, tok, pfx, share):
    """In-range states never get CANT_DECIDE (the count a server would alert on stays at 0)."""
    _, pol = dsv32
    before = pol.cant_decide
    s = with_prefill(state(ctx, layout, waiting, policy=pol), frac, tok, pfx, share)
    s.steps_since_switch = since
    assert pol.decide(s).reason != Reason.CANT_DECIDE
    assert pol.cant_decide == before


def test_out_of_range_states_are_counted_refusals_not_errors(dsv32):
    """decide(None), a bool or negative layout (−1 is not DOP), a batch beyond the tables (work
    stays bounded: 10**9 requests is refused at once), non-finite inputs: CANT_DECIDE, each counted
    as refused with the field named; nothing raised inside the rules."""
    import time

    from tests.runtime_policy.conftest import make_policy

    _, pol = make_policy()
    good = state([1000.0] * 4, DOP, waiting=[500.0], policy=pol)
    cases = {"state": None, "layout": PolicyState(good.context_tokens, good.owner_kv_tokens, good.free_kv_bytes,
                                                  good.waiting_tokens, -1, False, 1 << 30, 4)}
    big = state([1000.0] * 4, DOP, policy=pol)
    big.context_requests, big.context_sum_tokens, big.context_capped_sum_tokens = 10**9, 1e12, 1e12
    cases["context_requests"] = big
    nan_ctx = state([1000.0, float("nan")], DOP, policy=pol)
    cases["context_tokens"] = nan_ctx
    for name, value in (("owner_kv_tokens", np.full(T, np.inf)), ("waiting_tokens", np.array([np.nan])),
                        ("free_kv_bytes", np.full(T, np.nan))):
        bad = state([1000.0] * 4, DOP, waiting=[500.0], policy=pol)
        setattr(bad, name, value)
        cases[name] = bad
    bad = with_prefill(state([1000.0] * 4, DOP, policy=pol), 0.5, float("inf"), 100.0)
    cases["prefill statistics"] = bad
    bad = state([1000.0] * 4, DOP, policy=pol)
    bad.layout = True
    cases["layout (bool)"] = bad
    for name, s in cases.items():
        t0 = time.perf_counter()
        d = pol.decide(s)
        assert time.perf_counter() - t0 < 0.05, name
        assert d.reason == Reason.CANT_DECIDE and not d.switch, name
        assert pol.last_refusal == name.split(" (")[0], name
    assert pol.refused_states == len(cases) and pol.internal_errors == 0
    assert pol.decide(good).reason != Reason.CANT_DECIDE
    s = state([1000.0] * 4, np.int64(DOP), policy=pol)
    assert pol.decide(s).reason != Reason.CANT_DECIDE  # a numpy integer is a layout index


def test_a_nan_completion_is_ignored_not_stored():
    """One observe_completion(nan) used to make every later gain NaN: 40 of 40 'not worth it'
    answers became switches with gain_s = nan."""
    from tests.runtime_policy.conftest import make_policy

    _, pol = make_policy(min_dwell_steps=1.0)
    for _ in range(20):
        pol.observe_completion(2.0)  # a 1-step dwell: a 60K request's TP gain doesn't pay for the move
    s = state([60000.0], DOP, policy=pol)
    before = pol.decide(s)
    assert before.reason == Reason.STAY_NOT_WORTH
    for bad in (float("nan"), float("inf"), -5.0, None, "12"):
        pol.observe_completion(bad)
    assert pol.ignored_observations == 5
    assert pol.decide(s) == before  # (a not-worth answer carries its priced figures: a new object)


def test_decide_is_a_function_of_its_state_whatever_the_step_index():
    """The capacity memo is the caller's: the same state asked at step 100, 101 and 163 gets the
    same SWITCH_CAPACITY (a memo inside the policy, set also when a move was found, answered
    STAY_KV_WAIT for the next 63 steps to a server that deferred the switch). Passing the memo back
    (capacity_reprice_at_step) is what skips a pricing, and only while it stands."""
    from tests.runtime_policy.conftest import make_policy

    _, pol = make_policy()
    s = state([1000.0] * 400, TP, waiting=[50000.0], policy=pol)
    answers = []
    for step in (100, 101, 163, 100):
        s.step_index = step
        answers.append(pol.decide(s))
    assert [a.reason for a in answers] == [Reason.SWITCH_CAPACITY] * 4
    assert len({(a.layout, a.gain_s, a.cost_s) for a in answers}) == 1
    # a pricing that found no move: the memo is in the answer, and the caller decides to keep it
    for _ in range(10):
        pol.observe_completion(600.0)
    # 40 x 10K in TP (400K of its 447K-token pool) with five 60K prompts waiting: no move repays itself
    w = with_prefill(state([10000.0] * 40, TP, waiting=[60000.0] * 5, policy=pol), 0.1, 800.0, 18000.0)
    w.step_index = 200
    d = pol.decide(w)
    assert d.reason == Reason.STAY_KV_WAIT and d.capacity_stands_steps == 64
    w.waiting_tokens = np.full(100, 60000.0)  # the queue grew: its backlog now repays TP -> DCP (1/8 of the KV)
    assert pol.decide(w).reason == Reason.SWITCH_CAPACITY
    w.capacity_reprice_at_step = 200 + d.capacity_stands_steps  # the caller kept the memo: it stands
    for step in (201, 263):
        w.step_index = step
        assert pol.decide(w).reason == Reason.STAY_KV_WAIT
    w.step_index = 264  # 64 steps on: priced again
    assert pol.decide(w).reason == Reason.SWITCH_CAPACITY


def test_the_switch_margin_and_the_gain_hysteresis_hold_switches_back():
    """One 60K request in DOP: TP is faster. With the dwell such that the time saved is 1.25× the
    move's cost, the default margin (gain must exceed 1.5× cost) says not worth it, margin 0 says
    switch; and a layout only 3 % faster is ignored by the 5 % gain hysteresis."""
    from tests.runtime_policy.conftest import make_policy

    _, probe = make_policy(margin=0.0, min_dwell_steps=1.0)
    s = state([60000.0], DOP, policy=probe)
    d0 = probe.decide(s)
    assert d0.switch and d0.gain_s > d0.cost_s > 0
    # gain_s = (t_dop − t_tp) × (dwell − link/t_dop): find the dwell that makes it 1.25 × cost
    steps = probe.step_times_s(s)
    per_step = steps[DOP] - steps[TP]
    link_steps = d0.plan.link_s / steps[DOP]
    dwell = 1.25 * d0.cost_s / per_step + link_steps
    assert 1 < dwell < 8192  # inside the dwell's clamp, so 2 × dwell as the mean output sets it
    for margin, switches in ((0.0, True), (0.5, False)):
        _, pol = make_policy(margin=margin, min_dwell_steps=1.0)
        pol.observe_completion(2.0 * dwell)
        d = pol.decide(s)
        assert d.switch == switches, margin
        if switches:
            assert d.gain_s == pytest.approx(1.25 * d.cost_s, rel=1e-9)
    # the gain hysteresis: TP made only 3 % faster than DOP (a state TP is far faster for, with
    # DOP's pricing replaced) is not worth looking at; with min_gain_fraction 0.01 it is
    for min_gain, expect in ((0.05, Reason.STAY_SMALL_GAIN), (0.01, None)):
        _, pol = make_policy(min_gain_fraction=min_gain)
        real = pol.pricer.step_times

        def three_percent(*a, _real=real):
            out = _real(*a)
            for i in range(len(out)):  # no other layout faster than DOP: only TP, by 3 %
                out[i] = max(out[i], out[DOP])
            out[TP] = 0.97 * out[DOP]
            return out

        pol.pricer.step_times = three_percent
        d = pol.decide(state([60000.0], DOP, policy=pol))
        assert (d.reason == expect) if expect else d.reason != Reason.STAY_SMALL_GAIN


def test_policy_step_times_are_the_tables_formula(dsv32):
    """The policy's step times (pricing.py) are the one formula on the tables: decode-only states
    equal StepTimeTable.step_s bit for bit (owner layouts at their busiest owner's share), and the
    prefill blend is (1 − f) × that + f × the table's step with the chunk (spread layouts: the
    whole chunk; owner layouts: the chunk owner's share, against the busiest without it)."""
    _, pol = dsv32
    t = pol.tables
    rng = np.random.default_rng(3)
    for _ in range(40):
        b = int(rng.integers(1, 300))
        ctx = rng.integers(1, 40000, b).astype(np.float64)
        s = state(ctx, int(rng.integers(0, 4)), policy=pol)
        own = np.asarray(s.owner_kv_tokens)
        s2, s1 = ctx.sum(), np.minimum(ctx, t.topk).sum()
        got = pol.step_times_s(s)
        for i in range(len(t.layouts)):
            frac = min(busiest_group(t.info, i, own)[0] / s2, 1.0) if t.info.owner_groups[i] > 1 else 1.0
            want = t.step_s(i, b, np.zeros(1), np.array([s1 * frac]), np.array([s2 * frac]))[0]
            assert got[i] == want
        f, tok, pfx, share = 0.3, 600.0, 20000.0, 0.5
        got = pol.step_times_s(with_prefill(s, f, tok, pfx, share))
        chunk = pol.pricer._chunk_sizes[round(np.log(tok / f) / np.log(1.03))]
        own_p = int(chunk * round(share * 32) / 32)
        for i in range(len(t.layouts)):
            dec = t.step_s(i, b, np.zeros(1), np.array([s1]), np.array([s2]))[0]
            if t.info.owner_groups[i] > 1:
                hi, lo = busiest_group(t.info, i, own)
                fb, fl = min(hi / s2, 1.0), min(lo / s2, 1.0)
                dec = t.step_s(i, b, np.zeros(1), np.array([s1 * fb]), np.array([s2 * fb]))[0]
                co = (np.array([float(own_p)]), np.array([pfx]), np.array([s1 * fl]), np.array([s2 * fl]))
                with_chunk = t.step_s(i, b, np.array([float(chunk)]), np.array([s1 * fb]), np.array([s2 * fb]),
                                      chunk_owner=co)[0]
            else:
                with_chunk = t.step_s(i, b, np.array([float(chunk)]), np.array([s1]), np.array([s2]),
                                      prefill_context=np.array([pfx]))[0]
            assert got[i] == (1 - f) * dec + f * with_chunk


def test_in_flight_and_idle_stay(dsv32):
    _, pol = dsv32
    assert pol.decide(state([1000.0] * 4, TP, policy=pol, in_flight=True)).reason == Reason.STAY_IN_FLIGHT
    assert pol.decide(state([], DOP, policy=pol)).reason == Reason.STAY_IDLE


def test_capacity_wall_switches_to_a_layout_with_room(dsv32):
    """TP replicates MLA KV: 400 requests at 1,000 tokens (~33 GB per rank) nearly fill its 36.6 GB
    pool (3.3 GB free), so a 50K-token request (3.9 GB) can't be admitted; DOP holds 1/8 of it per rank."""
    _, pol = dsv32
    s = state([1000.0] * 400, TP, waiting=[50000.0], policy=pol)
    assert s.free_kv_bytes.min() < 50064 * pol.tables.kv_bytes_per_token
    d = pol.decide(s)
    assert d.switch and d.reason == Reason.SWITCH_CAPACITY
    assert LAYOUTS[d.layout] in ("cp", "dp", "dop")
    assert d.plan is not None and d.plan.feasible


def test_refuses_switch_whose_kv_does_not_fit(dsv32):
    """Two 300K-token requests: TP is the fastest layout at B=2, but 2 × 300K × 78 KB = 47 GB of
    replicated KV exceeds TP's 36.6 GB pool, so the policy must not move there."""
    _, pol = dsv32
    s = state([300000.0, 300000.0], DOP, policy=pol)
    steps = pol.step_times_s(s)
    assert steps[TP] < steps[DOP]
    d = pol.decide(s)
    assert not d.switch and d.layout == DOP


def test_switches_to_tp_for_a_few_long_requests(dsv32):
    _, pol = dsv32
    d = pol.decide(state([60000.0], DOP, policy=pol))
    assert d.switch and LAYOUTS[d.layout] == "tp" and d.reason == Reason.SWITCH_THROUGHPUT
    assert d.gain_s > d.cost_s


def test_hysteresis_and_cooldown(dsv32):
    _, pol = dsv32
    s = state([60000.0], DOP, policy=pol)
    s.steps_since_switch = 3
    assert pol.decide(s).reason == Reason.STAY_COOLDOWN
    # 16 requests at 15K: TP and DOP within a few percent of each other -> no switch either way
    for lay in (TP, DOP):
        d = pol.decide(state([15000.0] * 16, lay, policy=pol))
        assert not d.switch


def test_stay_decisions_do_not_allocate(dsv32):
    """A stay answer is a prebuilt Decision, and reading a state of numpy arrays allocates nothing
    that stays and little that passes (tracemalloc: < 512 B peak; a ufunc reduction alone takes
    ~1 KB, which is why the context sums go through np.dot into preallocated buffers)."""
    import tracemalloc

    _, pol = dsv32
    # each state in a layout within the 5 % hysteresis of the best (DOP; DOP; CP is 3 % faster than TP)
    for s in (state([2000.0] * 64, DOP, policy=pol), state([15000.0] * 16, DOP, policy=pol),
              with_prefill(state([2000.0] * 64, TP, policy=pol), 0.4, 700.0, 9000.0)):
        s.context_sum_tokens = s.context_capped_sum_tokens = -1.0  # decide sums the array itself
        first = pol.decide(s)
        assert not first.switch and pol.decide(s) is first
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            before, _ = tracemalloc.get_traced_memory()
            for _ in range(200):
                pol.decide(s)
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert after - before < 128  # nothing kept
        assert peak - before < 512  # nothing large made per call


def with_prefill(s, fraction, tokens_per_step, prefix, owner_share=1.0):
    s.prefill_step_fraction, s.prefill_tokens_per_step = fraction, tokens_per_step
    s.prefill_context_tokens, s.prefill_owner_share = prefix, owner_share
    return s


def test_prefill_mix_counts_chunks_on_one_owner(dsv32):
    """100 decodes at 9K: DOP is the faster decode layout. With half the steps running a 2K chunk
    after a 40K prefix, which DP/DOP run on one owner, TP and CP become faster; chunks spread
    over the owners (share 1/8) cost DOP much less than one owner running them all."""
    _, pol = dsv32
    base = pol.step_times_s(state([9000.0] * 100, DOP, policy=pol))
    assert base[DOP] < base[TP]
    one = list(pol.step_times_s(with_prefill(state([9000.0] * 100, DOP, policy=pol), 0.5, 1024.0, 40000.0)))
    assert one[TP] < one[DOP] and one[CP] < one[DP]
    spread = pol.step_times_s(with_prefill(state([9000.0] * 100, DOP, policy=pol), 0.5, 1024.0, 40000.0, 1 / 8))
    assert spread[DOP] < one[DOP]


def test_capacity_wall_waits_when_the_layouts_with_room_are_slower(dsv32):
    """TP full of long-prompt requests, one more waiting: the layouts with room run the prefill
    chunks on one owner (DP/DOP), and admitting one request doesn't make up for it: wait for TP's
    KV to free up instead of moving. (With CP allowed the same state moves to CP: its indexer
    scores a chunk's prefix split over the ranks where TP's scores it whole on every rank.)"""
    from tests.runtime_policy.conftest import make_policy

    _, full = make_policy()  # fresh: the session fixture's observed statistics depend on test order
    s = with_prefill(state([40000.0] * 11, TP, waiting=[40000.0], policy=full), 0.5, 1024.0, 30000.0)
    d = full.decide(s)
    assert d.switch and d.layout == CP
    _, pol = make_policy(allowed=("tp", "dp", "dop"))
    s = with_prefill(state([40000.0] * 11, TP, waiting=[40000.0], policy=pol), 0.5, 1024.0, 30000.0)
    assert s.free_kv_bytes.min() < 40064 * pol.tables.kv_bytes_per_token
    d = pol.decide(s)
    assert not d.switch and d.reason == Reason.STAY_KV_WAIT
    # decode-only, the same wall is a reason to move (the owner layouts are fast enough)
    d = pol.decide(state([40000.0] * 11, TP, waiting=[40000.0] * 40, policy=pol))
    assert d.switch and d.reason == Reason.SWITCH_CAPACITY


def test_projected_growth_moves_before_the_wall(dsv32):
    """5 requests at 60K in TP (300K of TP's 467K-token pool): TP is the fastest layout for them.
    If the running set's expected peak adds 300K tokens, TP would hold only 467/600 of it while
    DOP (8 × 467K) holds all of it: DOP sustains more, and the move is made now, while it fits."""
    _, pol = dsv32
    s = state([60000.0] * 5, TP, policy=pol)
    assert not pol.decide(s).switch
    s.kv_growth_tokens, s.owner_kv_growth_tokens = 300000.0, 300000.0 / T
    d = pol.decide(s)
    assert d.switch and d.reason == Reason.SWITCH_PROJECTED and LAYOUTS[d.layout] in ("cp", "dp", "dop")
    assert d.plan.feasible and d.shed_kv_tokens == 0.0


def test_long_prompt_backlog_moves_to_cp_shedding_what_the_move_cannot_hold():
    """TP full of 12 long prompts (432K tokens), prefill running: CP's pool holds 8× more, so with
    a backlog it sustains more decodes per chunk step. TP → CP keeps TP's KV until the commit next
    to CP's replicated weights (every attention weight, as SPLASH's CP holds them), which fits only
    below ~288K tokens: the move sheds the rest (its recompute priced) and is made once the backlog
    repays it; one waiting request doesn't. (36K, not 38K, prompts: TP's replicated q_a/kv_a and
    indexer weights leave its pool 447K tokens.)"""
    from tests.runtime_policy.conftest import make_policy

    _, pol = make_policy()
    for _ in range(10):
        pol.observe_completion(600.0)
    s = with_prefill(state([36000.0] * 12, TP, waiting=[36000.0], policy=pol), 0.1, 800.0, 18000.0)
    assert pol.decide(s).reason == Reason.STAY_KV_WAIT
    s = with_prefill(state([36000.0] * 12, TP, waiting=[36000.0] * 100, policy=pol), 0.1, 800.0, 18000.0)
    d = pol.decide(s)
    assert d.switch and d.reason == Reason.SWITCH_CAPACITY and d.layout == CP
    assert 0.0 < d.shed_kv_tokens < 12 * 36064
    assert d.plan.feasible and d.cost_s > d.plan.cost_s  # the recompute of the shed KV is in the cost


def test_the_start_counts_the_queues_prefill():
    """initial_layout prices each layout's first batch over its life, prefill included: a queue of
    400 prompts of 16K-64K is mostly prefill, which CP runs fastest (a 32K prompt: 0.15 s against
    DOP's 0.32 s on its owner), so it starts in CP; 2,000 prompts of 512 are decode-bound and start
    in a layout of several owner groups with sharded weights (the fastest decode at the batch its KV holds). Priced on decode steps alone, both
    started in DOP (the shrinking-long benchmark then ran 0.78x of fixed CP). A fresh policy: the
    expected output is the session fixture's observed mean once other tests fed it completions."""
    from tests.runtime_policy.conftest import make_policy

    _, pol = make_policy()
    names = pol.tables.layouts
    rng = np.random.default_rng(0)
    long = np.exp(rng.uniform(np.log(16384), np.log(65536), 400)).round()
    assert names[pol.initial_layout(long)] == "cp"
    # short prompts start in a layout of several owner groups (DOP, or DP attention with attention
    # TP inside two groups, whose chunks run over four ranks): more KV held, the faster decode there
    short = pol.initial_layout(np.full(2000, 512.0))
    assert pol.tables.info.owner_groups[short] > 1 and pol.tables.info.placements[short].weight_split > 1
    one = np.array([32768.0])
    assert min(range(len(names)), key=lambda i: pol._prefill_s(i, one, 8192.0)) == CP


def test_a_prompts_prefill_is_its_chunks_each_after_its_prefix(dsv32):
    """A 10,000-token prompt in 8,192-token chunks: 8,192 tokens at prefix 0, then 1,808 at prefix
    8,192; two prompts are the sum of theirs."""
    _, pol = dsv32
    t = pol.tables
    z = np.zeros(2)
    want = float(t.step_s(DOP, 0, np.array([8192.0, 1808.0]), z, z, prefill_context=np.array([0.0, 8192.0])).sum())
    assert pol._prefill_s(DOP, np.array([10000.0]), 8192.0) == pytest.approx(want, rel=1e-12)
    both = pol._prefill_s(DOP, np.array([10000.0, 300.0]), 8192.0)
    assert both == pytest.approx(want + pol._prefill_s(DOP, np.array([300.0]), 8192.0), rel=1e-12)
    assert pol._prefill_s(DOP, np.array([0.0]), 8192.0) == 0.0
