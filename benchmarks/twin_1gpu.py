"""The twin, measured on one GPU: the same workloads on the torch executor and in the simulator.

    python3 benchmarks/twin_1gpu.py --out DIR            # on a GPU: rows, fit, executor runs, twin
    python benchmarks/twin_1gpu.py --from DIR --out DIR2  # CPU: fit and twin again from DIR's files

On the GPU (one process, DeepSeek-V3.2 MLA dimensions, 4 layers, bf16, TP at T = 1, FlashInfer's
decode where it runs, decode graphs captured at start-up for SGLang's batch buckets):
1. step rows for the calibration (`engine_rows`): decode steps over batch x context (batches on
   and between buckets, so padding is in them), prefill-only steps (one prompt's chunk, and a chunk
   packing four prompts) and mixed steps (decodes + a chunk), each the median of CUDA-event-timed
   repetitions -> step_profile_twin.csv (the calibration's step-row format);
2. the executor calibration refit on those rows (calibration.fit, as `floorfirst calibrate`) ->
   executor-calibration-twin.json, with its 5-fold cross-validated error;
3. each workload served by the torch executor (`serve.serve_rank`: real chunked prefill in mixed
   steps, graphs replayed by bucket, CUDA-event step times) with every step logged;
4. the same workloads in the simulator (runtime_policy.loop.serve with executor.sim on tables
   compiled with that calibration, the executor's capacity and the same loop configuration);
5. throughput, TTFT, TPOT and TTLT percentiles side by side, and the twin's error on each.
Workloads: `shrinking` (48 requests at t = 0, the issue's), `chat` at 4 requests/s (64 requests),
and a rollout shape (64 prompts at t = 0: 56 short answers and a tail of 8 long ones, 4K-8K).
Everything is written to --out (default a fresh temporary folder); one JSON document is printed last.
`--smoke` runs the whole pipeline on the CPU with tiny dimensions and cut workloads (a check of the
script, not a measurement).
Does not: run switches (T = 1: every layout is one placement, so the policy is fixed TP), or size
anything beyond one GPU.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

LAYERS = 4
KV_PAGES = 8192
MAX_BATCH = 128
CHUNK = 2048
MODEL_CONFIG = "benchmarks/results/executor_gpu/executor-stack-config.json"
WORKLOADS = ("shrinking", "chat", "rollout")
CHAT_RATE_PER_S = 4.0
TARGET = 0.10  # the twin's throughput and TTFT/TPOT p50 within 10 % of the executor's
SMOKE = {"requests": 8, "max_output": 48}
REPS = 8  # repetitions of each chunk-step row (its median is the row)  # --smoke: workloads cut to this (CPU, tiny dimensions)


def stack_dims(smoke: bool):
    from executor.torch_executor import deepseek_v32, tiny_dims

    return tiny_dims(num_heads=8, num_layers=2, page_size=64) if smoke else deepseek_v32(LAYERS)


def stack_config(dims, path: str) -> str:
    """The config.json of the stack `dims` describes (serve.stack_deployment's model), for the rows."""
    from executor.torch_executor.serve import stack_hf_config

    json.dump(stack_hf_config(dims), open(path, "w"), indent=1)
    return path


# ---------------------------------------------------------------- workloads
def workload(name: str, seed: int = 0, smoke: bool = False):
    """(arrival_s, input_tokens, output_tokens, description) of one of WORKLOADS (--smoke: cut)."""
    arr, inp, out, text = _workload(name, seed)
    if smoke:
        n = SMOKE["requests"]
        return arr[:n], np.minimum(inp[:n], 200), np.minimum(out[:n], SMOKE["max_output"]), text + " (smoke cut)"
    return arr, inp, out, text


def _workload(name: str, seed: int):
    from runtime_policy.workloads import make_workload

    if name == "shrinking":
        w = make_workload("shrinking", 48, seed)
        return w.arrival_s, w.input_tokens, w.output_tokens, "shrinking: 48 requests at t = 0 (the issue's run)"
    if name == "chat":
        w = make_workload("chat", 64, seed, CHAT_RATE_PER_S)
        return w.arrival_s, w.input_tokens, w.output_tokens, f"chat: 64 requests at {CHAT_RATE_PER_S} requests/s"
    rng = np.random.default_rng(seed)
    n, n_long = 64, 8
    inp = np.clip(np.rint(np.exp(rng.normal(np.log(512), 0.5, n))), 16, 4096).astype(np.int64)
    out = np.clip(np.rint(np.exp(rng.normal(np.log(256), 0.6, n))), 8, 2048).astype(np.int64)
    out[n - n_long:] = rng.integers(4096, 8193, n_long)
    return (np.zeros(n), inp, out,
            "rollout: 64 prompts at t = 0 (median 512), 56 answers of median 256, a tail of 8 of 4K-8K")


def loop_config():
    from runtime_policy.serving_types import LoopConfig

    # NOTE: the torch executor decodes every request it holds each step, so its loop composes mixed
    # steps (runtime_policy/loop.py: an executor without `separate_prefill`); the twin's simulator
    # could sit decoders out for SGLang's separate prefill steps, so both are told the executor's mode
    return LoopConfig(max_batch=MAX_BATCH, prefill_chunk_tokens=CHUNK, prefill_mode="mixed")


def hardware_name(device_name: str) -> str:
    return "h100" if "H100" in device_name else "h200"


# ---------------------------------------------------------------- GPU: step rows
def _chained(r, fns: list) -> list[float]:
    """Milliseconds of each call of `fns`, run back to back with CUDA events between them and one
    wait at the end, as the executor times a run of steps while serving (the host runs ahead of the
    device, so a step's host work hides behind the step before it); CPU: the host clock."""
    import torch

    if not r.g.is_cuda:
        ms = []
        for fn in fns:
            t = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t) * 1e3)
        return ms
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(len(fns) + 1)]
    evs[0].record()
    for i, fn in enumerate(fns):
        fn()
        evs[i + 1].record()
    evs[-1].synchronize()
    return [evs[i].elapsed_time(evs[i + 1]) for i in range(len(fns))]


def _timed(r, fn, reps: int) -> list[float]:
    return _chained(r, [fn] * reps)


def engine_rows(g, out_dir: str, smoke: bool = False) -> dict:
    """Decode, prefill-only and mixed step rows on one GPU (module docstring, part 1)."""
    import torch

    from executor.torch_executor import RankRunner

    dims = stack_dims(smoke)
    dtype = torch.float32 if smoke else torch.bfloat16
    r = RankRunner(dims, g, "tp", num_slots=KV_PAGES + MAX_BATCH, dtype=dtype, seed=1, max_batch=MAX_BATCH)
    t0 = time.time()
    captured = r.prepare_buckets(MAX_BATCH, 16384) if g.is_cuda else 0
    capture_s = time.time() - t0
    rows, nxt = [], [10_000]

    def new_id() -> int:
        nxt[0] += 1
        return nxt[0]

    def decode_batch(b: int, ctx: int) -> list[int]:
        ids = [new_id() for _ in range(b)]
        r.add_requests({q: ctx for q in ids})
        return ids

    def clear():
        for q in list(r.seq_lens):
            r.finish_request(q)

    def prefill_steps(pieces_len: list[int], decode: bool, reps: int, prefix: int = 0) -> list[float]:
        """`reps` chunks of fresh prompts (pieces of `pieces_len` tokens each), alone (prefill-only)
        or beside the decodes (mixed, a decode step between chunks), each timed as a serving run's
        first step (the NOTE below)."""
        ids = [[new_id() for _ in pieces_len] for _ in range(reps)]
        for group in ids:
            for q in group:
                r.begin_prefill(q)
                if prefix:
                    r.step([(q, prefix)], decode=False)  # the cached prefix, by a prefill of its own
        ms = []
        for group in ids:
            if decode:
                _chained(r, [r.step])  # a decode step between chunks, as serving interleaves them
            # NOTE: each chunk step timed as the first step of a serving run: from an idle device, its
            # host work included. The serve loop waits for a run's last event before it schedules
            # the next (serving.py TorchExecutor.run_steps), and an admission starts a new run, so a
            # served prefill or mixed step doesn't hide its host work behind the step before it; a
            # chained row did, and ran 8-14 ms under the served steps (H200, the twin's run.log)
            ms += _chained(r, [lambda group=group: r.step(list(zip(group, pieces_len)), decode=decode)])
        for group in ids:
            for q in group:
                r.finish_request(q)
        return ms

    cap_tokens = KV_PAGES * dims.page_size
    for b in ((1, 3, 8, 13, 20, 32) if smoke else (1, 3, 8, 13, 20, 32, 48, 64, 96, 128)):
        for ctx in ((256, 1024, 2048) if smoke else (256, 1024, 4096, 12288)):
            if b * (ctx + 64) > 0.9 * cap_tokens:
                continue
            decode_batch(b, ctx)
            _timed(r, r.step, 3)
            ms = _timed(r, r.step, 12)
            rows.append({"kind": "decode", "batch": b, "context": ctx + 7, "prefill_tokens": 0, "prefix": 0,
                         "step_ms": statistics.median(ms), "step_ms_min": min(ms), "rows": r.last_exec.inputs.rows,
                         "graph": r.last_exec.graph is not None})
            clear()
    # NOTE: chunk steps are host-bound up to ~1.5K tokens on H100 and device-bound past it
    # (calibration/artifact.py, `host_overlap_alpha`): sizes on both sides of the bend, 8 repetitions
    # each (the host's launch time varies more than the device's)
    for n in ((64, 96, 128, 256) if smoke else (64, 256, 512, 1024, 1536, 2048)):  # one prompt's chunk, prefix 0
        first = prefill_steps([n], False, 1)  # warm-up of this shape (its time: the shape's first call)
        ms = prefill_steps([n], False, REPS)
        rows.append({"kind": "prefill", "batch": 0, "context": 1, "prefill_tokens": n, "prefix": 0,
                     "pieces": 1, "step_ms": statistics.median(ms), "step_ms_min": min(ms), "step_ms_first": first[0]})
    for k, n in (((2, 64),) if smoke else ((4, 512), (8, 256))):  # a chunk packing k prompts (what the loop's chunks of short prompts are)
        first = prefill_steps([n] * k, False, 1)
        ms = prefill_steps([n] * k, False, REPS)
        rows.append({"kind": "prefill", "batch": 0, "context": 1, "prefill_tokens": n * k, "prefix": 0,
                     "pieces": k, "step_ms": statistics.median(ms), "step_ms_min": min(ms),
                     "step_ms_first": first[0]})
    for n, pfx in (((64, 128),) if smoke else ((512, 1536), (2048, 2048))):  # a later chunk of a long prompt (JSON only: no CSV column)
        ms = prefill_steps([n], False, REPS, pfx)
        rows.append({"kind": "prefill_prefix", "batch": 0, "context": 1, "prefill_tokens": n, "prefix": pfx,
                     "pieces": 1, "step_ms": statistics.median(ms), "step_ms_min": min(ms)})
    for b in ((8, 20) if smoke else (8, 32, 64)):
        for n in ((64, 128, 256) if smoke else (256, 1024, 1536, 2048)):
            decode_batch(b, 1024)
            _timed(r, r.step, 2)
            first = prefill_steps([n], True, 1)
            ms = prefill_steps([n], True, REPS)
            rows.append({"kind": "mixed", "batch": b, "context": 1024 + 8, "prefill_tokens": n, "prefix": 0,
                         "pieces": 1, "step_ms": statistics.median(ms), "step_ms_min": min(ms),
                         "step_ms_first": first[0]})
            clear()
    doc = {"rows": rows, "graphs_at_start": captured, "capture_s": capture_s, "buckets": r.buckets,
           "kernel": "flashinfer" if r.last_exec is not None and r.last_exec.inputs.batch.kernel is not None
           else "triton"}
    json.dump(doc, open(os.path.join(out_dir, "engine_rows.json"), "w"), indent=1)
    del r
    gc.collect()
    torch.cuda.empty_cache()
    return doc


def write_profile(path: str, rows: list[dict], hardware: str, model: str = MODEL_CONFIG, layers: int = LAYERS) -> int:
    """Rows in the step-profile CSV `floorfirst calibrate --profile` reads: prefix-0 rows of one prompt
    only (a step row has no column for a chunk's cached prefix, nor for the prompts packed into it: a
    packed chunk's own attention is smaller, admission.py `chunk_plan`; those rows are the held-out
    check `packing_check` prices instead)."""
    n = 0
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["model", "hardware", "gpus", "attn", "moe", "batch", "context", "prefill_tokens", "weight_dtype",
                    "kv_dtype", "step_ms", "num_layers", "workload"])
        for rw in rows:
            if rw["prefix"] or rw.get("pieces", 1) > 1:
                continue
            w.writerow([model, hardware, 1, "tp", "tp", rw["batch"], rw["context"], rw["prefill_tokens"],
                        "bf16", "bf16", f"{rw['step_ms']:.4f}", layers, rw["kind"]])
            n += 1
    return n


def packing_check(rows: list[dict], tables) -> list[dict]:
    """The rows left out of the fit, priced by the fitted tables as the simulator prices them: a chunk
    packed from k prompts (its attention-equivalent prefix, admission.py `chunk_plan`) and a later
    chunk of a long prompt (its cached prefix). Held out: no fitted parameter saw them."""
    from runtime_policy.admission import chunk_plan

    tp = tables.layouts.index("tp")
    out = []
    for rw in rows:
        k = int(rw.get("pieces", 1))
        if not rw["prefix"] and k == 1:
            continue
        n = rw["prefill_tokens"] // k
        pfx = (chunk_plan([float(n * k)], list(range(k)), [n] * k, [float(n)] * k, [0] * k)[0][0] if k > 1
               else float(rw["prefix"]))
        b = int(rw["batch"])
        ctx = float(rw["context"] * b)
        pred = float(tables.step_s(tp, b, np.array([float(rw["prefill_tokens"])]), np.array([ctx]), np.array([ctx]),
                                   prefill_context=np.array([pfx]))[0]) * 1e3
        one = float(tables.step_s(tp, b, np.array([float(rw["prefill_tokens"])]), np.array([ctx]), np.array([ctx]),
                                  prefill_context=np.array([float(rw["prefix"])]))[0]) * 1e3
        out.append({"kind": rw["kind"], "prefill_tokens": rw["prefill_tokens"], "pieces": k, "prefix": rw["prefix"],
                    "equivalent_prefix": pfx, "measured_ms": rw["step_ms"], "predicted_ms": pred,
                    "predicted_as_one_prompt_ms": one, "error": (pred - rw["step_ms"]) / rw["step_ms"]})
    return out


# ---------------------------------------------------------------- GPU: the executor serves
def run_file(name: str, rep: int) -> str:
    """The executor run's file: the first repetition keeps the name earlier runs used."""
    return f"executor_{name}.json" if rep == 0 else f"executor_{name}_r{rep}.json"


def executor_runs(g, specs: dict, out_dir: str, repeat: int = 1) -> dict:
    """Serve each workload on the torch executor (one rank), a fresh runner each; with `repeat` > 1
    the workloads are served in turn that many times (shrinking, chat, rollout, shrinking, ...), so a
    repetition's warm-up or a slow stretch of the host falls on every workload alike."""
    import torch

    from executor.torch_executor.serve import serve_rank

    out = {}
    for k in range(repeat):
        for name, spec in specs.items():
            t0 = time.time()
            res = serve_rank(g, spec)
            res["wall_s"] = time.time() - t0
            out.setdefault(name, []).append(res)
            json.dump(res, open(os.path.join(out_dir, run_file(name, k)), "w"), default=float)
            print(f"executor {name} (run {k + 1}/{repeat}): {res['throughput_tokens_per_s']:.0f} tok/s, "
                  f"TTFT p50 {res['ttft_p50_s']:.3f} s, "
                  f"TPOT p50 {res['tpot_p50_s'] * 1e3:.2f} ms, {res['measured']['graphs_captured_count']} graphs, "
                  f"wall {res['wall_s']:.0f} s", flush=True)
            gc.collect()
            torch.cuda.empty_cache()
    return out


def tables_for(hardware: str, calibration: str | None, smoke: bool = False):
    import planner
    from executor.torch_executor.serve import torch_tables
    from runtime_policy.tables import calibrated_model

    model = calibrated_model(calibration) if calibration else None
    return torch_tables(stack_dims(smoke), planner.load_hardware(hardware), 1, KV_PAGES,
                        "float32" if smoke else "bfloat16", model=model, max_batch=MAX_BATCH, max_prefill_tokens=CHUNK)


def serve_specs(tables, smoke: bool = False) -> dict:
    from executor.torch_executor.serve import TorchServeSpec
    from executor.torch_executor.serving import TorchServeOptions
    from runtime_policy.policy import PolicyKnobs

    loop = loop_config()
    specs = {}
    for name in WORKLOADS:
        arr, inp, out, _ = workload(name, smoke=smoke)
        specs[name] = TorchServeSpec(tables, stack_dims(smoke), arr, inp, out, KV_PAGES, "tp", "fcfs",
                                     PolicyKnobs(max_batch=loop.max_batch), loop, TorchServeOptions(log_steps=True),
                                     "float32" if smoke else "bfloat16", 0, slack_pages=loop.max_batch)
    return specs


# ---------------------------------------------------------------- CPU: fit and twin
def fit(profile: str, out_path: str) -> dict:
    from calibration.artifact import save_calibration
    from calibration.costs import price_profile
    from calibration.fit import fit_calibration
    from calibration.loaders import load_profiles, parse_defaults
    from calibration.validate import validate

    prof = load_profiles([profile], parse_defaults(None))
    costs = price_profile(prof)
    cal = fit_calibration(costs, prof.sources, None, None)
    save_calibration(cal, out_path)
    summary = {"params": cal.params.model_dump(), "in_sample": {"median_abs_pct": cal.fit.median_abs_pct_error,
                                                                 "p90_abs_pct": cal.fit.p90_abs_pct_error},
               "rows": cal.fit.rows}
    try:
        v = validate(cal, costs)
        summary["kfold"] = {k: getattr(v, k) for k in ("median_abs_pct_error", "p90_abs_pct_error") if hasattr(v, k)}
    except Exception as e:  # noqa: BLE001 - the twin does not need it
        summary["kfold_error"] = repr(e)[:200]
    return summary


def simulate(tables, smoke: bool = False) -> dict:
    from executor.sim import SimExecutor
    from runtime_policy.loop import serve
    from runtime_policy.metrics import summarize
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy

    out = {}
    for name in WORKLOADS:
        arr, inp, outp, _ = workload(name, smoke=smoke)
        res = serve(arr, inp, outp, tables, FixedPolicy(tables.layouts.index("tp")), Ordering("fcfs"),
                    SimExecutor(tables), loop_config())
        out[name] = summarize(res)
    return out


METRICS = ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s", "tpot_p90_s",
           "tpot_p99_s", "ttlt_p50_s", "ttlt_p90_s", "ttlt_p99_s", "makespan_s", "steps")
GATED = ("throughput_tokens_per_s", "ttft_p50_s", "tpot_p50_s")


def executor_summaries(exec_dir: str) -> dict[str, list[dict]]:
    """Every executor run in exec_dir, per workload, in repetition order."""
    out = {}
    for n in WORKLOADS:
        k = 0
        while os.path.exists(os.path.join(exec_dir, run_file(n, k))):
            out.setdefault(n, []).append(json.load(open(os.path.join(exec_dir, run_file(n, k)))))
            k += 1
    return out


def side_by_side(ex: dict, sim: dict) -> dict:
    """Twin against executor per metric. `ex[name]` is one run's summary or a list of repetitions:
    then the executor's figure is each metric's median over them, and `executor_runs` / `executor_spread`
    (max - min over the median) say how far the executor moves against itself."""
    out = {}
    for name in WORKLOADS:
        if name not in ex:
            continue
        runs = ex[name] if isinstance(ex[name], list) else [ex[name]]
        rows = {}
        for m in METRICS:
            vals = [r.get(m) for r in runs if r.get(m) is not None]
            a, b = (statistics.median(vals) if vals else None), sim[name].get(m)
            rows[m] = {"executor": a, "twin": b, "twin_error": (b - a) / a if a and b is not None else None}
            if len(runs) > 1:
                rows[m]["executor_runs"] = vals
                rows[m]["executor_spread"] = (max(vals) - min(vals)) / a if a else None
        within = all(rows[m]["twin_error"] is not None and abs(rows[m]["twin_error"]) <= TARGET for m in GATED)
        out[name] = {"metrics": rows, "within_10pct": within, "description": workload(name)[3]}
    return out


def served_rows(exec_dir: str, min_steps: int = 3) -> list[dict]:
    """The executor's logged serving steps as step rows: grouped by decode batch, mean context (to
    256 tokens) and chunk tokens (to 128), each group's median (groups of `min_steps` steps or more;
    chunks with a cached prefix left out: a step row has no column for it)."""
    groups: dict[tuple, list[float]] = {}
    for name in WORKLOADS:
        path = os.path.join(exec_dir, f"executor_{name}.json")
        if not os.path.exists(path):
            continue
        for b, ctx_sum, chunk, pfx, sec in json.load(open(path))["measured"]["step_rows"]["rows"]:
            if pfx > 0 or (b == 0 and chunk == 0):
                continue
            ctx = int(round(ctx_sum / b / 256.0)) * 256 + 128 if b else 1
            key = (int(b), ctx, int(round(chunk / 128.0)) * 128 if chunk else 0)
            groups.setdefault(key, []).append(sec * 1e3)
    return [{"kind": "served", "batch": b, "context": c, "prefill_tokens": n, "prefix": 0,
             "step_ms": statistics.median(v), "steps": len(v)}
            for (b, c, n), v in sorted(groups.items()) if len(v) >= min_steps]


def served_step_check(exec_dir: str, tables) -> dict:
    """The executor's logged serving steps (first run of each workload) priced by the twin's tables, as
    the simulator prices them: per workload and step kind (a chunk step, a decode step; after a chunk
    step or not), the count, the median measured step and host time, and the median relative error.
    It tells a mispriced step from a served step that ran slower than its row (host time)."""
    tp = tables.layouts.index("tp")
    out = {}
    for name in WORKLOADS:
        path = os.path.join(exec_dir, run_file(name, 0))
        if not os.path.exists(path):
            continue
        m = json.load(open(path))["measured"]
        rows, host = m["step_rows"]["rows"], m.get("step_host_s") or []
        groups: dict[str, dict[str, list[float]]] = {}
        prev_chunk = False
        for i, (b, ctx_sum, chunk, pfx, sec) in enumerate(rows):
            pred = float(tables.step_s(tp, int(b), np.array([float(chunk)]), np.array([ctx_sum]), np.array([ctx_sum]),
                                       prefill_context=np.array([float(pfx)]))[0])
            key = f"{'chunk' if chunk > 0 else 'decode'} after {'chunk' if prev_chunk else 'decode'}"
            g = groups.setdefault(key, {"error": [], "measured_ms": [], "host_ms": []})
            g["error"].append((pred - sec) / sec)
            g["measured_ms"].append(sec * 1e3)
            if i < len(host):
                g["host_ms"].append(host[i] * 1e3)
            prev_chunk = chunk > 0
        out[name] = {k: {"steps": len(g["error"]), "median_error": statistics.median(g["error"]),
                         "median_measured_ms": statistics.median(g["measured_ms"]),
                         "median_host_ms": statistics.median(g["host_ms"]) if g["host_ms"] else None}
                     for k, g in groups.items()}
    return out


def print_served_steps(check: dict) -> None:
    print("served steps priced by the twin (first run): steps, median measured / host ms, median error")
    for name, groups in check.items():
        for k, g in groups.items():
            host = f"{g['median_host_ms']:6.2f}" if g["median_host_ms"] is not None else "     -"
            print(f"  {name:10s} {k:20s} {g['steps']:6d} {g['median_measured_ms']:7.2f} / {host} "
                  f"{100 * g['median_error']:+6.1f} %")


def twin(exec_dir: str, out_dir: str, hardware: str, smoke: bool = False, fit_on: str = "rows") -> dict:
    """Fit on exec_dir's step rows (`fit_on="rows"`) or on the executor's own serving steps
    ("served": in-sample to the workloads), simulate, compare with exec_dir's executor runs (CPU)."""
    rows = (json.load(open(os.path.join(exec_dir, "engine_rows.json")))["rows"] if fit_on == "rows"
            else served_rows(exec_dir))
    fitted = fit_rows(rows, out_dir, hardware, smoke)
    cal_path = os.path.join(out_dir, "executor-calibration-twin.json")
    tables = tables_for(hardware, cal_path, smoke)
    sim = simulate(tables, smoke)
    ex = executor_summaries(exec_dir)
    cmp_ = side_by_side(ex, sim)
    held_out = packing_check(json.load(open(os.path.join(exec_dir, "engine_rows.json")))["rows"], tables)
    doc = {"fit_on": fit_on, "calibration": fitted, "twin": cmp_, "held_out_rows": held_out,
           "served_steps": served_step_check(exec_dir, tables), "simulator": sim}
    json.dump(doc, open(os.path.join(out_dir, "twin.json"), "w"), indent=1, default=float)
    return doc


def print_held_out(rows: list[dict]) -> None:
    print("held-out rows (not fitted): measured / predicted ms (as one prompt)")
    for r in rows:
        print(f"  {r['kind']:15s} chunk={r['prefill_tokens']:5d} pieces={r['pieces']} pfx={r['prefix']:5d} "
              f"{r['measured_ms']:7.2f} / {r['predicted_ms']:7.2f} ({r['predicted_as_one_prompt_ms']:7.2f}) "
              f"{100 * r['error']:+.1f} %")


def print_table(cmp_: dict) -> None:
    for name, d in cmp_.items():
        print(f"{name}: {d['description']}  within 10 %: {d['within_10pct']}")
        for m, v in d["metrics"].items():
            a, b, e = v["executor"], v["twin"], v["twin_error"]
            if a is None or b is None:
                continue
            spread = (f"   executor runs {' / '.join(f'{x:.4f}' for x in v['executor_runs'])} "
                      f"(spread {100 * v['executor_spread']:.1f} %)" if v.get("executor_spread") is not None else "")
            print(f"  {m:26s} executor {a:12.4f}  twin {b:12.4f}  {100 * e:+7.1f} %{spread}" if e is not None else "")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None, help="folder for every file (default: a fresh temporary folder)")
    ap.add_argument("--from", dest="src", default=None, help="CPU: a GPU run's folder; fit and twin again")
    ap.add_argument("--hardware", default=None, help="with --from: the GPU spec (default: from the run's conditions)")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--repeat", type=int, default=1,
                    help="serve every workload this many times on the executor, in turn; the twin is compared "
                         "with each metric's median over the runs, and their spread is reported")
    ap.add_argument("--smoke", action="store_true", help="CPU, tiny dimensions, cut workloads: checks the script")
    ap.add_argument("--fit-on", default="rows", choices=("rows", "served"),
                    help="with --from: fit the twin's calibration on the step rows, or on the executor's "
                         "logged serving steps (in-sample to the workloads)")
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error(f"--repeat must be at least 1, got {a.repeat}")
    out_dir = a.out or tempfile.mkdtemp(prefix="twin_1gpu_")
    os.makedirs(out_dir, exist_ok=True)
    if a.src:
        cond = json.load(open(os.path.join(a.src, "conditions.json")))
        doc = twin(a.src, out_dir, a.hardware or cond["hardware"], bool(cond.get("smoke")), a.fit_on)
        print_table(doc["twin"])
        print_held_out(doc["held_out_rows"])
        print_served_steps(doc["served_steps"])
        print(json.dumps({"out": out_dir, "within_10pct": {k: v["within_10pct"] for k, v in doc["twin"].items()}}))
        return
    import torch

    from executor.torch_executor.dist import spawn_ranks

    smoke = a.smoke
    cuda = not smoke
    if cuda:
        from kernel_gpu import conditions
        cond = {**conditions(), "hardware": hardware_name(torch.cuda.get_device_name(0))}
    else:
        cond = {"device": "cpu", "torch": torch.__version__, "hardware": "h200"}
    cond.update({"layers": stack_dims(smoke).num_layers, "kv_pages": KV_PAGES, "max_batch": MAX_BATCH,
                 "prefill_chunk_tokens": CHUNK, "buckets": "sglang", "policy": "tp (fixed; T = 1)",
                 "prefill": "real, mixed steps", "smoke": smoke})
    json.dump(cond, open(os.path.join(out_dir, "conditions.json"), "w"), indent=1)
    t0 = time.time()
    eng = spawn_ranks(engine_rows, 1, out_dir, smoke, use_cuda=cuda)[0]
    print(f"[{time.time() - t0:.0f}s] {len(eng['rows'])} step rows, {eng['graphs_at_start']} graphs captured in "
          f"{eng['capture_s']:.1f} s", flush=True)
    for rw in eng["rows"]:
        print(f"  {rw['kind']:15s} B={rw['batch']:4d} ctx={rw['context']:6d} chunk={rw['prefill_tokens']:5d} "
              f"pfx={rw['prefix']:5d} {rw['step_ms']:8.3f} ms"
              + (f"  (first call at this shape {rw['step_ms_first']:8.3f} ms)" if "step_ms_first" in rw else ""),
              flush=True)
    doc = twin_fit_only(out_dir, cond["hardware"], smoke)
    print(f"[{time.time() - t0:.0f}s] calibration: {json.dumps(doc)}", flush=True)
    tables = tables_for(cond["hardware"], os.path.join(out_dir, "executor-calibration-twin.json"), smoke)
    names = a.workloads.split(",")
    specs = {k: v for k, v in serve_specs(tables, smoke).items() if k in names}
    spawn_ranks(executor_runs, 1, specs, out_dir, a.repeat, use_cuda=cuda)
    print(f"[{time.time() - t0:.0f}s] executor runs done", flush=True)
    doc = twin(out_dir, out_dir, cond["hardware"], smoke)
    print_table(doc["twin"])
    print_held_out(doc["held_out_rows"])
    print_served_steps(doc["served_steps"])
    print(json.dumps({"out": out_dir, "wall_s": time.time() - t0,
                      "within_10pct": {k: v["within_10pct"] for k, v in doc["twin"].items()}}))


def fit_rows(rows: list[dict], out_dir: str, hardware: str, smoke: bool) -> dict:
    """Step rows written as a profile (step_profile_twin.csv) and fitted into
    executor-calibration-twin.json, both in out_dir."""
    prof = os.path.join(out_dir, "step_profile_twin.csv")
    if smoke:
        dims = stack_dims(True)
        write_profile(prof, rows, hardware, stack_config(dims, os.path.join(out_dir, "stack-config.json")),
                      dims.num_layers)
    else:
        write_profile(prof, rows, hardware)
    return fit(prof, os.path.join(out_dir, "executor-calibration-twin.json"))


def twin_fit_only(out_dir: str, hardware: str, smoke: bool) -> dict:
    """The calibration the executor's own tables use while it serves (the same fit `twin` makes)."""
    return fit_rows(json.load(open(os.path.join(out_dir, "engine_rows.json")))["rows"], out_dir, hardware, smoke)


if __name__ == "__main__":
    main()
