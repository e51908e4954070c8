"""A/B of the Triton MLA decode kernel: a baseline kernels.py (any revision) vs the working tree.

    git show <rev>:executor/torch_executor/kernels.py > /tmp/base_kernels.py
    python3 benchmarks/kernel_ab.py --baseline /tmp/base_kernels.py [--out DIR]

Same inputs for both, timed alternately (3 rounds each, median) by CUDA-graph replays over rotated
KV sets (benchmarks/kernel_gpu: kernel_inputs, time_graph), at 128/T heads per program for T = 1, 2, 4, 8, uniform
batch x context points and the mixed-length batches of executor_gpu.MIXED. Prints a table; writes
kernel_ab.json (per point: both times, new/old, both bandwidth fractions, the outputs' relative
difference). Needs a CUDA GPU with Triton.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kernel_gpu import LATENT, MIXED, SCALE, conditions, copy_bandwidth, kernel_inputs, time_graph  # noqa: E402
from executor.torch_executor import kernels as new  # noqa: E402

BEST = {128: (64, 8, 2, 64, 1), 64: (64, 8, 2, 64, 1), 32: (32, 4, 2, 64, 2), 16: (16, 4, 2, 64, 2)}
UNIFORM = ((1, 4096), (1, 65536), (4, 16384), (16, 4096), (16, 65536), (64, 4096), (64, 65536))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", required=True, help="a kernels.py of another revision")
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results/executor_gpu"))
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("baseline_kernels", a.baseline)
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    pts = [(h, f"{b}x{ctx}", [ctx] * b) for h in BEST for b, ctx in UNIFORM]
    pts += [(h, n, lens) for h in (128, 64) for n, lens in MIXED.items()]
    cbw = copy_bandwidth()
    rows = []
    for h, name, lens_l in pts:
        q, pool, perm, lens, maxp, kv = kernel_inputs(lens_l, h)
        runs = {}
        for tag, mod in (("old", old), ("new", new)):
            cfg = mod.KernelConfig(*BEST[h])
            runs[tag] = (mod, cfg, [(lambda bt=bt.contiguous(), mod=mod, cfg=cfg:
                                     mod.mla_decode_triton(q, pool, bt, lens, SCALE, LATENT, maxp, cfg))
                                    for bt in perm])
        times = {"old": [], "new": []}
        for _ in range(3):  # alternate, so drift hits both
            for tag in ("old", "new"):
                times[tag].append(time_graph(runs[tag][2]))
        outs = [mod.mla_decode_triton(q, pool, perm[0].contiguous(), lens, SCALE, LATENT, maxp, cfg)[0].float()
                for mod, cfg, _ in runs.values()]
        t_old, t_new = statistics.median(times["old"]), statistics.median(times["new"])
        r = {"heads": h, "point": name, "old_us": t_old * 1e6, "new_us": t_new * 1e6, "new_over_old": t_new / t_old,
             "old_bw": kv / t_old / cbw, "new_bw": kv / t_new / cbw,
             "old_vs_new_rel": float((outs[0] - outs[1]).norm() / outs[0].norm())}
        rows.append(r)
        print(f"{h:4d} {name:16s} old {r['old_us']:8.1f} new {r['new_us']:8.1f} new/old {r['new_over_old']:.3f} "
              f"bw {r['old_bw']:.3f}->{r['new_bw']:.3f} diff {r['old_vs_new_rel']:.1e}", flush=True)
    os.makedirs(a.out, exist_ok=True)
    json.dump({"conditions": conditions(), "baseline": a.baseline, "copy_bandwidth_bytes_per_s": cbw, "rows": rows},
              open(os.path.join(a.out, "kernel_ab.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
