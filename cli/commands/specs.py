"""`floorfirst models` and `floorfirst hardware`: what is built in, and what a spec file says."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

import planner
from cli.common import console, JsonOpt, emit_json
from planner.units import GiB


def models(
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Show one model (name or config.json path).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List built-in models (or one config.json) with their parameter split."""
    names = [model] if model else planner.builtin_model_names()
    rows = [planner.load_model(n).summary() for n in names]
    if json_out:
        emit_json("models", {"models": rows})
        return
    from rich.table import Table  # NOTE: here: a --json call never imports rich

    t = Table(title="models (parameters in billions)")
    for col in ("name", "attention", "mlp", "layers", "heads", "total", "active/token", "weights"):
        t.add_column(col, justify="right" if col not in ("name", "attention", "mlp", "weights") else "left")
    for r in rows:
        t.add_row(r["name"], r["attention"], r["mlp"], str(r["layers"]), str(r["num_heads"]),
                  f"{r['total_params_b']:.1f}", f"{r['active_params_per_token_b']:.1f}", r["default_weight_dtype"])
    console().print(t)


def hardware(
    hardware: Annotated[Optional[str], typer.Option("--hardware", "-hw", help="Show one GPU (name or YAML path).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """List built-in GPUs: datasheet peaks, efficiency defaults and ridge points per dtype."""
    names = [hardware] if hardware else planner.builtin_hardware_names()
    specs = [planner.load_hardware(n) for n in names]
    rows = []
    for hw in specs:
        p = hw.peak
        dtypes = ["bf16"] + [d for d, v in (("fp8", p.fp8_flops_per_s), ("fp4", p.fp4_flops_per_s)) if v]
        rows.append({
            "name": hw.name,
            "description": hw.description,
            "vendor": hw.vendor,
            "arch": hw.arch,
            "compute_capability": list(hw.compute_capability) if hw.compute_capability else None,
            "hbm_bytes": p.hbm_bytes,
            "usable_hbm_bytes": hw.usable_hbm_bytes,
            "usable_hbm_declared": hw.memory.usable_hbm_bytes is not None,
            "smi_total_mib": hw.smi_total_mib,
            "cuda_context_bytes": hw.memory.context_bytes,
            "hbm_bandwidth_bytes_per_s": p.hbm_bandwidth_bytes_per_s,
            "flops_per_s": {d: hw.flops_per_s(d) for d in dtypes},
            "ridge_flops_per_byte": {d: hw.ridge_flops_per_byte(d) for d in dtypes},
            "scaleup_bandwidth_bytes_per_s_per_direction": p.scaleup_bandwidth_bytes_per_s_per_direction,
            "scaleup_domain_gpus": p.scaleup_domain_gpus,
            "collective_latency_s": p.collective_latency_s,
            "host_link_bandwidth_bytes_per_s": p.host_link_bandwidth_bytes_per_s,
            "scaleout_bandwidth_bytes_per_s_per_direction": hw.scaleout.nic_bandwidth_bytes_per_s_per_direction,
            "scaleout_collective_latency_s": hw.scaleout.collective_latency_s,
            "efficiency": hw.efficiency.model_dump(),
            "sources": hw.sources,
        })
    if json_out:
        emit_json("hardware", {"hardware": rows})
        return
    from rich.table import Table

    t = Table(title="hardware (datasheet, dense; usable HBM as torch reports it)")
    for col in ("name", "arch", "HBM GB", "usable GiB", "HBM TB/s", "BF16 TF/s", "FP8 TF/s", "FP4 TF/s",
                "ridge bf16/fp8 FLOP/B", "link GB/s/dir", "domain", "NIC GB/s/dir"):
        t.add_column(col, justify="left" if col == "name" else "right")
    for r in rows:
        f = r["flops_per_s"]
        ridge = r["ridge_flops_per_byte"]
        usable = f"{r['usable_hbm_bytes'] / GiB:.1f}" + ("" if r["usable_hbm_declared"] else " (datasheet)")
        cc = ".".join(str(x) for x in r["compute_capability"]) if r["compute_capability"] else "?"
        t.add_row(r["name"], f"{r['arch']} {cc}", f"{r['hbm_bytes'] / 1e9:.0f}", usable,
                  f"{r['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}",
                  f"{f['bf16'] / 1e12:.0f}", f"{f['fp8'] / 1e12:.0f}" if "fp8" in f else "–",
                  f"{f['fp4'] / 1e12:.0f}" if "fp4" in f else "–",
                  f"{ridge['bf16']:.0f} / {ridge['fp8']:.0f}" if "fp8" in ridge else f"{ridge['bf16']:.0f}",
                  f"{r['scaleup_bandwidth_bytes_per_s_per_direction'] / 1e9:.0f}", str(r["scaleup_domain_gpus"]),
                  f"{r['scaleout_bandwidth_bytes_per_s_per_direction'] / 1e9:.0f}")
    console().print(t)


def register(app: typer.Typer) -> None:
    app.command("models")(models)
    app.command("hardware")(hardware)
