"""Public request traces read as workloads, as they are published (no conversion step):

- the Azure LLM inference traces (Azure/AzurePublicDataset: AzureLLMInferenceTrace_conv.csv and
  _code.csv, 2023 and 2024): header `TIMESTAMP,ContextTokens,GeneratedTokens`, TIMESTAMP a date-time
  such as `2023-11-16 18:15:46.6805900` (seven fractional digits) — arrivals are seconds from the
  first request;
- Mooncake-style JSONL (kvcache-ai/Mooncake FAST25-release/traces; SGLang bench_serving's
  `--dataset-name mooncake` reads the same): one object per line with `timestamp` (milliseconds
  from the trace start), `input_length`, `output_length` (and `hash_ids`, the prefix-cache
  blocks, which a decode-step model does not use).

- a benchmark result that lists its requests: `vllm bench serve --save-result` JSON and SGLang
  `bench_serving --output-details` JSONL both write `input_lens` and `output_lens` per request
  (vllm/benchmarks/serve.py, sglang/bench_serving.py); arrivals follow the run's `request_rate`
  (`inf`: all at t = 0, as the benchmark sends them; a rate: Poisson at it, seeded by --seed — the
  benchmark's own draws are not in the file). Its `max_concurrency` cap is not replayed (the
  simulator's loop admits by KV, not by a client-side limit).

A request with no generated tokens (GeneratedTokens 0, output_length 0: a prefill-only call) has no
decode step to serve and is left out; the count left out is in the workload's params. CSV and
Mooncake traces are read line by line and only as far as the run needs: with `-n N` the first N
requests of the file (with generated tokens) are read, then ordered by arrival (a published trace
is in time order, so these are its first N arrivals), and nothing past them is read. Any other bad
row is one SpecError naming the file, its line and the field. Files are read through
planner.inputs (a regular file of at most TRACE_MAX_BYTES, UTF-8 with or without a BOM).
"""

from __future__ import annotations

import csv
import math
from datetime import datetime
from pathlib import Path

import numpy as np

from planner.errors import SpecError
from planner.inputs import TRACE_MAX_BYTES, benchmark_json_value, json_value, read_text_file, shown, text_lines

AZURE_HEADER = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
MAX_TRACE_TOKENS = 65536 * 16


def _seconds(text: str, path, line: int) -> float:
    """An Azure TIMESTAMP (date-time, any number of fractional digits) or plain seconds → seconds."""
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    whole, _, frac = t.partition(".")
    try:
        base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").timestamp()
        return base + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise SpecError(f"{path}: line {line}: TIMESTAMP={shown(t)} is not a date-time (2023-11-16 18:15:46.6805900)") from None


def _tokens(value, name: str, path, line: int, allow_zero: bool) -> int:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecError(f"{path}: line {line}: {name}={shown(value)} is not a number") from None
    lo = 0 if allow_zero else 1
    if not math.isfinite(v) or v != int(v) or not lo <= v <= MAX_TRACE_TOKENS:
        raise SpecError(f"{path}: line {line}: {name}={shown(value)} must be a whole number in [{lo}, {MAX_TRACE_TOKENS}]")
    return int(v)


def _workload(path: Path, arrivals: list[float], inputs: list[int], outputs: list[int], fmt: str):
    from runtime_policy.workloads import Workload

    keep = [i for i, o in enumerate(outputs) if o > 0]
    if not keep:
        raise SpecError(f"{path}: no request with generated tokens")
    a = np.asarray([arrivals[i] for i in keep])
    a = a - a.min()
    order = np.argsort(a, kind="stable")
    inp = np.asarray([inputs[i] for i in keep], dtype=np.int64)
    out = np.asarray([outputs[i] for i in keep], dtype=np.int64)
    return Workload(path.name, a[order], inp[order], out[order],
                    {"path": str(path), "format": fmt, "left_out_no_output": len(outputs) - len(keep)})


def csv_rows(path, what: str = "workload file"):
    """(line number, row) of a CSV trace, read as they are asked for (planner.inputs.text_lines): a
    caller that stops at -n requests reads no further. A row the csv module can't read is one
    SpecError line naming its line."""
    reader = csv.reader(text_lines(path, what, TRACE_MAX_BYTES))
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise SpecError(f"{path}: unreadable CSV at line {reader.line_num}: {exc}") from None
        yield reader.line_num, row


def three_column_rows(rows, path):
    """(line number, row) of a trace CSV's data rows, from csv_rows after its header: blank rows
    skipped, any other row of more or fewer than 3 columns one SpecError line."""
    for line, row in rows:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != 3:
            raise SpecError(f"{path}: line {line}: expected 3 columns, got {len(row)}")
        yield line, row


def from_azure_csv(path: str | Path, rows=None, limit: int | None = None):
    """The Azure trace; `rows`: csv_rows already past nothing (its header is read here); `limit`: stop
    after that many requests with generated tokens (the first ones in the file)."""
    p = Path(path)
    rows = iter(rows if rows is not None else csv_rows(p))
    header = next(rows, (1, []))[1]
    if [c.strip() for c in header] != AZURE_HEADER:
        raise SpecError(f"{path}: line 1 must be the header {','.join(AZURE_HEADER)}")
    arr, inp, out = [], [], []
    kept = 0
    for line, row in three_column_rows(rows, path):
        arr.append(_seconds(row[0], path, line))
        inp.append(_tokens(row[1], "ContextTokens", path, line, allow_zero=False))
        out.append(_tokens(row[2], "GeneratedTokens", path, line, allow_zero=True))
        kept += out[-1] > 0
        if limit is not None and kept >= limit:
            break
    if not arr:
        raise SpecError(f"{path}: no requests")
    return _workload(p, arr, inp, out, "azure_llm_inference")


def from_mooncake_jsonl(path: str | Path, limit: int | None = None):
    p = Path(path)
    arr, inp, out = [], [], []
    kept = 0
    for line, raw in enumerate(text_lines(p, "workload file", TRACE_MAX_BYTES), start=1):
        if not raw.strip():
            continue
        try:
            d = json_value(raw)
        except SpecError as exc:
            raise SpecError(f"{path}: line {line}: {exc}") from None
        if not isinstance(d, dict):
            raise SpecError(f"{path}: line {line}: expected an object with {', '.join(MOONCAKE_FIELDS)}")
        missing = [k for k in MOONCAKE_FIELDS if k not in d]
        if missing:
            raise SpecError(f"{path}: line {line}: missing {', '.join(missing)} (a Mooncake trace line has "
                            f"{', '.join(MOONCAKE_FIELDS)})")
        ts = d["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts) or ts < 0:
            raise SpecError(f"{path}: line {line}: timestamp={shown(ts)} must be milliseconds ≥ 0")
        arr.append(float(ts) / 1e3)
        inp.append(_tokens(d["input_length"], "input_length", path, line, allow_zero=False))
        out.append(_tokens(d["output_length"], "output_length", path, line, allow_zero=True))
        kept += out[-1] > 0
        if limit is not None and kept >= limit:
            break
    if not arr:
        raise SpecError(f"{path}: no requests")
    return _workload(p, arr, inp, out, "mooncake")


def _bench_object(path: Path, text: str) -> dict | None:
    """The first result object of a vLLM JSON or SGLang JSONL file that lists its requests (None:
    no object does). Read as the engines mean it (planner.inputs.benchmark_json_value: SGLang's
    default rate is written Infinity); a line that is no JSON is one SpecError naming it."""
    if path.suffix.lower() == ".json":
        try:
            objs = [benchmark_json_value(text)]
        except SpecError as exc:
            raise SpecError(f"{path}: {exc}") from None
    else:
        objs = []
        for line, raw in enumerate(text.splitlines(), start=1):
            if raw.strip():
                try:
                    objs.append(benchmark_json_value(raw))
                except SpecError as exc:
                    raise SpecError(f"{path}: line {line}: {exc}") from None
    for d in objs:
        if isinstance(d, dict) and "input_lens" in d and "output_lens" in d:
            return d
    return None


def is_bench_result(path: str | Path) -> bool:
    """Whether the file is a benchmark result (its first non-blank line is read, not the file)."""
    p = Path(path)
    first = next((ln for ln in text_lines(p, "workload file", TRACE_MAX_BYTES) if ln.strip()), "")
    return p.suffix.lower() == ".json" or '"input_lens"' in first or ('"completed"' in first and '"backend"' in first)


def from_bench_result(path: str | Path, seed: int = 0):
    p = Path(path)
    text = read_text_file(p, "workload file", TRACE_MAX_BYTES)
    d = _bench_object(p, text)
    if d is None:
        raise SpecError(f"{path}: no per-request lengths (vllm bench serve --save-result writes input_lens and "
                        "output_lens; SGLang bench_serving needs --output-details)")
    inl, outl = d["input_lens"], d["output_lens"]
    if not isinstance(inl, list) or not isinstance(outl, list) or len(inl) != len(outl) or not inl:
        raise SpecError(f"{path}: input_lens and output_lens must be lists of the same, non-zero length")
    inp = [_tokens(x, "input_lens[]", path, i + 1, allow_zero=False) for i, x in enumerate(inl)]
    out = [_tokens(x, "output_lens[]", path, i + 1, allow_zero=True) for i, x in enumerate(outl)]
    rate = d.get("request_rate", "inf")  # Infinity (SGLang) and "inf" (vLLM): every request at t = 0
    try:
        rate = float(rate)
    except (TypeError, ValueError):
        raise SpecError(f"{path}: request_rate={shown(rate)} is not a number or inf") from None
    if math.isinf(rate) and rate > 0:
        arr = [0.0] * len(inp)
    elif math.isfinite(rate) and rate > 0:
        arr = list(np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, len(inp))))
    else:
        raise SpecError(f"{path}: request_rate={shown(rate)} must be positive or inf")
    w = _workload(p, arr, inp, out, f"{d.get('backend') or 'bench'}_bench_result")
    return type(w)(w.name, w.arrival_s, w.input_tokens, w.output_tokens,
                   {**w.params, "request_rate_per_s": None if math.isinf(rate) else rate,
                    "max_concurrency_not_replayed": d.get("max_concurrency")})
