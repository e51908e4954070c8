"""Reduce microbenchmark rows to the figures calibration uses, and write a calibrated hardware YAML.

`summarize` is pure Python over the rows (no torch), so it is tested on a CPU and re-run on any
committed result. `calibrated_hardware_yaml` copies a hardware spec's datasheet peaks unchanged
and replaces only its efficiency defaults with measured fractions, naming the file they came from;
every value is written by the YAML emitter (a quote or backslash in a path stays text), and the
document is validated as a hardware spec before it is returned, so the next command can read it.
`load_result` reads a result file through planner.inputs and checks its summary.
"""

from __future__ import annotations

import hashlib
import math
import statistics

from planner.errors import SpecError
from planner.hardware.spec import MIN_EFFICIENCY
from planner.inputs import MICROBENCH_MAX_BYTES, decode_text, parse_json_text, read_bytes_file, shown

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


def load_result(path) -> tuple[dict, str]:
    """A microbench result file → (document, sha256 of its bytes); one SpecError line if it is not
    one, or if a summary figure is not a positive finite number."""
    data = read_bytes_file(path, "microbench file", MICROBENCH_MAX_BYTES)
    doc = parse_json_text(decode_text(data, "microbench file", path), "microbench file", path)
    if not isinstance(doc, dict) or doc.get("kind") != "floorfirst.microbench" or not isinstance(doc.get("summary"), dict):
        raise SpecError(f"microbench {path}: not a floorfirst microbench result")
    for k, v in doc["summary"].items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SpecError(f"microbench {path}: summary field '{k}'={shown(v)} must be a positive number")
    if not isinstance(doc.get("rows", []), list):
        raise SpecError(f"microbench {path}: field 'rows' must be a list")
    return doc, hashlib.sha256(data).hexdigest()


def _yaml_scalar(v) -> str:
    """One YAML scalar as the emitter writes it (quoted where plain text would be misread)."""
    import yaml

    text = yaml.safe_dump(float(v) if isinstance(v, float) else v, allow_unicode=True, width=1 << 30)
    return text[: -len("\n...\n")] if text.endswith("\n...\n") else text.rstrip("\n")


def calibrated_hardware_yaml(summary: dict, base, source: str, measured_by: str = "floorfirst microbench",
                             clamp: bool = False) -> str:
    """A hardware YAML: `base`'s datasheet peaks verbatim, its generation (vendor, arch, compute
    capability: engine and kernel rules key on them), its runtime memory and scale-out tier, and
    efficiencies from `summary`.

    hbm = HBM copy (or, from kernel tables, the composed weight-streaming rate) / peak bandwidth;
    flops = bf16 GEMM / bf16 peak; network = large-collective bus bandwidth / link peak (per
    direction). A measurement above a datasheet peak means the peak is wrong: that is raised, not
    absorbed — unless `clamp` (kernel tables, issue 26), where it is clamped to 1 with a note in the
    sources (a kernel table's byte count, not the GPU, is the likely culprit)."""
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
    clamped = {}
    if over and not clamp:
        raise ValueError(f"measured {', '.join(over)} above the datasheet peak of {base.name}: check the spec")
    for k in over:
        clamped[k] = measured[k]
        measured[k] = 1.0
    low = [f"{k} {v:.3g}" for k, v in measured.items() if not v >= MIN_EFFICIENCY]
    if low:
        raise ValueError(f"measured {', '.join(low)} of the datasheet peak of {base.name}: below {MIN_EFFICIENCY:g}, "
                         "the measurement failed")
    eff.update({k: float(f"{v:.4g}") for k, v in measured.items()})
    lines = [f"name: {_yaml_scalar(base.name + '-calibrated')}",
             f"description: {_yaml_scalar(base.description + ' — efficiencies measured by ' + measured_by)}",
             f"vendor: {_yaml_scalar(base.vendor)}", f"arch: {_yaml_scalar(base.arch)}"]
    if base.compute_capability is not None:
        lines.append(f"compute_capability: [{base.compute_capability[0]}, {base.compute_capability[1]}]")
    lines.append("peak:  # datasheet, copied unchanged from " + base.name.replace(chr(10), " "))
    lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in p.model_dump().items() if v is not None]
    for part in ("memory", "scaleout"):
        lines.append(f"{part}:  # copied unchanged from {base.name}")
        lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in getattr(base, part).model_dump().items() if v is not None]
    lines.append("efficiency:  # measured / datasheet peak")
    lines += [f"  {k}: {_yaml_scalar(v)}" for k, v in eff.items()]
    lines.append("sources:")
    srcs = dict(base.sources)
    srcs["efficiency"] = (f"{measured_by} ({source}): " + ", ".join(
        f"{k} {summary[n] / 1e12:.3f} TB/s" if "bytes" in n else f"{k} {summary[n] / 1e12:.1f} TFLOP/s"
        for k, n in (("hbm copy", "hbm_copy_bytes_per_s"), ("hbm stream", "hbm_stream_bytes_per_s"),
                     ("bf16 GEMM", "bf16_flops_per_s"), ("collective bus", "link_bytes_per_s")) if n in summary))
    for k, v in clamped.items():
        srcs[f"clamped_{k}"] = (f"measured {v:.3f} of the datasheet peak, clamped to 1.0: a kernel table above the peak "
                                "means its byte count (or the peak) is off, not the GPU")
    for k in ("all_reduce_small_eager_latency_s", "all_reduce_small_cuda_graph_latency_s"):
        if k in summary:
            srcs[f"measured_{k}"] = f"{summary[k] * 1e6:.1f} us ({source}); peak.collective_latency_s left as the datasheet file's"
    lines += [f"  {_yaml_scalar(str(k))}: {_yaml_scalar(str(v))}" for k, v in srcs.items()]
    text = "\n".join(lines) + "\n"
    _check_loads(text)
    return text


def _check_loads(text: str) -> None:
    """The YAML must be a hardware spec the next command accepts (ValueError naming why not)."""
    import yaml
    from pydantic import ValidationError

    from planner.hardware.spec import HardwareSpec

    try:
        HardwareSpec.model_validate(yaml.safe_load(text))
    except (yaml.YAMLError, ValidationError) as exc:
        raise ValueError(f"the calibrated hardware YAML would not load: {str(exc).splitlines()[0]}") from None
