"""`floorfirst simulate --disagg xPyD`: the colocated simulate's table and lines for the merged
record, then the pools, the GPUs and the hand-off (floorfirst.disagg_serving computes the document;
`--json` prints it as floorfirst.simulate_disagg/1)."""

from __future__ import annotations

import sys

from planner.errors import SpecError


def simulate_disagg(model, hardware, gpus, workload, requests, seed, policy, order, calibration, json_out, plot, moe,
                    replicas, kv_dtype, mem_fraction, rate, noise, boost, max_batch, host_tier, requests_csv, disagg,
                    prefill_layout, decode_layout, prefill_gpus, decode_gpus, engine=None) -> None:
    from cli.commands.simulate import _plot, render, write_requests_csv
    from cli.common import console, emit_json
    from floorfirst.disagg_serving import disagg_inputs, simulate_disagg_document
    from floorfirst.knobs import DeploymentSpec

    if disagg is None:
        raise SpecError("--prefill-layout, --decode-layout, --prefill-gpus and --decode-gpus need --disagg xPyD")
    if host_tier:
        raise SpecError("--host-tier and --tier-choice are not simulated with --disagg")
    spec = DeploymentSpec.of(model=model, hardware=hardware, gpus=gpus, moe=moe, replicas=replicas, kv_dtype=kv_dtype,
                             mem_fraction=mem_fraction, **({"engine": engine} if engine is not None else {}))
    p_lay, d_lay = disagg_inputs(spec, policy, prefill_layout, decode_layout, prefill_gpus, decode_gpus)
    bar = None
    if not json_out and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        bar = Progress(transient=True, console=Console(stderr=True))
    tasks: dict = {}

    def progress(role, k, done, total):
        key = (role, k)
        if key not in tasks:
            if not tasks:
                bar.start()
            tasks[key] = bar.add_task(f"{role} {k}", total=total)
        bar.update(tasks[key], completed=done)

    try:
        doc = simulate_disagg_document(spec, disagg, p_lay, d_lay, prefill_gpus,
                                       decode_gpus, workload, requests, seed, order, calibration, rate, noise, boost,
                                       max_batch, progress=progress if bar else None)
    finally:
        if bar is not None and tasks:
            bar.stop()
    rows = doc.pop("per_request")
    if requests_csv:
        write_requests_csv(rows, requests_csv)
    if plot:
        _plot({**doc, "gpus": doc["gpus"], "policy": doc["policy"], "switches": []}, plot)
    if json_out:
        doc.pop("timeline")
        emit_json("simulate_disagg", doc)
        return
    p, d = doc["prefill_pool"], doc["decode_pool"]
    render(doc, f"{doc['model']} on {doc['disagg']} ({doc['gpus']} × {doc['hardware']}): {doc['workload']} "
                f"({doc['requests']} requests), prefill {p['layout']}, decode {d['layout']}, order {order}")
    con = console()
    for name, x in (("prefill", p), ("decode", d)):
        con.print(f"{name} pool: {x['instances_count']} × {x['gpus_per_instance']} GPUs ({x['gpus']}), {x['layout']}, "
                  f"MoE {x['moe']}, KV pool {x['kv_pool_bytes_per_rank'] / 2**30:.1f} GiB per rank; {x['memory_rule']}")
    con.print(f"throughput {doc['throughput_tokens_per_s'] / doc['gpus']:.0f} output tokens/s per GPU "
              f"({doc['gpus']} GPUs)")
    q = [doc[f"handoff_queue_p{k}_s"] for k in (50, 90, 99)]
    tr = [doc[f"handoff_transfer_p{k}_s"] for k in (50, 90, 99)]
    fmt = lambda v: "—" if v is None else f"{v * 1e3:.1f}"  # noqa: E731
    con.print(f"hand-off ({doc['handoff_backend']}, {doc['handoff_overlap']}): queue for decode KV p50/p90/p99 "
              f"{' / '.join(map(fmt, q))} ms; transfer alone {' / '.join(map(fmt, tr))} ms")
    parts = doc["ttft_parts_mean_s"]
    if parts:
        con.print("TTFT's parts (means): " + ", ".join(f"{k.removesuffix('_s').replace('_', ' ')} {v * 1e3:.1f} ms"
                                                       for k, v in parts.items()))
