"""`floorfirst disagg`: split a GPU budget into prefill and decode pools (xPyD), price the KV
hand-off between them, and compare with the best colocated deployment of the same GPUs; with a
sweep, how the best P:D moves with input and output length (planner.disagg)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer
from rich.table import Table

from cli.common import (EngineOpt, HardwareOpt, JsonOpt, KvDtypeOpt, ModelOpt, PlotOpt, PricingChoice, PricingOpt,
                        WeightDtypeOpt, console, emit_json, load_specs, parse_tokens, pricing_for, title)
from planner.errors import SpecError


class Floor(str, Enum):
    max = "max"
    sum = "sum"


DEFAULT_SWEEP_INPUT = "1k,2k,4k,8k,16k,32k"


def _lengths(text: str, what: str) -> list[float]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise SpecError(f"{what} is empty")
    return [parse_tokens(x, what) for x in items]


def _positive(value: float | None, what: str, scale: float = 1.0) -> float | None:
    if value is None:
        return None
    if not value > 0 or value != value or value == float("inf"):
        raise SpecError(f"{what}={value} must be a positive number")
    return value * scale


def disagg(
    model: ModelOpt = "deepseek-v3.2", hardware: HardwareOpt = "h200",
    gpus: Annotated[Optional[int], typer.Option("--gpus", "-g", help="GPUs to split between the prefill and decode pools (default 16).")] = None,
    budget_nodes: Annotated[Optional[int], typer.Option("--budget-nodes", help="A budget of whole nodes instead of --gpus (nodes × the GPU's scale-up domain).")] = None,
    input_len: Annotated[str, typer.Option("--input", "--isl", help="Prompt tokens per request, e.g. 4k.")] = "4k",
    output_len: Annotated[str, typer.Option("--output", "--osl", help="Output tokens per request, e.g. 1k.")] = "1k",
    ttft_ms: Annotated[Optional[float], typer.Option("--ttft-ms", help="TTFT target (a request's prefill + the hand-off's exposed tail), ms.")] = None,
    tpot_ms: Annotated[Optional[float], typer.Option("--tpot-ms", help="TPOT target (the decode step; colocated: plus its share of prefill), ms.")] = None,
    rate: Annotated[Optional[float], typer.Option("--rate", help="Requests/s to sustain: the fewest GPUs of the budget that do, instead of the most throughput.")] = None,
    engine: EngineOpt = "sglang", kv_dtype: KvDtypeOpt = None, weight_dtype: WeightDtypeOpt = None,
    floor: Annotated[Floor, typer.Option("--floor", help="Price steps at the optimistic (max) or pessimistic (sum) floor.")] = Floor.max,
    pricing: PricingOpt = PricingChoice.datasheet,
    any_layout: Annotated[bool, typer.Option("--any-layout", help="Also layouts no engine flag launches (DOP, SPLASH's CP).")] = False,
    sweep_input: Annotated[Optional[str], typer.Option("--sweep-input", help=f"Input lengths for the P:D sweep, e.g. {DEFAULT_SWEEP_INPUT} (default with --plot).")] = None,
    sweep_output: Annotated[Optional[str], typer.Option("--sweep-output", help="Output lengths for the P:D sweep (default: --output).")] = None,
    top: Annotated[int, typer.Option("--top", help="Splits and colocated deployments listed.", min=1, max=64)] = 8,
    json_out: JsonOpt = False, plot: PlotOpt = None,
) -> None:
    """Prefill and decode pools (xPyD) against the best colocated deployment of the same GPUs."""
    from planner.disagg.report import result_doc, sweep_row
    from planner.disagg.search import Workload, search

    m, hw = load_specs(model, hardware)
    if gpus is not None and budget_nodes is not None:
        raise SpecError("give --gpus or --budget-nodes, not both")
    if budget_nodes is not None:
        if budget_nodes < 1:
            raise SpecError(f"--budget-nodes {budget_nodes} must be ≥ 1")
        gpus = budget_nodes * hw.peak.scaleup_domain_gpus
    gpus = 16 if gpus is None else gpus
    wl = Workload(parse_tokens(input_len, "--input"), parse_tokens(output_len, "--output"),
                  _positive(ttft_ms, "--ttft-ms", 1e-3), _positive(tpot_ms, "--tpot-ms", 1e-3), _positive(rate, "--rate"))
    pr = pricing_for(hw, pricing)
    kw = dict(engine=getattr(engine, "value", engine), kv_dtype=kv_dtype, weight_dtype=weight_dtype,
              floor=floor.value, pricing=pr, any_layout=any_layout)
    result = search(m, hw, gpus, wl, **kw)
    doc = {"model": m.name, "hardware": hw.name, **result_doc(result, pr, top)}
    sweep = None
    if sweep_input or sweep_output or plot:
        ins = _lengths(sweep_input or DEFAULT_SWEEP_INPUT, "--sweep-input")
        outs = _lengths(sweep_output, "--sweep-output") if sweep_output else [wl.output_tokens]
        sweep = [sweep_row(search(m, hw, gpus, Workload(i, o, wl.ttft_s, wl.tpot_s, wl.rate_requests_per_s), **kw))
                 for o in outs for i in ins]
    doc["ratio_sweep"] = sweep or []
    if plot:
        from cli.plots import plot_disagg_ratio

        plot_disagg_ratio(sweep, f"{m.name} on {gpus} × {hw.name}: best prefill:decode split", plot)
        doc["plot"] = plot
    # NOTE: printed as built, a dict, as floor and simulate print theirs: typing it here imports
    # floorfirst.results (53 pydantic models whose validators build at import: ~0.2 s more CPU a call).
    # Its model, floorfirst.disagg_result.DisaggResult, is held to it by tests/agent/test_schemas_from_models.py.
    if json_out:
        emit_json("disagg", doc)
        return
    _render(doc)


def _ms(x) -> str:
    return "—" if x is None else f"{x * 1e3:.1f}"


def _render(doc: dict) -> None:
    con = console()
    targets = ", ".join(f"{k} {_ms(doc[v])} ms" for k, v in (("TTFT ≤", "ttft_target_s"), ("TPOT ≤", "tpot_target_s"))
                        if doc[v] is not None) or "no latency targets"
    head = (f"{doc['model']} on {doc['gpus']} × {doc['hardware']} ({doc['engine']}), input {doc['input_tokens']:,.0f} / "
            f"output {doc['output_tokens']:,.0f} tokens, {targets} (floor {doc['floor']}, {doc['pricing']})")
    t = Table(title=title(head))
    for c in ("split", "GPUs P:D", "tok/s/GPU", "TTFT ms", "TPOT ms", "binds", "hand-off"):
        t.add_column(c, justify="left" if c in ("split", "binds") else "right")
    for o in doc["options"]:
        share = f"{o['handoff_share_of_ttft_fraction']:.1%}" if o["feasible"] else o["infeasible_reason"][:24]
        t.add_row(o["label"], f"{o['prefill_gpus']}:{o['decode_gpus']}", f"{o['output_tokens_per_s_per_gpu']:,.0f}",
                  _ms(o["ttft_s"]), _ms(o["tpot_s"]), o["binding"], share)
    for c in doc["colocated_options"][:3]:
        t.add_row(f"colocated {c['label']}", "—", f"{c['output_tokens_per_s_per_gpu']:,.0f}", _ms(c["ttft_s"]),
                  _ms(c["tpot_s"]), c["binding"], "—")
    con.print(t)
    b, c = doc["best"], doc["colocated"]
    if b is None:
        con.print("no disaggregated split meets the targets")
    else:
        h = b["handoff"]
        con.print(title(f"★ {b['label']}: {b['output_tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, binds {b['binding']}; "
                        f"prefill binds {b['prefill']['binding']}, decode {b['decode']['binding']} "
                        f"(B={b['decode']['batch']}, {_ms(b['decode']['step_s'])} ms steps)"))
        con.print(title(f"hand-off ({h['backend']}, {h['overlap']}): {h['request_bytes'] / 1e6:,.1f} MB a request, "
                        f"{h['wire_bytes'] / 1e6:,.1f} MB on the wire from {h['sender_gpus']} to {h['receiver_gpus']} GPUs, "
                        f"{h['messages_per_layer']:,.0f} messages/layer, {_ms(h['transfer_s'])} ms alone, "
                        f"{_ms(b['handoff_exposed_s'])} ms exposed ({b['handoff_share_of_ttft_fraction']:.1%} of TTFT), "
                        f"busiest NIC {b['handoff_nic_utilization_fraction']:.1%} busy"))
    if c is not None:
        gain = doc["gain_over_colocated_pct"]
        con.print(title(f"colocated best: {c['label']}: {c['output_tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, "
                        f"binds {c['binding']}" + ("" if gain is None else f"; disaggregated {gain:+.1f} %")))
    for row in doc["ratio_sweep"]:
        if row["best_label"] is None:
            con.print(f"input {row['input_tokens']:,.0f} / output {row['output_tokens']:,.0f}: no split meets the targets")
            continue
        gain = row["gain_over_colocated_pct"]
        con.print(title(f"input {row['input_tokens']:>7,.0f} / output {row['output_tokens']:>6,.0f}: P:D "
                        f"{row['prefill_gpus']}:{row['decode_gpus']} GPUs ({row['best_label']}), "
                        f"{row['output_tokens_per_s_per_gpu']:,.0f} tok/s/GPU"
                        + ("" if gain is None else f", {gain:+.0f} % over colocated")))
    if doc.get("launch"):
        con.print("SGLang:")
        for line in doc["launch"]["sglang"]:
            con.print(title(f"  {line}"), soft_wrap=True)
        con.print("vLLM:")
        for line in doc["launch"]["vllm"]:
            con.print(title(f"  {line}"), soft_wrap=True)
    if doc.get("plot"):
        con.print(f"plot written to {doc['plot']}")


def register(app: typer.Typer) -> None:
    app.command("disagg")(disagg)
