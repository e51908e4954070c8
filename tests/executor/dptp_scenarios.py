"""Rank-side scenarios for DP attention with attention TP (dptp) on the torch executor, and for
every registered layout: run in spawned process groups (gloo on CPU, tiny dims); test_dptp.py
asserts on what they return. Helper names are unique across tests/ (no package here).
"""

from __future__ import annotations

import torch

from executor.torch_executor import RankRunner, tiny_dims
from executor.torch_executor.checks import check_global_placement, collect_logical_kv, kv_checksum
from executor.torch_executor.placement_kind import NotRunnable
from executor.torch_executor.reference import ReferenceDecoder
from executor_scenarios import LENGTHS, SEED, STEPS, SWITCH_AT, _kv_bytes_step, _prefill_run, rel_err
from runtime_policy.tables import layout_names

OTHERS = ("tp", "cp", "dp", "dop")
DPTP_PAIRS = tuple((a, "dptp") for a in OTHERS) + tuple(("dptp", b) for b in OTHERS)
DPTP_PREFILL_PAIRS = (("tp", "dptp"), ("dptp", "dp"))


def _decode(g, kind, dims, steps=STEPS, lengths=None):
    r = RankRunner(dims, g, kind, num_slots=256, dtype=torch.float32, seed=SEED)
    r.add_requests(dict(lengths or LENGTHS))
    outs = []
    for _ in range(steps):
        outs.append(r.step().clone())
        check_global_placement(r)  # every page on exactly its group's ranks
    return r, outs


def scenario_dptp(g) -> dict:
    torch.manual_seed(0)
    dims = tiny_dims(num_heads=8)
    out: dict = {"world_size": g.world_size}
    ref = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref.add_requests(dict(LENGTHS))
    ref_out = [ref.step() for _ in range(STEPS)]

    # 1. decode: dptp against TP on the same requests, and against the single-device reference
    runners, base = {}, {}
    for kind in ("tp", "dptp"):
        runners[kind], base[kind] = _decode(g, kind, dims)
    d = runners["dptp"]
    lay = d.state.layout
    out["dptp_placement"] = (lay.primitive, lay.groups, lay.group_ranks, lay.weight_split)
    out["dptp_heads"] = d.state.heads[0].head_start, d.state.heads[0].num_heads  # this rank's slice of the heads
    out["dptp_vs_tp_err"] = max(rel_err(a, b) for a, b in zip(base["dptp"], base["tp"]))
    out["dptp_ref_err"] = max(rel_err(a, b) for a, b in zip(base["dptp"], ref_out))
    last = base["dptp"][-1].contiguous()
    gathered = [torch.empty_like(last) for _ in range(g.world_size)]
    torch.distributed.all_gather(gathered, last, group=g.ctrl)
    out["dptp_ranks_agree"] = all(torch.equal(x, gathered[0]) for x in gathered)
    # what each rank holds: the requests of its group (by the owner ranks), every page of them
    own = {q: k // lay.group_ranks for q, k in d.state.table.owners.items()}
    mine = lay.group_of_rank(g.rank)
    out[f"dptp_holds_its_group/{g.rank}"] = sorted(d.state.table.pages) == sorted(q for q, k in own.items() if k == mine)
    out["dptp_free_slots"] = d.alloc.num_free

    # 1b. one request: every group but one attends nobody
    ref1 = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref1.add_requests({0: 9})
    r1, o1 = _decode(g, "dptp", dims, steps=2, lengths={0: 9})
    out["dptp_single_err"] = max(rel_err(a, ref1.step()) for a in o1)

    # 1c. requests leave and join every step (the busiest group's bucket of rows changes)
    r2 = RankRunner(dims, g, "dptp", num_slots=256, dtype=torch.float32, seed=SEED)
    r2.add_requests(dict(LENGTHS))
    ref2 = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref2.add_requests(dict(LENGTHS))
    errs = []
    for s in range(8):
        gone = s % len(LENGTHS) if s < len(LENGTHS) else 100 + s - len(LENGTHS)
        r2.finish_request(gone)
        ref2.order.remove(gone)
        joins = {100 + s: 3 + s} if s % 3 else {100 + s: 3 + s, 200 + s: 2 + s}
        r2.add_requests(dict(joins))
        ref2.add_requests(dict(joins))
        errs.append(rel_err(r2.step(), ref2.step(list(r2.order))))
        check_global_placement(r2)
    out["dptp_churn_err"] = max(errs)

    # 2. chunked prefill then decode through dptp; a switch into and out of it while prefilling
    res = _prefill_run(g, dims, "dptp")
    out["dptp_prefill_err"], out["dptp_prefill_kv_err"] = res["err"], res["kv_err"]
    for src, dst in DPTP_PREFILL_PAIRS:
        res = _prefill_run(g, dims, src, switch_to=dst)
        key = f"{src}->{dst}"
        out[f"prefill_switch/{key}"] = (res["state"], res["layout"], res["err"], res["kv_err"])

    # 3. switches into and out of dptp mid-decode: outputs as the never-switched run, KV identical
    for kind in OTHERS:
        if kind not in base:
            base[kind] = _decode(g, kind, dims)[1]
    for src, dst in DPTP_PAIRS:
        r = RankRunner(dims, g, src, num_slots=256, dtype=torch.float32, seed=SEED)
        r.add_requests(dict(LENGTHS))
        outs, states, kv_same, plan = [], [], None, None
        for s in range(STEPS):
            if s == SWITCH_AT:
                sw = r.switch_to(dst, bytes_per_step=_kv_bytes_step(dims))
                plan = sw.plan
                states.append(sw.state.value)
            if r.switch is not None and r.switch.state.value == "copying" and r.step_index == r.switch.plan.commit_step:
                before = kv_checksum(collect_logical_kv(r))
                r.switch.before_step(r)
                kv_same = before == kv_checksum(collect_logical_kv(r))
                states.append(r.switch.state.value)
            outs.append(r.step().clone())
            check_global_placement(r)
        key = f"{src}->{dst}"
        out[f"switch/{key}"] = {
            "states": states, "layout": r.layout, "kv_identical": kv_same, "weights": plan.weights,
            "chunks": plan.num_chunks, "pages_moved": int(len(plan.move_req)),
            "err": max(rel_err(o, b) for o, b in zip(outs, base[src])),
            "ref_err": max(rel_err(o, rf) for o, rf in zip(outs, ref_out)),
            "heads": r.state.heads[0].num_heads, "head_start": r.state.heads[0].head_start,
            "weight_slots": len(r.state.weight_slots), "free": r.alloc.num_free}

    # 4. every registered layout: runs three steps against the reference, or is refused in one line
    for name in layout_names():
        try:
            r = RankRunner(dims, g, name, num_slots=256, dtype=torch.float32, seed=SEED)
        except NotRunnable as e:
            out[f"registry/{name}"] = ("refused", str(e))
            continue
        r.add_requests(dict(LENGTHS))
        err = max(rel_err(r.step(), rf) for rf in ref_out[:3])
        out[f"registry/{name}"] = ("ran", err, r.state.layout.primitive)
    return out
