"""`floorfirst triage`: a measured step against its floors — overlap quality, a floor violated
(and which resource), or a residual over the sum and the resource to profile. With
`--profile FILE` every row of a profile is triaged (calibration.triage does the bulk work). With
`--calibration FILE` the residual is read against the calibrated prediction: "profile" then means
the engine did worse than a calibrated expectation, not than a datasheet floor every real step
exceeds."""

from __future__ import annotations

from typing import Annotated, Optional

import numpy as np
import typer
from rich.markup import escape
from rich.table import Table

import planner
from cli.commands.floor import _point, prefill_args
from cli.common import (DEFAULTS, AttnOpt, BatchOpt, CalibrationOpt, ContextOpt, EngineOpt, GpusOpt, HardwareOpt, JsonOpt,
                        KvDtypeOpt, MemFractionOpt, ModelOpt, MoeOpt, NodesOpt, PageOpt, PrefillContextOpt, PrefillOpt,
                        PricingChoice, PricingOpt, ReplicasOpt, ReserveOpt, SwaRatioOpt, WeightDtypeOpt, AttnGroupsOpt, console, emit_json, fmt_ms,
                        load_calibration, scalar)
from cli.launch import planning
from cli.registry_options import live
from planner.errors import SpecError
from planner.triage import DEFAULT_THRESHOLD, triage_step


def _profile(path: str, threshold: float, json_out: bool, calibration: str | None, sets: list[str] | None) -> None:
    try:
        from calibration.loaders import parse_defaults
        from calibration.triage import triage_profile
    except ImportError:
        raise SpecError("--profile needs the calibration package's bulk triage, which is not available") from None
    result = triage_profile(path, threshold, parse_defaults(sets), calibration=load_calibration(calibration),
                            calibration_path=calibration)
    if not result.rows and result.issues:
        # NOTE: a file none of whose rows can be used is an error, not an empty table with exit 0
        more = f" (and {len(result.issues) - 1} more rows)" if len(result.issues) > 1 else ""
        raise SpecError(f"no usable rows: {result.issues[0]}{more}")
    render_profile_triage(result, json_out)


def render_profile_triage(result, json_out: bool = False) -> None:
    """Print a table (people) or one JSON document (programs) on stdout."""
    if json_out:
        emit_json("triage_profile", result.to_json())
        return
    con = console()
    tab = Table(title=f"triage of {len(result.rows)} measured steps (profile threshold {result.threshold:.0%})")
    for col, just in (("line", "right"), ("deployment", "left"), ("B", "right"), ("ctx", "right"),
                      ("measured ms", "right"), ("max ms", "right"), ("sum ms", "right"), ("verdict", "left"),
                      ("q / residual", "right"), ("profile", "left")):
        tab.add_column(col, justify=just)
    calibrated = result.calibration is not None
    if calibrated:
        tab.add_column("predicted ms", justify="right")
        tab.add_column("vs predicted", justify="right")
    for r in result.rows:
        q = (f"q={r['overlap_quality']:.2f}" if r["verdict"] == "inside" else
             f"+{r['residual_fraction']:.0%}" if r["verdict"] == "above_sum" else ",".join(r["violated_resources"]))
        cells = [str(r["line"]), r["deployment"], str(r["batch"]), f"{r['context_tokens']:.0f}",
                 f"{r['measured_s'] * 1e3:.3f}", f"{r['floor_max_s'] * 1e3:.3f}", f"{r['floor_sum_s'] * 1e3:.3f}",
                 r["verdict"], q, r["profile_resource"] or ""]
        if calibrated:
            cells += [f"{r['calibrated']['predicted_s'] * 1e3:.3f}", f"{r['calibrated']['residual_fraction']:+.0%}"]
        tab.add_row(*cells)
    con.print(tab)
    c = result.counts()
    con.print(f"{c['inside']} inside \\[max, sum], {c['above_sum']} above sum, {c['below_floor']} below the floor "
              f"(a spec or the model is wrong), {c['rejected']} rejected")
    if calibrated:
        con.print(f"against {result.calibration}: {c['as_predicted']} as predicted, {c['above_prediction']} above "
                  f"(profile), {c['below_prediction']} below the prediction (threshold {result.threshold:.0%})")
    else:
        con.print(f"{c['profile']} over the threshold above the sum: profile")
    for i in result.issues:
        con.print(f"[yellow]rejected[/] {i}")
    for n in result.notes:
        con.print(f"[dim]{n}[/]")


def triage(
    measured_ms: Annotated[Optional[float], typer.Option("--measured-ms", help="Measured step time in ms.")] = None,
    profile: Annotated[Optional[str], typer.Option("--profile", help="Triage every row of a profile file instead.")] = None,
    threshold: Annotated[float, typer.Option("--threshold", help="Residual over floor_sum that calls for a profiler.")] = DEFAULT_THRESHOLD,
    sets: Annotated[Optional[list[str]], typer.Option("--set", help="With --profile: key=value filling a field the rows lack (e.g. hardware=h200, gpus=8, attn=dp, moe=ep); repeatable.")] = None,
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"], gpus: GpusOpt = DEFAULTS["gpus"],
    attn: AttnOpt = "tp", moe: MoeOpt = None, replicas: ReplicasOpt = 1, batch: BatchOpt = None,
    context: ContextOpt = DEFAULTS["context"], prefill_tokens: PrefillOpt = 0.0, prefill_context: PrefillContextOpt = "0",
    kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None, mem_fraction: MemFractionOpt = DEFAULTS["mem_fraction"],
    page_tokens: PageOpt = None, reserve_gib: ReserveOpt = None, pricing: PricingOpt = PricingChoice.datasheet,
    engine: EngineOpt = DEFAULTS["engine"], nodes: NodesOpt = None, swa_full_tokens_ratio: SwaRatioOpt = None,
    attn_groups: AttnGroupsOpt = None, calibration: CalibrationOpt = None, json_out: JsonOpt = False,
) -> None:
    """Place a measured step between its floors (or against a calibrated prediction) and say whether to open a profiler."""
    if profile is not None:
        if measured_ms is not None:
            raise SpecError("give either --measured-ms (one point) or --profile (a file), not both")
        _profile(profile, threshold, json_out, calibration, sets)
        return
    if measured_ms is None:
        raise SpecError("--measured-ms is required (or --profile FILE)")
    if sets:
        raise SpecError("--set fills fields of a --profile file; for one point give the options themselves")
    if not np.isfinite(measured_ms) or measured_ms <= 0:
        raise SpecError(f"measured_ms={measured_ms} must be a positive number")
    dep, cost = _point(model, hardware, attn, moe, gpus, replicas, batch, context, prefill_tokens, kv_dtype,
                       weight_dtype, mem_fraction, page_tokens, reserve_gib, pricing, prefill_context, engine, nodes,
                       swa_full_tokens_ratio, attn_groups)
    tr = triage_step(cost, measured_ms / 1e3, threshold)
    cal = load_calibration(calibration)
    t = cost.times
    doc = {
        "model": dep.model.name, "hardware": dep.hardware.name, "gpus": dep.gpus, "attn": dep.attn, "moe": dep.moe,
        "batch": int(round(scalar(cost.batch))), "context_mean_tokens": scalar(cost.mean_context), "pricing": cost.pricing,
        "prefill_tokens": scalar(cost.prefill_tokens),
        "prefill_context_tokens": prefill_args(prefill_tokens, prefill_context)[1],
        "measured_s": measured_ms / 1e3, "floor_max_s": scalar(cost.floor_max_s), "floor_sum_s": scalar(cost.floor_sum_s),
        "times_s": dict(zip(planner.TIMED_RESOURCES, (float(x) for x in t.stacked()[:, 0]))),
        "verdict": str(tr.verdict[0]),
        "overlap_quality": scalar(tr.overlap_quality),
        "residual_fraction": scalar(tr.residual_fraction),
        "violated_resources": tr.violated_resources[0],
        "threshold_fraction": threshold,
        "profile": bool(tr.profile[0]),
        "profile_resource": str(tr.profile_resource[0]) or None,
        "explanation": tr.explain(0),
    }
    if cal is not None:
        from calibration.triage import triage_calibrated

        terms = cal.predict_terms_s(cost)
        ct = triage_calibrated(measured_ms / 1e3, cal.predict_s(cost),
                               np.stack([np.asarray(terms[r]) for r in planner.TIMED_RESOURCES]),
                               threshold)
        doc["calibrated"] = {"calibration": calibration, "predicted_s": scalar(ct.predicted_s),
                             "residual_fraction": scalar(ct.residual_fraction), "verdict": str(ct.verdict[0]),
                             "explanation": ct.explain(0)}
        # NOTE: against a calibration, "profile" means worse than the calibrated expectation
        doc["profile"], doc["profile_resource"] = bool(ct.profile[0]), str(ct.profile_resource[0]) or None
    if json_out:
        emit_json("triage", doc)
        return
    con = console()
    tab = Table(title=escape(f"{dep.model.name} on {dep.gpus} × {dep.hardware.name}, {dep.label()}, B={doc['batch']:.0f}"))
    tab.add_column("")
    tab.add_column("ms", justify="right")
    for k, v in doc["times_s"].items():
        tab.add_row(k, fmt_ms(v))
    tab.add_row("floor max", fmt_ms(doc["floor_max_s"]))
    tab.add_row("floor sum", fmt_ms(doc["floor_sum_s"]))
    tab.add_row("[bold]measured[/]", fmt_ms(doc["measured_s"]))
    if cal is not None:
        tab.add_row("calibrated prediction", fmt_ms(doc["calibrated"]["predicted_s"]))
    con.print(tab)
    con.print(f"[bold]{doc['verdict']}[/]: {doc['explanation']}")
    if cal is not None:
        con.print(f"[bold]{doc['calibrated']['verdict']}[/]: {doc['calibrated']['explanation']}")


def register(app: typer.Typer) -> None:
    app.command("triage")(live(planning("triage", triage)))
