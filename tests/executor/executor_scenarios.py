"""Rank-side scenarios for the executor's tests: run in spawned process groups (gloo on CPU;
NCCL on GPUs for the `gpu` test, with dims the Triton kernel takes).

One spawn per world size runs every scenario and returns plain numbers and flags; the test
modules assert on them. Helper names are unique across tests/ (no package here).
"""

from __future__ import annotations

import torch

from executor.torch_executor import RankRunner, tiny_dims
from executor.torch_executor.checks import check_global_placement, collect_logical_kv, kv_checksum
from executor.torch_executor.reference import ReferenceDecoder

LAYOUTS = ("tp", "cp", "dp", "dop")
PAIRS = tuple((a, b) for a in LAYOUTS for b in LAYOUTS if a != b)
LENGTHS = {0: 5, 1: 17, 2: 1, 3: 30, 4: 8, 5: 12}
STEPS = 12
SWITCH_AT = 2
SEED = 7


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().cpu(), b.double().cpu()
    return float((a - b).norm() / b.norm())


def _runner(g, layout, num_slots=256, dims=None):
    dims = dims or tiny_dims(num_heads=8)
    r = RankRunner(dims, g, layout, num_slots=num_slots, dtype=torch.float32, seed=SEED)
    r.add_requests(dict(LENGTHS))
    return r


def _kv_bytes_step(dims) -> int:
    from executor_fault_scenarios import bytes_per_step

    return bytes_per_step(dims)


def scenario_all(g, dims=None, faults: bool = True) -> dict:
    """dims: default tiny_dims(num_heads=8) (CPU); on GPUs pass dims with page, latent and rope
    widths >= 16 (the Triton kernel's dot minimum). The reference runs on the ranks' device (seeded
    weights are drawn per device type). faults: also the four basic faults (executor_fault_scenarios)."""
    torch.manual_seed(0)
    out: dict = {"world_size": g.world_size}
    dims = dims or tiny_dims(num_heads=8)
    ref = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref.add_requests(dict(LENGTHS))
    ref_out = [ref.step() for _ in range(STEPS)]

    # 1. every layout against the reference; outputs identical on all ranks
    base: dict[str, list[torch.Tensor]] = {}
    for kind in LAYOUTS:
        runner = _runner(g, kind, dims=dims)
        outs = []
        for _ in range(STEPS):
            outs.append(runner.step().clone())  # on CUDA: the graph's output buffer
            check_global_placement(runner)
        base[kind] = outs
        out[f"layout_err/{kind}"] = max(rel_err(o, rf) for o, rf in zip(outs, ref_out))
        last = outs[-1].cpu().contiguous()  # the control group is host-side
        gathered = [torch.empty_like(last) for _ in range(g.world_size)]
        torch.distributed.all_gather(gathered, last, group=g.ctrl)
        out[f"ranks_agree/{kind}"] = all(torch.equal(x, gathered[0]) for x in gathered)

    # 1b. fewer requests than ranks: some owners attend nobody
    ref1 = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref1.add_requests({0: 9})
    ref1_out = [ref1.step() for _ in range(2)]
    for kind in LAYOUTS:
        runner = RankRunner(dims, g, kind, num_slots=256, dtype=torch.float32, seed=SEED)
        runner.add_requests({0: 9})
        out[f"single_request_err/{kind}"] = max(rel_err(runner.step(), rf) for rf in ref1_out[:1])

    # 1c. the batch changes every step (a request leaves, another joins, the batch shrinks and
    # grows inside its bucket of 8): every step runs the same executable (on CUDA: replays the same
    # graph, no recapture); growing past 8 takes the bucket of 12, once; outputs stay the reference's
    for kind in LAYOUTS:
        runner = _runner(g, kind, dims=dims)
        refc = ReferenceDecoder(dims, seed=SEED, device=g.device)
        refc.add_requests(dict(LENGTHS))
        execs, errs = [], []
        for s in range(STEPS):
            gone = s % len(LENGTHS) if s < len(LENGTHS) else 100 + s - len(LENGTHS)
            runner.finish_request(gone)
            refc.order.remove(gone)
            joins = {100 + s: 3 + s} if s % 3 else {100 + s: 3 + s, 200 + s: 2 + s}  # 6 -> 7 -> 7 -> 8 ...
            runner.add_requests(dict(joins))
            refc.add_requests(dict(joins))
            errs.append(rel_err(runner.step(), refc.step(list(runner.order))))
            inp = runner.last_exec.inputs
            execs.append((len(runner.order), (inp.rows, inp.own_cap, inp.cap), id(runner.last_exec)))
        out[f"bucket_execs/{kind}"] = [(b, shape) for b, shape, _ in execs]
        out[f"bucket_distinct/{kind}"] = len({i for _, _, i in execs})
        out[f"bucket_shapes/{kind}"] = len({shape for _, shape, _ in execs})
        out[f"bucket_built/{kind}"] = len(runner.exec.entries)
        out[f"bucket_err/{kind}"] = max(errs)

    # 2. each of the 12 switches mid-decode
    for src, dst in PAIRS:
        runner = _runner(g, src, dims=dims)
        outs, kv_same, states, chunks = [], None, [], None
        for s in range(STEPS):
            if s == SWITCH_AT:
                sw = runner.switch_to(dst, bytes_per_step=_kv_bytes_step(dims))
                chunks = sw.plan.num_chunks
                states.append(sw.state.value)
            if runner.switch is not None and runner.switch.state.value == "copying" \
                    and runner.step_index == runner.switch.plan.commit_step:
                before = kv_checksum(collect_logical_kv(runner))
                runner.switch.before_step(runner)  # the commit at this boundary
                after = kv_checksum(collect_logical_kv(runner))
                kv_same = before == after
                states.append(runner.switch.state.value)
            outs.append(runner.step().clone())  # on CUDA: the graph's output buffer
            check_global_placement(runner)
        key = f"{src}->{dst}"
        out[f"switch_err/{key}"] = max(rel_err(o, b) for o, b in zip(outs, base[src]))
        out[f"switch_ref_err/{key}"] = max(rel_err(o, rf) for o, rf in zip(outs, ref_out))
        out[f"switch_states/{key}"] = states
        out[f"switch_layout/{key}"] = runner.layout
        out[f"switch_kv_identical/{key}"] = kv_same
        out[f"switch_chunks/{key}"] = chunks
        out[f"switch_free_after/{key}"] = runner.alloc.num_free

    # 2b. chunked prefill on the real layers, mixed and prefill-only steps, in every layout; and a
    # switch while a request is being prefilled
    out.update(scenario_prefill(g, dims))

    # 3. faults (GPUs; the CPU tests run them, and the group-wide ones, in executor_fault_scenarios.py at T = 4)
    if faults:
        from executor_fault_scenarios import fault_cases, runner_faults

        out.update(runner_faults(g, fault_cases(g, dims)[:4], dims))
    return out


PREFILL_PAIRS = (("dp", "cp"), ("cp", "tp"), ("tp", "dop"))


def _prefill_run(g, dims, kind, switch_to=None) -> dict:
    """Requests 0 and 1 decode (synthetic history); 2 and 3 are prefilled on the layers: a mixed
    step (6 tokens of 2), a mixed step packing two pieces (5 of 2, 4 of 3), a prefill-only step (9
    of 3, across pages), then all four decode. Every row against the reference decoder stepping
    each prompt token by token; the KV the chunks wrote against the reference's."""
    ref = ReferenceDecoder(dims, seed=SEED, device=g.device)
    ref.add_requests({0: 5, 1: 17, 2: 0, 3: 0})
    r = RankRunner(dims, g, kind, num_slots=256, dtype=torch.float32, seed=SEED)
    r.add_requests({0: 5, 1: 17})
    r.begin_prefill(2)
    r.begin_prefill(3)
    errs = []

    def chunk_ref(pieces):
        return torch.stack([ref.step([q])[0] for q, n in pieces for _ in range(n)])

    for s, (pieces, decode) in enumerate(((((2, 6),), True), (((2, 5), (3, 4)), True), (((3, 9),), False))):
        if switch_to is not None and s == 1:
            r.switch_to(switch_to, bytes_per_step=_kv_bytes_step(dims))
        out = r.step(list(pieces), decode=decode)
        if decode:
            errs.append(rel_err(out, ref.step([0, 1])))
        errs.append(rel_err(r.last_chunk_out, chunk_ref(pieces)))
        check_global_placement(r)
    r.finish_prefill(2)
    r.finish_prefill(3)
    for _ in range(4):
        if r.switch is not None and r.switch.state.value == "copying" and r.switch.ready:
            r.switch.commit(r)
        errs.append(rel_err(r.step(), ref.step([0, 1, 2, 3])))
        check_global_placement(r)
    kv = collect_logical_kv(r)
    kv_err = max(rel_err(kv[q], torch.stack(ref.kv[q])) for q in (2, 3))
    return {"err": max(errs), "kv_err": kv_err, "layout": r.layout,
            "state": r.switch.state.value if r.switch is not None else None}


def scenario_prefill(g, dims=None) -> dict:
    dims = dims or tiny_dims(num_heads=8)
    out = {}
    for kind in LAYOUTS:
        res = _prefill_run(g, dims, kind)
        out[f"prefill_err/{kind}"], out[f"prefill_kv_err/{kind}"] = res["err"], res["kv_err"]
    for src, dst in PREFILL_PAIRS:
        res = _prefill_run(g, dims, src, switch_to=dst)
        key = f"{src}->{dst}"
        out[f"prefill_switch_err/{key}"], out[f"prefill_switch_kv_err/{key}"] = res["err"], res["kv_err"]
        out[f"prefill_switch_state/{key}"], out[f"prefill_switch_layout/{key}"] = res["state"], res["layout"]
    return out
