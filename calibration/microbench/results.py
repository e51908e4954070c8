"""Reduce microbenchmark rows to the figures calibration uses, and write a calibrated hardware YAML.

`summarize` is pure Python over the rows (no torch), so it is tested on a CPU and re-run on any
committed result. `calibrated_hardware_yaml` copies a hardware spec's datasheet peaks unchanged
and replaces only its efficiency defaults with measured fractions, naming the file they came from.
"""

from __future__ import annotations

import statistics

SCHEMA_VERSION = 1
SMALL_COLLECTIVE_BYTES = 64 << 10  # payloads at or under this are latency-bound on NVLink
LARGE_COLLECTIVE_BYTES = 64 << 20  # and over this, bandwidth-bound


def _ok(rows, bench):
    return [r for r in rows if r.get("bench") == bench and "error" not in r]


def summarize(rows: list[dict]) -> dict:
    """Headline rates from raw rows; a family with no good row is left out."""
    s: dict = {}
    copy = _ok(rows, "hbm_copy")
    if copy:
        s["hbm_copy_bytes_per_s"] = max(r["bytes_per_s"] for r in copy)
    stream = [r for r in _ok(rows, "weight_stream") if r["m"] <= 64]
    if stream:
        s["weight_stream_bytes_per_s"] = statistics.median(r["weight_bytes_per_s"] for r in stream)
    big_stream = [r for r in _ok(rows, "weight_stream") if r["m"] > 64]
    if big_stream:
        s["weight_stream_m256_bytes_per_s"] = max(r["weight_bytes_per_s"] for r in big_stream)
    gemms = _ok(rows, "gemm")
    for dtype in sorted({r["dtype"] for r in gemms}):
        big = [r for r in gemms if r["dtype"] == dtype and r["m"] >= 1024]
        if big:
            s[f"{dtype}_flops_per_s"] = max(r["flops_per_s"] for r in big)
        small = [r for r in gemms if r["dtype"] == dtype and r["m"] <= 64]
        if small:
            s[f"{dtype}_decode_weight_bytes_per_s"] = statistics.median(r["weight_bytes_per_s"] for r in small)
    att = _ok(rows, "mla_attention")
    if att:
        s["mla_attention_kv_bytes_per_s"] = statistics.median(r["kv_bytes_per_s"] for r in att)
        s["mla_attention_flops_per_s"] = statistics.median(r["flops_per_s"] for r in att)
    host = _ok(rows, "host_link")
    if host:
        s["host_link_bytes_per_s"] = min(r["bytes_per_s"] for r in host)
    coll = _ok(rows, "collective")
    for mode in ("eager", "cuda_graph"):
        small = [r for r in coll if r["op"] == "all_reduce" and r["mode"] == mode
                 and r["payload_bytes"] <= SMALL_COLLECTIVE_BYTES]
        if small:
            s[f"all_reduce_small_{mode}_latency_s"] = min(r["time_s"] for r in small)
    for op in ("all_reduce", "all_gather", "all_to_all"):
        small = [r for r in coll if r["op"] == op and r["mode"] == "eager" and r["payload_bytes"] <= SMALL_COLLECTIVE_BYTES]
        if small:
            s[f"{op}_small_latency_s"] = min(r["time_s"] for r in small)
        large = [r for r in coll if r["op"] == op and r["payload_bytes"] >= LARGE_COLLECTIVE_BYTES]
        if large:
            s[f"{op}_bus_bytes_per_s"] = max(r["bus_bytes_per_s"] for r in large)
    bus = [s[k] for k in ("all_reduce_bus_bytes_per_s", "all_gather_bus_bytes_per_s") if k in s]
    if bus:
        s["link_bytes_per_s"] = max(bus)
    return s


def _yaml_scalar(v) -> str:
    return repr(float(v)) if isinstance(v, float) else str(v)


def calibrated_hardware_yaml(summary: dict, base, source: str, measured_by: str = "floorfirst microbench") -> str:
    """A hardware YAML: `base`'s datasheet peaks verbatim, efficiencies from `summary`.

    hbm = HBM copy (or, from kernel tables, the best memory-bound kernel's rate) / peak bandwidth;
    flops = bf16 GEMM / bf16 peak; network = large-collective bus bandwidth / link peak (per
    direction). A measurement above a datasheet peak means the peak is wrong: that is raised,
    not absorbed."""
    p = base.peak
    eff = dict(base.efficiency.model_dump())
    measured = {}
    hbm_key = next((k for k in ("hbm_copy_bytes_per_s", "hbm_stream_bytes_per_s") if k in summary), None)
    if hbm_key:
        measured["hbm"] = summary[hbm_key] / p.hbm_bandwidth_bytes_per_s
    if "bf16_flops_per_s" in summary:
        measured["flops"] = summary["bf16_flops_per_s"] / p.bf16_flops_per_s
    if "link_bytes_per_s" in summary:
        measured["network"] = summary["link_bytes_per_s"] / p.scaleup_bandwidth_bytes_per_s_per_direction
    over = [k for k, v in measured.items() if v > 1.0]
    if over:
        raise ValueError(f"measured {', '.join(over)} above the datasheet peak of {base.name}: check the spec")
    eff.update({k: round(v, 4) for k, v in measured.items()})
    lines = [f"name: {base.name}-calibrated",
             f'description: "{base.description} — efficiencies measured by {measured_by}"',
             "peak:  # datasheet, copied unchanged from " + base.name]
    lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in p.model_dump().items() if v is not None]
    lines.append("efficiency:  # measured / datasheet peak")
    lines += [f"  {k}: {v}" for k, v in eff.items()]
    lines.append("sources:")
    srcs = dict(base.sources)
    srcs["efficiency"] = (f"{measured_by} ({source}): " + ", ".join(
        f"{k} {summary[n] / 1e12:.3f} TB/s" if "bytes" in n else f"{k} {summary[n] / 1e12:.1f} TFLOP/s"
        for k, n in (("hbm copy", "hbm_copy_bytes_per_s"), ("hbm stream", "hbm_stream_bytes_per_s"),
                     ("bf16 GEMM", "bf16_flops_per_s"), ("collective bus", "link_bytes_per_s")) if n in summary))
    for k in ("all_reduce_small_eager_latency_s", "all_reduce_small_cuda_graph_latency_s"):
        if k in summary:
            srcs[f"measured_{k}"] = f"{summary[k] * 1e6:.1f} us ({source}); peak.collective_latency_s left as the datasheet file's"
    lines += [f'  {k}: "{str(v).replace(chr(34), chr(39))}"' for k, v in srcs.items()]
    return "\n".join(lines) + "\n"
