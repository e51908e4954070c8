"""Read measured operating points from files into a `Profile` (calibration.schema).

Formats, picked by extension and content:
- CSV with a header, in the step or serving schema (one row per line);
- JSONL, one object per line: schema rows (the executor benchmark and calibration/step_probe.py
  write these), or SGLang `bench_serving` result lines (one summary per line);
- JSON: a `vllm bench serve --save-result` document, a list of schema rows, or {"rows": [...]}.

Serving summaries (vLLM, SGLang) carry `completed, total_input_tokens, total_output_tokens,
max_concurrency, median_tpot_ms|mean_tpot_ms, mean_ttft_ms`; isl and osl are the per-request means.
They name no deployment in floorfirst's terms, so `defaults` (the CLI's `--set key=value`) or
`--metadata key=value` pairs saved in the result supply model, hardware, gpus, attn and moe (and
spec_tokens, accept_len, chunk_tokens where they apply); the engine is the result's `backend`
when it is one of sglang, vllm, trtllm.

Bad rows become `RowIssue`s with their line number; nothing is dropped silently. Metadata
columns outside the schema are ignored and named once in the notes. A file is read once, through
planner.inputs (regular files only, PROFILE_MAX_BYTES, UTF-8 with or without a BOM, bounded JSON
nesting, finite numbers); its sha256 is of the bytes read.
"""

from __future__ import annotations

import csv
import hashlib
import io
from pathlib import Path

from calibration.schema import LoadedRow, Profile, RowIssue, parse_row
from calibration.serving import ENGINES
from planner.errors import SpecError
from planner.inputs import PROFILE_MAX_BYTES, benchmark_json_value, decode_text, json_value, read_bytes_file

SERVING_SUMMARY_KEYS = ("completed", "total_input_tokens", "total_output_tokens")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_serving_summary(d: dict) -> bool:
    return all(k in d for k in SERVING_SUMMARY_KEYS) and ("mean_tpot_ms" in d or "median_tpot_ms" in d)


def serving_summary_to_raw(d: dict) -> dict:
    """A vLLM/SGLang serving summary → a serving-schema dict (deployment fields passed through)."""
    done = d.get("completed") or 0
    if not done:
        raise ValueError("serving result has completed=0 requests")
    raw = {k: d[k] for k in ("model", "hardware", "gpus", "attn", "moe", "replicas", "nodes", "weight_dtype", "kv_dtype",
                             "attention_kernel", "engine", "chunk_tokens", "spec_tokens", "accept_len")
           if d.get(k) is not None}
    if "model" not in raw and d.get("model_id"):
        # NOTE: a Hugging Face repo id (vLLM's model_id) names its built-in card where there is one,
        # the longest match ('deepseek-ai/DeepSeek-V3.2' is deepseek-v3.2, never deepseek-v3)
        from planner.launch import builtin_card

        raw["model"] = builtin_card(str(d["model_id"])) or d["model_id"]
    if "engine" not in raw and d.get("backend") in ENGINES:  # both benchmark tools record the backend they drove
        raw["engine"] = d["backend"]
    raw["isl"] = d["total_input_tokens"] / done
    raw["osl"] = d["total_output_tokens"] / done
    conc = d.get("max_concurrency") or d.get("concurrency")
    if conc is None:
        raise ValueError("serving result has no max_concurrency (run the benchmark with --max-concurrency)")
    raw["concurrency"] = conc
    raw["tpot_ms"] = d.get("median_tpot_ms") or d.get("mean_tpot_ms")
    if d.get("mean_ttft_ms"):
        raw["ttft_ms"] = d["mean_ttft_ms"]
    return raw


class _Collector:
    def __init__(self, path: Path, kind: str, defaults: dict | None, sha256: str):
        self.path, self.kind, self.defaults, self.sha256 = path, kind, defaults or {}, sha256
        self.profile = Profile()
        self.ignored: set[str] = set()

    def add(self, raw, line: int) -> None:
        src = str(self.path)
        if not isinstance(raw, dict):
            self.profile.issues.append(RowIssue(src, line, f"expected an object, got {type(raw).__name__}"))
            return
        if is_serving_summary(raw):
            try:
                raw = serving_summary_to_raw(raw)
            except (ValueError, TypeError) as exc:
                self.profile.issues.append(RowIssue(src, line, str(exc)))
                return
        row, issue, ignored = parse_row(raw, src, line, self.defaults)
        self.ignored |= ignored
        if issue and issue.message.startswith("missing fields"):
            missing = issue.message.removeprefix("missing fields").strip().split(", ")
            issue = RowIssue(issue.source, issue.line, f"{issue.message} (the file doesn't say: give them with "
                             + " ".join(f"--set {m}=…" for m in missing) + ")")
        if issue:
            self.profile.issues.append(issue)
        else:
            self.profile.rows.append(row)

    def done(self) -> Profile:
        p = self.profile
        if self.ignored:
            p.notes.append(f"{self.path}: ignored columns outside the schema: {', '.join(sorted(self.ignored))}")
        p.sources.append(dict(path=str(self.path), sha256=self.sha256, kind=self.kind, rows=len(p.rows),
                              rows_rejected=len(p.issues)))
        return p


def _load_csv(path: Path, text: str, defaults, sha: str) -> Profile:
    c = _Collector(path, "profile_csv", defaults, sha)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if not reader.fieldnames:
            raise SpecError(f"{path}: empty CSV (no header)")
        for raw in reader:
            if not any((v or "").strip() for v in raw.values() if isinstance(v, str)):
                continue  # a blank line is not a row
            c.add(raw, reader.line_num)
    except csv.Error as exc:
        raise SpecError(f"{path}: unreadable CSV at line {reader.line_num}: {exc}") from None
    return c.done()


def _value(text: str) -> object:
    """A JSON row: an engine's serving summary read as the engine means it (SGLang writes its default
    request rate as Infinity, a statistic of no samples as NaN: planner.inputs.benchmark_json_value);
    any other row with NaN or Infinity is refused as before (SpecError naming where)."""
    raw = json_value(text, finite=False)
    if isinstance(raw, dict) and is_serving_summary(raw):
        return benchmark_json_value(text)
    if "NaN" in text or "Infinity" in text:
        return json_value(text)  # NOTE: parsed again only to refuse a non-finite value, saying where it is
    return raw


def _load_jsonl(path: Path, text: str, defaults, sha: str) -> Profile:
    c = _Collector(path, "profile_jsonl", defaults, sha)
    for i, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            raw = _value(line)
        except SpecError as exc:
            c.profile.issues.append(RowIssue(str(path), i, str(exc)))
            continue
        if is_serving_summary(raw) if isinstance(raw, dict) else False:
            c.kind = "sglang"
        c.add(raw, i)
    return c.done()


def _load_json(path: Path, text: str, defaults, sha: str) -> Profile:
    try:
        doc = _value(text)
    except SpecError as exc:
        raise SpecError(f"profile file {path}: {exc}") from None
    if isinstance(doc, dict) and "traceEvents" in doc:
        raise SpecError(f"{path}: a profiler trace is not a step profile; use calibration.trace.trace_breakdown")
    if isinstance(doc, dict) and doc.get("kind") == "floorfirst.microbench":
        raise SpecError(f"{path}: a microbench result is not a step profile; pass it with --microbench")
    if isinstance(doc, dict) and is_serving_summary(doc):
        c = _Collector(path, "vllm", defaults, sha)
        c.add(doc, 1)
        return c.done()
    rows = doc.get("rows") if isinstance(doc, dict) else doc
    if not isinstance(rows, list):
        raise SpecError(f"{path}: expected a vLLM result, a list of rows or {{\"rows\": [...]}}")
    c = _Collector(path, "profile_json", defaults, sha)
    for i, raw in enumerate(rows, start=1):  # NOTE: 'line' is the row's index in the list here
        c.add(raw, i)
    return c.done()


_FORMATS = {".csv": _load_csv, ".jsonl": _load_jsonl, ".ndjson": _load_jsonl, ".json": _load_json}


def load_profile(path, defaults: dict | None = None) -> Profile:
    """One file → Profile. Unreadable files raise SpecError; bad rows become issues."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in _FORMATS:
        raise SpecError(f"{path}: unknown profile format '{suffix}' (use .csv, .jsonl or .json)")
    data = read_bytes_file(p, "profile file", PROFILE_MAX_BYTES)
    return _FORMATS[suffix](p, decode_text(data, "profile file", p), defaults, hashlib.sha256(data).hexdigest())


def load_profiles(paths, defaults: dict | None = None) -> Profile:
    out = Profile()
    for path in paths:
        out.extend(load_profile(path, defaults))
    return out


def parse_defaults(pairs) -> dict:
    """CLI `--set key=value` pairs → a defaults dict."""
    out = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise SpecError(f"--set {pair!r}: expected key=value")
        k, v = pair.split("=", 1)
        out[k.strip()] = v.strip()
    return out


__all__ = ["LoadedRow", "Profile", "RowIssue", "load_profile", "load_profiles", "parse_defaults", "serving_summary_to_raw"]
