"""Why the executor's served prefill and mixed steps take longer than its step rows of the same
chunk (issue 30; benchmarks/results/executor_gpu/twin_1gpu/README.md): the chat workload of
twin_1gpu.py served on one GPU after one warm run, alternating twice (a) with Python's collector as it
is and (b) with the objects alive after warm-up frozen out of it (serve.frozen_gc, the executor's
default; vLLM's `freeze_gc_heap`, SGLang's `freeze_gc`), each chunk step's device time (CUDA events)
beside its host time (its launches); then (c) under cProfile, the host functions that take the time.
Run: python3 benchmarks/executor_served_diag.py --out DIR (default: a temporary folder); writes
diag.json there and prints it last."""
import argparse, cProfile, gc, io, json, os, pstats, sys, tempfile, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import numpy as np


def chunk_steps(res: dict) -> dict:
    rows = res["measured"]["step_rows"]["rows"]
    host = res["measured"].get("step_host_s") or [float("nan")] * len(rows)
    sel = [(r, h) for r, h in zip(rows, host) if r[2] > 0]
    dev = np.array([r[4] for r, _ in sel]) * 1e3
    hs = np.array([h for _, h in sel]) * 1e3
    small = np.array([r[2] <= 1100 and r[3] == 0 for r, _ in sel])
    return {"chunk_steps": len(sel), "device_ms_p50": float(np.median(dev)), "host_ms_p50": float(np.nanmedian(hs)),
            "small_chunk_device_ms_p50": float(np.median(dev[small])) if small.any() else None,
            "small_chunk_host_ms_p50": float(np.nanmedian(hs[small])) if small.any() else None,
            "rows": [[*r, h] for r, h in sel][:60], "ttft_p50_s": res["ttft_p50_s"], "tpot_p50_s": res["tpot_p50_s"]}


def run(g, out_dir, workload):
    import torch
    import twin_1gpu as T
    from executor.torch_executor.serve import serve_rank

    from dataclasses import replace

    tables = T.tables_for(T.hardware_name(torch.cuda.get_device_name()), None)
    spec = T.serve_specs(tables)[workload]
    doc = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "workload": workload}
    serve_rank(g, spec)  # a first run: every first use (JIT, allocator) behind us
    # alternated, twice each: the collector as it is, and frozen after warm-up (the executor's default)
    for rnd in range(2):
        for name, frozen in (("gc_as_is", False), ("gc_frozen", True)):
            t = time.time()
            s = replace(spec, options=replace(spec.options, freeze_gc=frozen))
            doc[f"{name}_{rnd}"] = chunk_steps(serve_rank(g, s))
            doc[f"{name}_{rnd}"]["wall_s"] = time.time() - t
    prof = cProfile.Profile()
    prof.enable()
    res = serve_rank(g, spec)
    prof.disable()
    doc["profiled"] = chunk_steps(res)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(35)
    doc["profile_tottime"] = s.getvalue()[-9000:]
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(40)
    doc["profile_cumulative"] = s.getvalue()[-9000:]
    json.dump(doc, open(os.path.join(out_dir, "diag.json"), "w"), indent=1, default=float)
    return doc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--workload", default="chat")
    a = ap.parse_args()
    out = a.out or tempfile.mkdtemp(prefix="served_diag_")
    os.makedirs(out, exist_ok=True)
    import torch

    if not torch.cuda.is_available():
        print("executor_served_diag: needs a CUDA GPU (it times served steps with CUDA events)", file=sys.stderr)
        sys.exit(2)
    from executor.torch_executor.dist import spawn_ranks

    spawn_ranks(run, 1, out, a.workload, use_cuda=True)
    doc = json.load(open(os.path.join(out, "diag.json")))
    print(json.dumps({k: (v if not isinstance(v, dict) else {kk: vv for kk, vv in v.items() if kk != "rows"})
                      for k, v in doc.items() if not k.startswith("profile")}, default=float))


if __name__ == "__main__":
    main()
