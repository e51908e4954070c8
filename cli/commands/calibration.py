"""`floorfirst calibrate`, `validate` and `microbench`: fit a calibration artifact from measured
steps, check it by cross-validation, and measure a GPU's achieved rates.

Bulk triage of a profile is `floorfirst triage --profile FILE` (cli/commands/triage.py, which
calls calibration.triage). Thin: parse, call calibration, render; progress on stderr.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Annotated, Optional

import typer
from rich.markup import escape

from cli.common import JsonOpt, console, emit_json, emit_result
from planner.errors import SpecError
from planner.inputs import check_output_path, write_text_file

ProfileOpt = Annotated[list[str], typer.Option("--profile", "-p", help="Profile file (CSV, JSONL, vLLM/SGLang result); repeatable.")]
SetOpt = Annotated[Optional[list[str]], typer.Option("--set", help="key=value filling a field the rows lack (e.g. hardware=h200, gpus=8, attn=dp, moe=ep, engine=vllm); repeatable.")]
SpecTokensOpt = Annotated[Optional[int], typer.Option("--spec-tokens", help="Serving rows ran speculative decoding with k draft tokens per step (a step verifies B·(k+1) tokens).")]
AcceptLenOpt = Annotated[Optional[float], typer.Option("--accept-len", help="Tokens accepted per decode step with --spec-tokens (TPOT divides the step by it).")]


def spec_defaults(sets, spec_tokens, accept_len) -> list[str]:
    """--spec-tokens / --accept-len as --set pairs (a row's own fields win)."""
    if accept_len is not None and not spec_tokens:
        raise SpecError("--accept-len needs --spec-tokens")
    extra = [f"spec_tokens={spec_tokens}"] if spec_tokens else []
    extra += [f"accept_len={accept_len}"] if accept_len is not None else []
    return list(sets or ()) + extra


@contextmanager
def _progress(label: str, total: int):
    """A rich progress bar on stderr; yields advance(description)."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    err = Console(stderr=True)
    # NOTE: only on a terminal: piped stderr would get the bar's final newline before any error line
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=err, transient=True, disable=not err.is_terminal) as prog:
        task = prog.add_task(label, total=total)

        def advance(desc: str | None = None):
            prog.update(task, advance=1, description=f"{label}: {desc}" if desc else label)

        yield advance


def _load(profiles, sets):
    from calibration.costs import price_profile
    from calibration.loaders import load_profiles, parse_defaults

    if not profiles:
        raise SpecError("give at least one --profile FILE")
    prof = load_profiles(profiles, parse_defaults(sets))
    costs = price_profile(prof)
    return prof, costs


def _report_issues(con, issues, notes) -> None:
    for i in issues:
        con.print(f"[yellow]rejected[/] {i}")
    for n in notes:
        con.print(f"[dim]{n}[/]")


def check_calibration_out(out: str, force: bool) -> None:
    """`calibrate --out` is checked before the fit. NOTE: an existing file is replaced only if it is
    a floorfirst calibration (re-fitting into the same file is the normal loop) or with --force:
    a typo must not overwrite a profile, a config or anything else."""
    p = check_output_path(out, "--out", suffixes=(".json",))
    if force or not p.exists():
        return
    from calibration.artifact import ARTIFACT_KIND
    from planner.inputs import CALIBRATION_MAX_BYTES, load_json_file

    try:
        kind = load_json_file(p, "calibration file", CALIBRATION_MAX_BYTES).get("kind")
    except (SpecError, AttributeError):
        kind = None
    if kind != ARTIFACT_KIND:
        raise SpecError(f"--out {out} exists and is not a floorfirst calibration; pass --force to replace it")


def _read_microbench(path: str | None):
    if path is None:
        return None, None
    from calibration.artifact import DataSource
    from calibration.microbench.results import load_result

    doc, sha = load_result(path)
    return doc, DataSource(path=str(path), sha256=sha, kind="microbench", rows=len(doc.get("rows", [])),
                           rows_rejected=0)


def calibrate(
    profile: ProfileOpt = None,
    out: Annotated[str, typer.Option("--out", "-o", help="Where to write the calibration artifact (JSON); an existing file is replaced only if it is a floorfirst calibration (or with --force).")] = "calibration.json",
    force: Annotated[bool, typer.Option("--force", help="Replace --out even if it is not a floorfirst calibration.")] = False,
    microbench: Annotated[Optional[str], typer.Option("--microbench", help="A microbench result: priors for the fit and values for parameters the profile can't determine.")] = None,
    sets: SetOpt = None,
    loss: Annotated[str, typer.Option("--loss", help="Robust loss: soft_l1, huber, cauchy, arctan or linear.")] = "soft_l1",
    spec_tokens: SpecTokensOpt = None, accept_len: AcceptLenOpt = None,
    from_kernel_db: Annotated[Optional[str], typer.Option("--from-kernel-db", help="An aiconfigurator-core system (h200_sxm, b200_sxm, …): read its per-kernel tables into achieved rates (priors for --profile, or on their own).")] = None,
    backend: Annotated[Optional[str], typer.Option("--backend", help="With --from-kernel-db: whose kernels, sglang, vllm or trtllm.")] = None,
    wheel: Annotated[Optional[str], typer.Option("--wheel", help="With --from-kernel-db: the aiconfigurator-core wheel (default: the installed package).")] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", help="With --from-kernel-db: the datasheet spec the rates are relative to (default: from the system name).")] = None,
    yaml_out: Annotated[Optional[str], typer.Option("--yaml-out", help="With --from-kernel-db: also write a calibrated hardware YAML.")] = None,
    prior_out: Annotated[Optional[str], typer.Option("--prior-out", help="With --from-kernel-db: also write the (GPU, engine) prior, a calibration with no measured row (what calibration/priors ships).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit achieved efficiencies, message latency, overlap α and per-step overhead to measured steps
    (or, with --from-kernel-db, read a kernel database's achieved rates)."""
    from calibration.artifact import save_calibration
    from calibration.fit import fit_calibration

    if loss not in ("soft_l1", "huber", "cauchy", "arctan", "linear"):
        raise SpecError(f"loss={loss!r} is not one of soft_l1, huber, cauchy, arctan, linear")
    check_calibration_out(out, force)  # before the fit: a bad --out must not cost the whole fit
    if from_kernel_db is None and any(v is not None for v in (backend, wheel, hardware, yaml_out, prior_out)):
        raise SpecError("--backend, --wheel, --hardware, --yaml-out and --prior-out go with --from-kernel-db")
    kdb = None
    if yaml_out:
        check_output_path(yaml_out, "--yaml-out", suffixes=(".yaml", ".yml"))
    if prior_out:
        check_calibration_out(prior_out, force)
    if from_kernel_db is not None:
        kdb = _kernel_db(from_kernel_db, backend, wheel, hardware, yaml_out, out if not profile else None, json_out,
                         prior_out)
        if not profile:
            return
    sets = spec_defaults(sets, spec_tokens, accept_len)
    prof, costs = _load(profile, sets)
    mb, mb_src = _read_microbench(microbench)
    if kdb is not None:
        if mb is not None:
            raise SpecError("give --microbench or --from-kernel-db as the fit's priors, not both")
        mb, mb_src = kdb
    with _progress("fitting", 1) as advance:
        try:
            cal = fit_calibration(costs, prof.sources, mb, mb_src, loss=loss)
        except SpecError as exc:
            # the loader's rejections (bad fields) are not in the cost stage's list: name the first
            if prof.issues and "first rejection" not in str(exc):
                raise SpecError(f"{exc} (first rejection: {prof.issues[0]})") from None
            raise
        advance()
    save_calibration(cal, out)
    issues = [str(i) for i in prof.issues + costs.issues]
    if json_out:
        from floorfirst.calibration_results import CalibratedParams, CalibrateResult, EngineCalibratedParams

        # NOTE: constructed, not validated: the fit's values as they are
        s = cal.summary()
        s["params"] = CalibratedParams.model_construct(**s["params"])
        s["engines"] = {k: EngineCalibratedParams.model_construct(**v) for k, v in s["engines"].items()}
        emit_result(CalibrateResult.model_construct(out=out, **s, param_std=cal.param_std, rows_rejected=issues,
                                                    notes=list(prof.notes) + list(cal.notes)))
        return
    con = console()
    from rich.table import Table

    tab = Table(title=escape(f"calibration of {cal.rates.hardware} from {cal.fit.rows} measured steps → {out}"))
    for c in ("parameter", "value", "±1σ", "source"):
        tab.add_column(c)
    for k, v in cal.params.model_dump().items():
        shown = f"{v * 1e6:.2f} µs" if k == "message_latency_s" else f"{v * 1e3:.3f} ms" if k == "overhead_s" else f"{v:.3f}"
        sd = cal.param_std.get(k)
        sd_s = "" if sd is None else f"{sd * 1e6:.2f} µs" if k == "message_latency_s" else f"{sd * 1e3:.3f} ms" if k == "overhead_s" else f"{sd:.3f}"
        tab.add_row(k, shown, sd_s, "fitted" if k in cal.fitted else cal.fixed.get(k, ""))
    con.print(tab)
    con.print(f"in-sample: median |error| {cal.fit.median_abs_pct_error:.2f} %, p90 {cal.fit.p90_abs_pct_error:.2f} %; "
              f"{cal.fit.rows_below_floor} rows below the datasheet floor. Cross-validate with `floorfirst validate`.")
    _report_issues(con, issues, list(prof.notes) + list(cal.notes))


def validate(
    calibration: Annotated[str, typer.Option("--calibration", help="A calibration artifact (floorfirst calibrate).")],
    profile: ProfileOpt = None,
    sets: SetOpt = None,
    folds: Annotated[int, typer.Option("--folds", help="k of k-fold cross-validation.")] = 5,
    seed: Annotated[int, typer.Option("--seed", help="Fold shuffle seed.")] = 0,
    holdout: Annotated[Optional[list[str]], typer.Option("--holdout", help="Also hold out each group of: model, gpus, layout or engine (fit on the others, predict it); repeatable.")] = None,
    spec_tokens: SpecTokensOpt = None, accept_len: AcceptLenOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Per-row residuals of a calibration on a profile, k-fold and hold-out-by-group errors, floor violations."""
    from calibration.artifact import load_calibration
    from calibration.validate import HOLDOUT_GROUPS
    from calibration.validate import validate as run_validate

    bad = [h for h in holdout or () if h not in HOLDOUT_GROUPS]
    if bad:
        raise SpecError(f"--holdout {bad[0]!r} is not one of {', '.join(HOLDOUT_GROUPS)}")
    cal = load_calibration(calibration)
    prof, costs = _load(profile, spec_defaults(sets, spec_tokens, accept_len))
    with _progress("cross-validating", folds) as advance:
        rep = run_validate(cal, costs, folds, seed, progress=lambda k: advance(f"fold {k + 1}"),
                           holdout=tuple(holdout or ()))
    issues = [str(i) for i in prof.issues + costs.issues]
    if json_out:
        emit_json("validate", {"calibration": calibration, **rep.to_json(), "rows_rejected": issues})
        return
    con = console()
    con.print(f"{rep.rows} rows; {rep.folds}-fold cross-validated |error|: median {rep.cv_median_abs_pct_error:.2f} %, "
              f"p90 {rep.cv_p90_abs_pct_error:.2f} %")
    for h in rep.holdout:
        if h["rows_predicted"]:
            con.print(f"hold-out by {h['by']}: median {h['median_abs_pct_error']:.2f} %, p90 {h['p90_abs_pct_error']:.2f} % "
                      f"over {h['rows_predicted']} rows")
        for g in h["groups"]:
            what = (f"skipped: {g['skipped']}" if "skipped" in g else
                    f"median {g['median_abs_pct_error']:.2f} %, p90 {g['p90_abs_pct_error']:.2f} %")
            con.print(f"  {h['by']}={g['group']} ({g['rows']} rows, fit on {g['trained_on_rows']}): {what}")
    con.print(f"this calibration on these rows: median {rep.median_abs_pct_error:.2f} %, p90 {rep.p90_abs_pct_error:.2f} %")
    con.print(f"inside the datasheet \\[max, sum]: {rep.fraction_inside_floors:.0%}; below floor_max: {len(rep.rows_below_floor)}")
    for v in rep.rows_below_floor:
        con.print(f"[red]below floor[/] {v.source}:{v.line}: measured {v.measured_s * 1e3:.3f} ms < floor_max "
                  f"{v.floor_max_s * 1e3:.3f} ms ({', '.join(v.resources)} alone take longer): a spec or the model is wrong")
    worst = sorted(rep.residuals, key=lambda r: -abs(r["cv_error_pct"]))[:5]
    for r in worst:
        con.print(f"[dim]worst: {r['source']}:{r['line']} gpus={r['gpus']} {r['attn']} B={r['batch']} ctx={r['context_tokens']:.0f}: "
                  f"measured {r['measured_s'] * 1e3:.3f} ms, cross-validated {r['cv_predicted_s'] * 1e3:.3f} ms ({r['cv_error_pct']:+.1f} %)[/]")
    _report_issues(con, issues, prof.notes)


def _kernel_db(system, backend, wheel, hardware, yaml_out, out, json_out, prior_out=None):
    """Read the kernel tables; write the rates document (when `out`), the YAML and the prior; return
    (doc, DataSource) for use as the fit's priors."""
    from calibration.artifact import DataSource, save_calibration
    from calibration.kernel_db import prior_calibration, read_kernel_db, write_outputs

    if backend is None:
        raise SpecError("--from-kernel-db needs --backend sglang|vllm|trtllm")
    doc = read_kernel_db(system, backend, wheel, hardware)
    write_outputs(doc, out, yaml_out)
    if prior_out:
        save_calibration(prior_calibration(doc), prior_out)
    if out is not None:
        if json_out:
            from floorfirst.calibration_results import KernelDbResult, KernelTable

            # NOTE: constructed, not validated: the reader's values as they are (a validated float field
            # would print an integer rate as 3.0)
            tables = [KernelTable.model_construct(**t) for t in doc["tables"]]
            emit_result(KernelDbResult.model_construct(out=out, yaml_out=yaml_out, tables=tables, **{k: doc[k] for k in
                        ("system", "backend", "hardware", "wheel", "summary", "notes")}))
        else:
            con = console()
            con.print(f"{doc['system']} / {doc['backend']} ({doc['wheel']}) → {out}" + (f", {yaml_out}" if yaml_out else ""))
            for k, v in doc["summary"].items():
                con.print(f"  {k:<42} {v:.4g}")
            for t in doc["tables"]:
                con.print(f"[dim]  table {t['path']} ({t['rows_used']} rows used)[/]")
            for n in doc["notes"]:
                con.print(f"[dim]{n}[/]")
    return doc, DataSource(path=f"{doc['wheel']}:{system}/{backend}", sha256=doc["wheel_sha256"], kind="kernel_db",
                           rows=sum(t["rows_used"] for t in doc["tables"]), rows_rejected=0)


def microbench(
    out: Annotated[str, typer.Option("--out", "-o", help="Where to write the result JSON.")] = "microbench.json",
    quick: Annotated[bool, typer.Option("--quick", help="Tiny sizes (a smoke test, not a measurement).")] = False,
    gpus: Annotated[Optional[int], typer.Option("--gpus", help="GPUs for the collectives (default: all visible).")] = None,
    from_file: Annotated[Optional[str], typer.Option("--from", help="Use an existing result instead of running (e.g. to write --yaml-out).")] = None,
    hardware: Annotated[str, typer.Option("--hardware", help="Datasheet spec the calibrated YAML copies peaks from.")] = "h200",
    yaml_out: Annotated[Optional[str], typer.Option("--yaml-out", help="Also write a calibrated hardware YAML (datasheet peaks, measured efficiencies).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """Measure achieved HBM, GEMM, weight-streaming, attention, host-link and NCCL rates on this machine."""
    import planner
    from calibration.microbench.results import calibrated_hardware_yaml

    base = None
    if yaml_out:
        check_output_path(yaml_out, "--yaml-out", suffixes=(".yaml", ".yml"))
        base = planner.load_hardware(hardware)
    if from_file:
        doc, _ = _read_microbench(from_file)
        out = from_file
    else:
        check_output_path(out, "--out", suffixes=(".json",))
        try:
            import torch
        except ImportError:
            raise SpecError("microbench needs torch (pip install '.[torch]' in a clone) and a CUDA GPU") from None
        if not torch.cuda.is_available():
            raise SpecError("microbench needs a CUDA GPU; torch.cuda.is_available() is False here")
        from calibration.microbench.runner import plan, run_microbench

        world = torch.cuda.device_count() if gpus is None else gpus
        with _progress("microbench", len(plan(quick, world))) as advance:
            doc = run_microbench(quick=quick, gpus=world, progress=advance)
        write_text_file(out, json.dumps(doc, indent=1) + "\n", "microbench file")
    if yaml_out:
        try:
            text = calibrated_hardware_yaml(doc["summary"], base, out)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        write_text_file(yaml_out, text, "hardware file")
    if json_out:
        from floorfirst.calibration_results import MicrobenchResult

        emit_result(MicrobenchResult.model_construct(out=out, yaml_out=yaml_out, device=doc.get("device"),
                                                     gpus=doc.get("gpus"), summary=doc["summary"]))
        return
    from calibration.microbench.runner import table

    con = console()
    con.print(f"{doc.get('device')} × {doc.get('gpus')}, torch {doc.get('torch')}, NCCL {doc.get('nccl')} → {out}")
    con.print(table(doc))
    if yaml_out:
        con.print(f"calibrated hardware spec → {yaml_out} (use with --hardware {yaml_out})")


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate)
    app.command("validate")(validate)
    app.command("microbench")(microbench)
