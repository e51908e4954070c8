"""Rank-side scenarios for the group-wide fault tests (gloo, tiny dims, T = 4, the side group's
timeout 2 s): a fault fires on one rank during a switch or in the step after its commit, and every
rank must end in the old (or the committed) layout within seconds, every request's KV
bit-identical, and keep serving. Driven through the runner (scripted switches: `runner_faults`)
and through the serving loop with the policy and the TorchExecutor (`loop_faults`); one spawn
runs both (`scenario_faults`). `fault_case` is also what executor_scenarios.py runs on GPUs.
Helper names are unique across tests/.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from executor.torch_executor import Faults, RankRunner, tiny_dims
from executor.torch_executor.dist import GroupLost
from executor.torch_executor.checks import check_global_placement, collect_logical_kv
from executor.torch_executor.move_plan import plan_page_moves

SIDE_TIMEOUT_S = 2.0
LENGTHS = {0: 5, 1: 17, 2: 1, 3: 30, 4: 8, 5: 12}
STEPS = 12
SWITCH_AT = 2
SEED = 7


def _fresh(g, layout, num_slots=256, dims=None):
    r = RankRunner(dims or tiny_dims(num_heads=8), g, layout, num_slots=num_slots, dtype=torch.float32, seed=SEED)
    r.add_requests(dict(LENGTHS))
    return r


def bytes_per_step(dims) -> int:
    # a few tokens' pages per chunk so switches take several steps (3 pages of 4 tokens; 1 page
    # of 16 on GPUs, where 3 would move CP -> TP in one chunk and the chunk-1 fault never fires)
    return max(1, 12 // dims.page_size) * dims.kv_bytes_per_page(4)


def _slowest(g, seconds: float) -> float:
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g.ctrl)
    return float(t.item())


def _max_slots(g, n: int) -> int:
    t = torch.tensor([n])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=g.ctrl)
    return int(t.item())


def cp_fit_slots(g, dims) -> int:
    """Room for CP and its growth over the steps, not for TP's copies."""
    probe = _fresh(g, "cp", dims=dims)
    return _max_slots(g, len(probe.alloc.reserved) + 1 + sum(
        1 for q, n in LENGTHS.items() for lp in range(-(-(n + STEPS) // dims.page_size))
        if probe.state.table.holds(g.rank, g.world_size, q, lp)))


def starved_slots(g, dims) -> int:
    """Slots where DP -> TP's destination pages and weight slots fit exactly on the fullest rank,
    leaving nothing there for either layout's next tokens (what the check before issue 19 began)."""
    probe = _fresh(g, "dp", dims=dims)
    plan = plan_page_moves("dp", "tp", g.world_size, dict(probe.seq_lens), dict(probe.state.table.owners),
                           probe.dims, 4, probe.head_bytes_full, 0, bytes_per_step(dims))
    return _max_slots(g, probe.alloc.num_slots - probe.alloc.num_free + plan.memory_needed_pages(g.rank))


def fault_case(g, name, src, dst, faults, slots, base, dims, retry=True) -> dict:
    """A scripted switch src -> dst at step SWITCH_AT with `faults`: outcome, slowest step (every
    rank), outputs against `base` (the never-switched run), KV, page accounting, then a clean retry
    that commits (`retry`; its side group rebuilt where a transfer broke it) and one more step."""
    runner = _fresh(g, src, slots, dims)
    free0, kv0, outs, slowest, sw = runner.alloc.num_free, None, [], 0.0, None
    for s in range(STEPS):
        t0 = time.perf_counter()
        if s == SWITCH_AT:
            kv0 = collect_logical_kv(runner)
            sw = runner.switch_to(dst, bytes_per_step(dims), faults=faults)
        outs.append(runner.step().clone())  # on CUDA: the graph's output buffer
        slowest = max(slowest, _slowest(g, time.perf_counter() - t0))
        check_global_placement(runner)
    kv1 = collect_logical_kv(runner)
    pages_now = len(set(runner.state.table.slots()))
    out = {f"fault_state/{name}": sw.state.value, f"fault_reason/{name}": sw.reason,
           f"fault_layout/{name}": runner.layout, f"fault_slowest_step_s/{name}": slowest,
           f"fault_err/{name}": max(float(((o - b).double().norm() / b.double().norm()).cpu()) for o, b in zip(outs, base)),
           f"fault_kv_prefix_identical/{name}": all(torch.equal(kv1[q][:, :kv0[q].shape[1]], kv0[q]) for q in kv0),
           f"fault_pages_accounted/{name}": (runner.alloc.num_free + pages_now + len(runner.alloc.reserved)
                                             == runner.alloc.num_slots) and free0 >= runner.alloc.num_free}
    if retry:
        again = runner.switch_to(dst, 1 << 20)  # one chunk: the retry shows the group can still switch
        while again.in_flight or again.probation:
            runner.step()
        out[f"fault_retry/{name}"] = again.state.value
    runner.step()
    check_global_placement(runner)
    out[f"fault_served_after/{name}"] = True
    return out


def fault_cases(g, dims) -> tuple:
    """(name, src, dst, faults, slots) of every fault; the first four are also run on GPUs."""
    last = g.world_size - 1
    return (
        ("transfer", "cp", "tp", Faults(fail_transfer_chunk=1, fail_transfer_rank=last), 256),
        ("transfer_weights", "dop", "dp", Faults(fail_transfer_chunk=0, fail_transfer_rank=0), 256),
        ("deny_pages", "dp", "cp", Faults(deny_pages_rank=last), 256),
        ("small_pool", "cp", "tp", None, cp_fit_slots(g, dims)),
        ("starved_begin", "dp", "tp", None, starved_slots(g, dims)),
        ("starved_mid", "dp", "cp", Faults(starve_rank=last), 256),
        ("transport_error", "cp", "tp", Faults(transfer_error_chunk=1, fail_transfer_rank=last), 256),
        ("corrupt_page", "cp", "tp", Faults(corrupt_chunk=1, fail_transfer_rank=last), 256),
        ("after_commit", "cp", "tp", Faults(fail_after_commit_rank=last), 256),
        ("device_after_commit", "cp", "tp", Faults(fail_device_after_commit_rank=last), 256),
    )


NO_RETRY = ("small_pool", "starved_begin", "starved_admission")  # the pool can't hold both layouts


def starved_admission(g, dims) -> dict:
    """DP -> TP; a step later a request is admitted on the last rank that needs every free page
    there, the switch's spare and one more: the serving layout gets them (the switch gives its
    memory back at once and fails; every rank aborts at the next step), and what the switch held
    beyond that is room the DP layout grows into afterwards. Compared with a DP run that never
    switches and admits the same request at the same step."""
    name, last = "starved_admission", g.world_size - 1
    runner, outs, n, slowest = _fresh(g, "dp", dims=dims), [], 0, 0.0
    free0 = runner.alloc.num_free
    for s in range(STEPS):
        t0 = time.perf_counter()
        if s == SWITCH_AT:
            kv0 = collect_logical_kv(runner)
            sw = runner.switch_to("tp", bytes_per_step(dims))
        if s == SWITCH_AT + 1:
            # pages: every free one, the spare, one more; its last page holds one token (room to grow)
            mine = (runner.alloc.num_free + len(sw.spare)) * dims.page_size + 1 if g.rank == last else 0
            n = _max_slots(g, mine)
            runner.add_requests({99: n}, {99: last})
            surrendered = _max_slots(g, int(g.rank == last and "serving layout" in (sw._failed or "")))
        outs.append(runner.step().clone())
        slowest = max(slowest, _slowest(g, time.perf_counter() - t0))
        check_global_placement(runner)
    kv1 = collect_logical_kv(runner)
    base = _fresh(g, "dp", dims=dims)
    ref = []
    for s in range(STEPS):
        if s == SWITCH_AT + 1:
            base.add_requests({99: n}, {99: last})
        ref.append(base.step().clone())
    pages_now = len(set(runner.state.table.slots()))
    out = {f"fault_state/{name}": sw.state.value, f"fault_reason/{name}": sw.reason,
           f"fault_layout/{name}": runner.layout, f"fault_slowest_step_s/{name}": slowest,
           f"fault_err/{name}": max(float(((o - b).double().norm() / b.double().norm()).cpu()) for o, b in zip(outs, ref)),
           f"fault_kv_prefix_identical/{name}": all(torch.equal(kv1[q][:, :kv0[q].shape[1]], kv0[q]) for q in kv0),
           f"fault_pages_accounted/{name}": runner.alloc.num_free + pages_now + len(runner.alloc.reserved)
           == runner.alloc.num_slots and free0 >= runner.alloc.num_free}
    runner.step()
    check_global_placement(runner)
    out[f"fault_served_after/{name}"] = True
    out[f"fault_surrendered/{name}"] = bool(surrendered)  # the last rank's switch gave its memory back
    return out


def runner_faults(g, cases=None, dims=None) -> dict:
    dims = dims or tiny_dims(num_heads=8)
    cases = cases or fault_cases(g, dims)
    base = {}
    for src in sorted({c[1] for c in cases}):  # NOTE: sorted: a set's order differs between processes
        runner = _fresh(g, src, dims=dims)
        base[src] = [runner.step().clone() for _ in range(STEPS)]
    out: dict = {}
    for name, src, dst, faults, slots in cases:
        out.update(fault_case(g, name, src, dst, faults, slots, base[src], dims, retry=name not in NO_RETRY))
    if len(cases) == len(fault_cases(g, dims)):
        out.update(starved_admission(g, dims))
    return out


def loop_faults(g) -> dict:
    """The serving loop with the policy on the TorchExecutor (the tables' clock; the workload of
    executor_serving_scenarios.py): one run with a fault in each of its first three switches
    (DOP -> TP moving pages in several chunks: a transport error, a corrupted page, starved
    pages), one with a failure in the step after the first commit; the reference is the same
    workload never switching (fixed DOP)."""
    import executor_serving_scenarios as ss
    from executor.torch_executor.checks import check_global_placement as placement
    from executor.torch_executor.serve import torch_tables
    from executor.torch_executor.serving import with_step_times

    last = g.world_size - 1
    tables = with_step_times(torch_tables(tiny_dims(num_heads=8), ss.TOY_GPU, g.world_size, ss.KV_PAGES), ss.FITS)
    _, ex_fixed = ss._torch(g, ss._spec(tables, policy="dop", clock="table", record_outputs=True))
    runs = {"in_flight": {0: Faults(transfer_error_chunk=1, fail_transfer_rank=last),
                          1: Faults(corrupt_chunk=0, fail_transfer_rank=last), 2: Faults(starve_rank=last)},
            "after_commit": {0: Faults(fail_after_commit_rank=last)},
            "device_after_commit": {0: Faults(fail_device_after_commit_rank=last)}}
    out: dict = {}
    for name, faults in runs.items():
        t0 = time.perf_counter()
        run, ex = ss._torch(g, ss._spec(tables, clock="table", record_outputs=True, check_kv=True,
                                        bytes_per_step=16 * 1280, faults=faults))
        placement(ex.runner)
        out[name] = {"run": run, "wall_s": _slowest(g, time.perf_counter() - t0),
                     "slowest_step_s": max(ex.measured_steps_s),
                     "outputs_vs_fixed": ss._max_rel_err(ex.outputs, ex_fixed.outputs),
                     "kv_identical": ex.kv_identical, "final_layout": ex.runner.layout,
                     "switches": [(t.plan.src_kind, t.plan.dst_kind, t.state.value, t.after_commit_failure)
                                  for t in ex.transitions]}
    return out


def _only_starved(g):
    return starved_admission(g, tiny_dims(num_heads=8))


def scenario_faults(g) -> dict:
    torch.manual_seed(0)
    return {"runner": runner_faults(g), "loop": loop_faults(g)}


def dead_rank(g, kill_at: str, victim: int | None = None, src: str = "cp", dst: str = "tp") -> dict:
    """src -> dst (CP -> TP) with one rank's process (`victim`, default the last) ending mid-switch
    (`kill_at`: "copying", the first copy step; "probation", the step after the commit). Each survivor: how long its step took to raise
    GroupLost, what it raised, its layout and switch state after, its KV against before the switch
    (local: the group can't gather any more) and its page accounting."""
    dims = tiny_dims(num_heads=8)
    last = g.world_size - 1 if victim is None else victim
    runner = _fresh(g, src, 256, dims)
    out: dict = {"rank": g.rank, "error": None}
    kv0 = None
    for s in range(STEPS):
        if s == SWITCH_AT:
            kv0 = runner.local_logical_kv()
            runner.switch_to(dst, bytes_per_step(dims), faults=Faults(kill_rank=last, kill_at=kill_at))
        state = runner.switch.state.value if runner.switch is not None else None
        t0 = time.perf_counter()
        try:
            runner.step()
        except GroupLost as exc:
            kv1 = runner.local_logical_kv()
            pages_now = len(set(runner.state.table.slots()))
            out.update(error=str(exc), after_s=time.perf_counter() - t0, step=s, state_before=state,
                       layout=runner.layout, state=runner.switch.state.value, reason=runner.switch.reason,
                       kv_intact=all(kv1[q][0][:len(kv0[q][0])] == kv0[q][0] and torch.equal(kv1[q][1][:, :kv0[q][1].shape[1]], kv0[q][1])
                                     for q in kv0),
                       pages_accounted=runner.alloc.num_free + pages_now + len(runner.alloc.reserved)
                       == runner.alloc.num_slots)
            return out
    return out
