"""The torch executor reads which attention it runs off a layout's placement (placement_kind.py), never
its name: the mapping written out, its refusals in one line, the pages and head slices that follow
from it, the capacity the executor gives the policy for every registered layout (numbers written
out), and the loop's KV ledger against the executor's own page accounting. No process group."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import tiny_dims  # noqa: E402
from executor.torch_executor.kv_pages import least_loaded, pages_for  # noqa: E402
from executor.torch_executor.layouts import ATTENTION, weight_slots_needed  # noqa: E402
from executor.torch_executor.placement_kind import (NotRunnable, exec_layout, primitive_or_reason,  # noqa: E402
                                                    registry_placement)
from executor.torch_executor.serve import torch_tables  # noqa: E402
from executor.torch_executor.serving import check_runnable, table_refusals  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.hardware.spec import load_hardware  # noqa: E402
from planner.layouts.placement import Placement  # noqa: E402
from runtime_policy.kv_ledger import KvLedger, ledger_admits  # noqa: E402
from runtime_policy.tables import layout_names  # noqa: E402

SLOTS = 150


@pytest.fixture(scope="module", params=[2, 4], ids=lambda t: f"T{t}")
def tables(request):
    return torch_tables(tiny_dims(num_heads=8), load_hardware("h200"), request.param, SLOTS)


def test_the_mapping_from_placements():
    """(G, R, token split, weight split) -> primitive, at T = 4 (and what collapses at T = 1, 2)."""
    def prim(g, ts, ws, t=4):
        return primitive_or_reason(Placement("x", t, g, ts, 1, ws, ws))[0]

    assert prim(1, 1, 4) == "tp"
    assert prim(1, 4, 1) == "cp"
    assert prim(4, 1, 1) == "dp"
    assert prim(4, 1, 4) == "dop"
    assert prim(2, 1, 2) == "dptp"  # 2 groups of 2, TP-2 inside each
    assert prim(1, 4, 4) is None  # DCP: a token split with head-sharded weights
    assert prim(2, 2, 1) is None  # a token split inside each of 2 groups
    assert prim(2, 1, 4) is None  # 2 owner groups, weights over all 4: no all-to-all between groups
    assert prim(1, 1, 2) is None  # one group, weights split 2 of 4 ways
    assert {prim(1, 1, 1, t=1)} == {"tp"}  # one rank: everything is TP's primitive
    assert set(ATTENTION) == {"tp", "cp", "dp", "dop", "dptp"}
    # the registry's layouts, through their own placements
    got = {n: primitive_or_reason(registry_placement(n, 4))[0] for n in ("tp", "cp", "dcp", "dp", "dop", "dptp")}
    assert got == {"tp": "tp", "cp": "cp", "dcp": None, "dp": "dp", "dop": "dop", "dptp": "dptp"}
    assert primitive_or_reason(registry_placement("dptp", 2))[0] == "dp"  # G = T = 2: DP's placement
    assert primitive_or_reason(registry_placement("dptp", 4, 4))[0] == "dp"
    assert primitive_or_reason(registry_placement("dptp", 4, 1))[0] == "tp"


def test_refusals_are_one_line_naming_the_layout_and_what_is_missing():
    with pytest.raises(SpecError) as exc:
        check_runnable("dcp", 4)
    msg = str(exc.value)
    assert "'dcp'" in msg and "\n" not in msg and "DCP" in msg and "all-gathers queries" in msg
    assert msg.endswith("it runs tp, cp, dp, dop, dptp (placement_kind.py)")
    with pytest.raises(NotRunnable, match=r"^layout toy splits tokens inside each of 2 owner groups of 2 ranks"):
        exec_layout(Placement("toy", 4, 2, 2, 1, 1, 1))
    with pytest.raises(SpecError, match="not registered"):
        check_runnable("nope", 4)
    assert check_runnable("dptp", 4) == "dptp"


def test_pages_and_heads_follow_the_placement():
    """T = 4, 8 heads: who holds a page of request 7 (owner rank 3), and each rank's head slice."""
    owners = {7: 3}
    lay = {n: exec_layout(n, 4) for n in ("tp", "cp", "dp", "dop", "dptp")}
    assert lay["tp"].holders(7, 0, owners) == (0, 1, 2, 3)
    assert [lay["cp"].holders(7, lp, owners) for lp in range(3)] == [(3,), (0,), (1,)]  # (7 + lp) mod 4
    assert lay["dp"].holders(7, 0, owners) == lay["dop"].holders(7, 5, owners) == (3,)
    assert lay["dptp"].holders(7, 0, owners) == (2, 3)  # the owner's group of 2
    assert [lay["dptp"].head_range(k, 8) for k in range(4)] == [(0, 4), (4, 4), (0, 4), (4, 4)]
    assert [lay["tp"].head_range(k, 8) for k in range(4)] == [(0, 2), (2, 2), (4, 2), (6, 2)]
    assert lay["cp"].head_range(3, 8) == lay["dp"].head_range(3, 8) == (0, 8)
    assert {n: x.kernel_heads(8) for n, x in lay.items()} == {"tp": 2, "cp": 8, "dp": 8, "dop": 8, "dptp": 4}
    assert [n for n, x in lay.items() if x.owned] == ["dp", "dop", "dptp"]
    assert [n for n, x in lay.items() if x.gathers_prefix] == ["cp", "dop"]


def test_weight_slots_from_the_weight_split():
    """2 layers × 22,528 head params × 4 B = 180,224 B; slots of 1,280 B beyond the 4-way shard
    (45,056 B): CP and DP ⌈135,168 / 1,280⌉ = 106; DPTP keeps half, ⌈(90,112 − 45,056) / 1,280⌉ =
    ⌈35.2⌉ = 36; TP and DOP none."""
    full, page = 180_224, 1_280
    got = {n: weight_slots_needed(n, full, 4, page) for n in ("tp", "cp", "dp", "dop", "dptp")}
    assert got == {"tp": 0, "cp": 106, "dp": 106, "dop": 0, "dptp": 36}


@pytest.mark.parametrize("name", layout_names())
def test_every_registered_layout_has_a_pool_or_a_reason(tables, name):
    """Over the layout registry: a layout the executor runs has its pool (the slots less the padded
    writes' one less its weight slots); one it can't has −1 and a one-line reason naming it."""
    t = tables.ranks
    k = tables.layouts.index(name)
    pool_pages = tables.info.kv_pool_bytes[k] / (4 * tables.kv_bytes_per_token)
    why = table_refusals(tables).get(name)
    if why is None:
        lay = exec_layout(tables.info.placements[k])
        ws = weight_slots_needed(lay, 180_224, t, 1_280)
        assert pool_pages == SLOTS - 1 - ws and lay.primitive in ATTENTION
    else:
        assert tables.info.kv_pool_bytes[k] == -1.0 and name in why and "\n" not in why
        with pytest.raises(SpecError):
            check_runnable(name, t, tables.info.placements[k])


def test_dptp_pool_at_four_ranks(tables):
    """T = 4, 150 slots: DPTP (2 groups of 2) 149 − 36 = 113 pages; CP and DP 149 − 106 = 43; TP and
    DOP 149. At T = 2 DPTP is DP's placement: 149 − 71 = 78."""
    pages = dict(zip(tables.layouts, tables.info.kv_pool_bytes / (4 * tables.kv_bytes_per_token)))
    want = {4: {"tp": 149, "cp": 43, "dp": 43, "dop": 149, "dptp": 113},
            2: {"tp": 149, "cp": 78, "dp": 78, "dop": 149, "dptp": 78}}[tables.ranks]
    assert {n: pages[n] for n in want} == want
    assert table_refusals(tables).keys() == {"dcp"}


def test_the_runners_owner_rule_is_the_ledgers():
    """A runner placing a request itself picks the rank the loop's ledger would (KvLedger.place)."""
    t = torch_tables(tiny_dims(num_heads=8), load_hardware("h200"), 4, SLOTS)
    rng = np.random.default_rng(3)
    for _ in range(50):
        led = KvLedger(t)
        for r, x in enumerate(rng.integers(0, 5, 4)):  # through add: the ledger keeps group totals
            if x:
                led.add(r, float(x))
        for k, name in enumerate(t.layouts):
            assert least_loaded(led.tokens, int(t.info.owner_groups[k])) == led.place(k), (name, led.tokens)


@pytest.mark.parametrize("context", [41, 129])
def test_the_ledger_admits_what_the_executors_pages_hold(tables, context):
    """For every layout the executor runs: requests of one context placed by the loop's ledger
    (KvLedger.place) until `ledger_admits`, and their pages on each rank as the executor places them
    (ExecLayout.holders: DPTP keeps a request's latent on both ranks of its group): the ledger never
    admits more than the fullest rank's free slots hold, and (every layout storing whole requests)
    at most one request per owner group fewer. Contexts one token past a page: the ledger's page
    of slack then counts one token more than the executor's last page."""
    t = tables.ranks
    refused = table_refusals(tables)
    for k, name in enumerate(tables.layouts):
        if name in refused:
            continue
        lay = exec_layout(tables.info.placements[k])
        free = SLOTS - 1 - weight_slots_needed(lay, 180_224, t, 1_280)
        admitted = int(ledger_admits(tables, k, context))
        led, owners, per_rank, fits = KvLedger(tables), {}, [0] * t, None
        for q in range(100_000):
            owners[q] = led.place(k)
            led.add(owners[q], context + tables.request_slack_tokens)
            for lp in range(pages_for(context, 4)):
                for rank in lay.holders(q, lp, owners):
                    per_rank[rank] += 1
            if max(per_rank) > free:
                fits = q  # requests 0 .. q-1 fit
                break
        assert admitted <= fits, (name, admitted, fits)
        if lay.placement.token_split == 1:
            assert fits - admitted <= lay.groups, (name, admitted, fits)
