"""Rank-side scenarios: the destination's KV pool fills while an incremental move runs, after some of
its groups have landed (Issue 27 item 1; gloo on CPU, tiny dims). The serving loop's KV wall
(runtime_policy/preemption.py `kv_wall`) then ends the move: the landed requests stay where they
landed, the destination becomes the layout, and the requests the destination lacks are preempted
(runtime_policy/switching.py `finish_move`). Run by test_move_fill.py at T = 2 and 4. Helper names
are unique across tests/."""

from __future__ import annotations

import numpy as np

from executor.torch_executor import tiny_dims
from tests.runtime_policy.move_fill_policy import FillMove

FILL_REQUESTS = 16
FILL_GROUPS = 8
FILL_ROOM_STEPS = 4  # the move starts when the destination holds the running set for this many more steps


def fill_workload():
    """16 requests at t = 0, prompts 24–31 tokens, outputs 40–47 (none ends during the move)."""
    n = FILL_REQUESTS
    arr = np.zeros(n)
    inp = 24 + (np.arange(n) * 5) % 8
    out = 40 + (np.arange(n) * 3) % 8
    return arr, inp.astype(np.int64), out.astype(np.int64)


def fill_tables(world_size: int):
    from executor.torch_executor.serve import torch_tables
    from executor.torch_executor.serving import with_step_times
    from executor_serving_scenarios import FITS, KV_PAGES, TOY_GPU

    return with_step_times(torch_tables(tiny_dims(num_heads=8), TOY_GPU, world_size, KV_PAGES), FITS)


FILL_LOOP = dict(max_batch=32, prefill_chunk_tokens=512, max_run_steps=1, prefill_mode="mixed")


def _serve_fill(g, room: int, watch: bool):
    """Serve the workload on this rank, moving DOP -> TP when the destination has `room` steps left
    (never, at a negative room); with `watch`, check after every turn from the move's start until
    the layout after it has served a step: every slot of the executor accounted for, every page
    where its layout puts it, and the loop's decoders the executor's (what `seen` gathers)."""
    from executor.torch_executor.checks import check_global_placement, collect_logical_kv
    from executor.torch_executor.serve import TorchServeSpec, build_rank
    from executor.torch_executor.serving import TorchServeOptions
    from executor_serving_scenarios import KV_PAGES
    from runtime_policy.loop import LoopConfig, make_loop
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import PolicyKnobs

    tables = fill_tables(g.world_size)
    arr, inp, out = fill_workload()
    cfg = LoopConfig(**FILL_LOOP)
    spec = TorchServeSpec(tables, tiny_dims(num_heads=8), arr, inp, out, KV_PAGES, "dop", "fcfs",
                          PolicyKnobs(max_batch=cfg.max_batch), cfg,
                          TorchServeOptions(clock="table", record_outputs=True), seed=7, slack_pages=cfg.max_batch)
    _, ex = build_rank(g, spec)
    policy = FillMove(tables, "dop", "tp", FILL_GROUPS, FILL_REQUESTS, room)
    loop = make_loop(arr, inp, out, tables, policy, Ordering("fcfs"), ex, cfg)
    policy.loop = loop
    ex.bind_prefill_queue(lambda: [(i, loop.pre_left[i], int(loop.ctx[i]), loop.owner[i]) for i in loop.prefill_q])
    seen: dict = {"mismatch": []}
    orig_turn = loop._turn

    def turn():
        orig_turn()
        if not watch or not loop.moves or seen.get("checked_after"):
            return
        runner = ex.runner
        runner.check_pages()
        check_global_placement(runner)
        decoding = sorted(int(q) for q in loop.dec.in_join_order())
        if decoding != sorted(runner.order):
            seen["mismatch"].append((decoding, sorted(runner.order)))
        if loop.inflight is None and loop.switches:
            kv = collect_logical_kv(runner)
            seen["whole"] = all(v.shape[1] == runner.seq_lens[q] for q, v in kv.items())
            seen["layout_after"] = runner.layout
            seen["checked_after"] = True

    loop._turn = turn
    return loop.run(), ex, loop, seen


def scenario_move_fill(g) -> dict:
    """DOP -> TP in 8 groups, started with room for 4 steps: the destination fills after some groups
    landed. What the loop and the executor hold afterwards, on this rank, and every request's output
    at every position against a never-switching DOP run."""
    from executor_serving_scenarios import _max_rel_err

    res, ex, loop, seen = _serve_fill(g, FILL_ROOM_STEPS, True)
    _, fixed, _, _ = _serve_fill(g, -(1 << 30), False)
    sw = ex.transitions[0] if ex.transitions else None
    m = loop.moves[0] if loop.moves else {}
    return {"switches": [(s.from_layout, s.to_layout) for s in res.switches],
            "aborted": [(s.from_layout, s.to_layout, s.aborted) for s in res.aborted_switches],
            "landed": len(sw.landed) if sw is not None else 0,
            "finished_early": m.get("finished_early"),
            "status": sorted(set(res.status.tolist())),
            "preemptions": int(res.preemptions.sum()),
            "mismatch": seen["mismatch"], "whole": seen.get("whole"), "layout_after": seen.get("layout_after"),
            "outputs_vs_fixed": _max_rel_err(ex.outputs, fixed.outputs)}
