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

    # 1c. the batch changes every step (a request leaves, another joins): each step replaces the
    # executable, and the replaced ones are dropped once the device is past them (CPU: at once)
    runner = _runner(g, "dp", dims=dims)
    retired = []
    for s in range(STEPS):
        runner.finish_request(s % len(LENGTHS) if s < len(LENGTHS) else 100 + s - len(LENGTHS))
        runner.add_requests({100 + s: 3 + s})
        runner.step()
        retired.append(len(runner.retired))
    out["retired_per_step/dp"] = retired

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

    # 3. faults (GPUs; the CPU tests run them, and the group-wide ones, in executor_fault_scenarios.py at T = 4)
    if faults:
        from executor_fault_scenarios import fault_cases, runner_faults

        out.update(runner_faults(g, fault_cases(g, dims)[:4], dims))
    return out
