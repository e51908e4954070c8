"""A/B of the Triton MLA decode kernel: baseline revisions vs the working tree, same inputs.

    mkdir -p .ab/head && for f in kernels.py mla_triton.py; do
        git show <rev>:executor/torch_executor/$f > .ab/head/$f; done; touch .ab/head/__init__.py
    git show <old-rev>:executor/torch_executor/kernels.py > .ab/old_kernels.py
    python3 benchmarks/kernel_ab.py --baseline head=.ab/head --baseline old=.ab/old_kernels.py \\
        [--configs kernel.json] [--out DIR]

A baseline is a kernels.py (self-contained revisions) or a folder holding kernels.py and the
modules it imports relatively (loaded as a package). Every variant runs on the same inputs, timed
in turn (3 rounds, median) by CUDA-graph replays over rotated KV sets (benchmarks/kernel_gpu:
kernel_inputs, time_graph), at 128/T heads per program for T = 1, 2, 4, 8, uniform batch x
context points and the mixed-length batches of kernel_gpu.MIXED. Baselines run the launch shapes
they were tuned with (BEST); the working tree runs --configs' best_config (a kernel.json from
`executor_gpu.py --parts kernel`) when given, else BEST. Prints a table; writes kernel_ab.json
(per point and variant: time, time over the first baseline's, bandwidth fraction, the output's
relative difference from the first baseline's). Needs a CUDA GPU with Triton.
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


def load_baseline(name: str, path: str):
    """A kernels.py file, or a folder with kernels.py imported as a package (relative imports)."""
    if os.path.isdir(path):
        pkg = f"ab_{name}"
        spec = importlib.util.spec_from_file_location(pkg, os.path.join(path, "__init__.py"),
                                                      submodule_search_locations=[path])
        mod = importlib.util.module_from_spec(spec)
        sys.modules[pkg] = mod
        spec.loader.exec_module(mod)
        return importlib.import_module(f"{pkg}.kernels")
    spec = importlib.util.spec_from_file_location(f"ab_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[f"ab_{name}"] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", action="append", required=True, metavar="NAME=PATH",
                    help="a kernels.py or a folder holding one (repeatable; the first is the reference)")
    ap.add_argument("--configs", default=None, help="kernel.json whose best_config the working tree runs")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=FIELD:VALUE,...",
                    help="the working tree again with KernelConfig fields overridden, e.g. fp16=half_partials:1")
    ap.add_argument("--out", default=os.environ.get("OUT", "benchmarks/results/executor_gpu"))
    a = ap.parse_args()
    variants = {}
    for spec in a.baseline:
        name, _, path = spec.partition("=")
        if not path or not os.path.exists(path):
            ap.error(f"--baseline wants NAME=PATH to a kernels.py or a folder, got {spec!r}")
        mod = load_baseline(name, path)
        variants[name] = (mod, {h: mod.KernelConfig(*t) for h, t in BEST.items()})
    if a.configs:
        best = json.load(open(a.configs))["best_config"]
        variants["new"] = (new, {h: new.KernelConfig(**best[str(h)]) for h in BEST})
    else:
        variants["new"] = (new, {h: new.KernelConfig(*t) for h, t in BEST.items()})
    for spec in a.variant:
        name, _, sets = spec.partition("=")
        over = {}
        for item in filter(None, sets.split(",")):
            field, _, val = item.partition(":")
            kind = new.KernelConfig.__dataclass_fields__.get(field)
            if kind is None or not val:
                ap.error(f"--variant {spec!r}: {field!r} is not a KernelConfig field with a value")
            # NOTE: annotations are strings here (`from __future__ import annotations`): "bool | None"
            over[field] = bool(int(val)) if "bool" in str(kind.type) else int(val)
        variants[name] = (new, {h: new.KernelConfig(**{**vars(c), **over}) for h, c in variants["new"][1].items()})
    ref = next(iter(variants))
    pts = [(h, f"{b}x{ctx}", [ctx] * b) for h in BEST for b, ctx in UNIFORM]
    pts += [(h, n, lens) for h in (128, 64) for n, lens in MIXED.items()]
    cbw = copy_bandwidth()
    rows = []
    for h, name, lens_l in pts:
        q, pool, perm, lens, maxp, kv = kernel_inputs(lens_l, h)
        fns = {tag: [(lambda bt=bt.contiguous(), mod=mod, cfg=cfgs[h]:
                      mod.mla_decode_triton(q, pool, bt, lens, SCALE, LATENT, maxp, cfg)) for bt in perm]
               for tag, (mod, cfgs) in variants.items()}
        times = {tag: [] for tag in variants}
        for _ in range(3):  # in turn, so drift hits every variant
            for tag in variants:
                times[tag].append(time_graph(fns[tag]))
        outs = {tag: mod.mla_decode_triton(q, pool, perm[0].contiguous(), lens, SCALE, LATENT, maxp, cfgs[h])[0].float()
                for tag, (mod, cfgs) in variants.items()}
        t_ref = statistics.median(times[ref])
        r = {"heads": h, "point": name, "configs": {tag: vars(cfgs[h]) for tag, (_, cfgs) in variants.items()}}
        line = f"{h:4d} {name:16s}"
        for tag in variants:
            t = statistics.median(times[tag])
            r[tag] = {"us": t * 1e6, "over_" + ref: t / t_ref, "bw": kv / t / cbw,
                      "rel_diff_vs_" + ref: float((outs[tag] - outs[ref]).norm() / outs[ref].norm())}
            line += f" | {tag} {t * 1e6:8.1f} us {t / t_ref:5.3f} bw {kv / t / cbw:.3f}"
        rows.append(r)
        print(line, flush=True)
    os.makedirs(a.out, exist_ok=True)
    json.dump({"conditions": conditions(), "baselines": a.baseline, "configs": a.configs,
               "copy_bandwidth_bytes_per_s": cbw, "rows": rows},
              open(os.path.join(a.out, "kernel_ab.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
