"""Every attention layout held fixed on one burst (issue 25): 16 requests arriving together, input
1K, 4K, 16K, 32K and 64K tokens, 1,024 output tokens each, DeepSeek-V3.2 on 8 × H200 and GLM-5 on
8 × B200 (fp8 KV), served by the simulator (runtime_policy.loop with executor.sim) under each
engine's scheduler (planner.engines.scheduling: SGLang's chunk divided over the DP ranks and its
separate prefill batches, vLLM's budget per engine core mixed into the decodes, TRT-LLM's).

What the published fixed-layout runs of the switching system report (shared reference,
published.md, SPLASH 2026, GLM-5.3 on 8 × B200 and DeepSeek-V3.2 on 8 × H200): TP wins at short
inputs, CP with long prompts, DP-attention with many independent requests. Before issue 25 the
loop ran one global chunk on one owner rank while seven waited, so DP-attention came out the
slowest layout at 16K–64K. The record holds, per layout and input, the time spent in steps that
carry prefill and in decode-only steps, the median and last TTFT, the makespan and output tokens/s,
and the busiest owner group's mean chunk per step with one (its scheduler's: SGLang DP8 1,024
tokens a rank, TP and CP one 8,192-token chunk over all ranks). All ranks step together, so the
time in steps carrying a chunk is the busiest rank's prefill time: DP-attention and CP both split a
64K burst's prefill 8 ways (DP: each rank its own two prompts; CP: each rank an eighth of all 16),
so theirs come out close.

Usage: python benchmarks/fixed_layouts.py [--out DIR] [--engine sglang ...] [--plot]
(default: a temporary folder, every registered engine). Writes fixed_layouts.json and
fixed_layouts.txt there (fixed_layouts.png with --plot); prints the text. CPU only, ~1 min.
Step times: the deployment's default step model (compile_tables's default), DSA's top-k indexer
latency left out as the tables leave it out.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import planner  # noqa: E402
from benchmarks.conditions import cpu_name, git_commit  # noqa: E402
from executor.sim import SimExecutor  # noqa: E402
from planner.engines.base import engine_names  # noqa: E402
from runtime_policy.loop import LoopConfig, serve  # noqa: E402
from runtime_policy.ordering import Ordering  # noqa: E402
from runtime_policy.policy import FixedPolicy  # noqa: E402
from runtime_policy.tables import compile_tables, layout_names  # noqa: E402

REQUESTS = 16
INPUTS = [1024, 4096, 16384, 32768, 65536]
OUTPUT = 1024
CASES = [
    # (name, model, hardware, kv dtype)
    ("dsv32_h200", "deepseek-v3.2", "h200", "fp8"),
    ("glm5_b200", "glm-5", "b200", "fp8"),
]


class PhaseTimer(SimExecutor):
    """The simulator, summing its step times by kind: steps that carry a chunk, decode-only steps;
    and the busiest owner group's chunk tokens over the steps with one."""

    def __init__(self, tables):
        super().__init__(tables)
        self.prefill_s = self.decode_s = 0.0
        self.prefill_steps = 0
        self.group_chunk_tokens = 0.0

    def run_steps(self, batch, prefill_tokens, prefill_context_tokens=None, chunk_owner=None):
        times = super().run_steps(batch, prefill_tokens, prefill_context_tokens, chunk_owner)
        groups = self._groups[batch.layout]
        for i, (t, p) in enumerate(zip(times, prefill_tokens)):
            if p > 0:
                self.prefill_s += float(t)
                self.prefill_steps += 1
                # one group's scheduler runs the whole chunk; of G groups, the busiest runs its own
                own = chunk_owner[1][i] if (groups > 1 and chunk_owner is not None) else p
                self.group_chunk_tokens += float(own)
            else:
                self.decode_s += float(t)
        return times


def run_case(model: str, hardware: str, kv: str, engine: str, progress) -> dict:
    m, hw = planner.load_model(model), planner.load_hardware(hardware)
    base = planner.make_deployment(m, hw, attn="tp", gpus=8, kv_dtype=kv, engine=engine)
    layouts, rows = [], []
    for attn in layout_names():
        try:
            dep = planner.make_deployment(m, hw, attn=attn, gpus=8, kv_dtype=kv, engine=engine)
        except planner.SpecError as e:
            layouts.append({"layout": attn, "runs": False, "why": str(e)})
            continue
        layouts.append({"layout": attn, "runs": True, "label": dep.label(),
                        "owner_groups": dep.placement.owner_groups,
                        "chunk_tokens_per_group": dep.engine_model.scheduler(dep).chunk_tokens_per_group,
                        "prefill_mode": dep.engine_model.scheduler(dep).prefill_mode})
        spec = dep.engine_model.scheduler(dep)
        tables = compile_tables(dep, max_batch=64, max_prefill_tokens=spec.engine_chunk_tokens)
        li = tables.layouts.index(attn)
        for isl in INPUTS:
            progress(f"{model} {engine} {attn} {isl}")
            ex = PhaseTimer(tables)
            res = serve(np.zeros(REQUESTS), np.full(REQUESTS, isl), np.full(REQUESTS, OUTPUT), tables,
                        FixedPolicy(li), Ordering("fcfs"), ex, LoopConfig(max_batch=64))
            done = res.status == 4
            if not np.all(done):
                rows.append({"layout": attn, "input_tokens": isl, "served": False,
                             "why": f"{int((~done).sum())} of {REQUESTS} requests did not finish (KV pool)"})
                continue
            makespan = float(res.finish_s.max())
            rows.append({"layout": attn, "input_tokens": isl, "served": True,
                         "prefill_steps_s": ex.prefill_s, "decode_steps_s": ex.decode_s, "makespan_s": makespan,
                         "ttft_median_s": float(np.median(res.first_token_s)), "ttft_last_s": float(res.first_token_s.max()),
                         "output_tokens_per_s": REQUESTS * OUTPUT / makespan, "steps_with_prefill": ex.prefill_steps,
                         "busiest_group_chunk_tokens_per_step": ex.group_chunk_tokens / max(ex.prefill_steps, 1),
                         "preemptions": int(res.preemptions.sum())})
    for isl in INPUTS:
        served = sorted((r for r in rows if r["input_tokens"] == isl and r["served"]), key=lambda r: r["makespan_s"])
        for rank, r in enumerate(served, 1):
            r["rank_by_makespan"] = rank
    return {"model": model, "hardware": hardware, "gpus": 8, "kv_dtype": kv, "engine": engine,
            "weight_dtype": base.weight_dtype, "step_model": tables.model_label,
            "layouts": layouts, "rows": rows}


def text(doc: dict) -> str:
    c = doc["conditions"]
    lines = [f"fixed_layouts: {REQUESTS} requests together, {OUTPUT} output tokens, every layout fixed; simulator "
             f"(commit {c['commit']}, {c['cpu']}); prefill = time in steps carrying a chunk, decode = decode-only steps"]
    for case in doc["cases"]:
        lines.append(f"\n{case['model']} on 8 × {case['hardware'].upper()}, {case['kv_dtype']} KV, {case['engine']}; "
                     f"step model: {case['step_model']}")
        lines.append(f"{'layout':8} {'input':>6} {'prefill s':>10} {'decode s':>9} {'TTFT med s':>10} "
                     f"{'makespan s':>10} {'tok/s':>8} {'rank':>4} {'group chunk':>11}")
        for r in sorted(case["rows"], key=lambda r: (r["input_tokens"], r["layout"])):
            if not r["served"]:
                lines.append(f"{r['layout']:8} {r['input_tokens']:>6} {'—':>10}  {r['why']}")
                continue
            lines.append(f"{r['layout']:8} {r['input_tokens']:>6} {r['prefill_steps_s']:>10.3f} {r['decode_steps_s']:>9.3f} "
                         f"{r['ttft_median_s']:>10.3f} {r['makespan_s']:>10.3f} {r['output_tokens_per_s']:>8.0f} "
                         f"{r['rank_by_makespan']:>4} {r['busiest_group_chunk_tokens_per_step']:>11.0f}")
        for lay in case["layouts"]:
            if not lay["runs"]:
                lines.append(f"  {lay['layout']}: cannot run ({lay['why']})")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = doc["cases"]
    fig, axes = plt.subplots(len(cases), len(INPUTS), figsize=(3.2 * len(INPUTS), 2.8 * len(cases)), squeeze=False)
    for i, case in enumerate(cases):
        for j, isl in enumerate(INPUTS):
            ax = axes[i][j]
            rows = [r for r in case["rows"] if r["input_tokens"] == isl and r["served"]]
            names = [r["layout"] for r in rows]
            pre = [r["prefill_steps_s"] for r in rows]
            dec = [r["decode_steps_s"] for r in rows]
            ax.bar(names, pre, label="prefill steps", color="#c44e52")
            ax.bar(names, dec, bottom=pre, label="decode steps", color="#4c72b0")
            ax.set_title(f"{case['model']} {case['engine']} {isl // 1024}K", fontsize=8)
            ax.tick_params(labelsize=7)
            if j == 0:
                ax.set_ylabel("seconds", fontsize=8)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None, help="Folder to write to (default: a temporary one).")
    ap.add_argument("--engine", action="append", choices=list(engine_names()),
                    help="Engine scheduler(s) to run (repeatable; default: every registered engine).")
    ap.add_argument("--plot", action="store_true", help="Also draw fixed_layouts.png.")
    a = ap.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="fixed_layouts_"))
    out.mkdir(parents=True, exist_ok=True)
    engines = a.engine or list(engine_names())
    t0 = time.perf_counter()
    cases = []
    for name, model, hw, kv in CASES:
        for engine in engines:
            cases.append(run_case(model, hw, kv, engine, lambda s: print(f"  {s}", file=sys.stderr, flush=True)))
    doc = {"benchmark": "fixed_layouts", "requests": REQUESTS, "inputs": INPUTS, "output_tokens": OUTPUT,
           "conditions": {"commit": git_commit(), "cpu": cpu_name(), "python": platform.python_version(),
                          "numpy": np.__version__, "wall_s": None, "simulator": "executor.sim.SimExecutor"},
           "cases": cases}
    doc["conditions"]["wall_s"] = round(time.perf_counter() - t0, 2)
    (out / "fixed_layouts.json").write_text(json.dumps(doc, indent=1) + "\n")
    txt = text(doc)
    (out / "fixed_layouts.txt").write_text(txt)
    if a.plot:
        plot(doc, out / "fixed_layouts.png")
    print(txt)
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
