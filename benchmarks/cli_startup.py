"""Wall time of one CLI call, start to exit, as a user's shell sees it (issue 32: one call under 200 ms).

Each command runs `--repeat` times as a fresh subprocess (`python -c "from cli.main import main; main()"`
from the checkout's root, what the `floorfirst` console script runs), after one warm-up call that
compiles the checkout's .pyc files; the medians, minima and maxima of the wall time and of the call's
CPU time (user + sys, less disturbed by other jobs sharing the cores) go to `<out>/cli_startup.json`.
With `--base ROOT` (another checkout of the project, e.g. `git archive main | tar -x -C /tmp/base`)
the same commands run from both roots, alternating call by call, so both see the same load; the
document then holds both and the ratio of the medians (this checkout / base).

    python benchmarks/cli_startup.py [--out DIR] [--repeat 15] [--base /tmp/base]

Also `--importtime`: one `python -X importtime` run of each command per root, with the import
time of each top-level package (self time, summed) in the document, to say what the start-up is
made of.

Prints one JSON document as its last line. Does not: time inside a command (floorfirst --verbose
logs that), or check outputs (tests/cli/test_startup.py's byte-identity check does).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS: dict[str, list[str]] = {
    "floor --json": ["floor", "--json"],
    "floor": ["floor"],
    "compare": ["compare"],
    "capacity --json": ["capacity", "--json"],
    "--version": ["--version"],
}
# --check-outputs: every one of these prints the same bytes (stdout, stderr) and exit code from both roots
CHECKED: list[list[str]] = [
    [], ["--help"], ["--version"], ["floor", "--help"], ["floor"], ["floor", "--json"], ["-q", "floor", "--json"],
    ["floor", "--attn", "dop", "--moe", "ep", "--batch", "64", "--context", "32k"],
    ["compare"], ["compare", "--json"], ["compare", "--all-layouts", "--batch", "64", "--context", "32k"],
    ["compare", "--batch", "64", "--context", "32k", "--engine-args",
     "vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 8 --enable-expert-parallel"],
    ["capacity"], ["capacity", "--json"], ["capacity", "--context", "4k*60,64k*4"],
    ["models"], ["models", "--json"], ["hardware", "--json"],
    ["explain-launch", "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 "
     "--enable-dp-attention", "--json"],
    ["triage", "--attn", "dp", "--batch", "32", "--context", "8k", "--measured-ms", "30"],
    ["triage", "--attn", "dp", "--batch", "32", "--context", "8k", "--measured-ms", "30", "--json"],
    ["walls", "--context", "32k", "--json"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "50", "--json"],
    ["floor", "--attn", "nope"], ["floor", "--json", "--gpus", "0"], ["floor", "--hardware", "nope.yaml", "--json"],
    ["no-such-command"], ["floor", "--no-such-option"],
    # option values typer converts itself and those cli/fast_coercion.py converts (each kind, and refused ones)
    ["floor", "--batch", "abc", "--json"], ["floor", "--batch", "064", "--json"], ["floor", "--batch", " 64"],
    ["floor", "--batch", "1.0"], ["floor", "--batch", "-3", "--json"], ["floor", "--gpus", "99999999999999999999"],
    ["floor", "--attn", "DP", "--json"], ["floor", "--attn", "dp", "--moe", "EP"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "5e1", "--json"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "50.", "--json"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "fast", "--json"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "nan", "--json"],
    ["disagg", "--gpus", "24", "--input", "2k", "--output", "1k", "--tpot-ms", "-0.5"],
    # the documents typed since (follow, serve, disagg: issue 32 item 2), as JSON and as tables
    ["disagg", "--gpus", "16", "--input", "4k", "--tpot-ms", "1", "--json"], ["disagg", "--gpus", "16", "--input", "4k"],
    ["disagg", "--model", "llama-3.1-70b", "--gpus", "8", "--input", "8k", "--engine", "vllm", "--sweep-input", "2k,16k",
     "--json"],
    ["serve", "--executor", "sim", "--requests", "12", "--json"], ["serve", "--executor", "sim", "--requests", "12"],
    ["follow", "--engine-args", "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8",
     "--once", "tests/fixtures/fpm/dsv32_tp8_h200.jsonl", "--refit-every", "64", "--window", "128", "--no-tables"],
]
# --floor: what every planning call imports before any floorfirst code runs, timed the same way (from the
# checkout's root): the interpreter alone, numpy as main loaded it (OpenBLAS's default threads) and as the
# CLI loads it now (one thread: cli/main.py), typer, and pydantic with one deferred model (the planner's specs
# are defer_build pydantic models; typer builds no TypeAdapter since cli/fast_coercion.py converts the options)
_ONE_BLAS_THREAD = "import os; os.environ['OPENBLAS_NUM_THREADS'] = '1'; "
_ONE_MODEL = ("import pydantic; type('M', (pydantic.BaseModel,), {'__annotations__': {'x': int}, "
              "'model_config': {'defer_build': True}})")  # as the planner's spec models: no schema built at import
FLOOR_SNIPPETS = {
    "python -c pass": "pass",
    "import numpy": "import numpy",
    "import numpy, one BLAS thread": _ONE_BLAS_THREAD + "import numpy",
    "import typer": "import typer",
    "import pydantic + one model": _ONE_MODEL,
    "import numpy (one BLAS thread), typer, pydantic + one model": _ONE_BLAS_THREAD + "import numpy, typer; " + _ONE_MODEL,
}
LAUNCH = "import sys; sys.argv[0] = 'floorfirst'; from cli.main import main; main()"


CACHES: dict[Path, str] = {}  # checkout root → its own spec cache folder (main() fills it)


def _call(root: Path, argv: list[str], importtime: bool = False, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    cmd = [sys.executable] + (["-X", "importtime"] if importtime else []) + ["-c", LAUNCH, *argv]
    # NOTE: .pyc files written and read, as an installed package has them: with PYTHONDONTWRITEBYTECODE
    # set (some shells and CI images do) every call compiled each edited module from source.
    # NOTE: each checkout its own spec cache (planner.spec_cache): an entry is keyed by the planner's
    # files, and two checkouts sharing one folder drop each other's entries, so every call of an
    # alternating A/B ran the cold path (YAML parsed, specs validated) that a user's second call skips
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"COLUMNS": "100"}
    if root in CACHES:
        env["FLOORFIRST_CACHE_DIR"] = CACHES[root]
    t0 = time.perf_counter()
    run = subprocess.run(cmd, cwd=root, capture_output=True, text=True, env=env, timeout=300)
    wall = time.perf_counter() - t0
    _CPU.append(_children_cpu_s())
    if check and run.returncode != 0:
        raise SystemExit(f"{root}: floorfirst {' '.join(argv)} exited {run.returncode}: {run.stderr[-500:]}")
    return wall, run


def _snippet(root: Path, code: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], cwd=root, env=env, check=True, capture_output=True, timeout=300)
    wall = time.perf_counter() - t0
    _CPU.append(_children_cpu_s())
    return wall


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


_CPU: list[float] = [0.0]  # reaped children's CPU seconds after each call: a call's CPU time is the step


def _import_ms_by_package(stderr: str) -> dict[str, float]:
    """Self import time (ms) summed per top-level package of one `-X importtime` run."""
    by = Counter()
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        parts = line[len("import time:"):].split("|")
        self_us, name = int(parts[0]), parts[2].strip()
        top = name.split(".")[0]
        by[top if not top.startswith("_") else "(private stdlib modules)"] += self_us
    return {k: round(v / 1000, 2) for k, v in by.most_common()}


def check_outputs(roots: dict[str, Path]) -> list[dict]:
    """Each CHECKED command line once from every root: [{argv, same, rc}], `same` when stdout, stderr
    and the exit code match byte for byte."""
    rows = []
    for argv in CHECKED:
        runs = [_call(root, argv, check=False)[1] for root in roots.values()]
        same = all((r.stdout, r.stderr, r.returncode) == (runs[0].stdout, runs[0].stderr, runs[0].returncode) for r in runs)
        rows.append({"argv": argv, "same": same, "rc": runs[0].returncode, "stdout_bytes": len(runs[0].stdout.encode())})
        if not same:
            print(f"DIFFERS: floorfirst {' '.join(argv)}", file=sys.stderr)
    return rows


def _stats(xs: list[float]) -> dict[str, float]:
    return {"median_ms": round(1000 * statistics.median(xs), 1), "min_ms": round(1000 * min(xs), 1),
            "max_ms": round(1000 * max(xs), 1), "n": len(xs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for cli_startup.json (default: a new temporary folder)")
    ap.add_argument("--repeat", type=int, default=15, help="calls of each command per root")
    ap.add_argument("--base", default=None, help="another checkout to run side by side (A/B), alternating")
    ap.add_argument("--importtime", action="store_true", help="also one -X importtime run per command and root")
    ap.add_argument("--check-outputs", action="store_true",
                    help="with --base: run each of CHECKED once from both roots and compare their outputs byte for byte")
    ap.add_argument("--floor", action="store_true", help="also time FLOOR_SNIPPETS (the imports no call can skip)")
    ap.add_argument("--commands", default=None, help="comma-separated subset of: " + ", ".join(COMMANDS))
    ap.add_argument("--shared-cache", action="store_true",
                    help="both checkouts use the user's one spec cache folder (they then drop each other's entries: "
                         "every call runs cold); default: one folder per checkout under --out")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="cli_startup_"))
    out.mkdir(parents=True, exist_ok=True)
    roots = {"this": ROOT}
    if args.base:
        roots["base"] = Path(args.base).resolve()
    if not args.shared_cache:
        CACHES.update({root: str(out / f"spec_cache_{r}") for r, root in roots.items()})
    if args.check_outputs:
        if "base" not in roots:
            raise SystemExit("--check-outputs needs --base")
        rows = check_outputs(roots)
        doc = {"benchmark": "cli_startup.check_outputs", "roots": {r: str(p) for r, p in roots.items()},
               "commands": len(rows), "identical": sum(r["same"] for r in rows), "rows": rows}
        (out / "cli_outputs.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(json.dumps(doc))
        return
    names = list(COMMANDS) if not args.commands else [c.strip() for c in args.commands.split(",")]
    walls: dict[str, dict[str, list[float]]] = {r: {c: [] for c in names} for r in roots}
    cpus: dict[str, dict[str, list[float]]] = {r: {c: [] for c in names} for r in roots}
    for c in names:  # warm-up: .pyc files, the page cache, any cache a command keeps
        for r, root in roots.items():
            _call(root, COMMANDS[c])
    for _ in range(args.repeat):
        for c in names:
            for r, root in roots.items():
                walls[r][c].append(_call(root, COMMANDS[c])[0])
                cpus[r][c].append(_CPU[-1] - _CPU[-2])
    doc: dict = {
        "benchmark": "cli_startup", "repeat": args.repeat,
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "load_average_at_end": list(os.getloadavg()),
        "roots": {r: str(p) for r, p in roots.items()}, "spec_cache": "shared" if args.shared_cache else "one per checkout",
        "commands": {c: {r: _stats(walls[r][c]) for r in roots} for c in names},
        "cpu_user_plus_sys": {c: {r: _stats(cpus[r][c]) for r in roots} for c in names},
    }
    if "base" in roots:
        for c in names:
            doc["commands"][c]["ratio_this_over_base"] = round(
                statistics.median(walls["this"][c]) / statistics.median(walls["base"][c]), 3)
            doc["cpu_user_plus_sys"][c]["ratio_this_over_base"] = round(
                statistics.median(cpus["this"][c]) / statistics.median(cpus["base"][c]), 3)
    if args.floor:
        fw: dict[str, list[float]] = {k: [] for k in FLOOR_SNIPPETS}
        fc: dict[str, list[float]] = {k: [] for k in FLOOR_SNIPPETS}
        for _ in range(args.repeat):
            for k, code in FLOOR_SNIPPETS.items():
                fw[k].append(_snippet(ROOT, code))
                fc[k].append(_CPU[-1] - _CPU[-2])
        doc["floor"] = {k: {"wall": _stats(fw[k]), "cpu_user_plus_sys": _stats(fc[k])} for k in FLOOR_SNIPPETS}
    if args.importtime:
        doc["import_ms_by_package"] = {c: {r: _import_ms_by_package(_call(root, COMMANDS[c], importtime=True)[1].stderr)
                                           for r, root in roots.items()} for c in names}
    (out / "cli_startup.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'cli_startup.json'}", file=sys.stderr)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
