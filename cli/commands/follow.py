"""`floorfirst follow`: keep the calibration of a running SGLang deployment current from its
forward-pass metrics (integrations.follow), live over ZMQ or from a recorded stream (`--once`)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from cli.common import CalibrationOpt, JsonOpt, console, emit_json, load_calibration
from planner.errors import SpecError
from planner.triage import DEFAULT_THRESHOLD


def follow(
    engine_args: Annotated[str, typer.Option("--engine-args", help="The SGLang launch command of the deployment the records come from, quoted.")],
    hardware: Annotated[str, typer.Option("--hardware", "-hw", help="The GPU it runs on (a launch line doesn't say).")] = "h200",
    endpoint: Annotated[Optional[list[str]], typer.Option("--endpoint", help="A ZMQ endpoint SGLang's FPM publisher binds: {--forward-pass-metrics-ipc-name}.{dp_rank} (ipc://…) or tcp://…; repeat per DP rank.")] = None,
    once: Annotated[Optional[str], typer.Option("--once", help="Read a recorded stream (JSONL, one record per line) instead, then stop.")] = None,
    calibration: CalibrationOpt = None,
    window: Annotated[int, typer.Option("--window", help="Steps the refit fits (the newest).")] = 512,
    refit_every: Annotated[int, typer.Option("--refit-every", help="Refit after this many new steps.")] = 64,
    margin: Annotated[float, typer.Option("--margin", help="Drift: a step slower than the served prediction by more than this fraction.")] = DEFAULT_THRESHOLD,
    out: Annotated[Optional[str], typer.Option("--out", "-o", help="Write each calibration a refit produces here (JSON; replaced only if it is a floorfirst calibration, or with --force).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace --out even if it is not a floorfirst calibration.")] = False,
    record: Annotated[Optional[str], typer.Option("--record", help="Append every record received to this JSONL file (replay it with --once).")] = None,
    duration_s: Annotated[Optional[float], typer.Option("--duration-s", help="Stop after this many seconds (default: until interrupted).")] = None,
    max_records: Annotated[Optional[int], typer.Option("--max-records", help="Stop after this many records.")] = None,
    silence_s: Annotated[float, typer.Option("--silence-s", help="Say so when no record came for this long.")] = 5.0,
    tables: Annotated[bool, typer.Option("--tables/--no-tables", help="Keep the runtime policy's tables compiled from the served calibration (background).")] = True,
    json_out: JsonOpt = False,
) -> None:
    """Follow SGLang's forward-pass metrics: each record a measured step, the calibration refit
    over a rolling window, drift named by resource, the policy tables kept current."""
    from cli.commands.calibration import check_calibration_out
    from integrations.follow import Follower
    from integrations.follow_run import run_live, run_once
    from integrations.launch import launched_deployment

    if (once is None) == (not endpoint):
        raise SpecError("give --endpoint (live) or --once FILE (a recorded stream), not both")
    for name, v in (("--duration-s", duration_s), ("--max-records", max_records)):
        if v is not None and not v > 0:
            raise SpecError(f"{name}={v} must be > 0")
    if not silence_s > 0:
        raise SpecError(f"--silence-s={silence_s} must be > 0")
    if out:
        check_calibration_out(out, force)
    if record:
        from planner.inputs import check_output_path

        check_output_path(record, "--record", suffixes=(".jsonl",))
    launched = launched_deployment(engine_args, hardware)
    if launched.reading.engine != "sglang":
        raise SpecError("--engine-args: follow reads SGLang's forward-pass metrics; give an SGLang launch line")
    cal = load_calibration(calibration)

    def save(c) -> None:
        from calibration.artifact import save_calibration

        save_calibration(c, out)

    def say(line: str) -> None:
        sys.stderr.write(f"follow: {line}\n")

    follower = Follower(launched, cal, calibration or "", window=window, refit_every=refit_every, margin=margin,
                        tables=tables, source=once or ",".join(endpoint or []), on_refit=save if out else None)
    if once is not None:
        from integrations.fpm_stream import read_recorded

        rep = run_once(follower, read_recorded(once), say)
    else:
        from integrations.fpm_stream import FpmSubscriber

        sub = FpmSubscriber(list(endpoint or []), record_to=record)
        try:
            rep = run_live(follower, sub, duration_s, max_records, silence_s, say)
        finally:
            sub.close()
    rep["calibration_out"] = out
    # NOTE: printed as built, a dict, as floor and simulate print theirs: typing it here imports
    # floorfirst.results (53 pydantic models whose validators build at import: ~0.2 s more CPU a call).
    # Its model, floorfirst.follow_result.FollowResult, is held to it by tests/agent/test_schemas_from_models.py.
    if json_out:
        emit_json("follow", rep)
        return
    render(rep)


def render(rep: dict) -> None:
    con = console()
    i = rep["records"]
    con.print(escape(f"{rep['deployment']}: {i['received']} records, {i['accepted']} steps, {i['heartbeats']} heartbeats, "
                     f"{i['dropped_total']} dropped"))
    for reason, n in i["dropped"].items():
        ex = "; ".join(i["drop_examples"].get(reason, []))
        con.print(escape(f"  dropped {n} {reason}" + (f": {ex}" if ex else "")))
    s = rep["served"]
    con.print(escape(f"serving: {s['label']}"))
    t = Table(title="residual (measured − predicted)/predicted by binding resource, last refit window")
    t.add_column("resource")
    t.add_column("steps", justify="right")
    t.add_column("median", justify="right")
    t.add_column("p90 |·|", justify="right")
    for res, r in (rep["residual_by_resource"] or rep["residual_by_resource_since_refit"]).items():
        t.add_row(res, str(r["steps"]), f"{r['median_residual_fraction']:+.1%}", f"{r['p90_abs_residual_fraction']:.1%}")
    con.print(t)
    d = rep["drift"]
    by = ", ".join(f"{k} {v}" for k, v in d["steps_by_resource"].items()) or "none"
    con.print(escape(f"drift (> {rep['margin_fraction']:.0%} above the served prediction): {d['steps']} steps; by resource: {by}"))
    taken = sum(1 for r in rep["refits"] if r["taken"])
    con.print(escape(f"refits: {len(rep['refits'])} ({taken} taken); tables: {rep['tables'].get('state')}"
                     + (f" ({rep['tables'].get('model')})" if rep["tables"].get("model") else "")))


def register(app: typer.Typer) -> None:
    app.command("follow")(follow)
