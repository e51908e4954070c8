"""Prefill steps of one chunk split into k pieces, on one GPU (issue 30): the host and device time
of a 2,048-token chunk as 1, 4, 16 and 64 prompts (prefill-only and beside 32 decodes), fresh
requests each repetition, the medians of several. Engines run a chunk's pieces as one ragged
batch, so their step time barely moves with k; the executor's per-piece attention loop made it
grow ~2 ms a piece on a 4-layer DeepSeek-V3.2 stack.

Run: python3 benchmarks/executor_prefill_pieces.py --out DIR   (needs a CUDA GPU; writes
DIR/prefill_pieces.json and prints it last)."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))


def run(g, out_dir: str, reps: int) -> int:
    import torch

    import twin_1gpu as T
    from executor.torch_executor import RankRunner

    dims = T.stack_dims(False)
    r = RankRunner(dims, g, "tp", num_slots=T.KV_PAGES + T.MAX_BATCH, dtype=torch.bfloat16, seed=1,
                   max_batch=T.MAX_BATCH)
    r.prepare_buckets(T.MAX_BATCH, 16384)
    nxt = [10_000]

    def nid():
        nxt[0] += 1
        return nxt[0]

    def timed(lens, decode):
        ids = [nid() for _ in lens]
        for q in ids:
            r.begin_prefill(q)
        torch.cuda.synchronize()
        t = time.perf_counter()
        r.step(list(zip(ids, lens)), decode=decode)
        host = time.perf_counter() - t
        torch.cuda.synchronize()
        wall = time.perf_counter() - t
        for q in ids:
            r.finish_request(q)
        return wall * 1e3, host * 1e3

    dec = [nid() for _ in range(32)]
    res = {"chunk_tokens": T.CHUNK, "decodes_beside_mixed": len(dec), "rows": []}
    for decode in (False, True):
        if decode:
            r.add_requests({q: 1024 for q in dec})
            for _ in range(3):
                r.step()
        for k in (1, 4, 16, 64):
            lens = [T.CHUNK // k] * k
            timed(lens, decode)  # warm-up of this shape
            walls, hosts = zip(*[timed(lens, decode) for _ in range(reps)])
            res["rows"].append({"kind": "mixed" if decode else "prefill", "pieces": k, "tokens_each": T.CHUNK // k,
                                "step_ms_median": statistics.median(walls), "host_ms_median": statistics.median(hosts),
                                "step_ms": list(walls)})
    import torch.nn.attention as A

    res["conditions"] = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                         "varlen_available": hasattr(A, "varlen") or os.path.exists(os.path.join(os.path.dirname(A.__file__), "varlen.py")),
                         "FLOORFIRST_PREFILL_VARLEN": os.environ.get("FLOORFIRST_PREFILL_VARLEN", "1"), "layers": dims.num_layers,
                         "reps": reps}
    path = os.path.join(out_dir, "prefill_pieces.json")
    json.dump(res, open(path, "w"), indent=1)
    print(json.dumps(res))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for prefill_pieces.json (default: a temporary one)")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="prefill_pieces_")
    os.makedirs(out, exist_ok=True)
    from executor.torch_executor.dist import spawn_ranks

    spawn_ranks(run, 1, out, a.reps, use_cuda=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
