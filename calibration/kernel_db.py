"""Calibration priors for GPUs we don't own: NVIDIA's aiconfigurator-core wheel (Apache-2.0, on the
package index) ships per-kernel measured tables for H100, H200, B200, B300, GB200, GB300, … per
backend (sglang, vllm, trtllm). This module reads them into achieved rates per resource — the
same summary keys a `floorfirst microbench` result carries, so they serve as the fit's priors or,
through `calibrated_hardware_yaml`, as a calibrated hardware spec — and names every table and
version it used.

What it reads, and only that: wheel (or installed package) members
`aiconfigurator_core/systems/data/<system>/<op>/<backend>/<version>/<table>_perf.parquet`, the
newest version of each table. The wheel's end-to-end measured rows (`systems/silicon_sample.csv`)
are what floorfirst's release check scores: they are never opened, listed into a rate, or fitted
(`_member_ok` refuses every other member).

Rates (latency columns are milliseconds; NCCL message sizes are elements, as the int8 and half
series agree only read so):
- GEMM (`gemm_perf`): FLOP/s = 2·m·n·k / latency, the best over m ≥ 1024 per dtype (bf16; fp8 the
  best of fp8 and fp8_block); weight streaming = n·k·bytes / latency, the median over m ≤ 16 with
  n·k ≥ 2^24 (a decode GEMM streams its weights).
- MLA decode (`generation_mla_perf`): KV bytes = batch · context · 576 · kv bytes, FLOPs = batch ·
  context · heads · 2176, each over latency, the best over rows of ≥ 2^20 cached tokens.
- attention (`generation_attention_perf`, GQA decode, every backend has it): KV bytes = batch ·
  context · 2 · kv_heads · head_dim · kv bytes, FLOPs = batch · context · heads · head_dim · 4, the
  best over rows of ≥ 2^20 cached tokens: the KV rate where a backend has no MLA decode table (vLLM;
  its FLOP rate, a memory-bound kernel's, is not used for attention compute).
- MoE (`moe_perf`, one rank, balanced routing): the distinct experts' bytes E(1 − (1 − k/E)^N) ·
  3 · hidden · inter · bytes over latency, the median over N ≤ 16, taken to infinite width with the
  narrow-width law the same table gives (`moe_half_width`: rate(w) = rate_∞ · w / (w + w½), w½ fitted
  on the same experts at moe_tp 1 against 2–32, planner/engines/kernels.py NarrowGemm).

Families are composed separately (issue 26), never as "the fastest memory-bound kernel": weight
streaming = the mean of the GEMM family's decode streaming and the MoE family's rate_∞ (the weights a
step streams are projections and experts); KV streaming = the MLA decode table's, else the GQA
one's; FLOPs = the GEMM family's; the link = NCCL's all-gather; the message latency = the
backend's custom all-reduce in CUDA-graph mode, else NCCL's smallest all-reduce. A rate above the
datasheet is clamped to it with a note (a kernel beating a peak means a byte count or the peak is
off, not a reason to drop the GPU). `prior_calibration` turns the summary into the shipped prior of a
(GPU, engine): the efficiencies above, α and the per-step overhead as stated defaults.
- NCCL (`nccl_perf`): bus bytes/s 2(n−1)/n·S (all-reduce) or (n−1)/n·S (all-gather) over latency at
  S ≥ 64 MiB, the best (the link rate is the all-gather's: NVLS all-reduce reduces in the switch);
  the smallest all-reduce latency at ≤ 64 KiB; the backend's custom
  all-reduce (`custom_allreduce_perf`) in CUDA-graph mode gives the graph latency.
A rate is a lower bound on what the GPU can do (these are real kernels, not copy loops); the YAML
caps efficiencies at 1 and says so.

pyarrow is optional (`pip install pyarrow`), imported only by `read_parquet`; the arithmetic
takes plain column dicts, so it is tested without it.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import statistics
import zipfile
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from planner.errors import SpecError

MEMBER = re.compile(r"^aiconfigurator_core/systems/data/(?P<system>[^/]+)/(?P<op>[^/]+)/(?P<backend>[^/]+)/"
                    r"(?P<version>[^/]+)/(?P<table>[^/]+)_perf\.parquet$")
BACKENDS = ("sglang", "vllm", "trtllm")
HARDWARE_BY_SYSTEM = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200", "b300_sxm": "b300", "gb200": "gb200"}
DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "half": 2.0, "fp8": 1.0, "fp8_block": 1.0, "fp8_e4m3": 1.0, "int8": 1.0}
MLA_LATENT, MLA_FLOPS_PER_HEAD_TOKEN = 576, 2176.0
SMALL_BYTES, LARGE_BYTES = 64 << 10, 64 << 20


def _member_ok(name: str) -> bool:
    return MEMBER.match(name) is not None


def _version_key(v: str) -> tuple:
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.\-+]|rc|post|dev", v) if x != "")


# NOTE: archive limits, far above the real wheel (its per-kernel tables are a few MiB each, a few
# hundred members) and far below what would stall or exhaust the machine: a member's size is checked
# as the zip declares it and again as it inflates (a declaration can lie), and so is its ratio, so a
# 1 MB zip bomb is refused before it inflates to gigabytes; a parquet table's rows and columns are
# checked from its footer before it is decoded.
WHEEL_MAX_BYTES = 1 << 30
WHEEL_MAX_MEMBERS = 100_000
MEMBER_MAX_BYTES = 64 << 20
MEMBER_MAX_RATIO = 100  # uncompressed / compressed: parquet is compressed already (real tables: < 10)
PARQUET_MAX_ROWS = 5_000_000
PARQUET_MAX_COLUMNS = 256


class KernelDbSource:
    """A wheel file or an installed aiconfigurator_core package, read member by member, each read
    bounded (the limits above; the wheel itself is read through planner.inputs: a regular file,
    inside the MCP root when there is one)."""

    def __init__(self, path: str | None):
        if path is None:
            import importlib.util

            spec = importlib.util.find_spec("aiconfigurator_core")
            if spec is None or not spec.submodule_search_locations:
                raise SpecError("--from-kernel-db needs the aiconfigurator-core wheel: pip install aiconfigurator-core, "
                                "or pass --wheel PATH")
            self.root: Path | None = Path(list(spec.submodule_search_locations)[0]).parent
            self.zip = None
            self.label = f"aiconfigurator_core (installed at {self.root})"
            self.sha256 = ""
        else:
            from planner.inputs import open_binary_file

            p = Path(path)
            fh = open_binary_file(p, "wheel", WHEEL_MAX_BYTES)
            h = hashlib.sha256()
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
            fh.seek(0)
            try:
                self.zip = zipfile.ZipFile(fh)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError):
                fh.close()
                raise SpecError(f"{path}: not a wheel (zip) file") from None
            if len(self.zip.infolist()) > WHEEL_MAX_MEMBERS:
                raise SpecError(f"{path}: {len(self.zip.infolist()):,} members, over the {WHEEL_MAX_MEMBERS:,} a wheel "
                                "may hold here")
            self.root = None
            self.label = p.name
            self.sha256 = h.hexdigest()

    def names(self) -> list[str]:
        if self.zip is not None:
            return [n for n in self.zip.namelist() if _member_ok(n)]
        base = self.root / "aiconfigurator_core" / "systems" / "data"
        return [str(p.relative_to(self.root)).replace("\\", "/") for p in base.rglob("*_perf.parquet")
                if _member_ok(str(p.relative_to(self.root)).replace("\\", "/"))]

    def read(self, name: str) -> bytes:
        if not _member_ok(name):  # NOTE: the end-to-end rows are held back for release checks
            raise SpecError(f"refusing to read {name}: only per-kernel *_perf.parquet tables are read")
        if self.zip is None:
            from planner.inputs import read_bytes_file

            return read_bytes_file(self.root / name, "kernel table", MEMBER_MAX_BYTES)
        info = self.zip.getinfo(name)
        over = f"{name}: {{}} over the {MEMBER_MAX_BYTES >> 20} MiB a kernel table may inflate to (a zip bomb?)"
        if info.file_size > MEMBER_MAX_BYTES:
            raise SpecError(over.format(f"declares {info.file_size:,} bytes,"))
        if info.file_size > MEMBER_MAX_RATIO * max(info.compress_size, 1) and info.file_size > (1 << 20):
            raise SpecError(f"{name}: inflates {info.file_size / max(info.compress_size, 1):,.0f}-fold, over the "
                            f"{MEMBER_MAX_RATIO}-fold a kernel table may (a zip bomb?)")
        try:
            with self.zip.open(info) as f:
                data = f.read(MEMBER_MAX_BYTES + 1)
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise SpecError(f"{name}: unreadable member of the wheel ({type(exc).__name__})") from None
        if len(data) > MEMBER_MAX_BYTES:
            raise SpecError(over.format("inflates past its declared size,"))
        return data


def read_parquet(data: bytes, name: str = "kernel table") -> dict[str, np.ndarray]:
    """Column arrays of one parquet table; its footer's rows and columns are checked before a byte
    of it is decoded, and any table pyarrow can't read is one SpecError line naming it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise SpecError("--from-kernel-db reads parquet tables: pip install pyarrow") from None
    try:
        f = pq.ParquetFile(io.BytesIO(data))
        meta = f.metadata
        if meta.num_rows > PARQUET_MAX_ROWS or meta.num_columns > PARQUET_MAX_COLUMNS:
            raise SpecError(f"{name}: {meta.num_rows:,} rows × {meta.num_columns} columns, over the "
                            f"{PARQUET_MAX_ROWS:,} × {PARQUET_MAX_COLUMNS} a kernel table may hold")
        t = f.read()
        return {c: np.asarray(t.column(c).to_pylist(), dtype=object if t.schema.field(c).type == "string" else None)
                for c in t.column_names}
    except SpecError:
        raise
    except Exception as exc:  # noqa: BLE001 - pyarrow raises ArrowInvalid, OSError, ValueError… on a bad table
        first = (str(exc).splitlines() or [""])[0][:120]
        raise SpecError(f"{name}: not a readable parquet table ({type(exc).__name__}: {first})") from None


def newest_tables(names: list[str], system: str, backend: str) -> dict[tuple[str, str], tuple[str, str]]:
    """(op, table) -> (member, version) of the newest version of each table of `system`/`backend`."""
    out: dict[tuple[str, str], tuple[str, str]] = {}
    for n in names:
        m = MEMBER.match(n)
        if not m or m["system"] != system or m["backend"] not in (backend, "nccl"):
            continue
        key = (m["op"], m["table"] if m["backend"] == backend else f"nccl/{m['table']}")
        if key not in out or _version_key(m["version"]) > _version_key(out[key][1]):
            out[key] = (n, m["version"])
    return out


def _f(col) -> np.ndarray:
    return np.asarray(col, dtype=np.float64)


def _s(col) -> np.ndarray:
    return np.asarray([str(x) for x in col], dtype=object)


def gemm_rates(t: dict) -> tuple[dict, int]:
    m, n, k, lat = _f(t["m"]), _f(t["n"]), _f(t["k"]), _f(t["latency"]) / 1e3
    dt = _s(t["gemm_dtype"])
    out, used = {}, 0
    for name, dtypes in (("bf16", ("bfloat16",)), ("fp8", ("fp8", "fp8_block"))):
        sel = np.isin(dt, dtypes) & (m >= 1024) & (lat > 0)
        if sel.any():
            out[f"{name}_flops_per_s"] = float(np.max(2 * m[sel] * n[sel] * k[sel] / lat[sel]))
            used += int(sel.sum())
    b = np.array([DTYPE_BYTES.get(x, 0.0) for x in dt])
    sel = (m <= 16) & (n * k >= 1 << 24) & (b > 0) & (lat > 0)
    if sel.any():
        out["gemm_weight_stream_bytes_per_s"] = float(statistics.median((n[sel] * k[sel] * b[sel] / lat[sel]).tolist()))
        used += int(sel.sum())
    return out, used


def mla_rates(t: dict) -> tuple[dict, int]:
    b, ctx, h, lat = _f(t["batch_size"]), _f(t["step"]) + _f(t["isl"]), _f(t["num_heads"]), _f(t["latency"]) / 1e3
    kvb = np.array([DTYPE_BYTES.get(x, 0.0) for x in _s(t["kv_cache_dtype"])])
    sel = (b * ctx >= 1 << 20) & (kvb > 0) & (lat > 0)
    if not sel.any():
        return {}, 0
    kv = b[sel] * ctx[sel] * MLA_LATENT * kvb[sel] / lat[sel]
    fl = b[sel] * ctx[sel] * h[sel] * MLA_FLOPS_PER_HEAD_TOKEN / lat[sel]
    return {"mla_attention_kv_bytes_per_s": float(kv.max()), "mla_attention_flops_per_s": float(fl.max())}, int(sel.sum())


def moe_half_width(t: dict) -> tuple[float | None, int]:
    """(w½, pairs used): the per-rank width at which the grouped expert GEMM streams at half its
    infinite-width rate, rate(w) = rate_∞ · w/(w + w½). Fitted on pairs of rows with the same experts
    and tokens (balanced, ≤ 16 tokens, moe_ep 1) at moe_tp 1 and tp > 1: their rate ratio is
    [w/(w + w½)] / [I/(I + w½)] with w = I/tp; w½ minimises the median |log| error over a 5-column grid."""
    keys = ("moe_dtype", "hidden_size", "inter_size", "topk", "num_experts", "num_tokens")
    ok = (_s(t["distribution"]) == "balanced") & (_f(t["num_tokens"]) <= 16) & (_f(t["moe_ep_size"]) == 1)
    lat, tp = _f(t["latency"]), _f(t["moe_tp_size"])
    base: dict[tuple, float] = {}
    for i in np.flatnonzero(ok & (tp == 1) & (lat > 0)):
        base[tuple(str(t[k][i]) for k in keys)] = float(lat[i])
    w, full, ratio = [], [], []
    for i in np.flatnonzero(ok & (tp > 1) & (lat > 0)):
        key = tuple(str(t[k][i]) for k in keys)
        if key in base:
            inter = float(t["inter_size"][i])
            w.append(inter / tp[i])
            full.append(inter)
            ratio.append(base[key] / (tp[i] * lat[i]))
    if len(w) < 5:
        return None, len(w)
    w, full, ratio = np.array(w), np.array(full), np.array(ratio)
    grid = np.arange(10.0, 1500.0, 5.0)
    err = [np.median(np.abs(np.log((w / (w + a)) / (full / (full + a)) / ratio))) for a in grid]
    return float(grid[int(np.argmin(err))]), int(w.size)


def moe_rates(t: dict) -> tuple[dict, int]:
    n, hid, inter = _f(t["num_tokens"]), _f(t["hidden_size"]), _f(t["inter_size"])
    k, e, lat = _f(t["topk"]), _f(t["num_experts"]), _f(t["latency"]) / 1e3
    one_rank = (_f(t["moe_tp_size"]) == 1) & (_f(t["moe_ep_size"]) == 1) & (_s(t["distribution"]) == "balanced")
    b = np.array([DTYPE_BYTES.get(x, 0.0) for x in _s(t["moe_dtype"])])
    sel = one_rank & (n <= 16) & (b > 0) & (lat > 0)
    if not sel.any():
        return {}, 0
    touched = e[sel] * (1.0 - (1.0 - k[sel] / e[sel]) ** n[sel])
    half, pairs = moe_half_width(t)
    # NOTE: each row streams at its own width's rate; rate_∞ = rate · (I + w½)/I takes it to the
    # width-free rate the step model's `experts_weights` bytes are priced at (the narrow part is
    # `experts_narrow_gemm`, planner/engines/kernels.py)
    widen = 1.0 + (half or 0.0) / inter[sel]
    rate = touched * 3.0 * hid[sel] * inter[sel] * b[sel] / lat[sel] * widen
    out = {"moe_weight_stream_bytes_per_s": float(statistics.median(rate.tolist()))}
    if half is not None:
        out["moe_half_width_columns"] = half
    return out, int(sel.sum()) + pairs


def gqa_rates(t: dict) -> tuple[dict, int]:
    b, ctx = _f(t["batch_size"]), _f(t["step"]) + _f(t["isl"])
    h, kvh, d, lat = _f(t["num_heads"]), _f(t["num_key_value_heads"]), _f(t["head_dim"]), _f(t["latency"]) / 1e3
    kvb = np.array([DTYPE_BYTES.get(x, 0.0) for x in _s(t["kv_cache_dtype"])])
    win = _f(t["window_size"]) if "window_size" in t else np.zeros_like(b)
    sel = (b * ctx >= 1 << 20) & (kvb > 0) & (lat > 0) & (win == 0)
    if not sel.any():
        return {}, 0
    kv = b[sel] * ctx[sel] * 2.0 * kvh[sel] * d[sel] * kvb[sel] / lat[sel]
    fl = b[sel] * ctx[sel] * h[sel] * d[sel] * 4.0 / lat[sel]
    return {"gqa_attention_kv_bytes_per_s": float(kv.max()), "gqa_attention_flops_per_s": float(fl.max())}, int(sel.sum())


def nccl_rates(t: dict) -> tuple[dict, int]:
    op, g, lat = _s(t["op_name"]), _f(t["num_gpus"]), _f(t["latency"]) / 1e3
    size = _f(t["message_size"]) * np.array([DTYPE_BYTES.get(x, 0.0) for x in _s(t["nccl_dtype"])])
    out, used = {}, 0
    for name, factor in (("all_reduce", 2.0), ("all_gather", 1.0)):
        sel = (op == name) & (size >= LARGE_BYTES) & (lat > 0) & (g > 1)
        if sel.any():
            out[f"{name}_bus_bytes_per_s"] = float(np.max(factor * (g[sel] - 1) / g[sel] * size[sel] / lat[sel]))
            used += int(sel.sum())
    small = (op == "all_reduce") & (size <= SMALL_BYTES) & (size > 0) & (lat > 0)
    if small.any():
        out["all_reduce_small_latency_s"] = float(lat[small].min())
        used += int(small.sum())
    # NOTE: on NVSwitch systems NCCL's all-reduce runs NVLS (the switch reduces), so its ring-
    # equivalent bus bandwidth can exceed the link (H200: 460 GB/s over a 450 GB/s link); the link
    # rate comes from the all-gather, which moves every byte over the link.
    if "all_gather_bus_bytes_per_s" in out:
        out["link_bytes_per_s"] = out["all_gather_bus_bytes_per_s"]
    return out, used


def custom_allreduce_rates(t: dict) -> tuple[dict, int]:
    src, lat = _s(t["kernel_source"]), _f(t["latency"]) / 1e3
    size = _f(t["message_size"]) * np.array([DTYPE_BYTES.get(x, 2.0) for x in _s(t["allreduce_dtype"])])
    sel = np.array(["graph" in x.lower() for x in src]) & (size <= SMALL_BYTES) & (lat > 0)
    if not sel.any():
        return {}, 0
    return {"all_reduce_small_cuda_graph_latency_s": float(lat[sel].min())}, int(sel.sum())


READERS = {  # (op, table) -> reducer
    ("gemm", "gemm"): gemm_rates,
    ("mla", "generation_mla"): mla_rates,
    ("attention", "generation_attention"): gqa_rates,
    ("moe", "moe"): moe_rates,
    ("comm", "nccl/nccl"): nccl_rates,
    ("comm", "custom_allreduce"): custom_allreduce_rates,
}


def kernel_db_summary(tables: dict[tuple[str, str], dict]) -> tuple[dict, list[str]]:
    """Summary rates from column dicts keyed like READERS, and notes on what is missing."""
    summary, notes = {}, []
    for key, fn in READERS.items():
        if key not in tables:
            notes.append(f"no {key[0]}/{key[1]}_perf table: its rates stay at the hardware file's defaults")
            continue
        rates, _ = fn(tables[key])
        summary.update(rates)
    weights = [summary[k] for k in ("gemm_weight_stream_bytes_per_s", "moe_weight_stream_bytes_per_s") if k in summary]
    if weights:
        # NOTE: families composed, not the fastest kernel's rate (issue 26): a step streams projections
        # and experts alike, so the weight rate is the mean of the two families' rates
        summary["weight_stream_bytes_per_s"] = float(np.mean(weights))
        summary["hbm_stream_bytes_per_s"] = summary["weight_stream_bytes_per_s"]
    if "mla_attention_kv_bytes_per_s" not in summary and "gqa_attention_kv_bytes_per_s" in summary:
        # NOTE: GQA decode streams KV like MLA decode does, but its FLOP rate is a memory-bound
        # kernel's (a few % of the peak): it says nothing of MLA's 128-head compute, so the attention
        # FLOP efficiency stays the hardware file's
        notes.append("no MLA decode table: the KV rate is the GQA decode table's; the attention FLOP efficiency "
                     "stays the hardware file's default")
        summary["mla_attention_kv_bytes_per_s"] = summary["gqa_attention_kv_bytes_per_s"]
    return summary, notes


def read_kernel_db(system: str, backend: str, wheel: str | None = None, hardware: str | None = None) -> dict:
    """The rates document: system, backend, the tables used (member, version, rows), summary."""
    import planner

    if backend not in BACKENDS:
        raise SpecError(f"backend={backend!r} is not one of {', '.join(BACKENDS)}")
    src = KernelDbSource(wheel)
    names = src.names()
    systems = sorted({MEMBER.match(n)["system"] for n in names})
    if system not in systems:
        raise SpecError(f"system={system!r} has no per-kernel tables; the wheel has {', '.join(systems)}")
    hw_name = hardware or HARDWARE_BY_SYSTEM.get(system)
    if hw_name is None:
        raise SpecError(f"system {system!r} has no built-in hardware spec to be relative to: pass --hardware NAME|YAML")
    hw = planner.load_hardware(hw_name)
    found = newest_tables(names, system, backend)
    tables, used = {}, []
    for key in READERS:
        if key in found:
            member, version = found[key]
            data = src.read(member)
            tables[key] = read_parquet(data, member)
            _, n = READERS[key](tables[key])
            used.append({"path": member, "op": key[0], "table": key[1], "version": version, "rows_used": n,
                         "sha256": hashlib.sha256(data).hexdigest()})
    summary, notes = kernel_db_summary(tables)
    return {"kind": "floorfirst.kernel_db", "schema_version": 1, "system": system, "backend": backend,
            "hardware": hw.name, "wheel": src.label, "wheel_sha256": src.sha256,
            "device": f"{system} ({backend} kernels, aiconfigurator-core)",
            "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tables": used, "summary": summary, "notes": notes}


def write_outputs(doc: dict, out: str | None, yaml_out: str | None) -> None:
    """The rates document as JSON (when `out`), and a calibrated hardware YAML (when `yaml_out`)."""
    from planner.inputs import write_text_file

    if out is not None:
        write_text_file(out, json.dumps(doc, indent=1) + "\n", "kernel-db rates file")
    if yaml_out is not None:
        import planner
        from calibration.microbench.results import calibrated_hardware_yaml

        source = f"aiconfigurator-core {doc['wheel']}: {doc['system']}/{doc['backend']} " + ", ".join(
            f"{t['op']}/{t['table']} {t['version']}" for t in doc["tables"])
        try:
            text = calibrated_hardware_yaml(doc["summary"], planner.load_hardware(doc["hardware"]), source,
                                            measured_by="aiconfigurator-core kernel tables", clamp=True)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
        write_text_file(yaml_out, text, "hardware file")


# NOTE: α of the prior (t = overhead + max + α·(sum − max)): no per-kernel table measures how a step's
# kernels overlap; floorfirst's own H200 fits found almost none (α 0.90 on the step probe, 0.96 on the
# executor, benchmarks/results/calibration_report.txt: decode kernels run one after another).
PRIOR_ALPHA = 0.9
PRIOR_ALPHA_SOURCE = "floorfirst's H200 fits: 0.90 (step probe), 0.96 (executor), benchmarks/results/calibration_report.txt"
PRIOR_EFFICIENCY_KEYS = (  # parameter -> (summary key, the datasheet peak it is a fraction of)
    ("hbm_weight_efficiency", "weight_stream_bytes_per_s", "hbm"),
    ("hbm_kv_efficiency", "mla_attention_kv_bytes_per_s", "hbm"),
    ("compute_linear_efficiency", "bf16_flops_per_s", "bf16"),
    ("compute_attention_efficiency", "mla_attention_flops_per_s", "bf16"),
    ("network_efficiency", "link_bytes_per_s", "link"),
)


def prior_calibration(doc: dict):
    """The shipped prior of (the doc's GPU, its backend's engine): a calibration artifact with no
    measured row (origin 'prior'): efficiencies from the kernel families (module docstring), each
    clamped to (0, 1] with a note when a table beats the datasheet; the message latency from the
    backend's CUDA-graph custom all-reduce (else NCCL's smallest, else the hardware file's); α and the
    per-step overhead as stated defaults (PRIOR_ALPHA; planner.engines.kernels DEFAULT_STEP_OVERHEAD_S:
    no table of the wheel measures one)."""
    import planner
    from calibration.artifact import (EFF_MIN, PARAM_NAMES, Calibration, DataSource, FitSummary, FittedParams)
    from calibration.costs import rates_for
    from planner.engines.kernels import DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE

    hw = planner.load_hardware(doc["hardware"])
    s, p = doc["summary"], hw.peak
    peaks = {"hbm": p.hbm_bandwidth_bytes_per_s, "bf16": p.bf16_flops_per_s, "link": p.scaleup_bandwidth_bytes_per_s_per_direction}
    vals: dict[str, float] = {}
    src: dict[str, str] = {}
    notes = list(doc.get("notes", []))
    for name, key, peak in PRIOR_EFFICIENCY_KEYS:
        if key in s and s[key] > 0:
            eff = s[key] / peaks[peak]
            if eff > 1.0:
                notes.append(f"{name}: {key} {s[key]:.4g} is {eff:.3f} of the datasheet peak: clamped to 1.0 (a table "
                             "above the peak means its byte count, or the peak, is off)")
            vals[name] = float(min(max(eff, EFF_MIN), 1.0))
            src[name] = f"{key} (aiconfigurator-core tables)"
        else:
            vals[name] = getattr(hw.efficiency, "hbm" if peak == "hbm" else "flops" if peak == "bf16" else "network")
            src[name] = f"hardware spec {hw.name} defaults (no table for {key})"
    lat = s.get("all_reduce_small_cuda_graph_latency_s") or s.get("all_reduce_small_latency_s")
    vals["message_latency_s"] = float(lat) if lat else p.collective_latency_s
    src["message_latency_s"] = ("custom all-reduce in CUDA graphs" if s.get("all_reduce_small_cuda_graph_latency_s")
                                else "NCCL smallest all-reduce" if lat else f"hardware spec {hw.name}")
    vals["overlap_alpha"], src["overlap_alpha"] = PRIOR_ALPHA, PRIOR_ALPHA_SOURCE
    vals["overhead_s"], src["overhead_s"] = DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE
    for name in ("prefill_step_overhead_s", "mixed_step_overhead_s"):
        # NOTE: the tables time kernels, not the host's launches between them: a step without a full
        # CUDA graph has no prior of its own here (0: priced as a graph step)
        vals[name], src[name] = 0.0, "no table of the wheel times a step's host launches (0)"
    vals["host_overlap_alpha"], src["host_overlap_alpha"] = 1.0, "no eager-step overhead to overlap (1)"
    if "moe_half_width_columns" in s:
        notes.append(f"moe_half_width_columns {s['moe_half_width_columns']:g}: the expert GEMM's narrow-width "
                     "constant these tables give (the engine module declares its own per GPU generation)")
    sources = tuple(DataSource(path=f"{doc['wheel']}!{t['path']}", sha256=t.get("sha256", ""), kind="aiconfigurator-core table",
                               rows=int(t["rows_used"]), rows_rejected=0) for t in doc["tables"])
    return Calibration(
        created_utc=doc.get("created_utc", ""), rates=rates_for(hw), params=FittedParams(**vals), fitted=(),
        fixed={n: f"prior: {src[n]}" for n in PARAM_NAMES}, param_std={}, priors=dict(vals), sources=sources,
        microbench=None, fit=FitSummary(rows=0, loss="none (a prior: no measured row)", f_scale=0.0,
                                        median_abs_pct_error=0.0, p90_abs_pct_error=0.0, rows_below_floor=0),
        notes=tuple(notes), engine=doc["backend"], origin="prior")
