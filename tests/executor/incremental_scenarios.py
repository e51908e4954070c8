"""Rank-side scenarios for incremental moves in the torch executor (Issue 27; gloo on CPU, tiny
dims): a switch moves its requests group by group, the landed groups served in the destination
while the rest run in the source, each group's source pages freed as it lands. Run by
test_incremental_moves.py at T = 2 and T = 4. Helper names are unique across tests/."""

from __future__ import annotations

import torch
import torch.distributed as dist

from executor.torch_executor import Faults, RankRunner, tiny_dims
from executor.torch_executor.checks import check_global_placement, collect_logical_kv
from executor.torch_executor.kv_pages import pages_for
from executor.torch_executor.layouts import weight_slots_needed
from executor.torch_executor.move_plan import plan_incremental, plan_page_moves
from executor.torch_executor.reference import ReferenceDecoder

INC_LENGTHS = {0: 244, 1: 148, 2: 360, 3: 56, 4: 292, 5: 180, 6: 88, 7: 232}
INC_GROUPS = 4
INC_SEED = 7
INC_STEPS = 24  # enough for every group to land and the commit (one chunk a group: 1 << 20 bytes a step)
BIG = 1 << 20


def _inc_pairs(t: int) -> list[tuple[str, str]]:
    pairs = [("dop", "cp"), ("cp", "dop"), ("dop", "tp")]
    if t >= 4:
        pairs += [("dptp", "cp"), ("cp", "dptp")]
    return pairs


def _max_int(g, n: int) -> int:
    x = torch.tensor([n])
    dist.all_reduce(x, op=dist.ReduceOp.MAX, group=g.ctrl)
    return int(x.item())


def _rel(a, b) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def _slots(g, dims, src: str, dst: str) -> tuple[int, int, int]:
    """(slots for an incremental move, slots the whole move needs, the trash and weight slots):
    the fullest rank's pages at the incremental peak + weights + both layouts' growth over the
    steps (and a page a request of headroom), and the same with the union of both layouts."""
    probe = RankRunner(dims, g, src, num_slots=4096, dtype=torch.float32, seed=INC_SEED)
    probe.add_requests(dict(INC_LENGTHS))
    t, page = g.world_size, dims.page_size
    inc = plan_incremental(src, dst, t, dict(probe.seq_lens), dict(probe.state.table.owners), page, INC_GROUPS)
    whole = plan_page_moves(src, dst, t, dict(probe.seq_lens), dict(probe.state.table.owners), dims, 4,
                            probe.head_bytes_full, 0, BIG)
    fixed = probe.alloc.num_slots - probe.alloc.num_free - len(probe.state.table.slots())  # trash + weights
    w = max(weight_slots_needed(probe.resolve_layout(x), probe.head_bytes_full, t, probe.page_bytes) for x in (src, dst))
    # both layouts' pages on this rank for every request's next INC_STEPS tokens
    src_l, dst_l = probe.resolve_layout(src), probe.resolve_layout(dst)
    growth = sum(1 for lay, own in ((src_l, probe.state.table.owners), (dst_l, inc.dst_owners))
                 for q, n in INC_LENGTHS.items() for lp in range(pages_for(n, page), pages_for(n + INC_STEPS, page))
                 if g.rank in lay.holders(q, lp, own))
    held = len(probe.state.table.slots())
    inc_need = _max_int(g, inc.peak_pages[g.rank] + growth)
    whole_need = _max_int(g, held + whole.memory_needed_pages(g.rank) + growth)
    return inc_need + fixed + w, whole_need + fixed + w, fixed


def _run(g, dims, src, dst, slots, groups, faults=None):
    runner = RankRunner(dims, g, src, num_slots=slots, dtype=torch.float32, seed=INC_SEED)
    runner.add_requests(dict(INC_LENGTHS))
    outs = [runner.step().clone()]
    sw = runner.switch_to(dst, BIG, faults=faults, groups=groups)
    mixed = 0
    for _ in range(INC_STEPS - 1):
        if sw.in_flight and sw.landed and len(sw.landed) < len(INC_LENGTHS):
            mixed += 1  # a step with rows in both layouts
        outs.append(runner.step().clone())
        check_global_placement(runner)
        runner.check_pages()
    return runner, sw, outs, mixed


def scenario_incremental(g, dims=None) -> dict:
    dims = dims or tiny_dims(num_heads=8)
    out: dict = {}
    ref = ReferenceDecoder(dims, seed=INC_SEED, device=g.device)
    ref.add_requests(dict(INC_LENGTHS))
    ref_out = [ref.step() for _ in range(INC_STEPS)]
    for src, dst in _inc_pairs(g.world_size):
        tag = f"{src}->{dst}"
        inc_slots, whole_slots, _ = _slots(g, dims, src, dst)
        out[f"slots/{tag}"] = (inc_slots, whole_slots)
        # the whole move at once, in the pool the incremental one fits: refused before it starts
        if whole_slots > inc_slots:
            runner = RankRunner(dims, g, src, num_slots=inc_slots, dtype=torch.float32, seed=INC_SEED)
            runner.add_requests(dict(INC_LENGTHS))
            runner.step()
            sw = runner.switch_to(dst, BIG)
            out[f"whole_state/{tag}"] = sw.state.value
            out[f"whole_reason/{tag}"] = sw.reason or ""
        runner, sw, outs, mixed = _run(g, dims, src, dst, inc_slots, INC_GROUPS)
        out[f"state/{tag}"] = sw.state.value
        out[f"layout/{tag}"] = runner.layout
        out[f"mixed_steps/{tag}"] = mixed
        out[f"err/{tag}"] = max(_rel(o, r) for o, r in zip(outs, ref_out))
        out[f"group_pages/{tag}"] = list(sw.group_pages)
        out[f"profile/{tag}"] = [row[g.rank] for row in sw.inc.profile]
        out[f"groups/{tag}"] = len(sw.inc.groups)
    # a transfer fault in the second group, after the first landed: the landed requests stay in the
    # destination, the group is moved again, nothing is lost
    src, dst = "dop", "cp"
    inc_slots, _, _ = _slots(g, dims, src, dst)
    f = Faults(fail_transfer_chunk=0, fail_transfer_rank=g.world_size - 1, fail_group=1)
    runner, sw, outs, _ = _run(g, dims, src, dst, inc_slots, INC_GROUPS, faults=f)
    out["fault/state"] = sw.state.value
    out["fault/failures"] = len(sw.group_failures)
    out["fault/reason"] = sw.group_failures[0] if sw.group_failures else ""
    out["fault/err"] = max(_rel(o, r) for o, r in zip(outs, ref_out))
    kv = collect_logical_kv(runner)  # every page of every request, from the ranks that hold it
    out["fault/requests_whole"] = sorted(kv) == sorted(INC_LENGTHS) and all(
        v.shape[1] == runner.seq_lens[q] and bool(torch.isfinite(v).all()) for q, v in kv.items())
    return out


class _ForceMove:
    """The fixed policy of a spec, but at its `at`-th answer with requests running it switches
    src -> dst with the plan the tables give, split into `groups` (what the dynamic policy would
    hand the executor for a move whose union does not fit: runtime_policy/transitions.py)."""

    def __init__(self, inner, tables, src: str, dst: str, groups: int, at: int = 6):
        self.inner, self.t = inner, tables
        self.src, self.dst = tables.layouts.index(src), tables.layouts.index(dst)
        self.groups, self.at, self.calls, self.plan = groups, at, 0, None
        self.reads_kv_growth = False

    def decide(self, state):
        from dataclasses import replace as _replace

        from runtime_policy.decision import Decision, Reason
        from runtime_policy.transitions import plan_transition

        if self.plan is None and state.layout == self.src and not state.switch_in_flight and state.running:
            self.calls += 1
            bpt = self.t.kv_bytes_per_token
            okv = [float(x) for x in state.owner_kv_tokens]
            p = plan_transition(self.t, self.src, self.dst, sum(okv) * bpt, max(okv) * bpt, state.running)
            # once the destination holds the running set with room for its growth over the move
            if self.calls >= self.at and p.post_kv_bytes_per_rank <= 0.6 * p.post_kv_pool_bytes:
                self.plan = _replace(p, move_groups=self.groups, move_order="longest")
                return Decision(self.dst, True, Reason.SWITCH_CAPACITY, 0.0, p.cost_s, self.plan)
        return Decision(state.layout, False, Reason.STAY_FIXED)

    def usable_layouts(self):
        return [self.src, self.dst]

    def initial_layout(self, waiting):
        return self.src

    def __getattr__(self, name):
        return getattr(self.inner, name)


def scenario_loop_incremental(g) -> dict:
    """The serving loop drives an incremental DOP -> CP move on the TorchExecutor (the serving
    tests' workload and tables): it commits, and every request's output at every position is the
    one a never-switching DOP run computes."""
    from executor.torch_executor.serve import build_rank, serve_loop, torch_tables
    from executor.torch_executor.serving import with_step_times
    from executor_serving_scenarios import FITS, KV_PAGES, TOY_GPU, _max_rel_err, _spec
    from runtime_policy.ordering import Ordering

    dims = tiny_dims(num_heads=8)
    tables = with_step_times(torch_tables(dims, TOY_GPU, g.world_size, KV_PAGES), FITS)
    out: dict = {}
    runs = {}
    for name in ("fixed", "moved"):
        spec = _spec(tables, policy="dop", clock="table", record_outputs=True, check_kv=True)
        policy, ex = build_rank(g, spec)
        if name == "moved":
            policy = _ForceMove(policy, tables, "dop", "cp", INC_GROUPS)
        res = serve_loop(spec.arrival_s, spec.input_tokens, spec.output_tokens, spec.tables, policy,
                         Ordering(spec.order), ex, spec.loop)
        runs[name] = (res, ex)
    res, ex = runs["moved"]
    sw = ex.transitions[0] if ex.transitions else None
    out["switches"] = [(s.from_layout, s.to_layout) for s in res.switches]
    out["aborted"] = [(s.from_layout, s.to_layout, s.aborted) for s in res.aborted_switches]
    out["groups"] = len(sw.inc.groups) if sw is not None and sw.inc is not None else 0
    out["switch_state"] = (sw.state.value, sw.reason) if sw is not None else None
    out["landed_before_commit"] = len(sw.landed) if sw is not None else 0
    out["status"] = sorted(set(res.status.tolist()))
    out["kv_identical"] = ex.kv_identical
    out["outputs_vs_fixed"] = _max_rel_err(ex.outputs, runs["fixed"][1].outputs)
    return out
