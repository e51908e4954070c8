"""`floorfirst thresholds --engine-args "<sglang launch line>"`: the crossovers SGLang's runtime
TP/CP/DCP switching reads (sglang PR #36191), from the (calibrated) step model of the deployment,
printed as the flags that switching takes (integrations.thresholds)."""

from __future__ import annotations

import shlex
from enum import Enum
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cli.common import CalibrationOpt, JsonOpt, PlotOpt, console, emit_json, load_calibration, parse_tokens


class Ranking(str, Enum):
    max = "max"
    sum = "sum"


def _crossover_doc(c) -> dict:
    return {"name": c.name, "flag": c.flag, "below_layout": "tp", "above_layout": c.other, "status": c.status,
            "tokens": c.tokens, "batch": c.batch, "prefix_tokens": c.prefix_tokens,
            "margin_below_fraction": c.margin_below_fraction, "margin_above_fraction": c.margin_above_fraction,
            "band_tokens": list(c.band_tokens) if c.band_tokens is not None else None, "notes": list(c.notes)}


def thresholds(
    engine_args: Annotated[str, typer.Option("--engine-args", help="The SGLang launch command, quoted (python -m sglang.launch_server …).")],
    hardware: Annotated[str, typer.Option("--hardware", "-hw", help="The GPU it runs on (a launch line doesn't say).")] = "h200",
    calibration: CalibrationOpt = None,
    floor: Annotated[Ranking, typer.Option("--floor", help="Without --calibration: rank by the optimistic (max) or pessimistic (sum) floor, as regimes does.")] = Ranking.max,
    batch: Annotated[int, typer.Option("--batch", "-b", help="Decode requests in the step the DCP crossover is read at (SGLang's threshold is one number; --json lists other batches).")] = 1,
    prefix: Annotated[str, typer.Option("--prefix", help="Tokens each prefill batch already has cached (its prefix), e.g. 32k.")] = "0",
    json_out: JsonOpt = False, plot: PlotOpt = None,
) -> None:
    """The prefill tokens above which CP beats TP and the decode context above which DCP beats TP,
    as SGLang's runtime-switching flags, with the margin at each crossover."""
    from integrations.launch import launched_deployment
    from integrations.thresholds import PR, thresholds as compute

    cal = load_calibration(calibration)
    launched = launched_deployment(engine_args, hardware)
    ranking = "calibrated" if cal is not None else floor.value
    th = compute(launched, ranking, cal, batch, parse_tokens(prefix, "--prefix") if prefix.strip() != "0" else 0.0)
    d = launched.deployment
    out = {"model": d.model.name, "hardware": d.hardware.name, "gpus": d.ranks, "engine": d.engine, "moe": d.moe,
           "deployment": launched.label(), "engine_args": engine_args, "ranking": ranking, "calibration": calibration,
           "source": PR, "flags": th.flags(),
           "crossovers": [_crossover_doc(th.prefill), _crossover_doc(th.decode)],
           "decode_by_batch": [{"batch": c.batch, "status": c.status, "tokens": c.tokens} for c in th.decode_by_batch]}
    title = f"{launched.label()}: runtime TP/CP/DCP crossovers ({ranking})"
    if plot:
        from cli.plots import plot_thresholds

        plot_thresholds(th, title, plot)
        out["plot"] = plot
    if json_out:
        emit_json("thresholds", out)
        return
    con = console()
    t = Table(title=escape(title))
    t.add_column("crossover")
    t.add_column("tokens", justify="right")
    t.add_column("TP ahead at ½", justify="right")
    t.add_column("other ahead at 2×", justify="right")
    t.add_column("within 2 % over", justify="right")
    for c, what in ((th.prefill, "prefill: CP beats TP"), (th.decode, f"decode B={th.decode.batch}: DCP beats TP")):
        val = {"crossover": f"{c.tokens:,.0f}", "always": f"always (≥ {c.tokens:,.0f})", "never": "never"}[c.status]
        below = "—" if c.margin_below_fraction is None else f"{c.margin_below_fraction:.1%}"
        above = "—" if c.margin_above_fraction is None else f"{c.margin_above_fraction:.1%}"
        band = "—" if c.band_tokens is None else f"{c.band_tokens[0]:,.0f}–{c.band_tokens[1]:,.0f}"
        t.add_row(what, val, below, above, band)
    con.print(t)
    con.print(escape("decode crossover by batch: " + ", ".join(
        f"{c.batch}: {c.tokens:,.0f}" if c.status == "crossover" else f"{c.batch}: {c.status}" for c in th.decode_by_batch)))
    flags = th.flags()
    con.print(escape("add to the launch line: " + (" ".join(shlex.quote(f) for f in flags) if flags else "(no crossover in range)")
                     + " (decode DCP also needs the PR's enable switch, --dynamic-include-dcp)"))
    for c in (th.prefill, th.decode):
        for n in c.notes:
            con.print(escape(f"note: {n}"))
    if plot:
        con.print(f"plot written to {plot}")


def register(app: typer.Typer) -> None:
    app.command("thresholds")(thresholds)
