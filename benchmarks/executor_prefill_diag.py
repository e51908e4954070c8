"""Why the executor's served prefill steps took 150-250 ms where its step rows take 25 ms (issue 30):
mixed steps of a repeated shape against fresh shapes, a continuation chunk, a host profile and the
torch profiler of one fresh mixed step, on one GPU. Run: python3 benchmarks/executor_prefill_diag.py
(with $OUT set: writes $OUT/diag.json). Found: cuDNN SDPA building a plan per new shape."""
import cProfile, io, json, os, pstats, sys, time
sys.path.insert(0, os.getcwd()); sys.path.insert(0, os.path.join(os.getcwd(), "benchmarks"))
import torch
import twin_1gpu as T
from executor.torch_executor.dist import spawn_ranks


def diag(g, out_dir):
    from executor.torch_executor import RankRunner
    dims = T.stack_dims(False)
    r = RankRunner(dims, g, "tp", num_slots=T.KV_PAGES + T.MAX_BATCH, dtype=torch.bfloat16, seed=1, max_batch=T.MAX_BATCH)
    r.prepare_buckets(T.MAX_BATCH, 16384)
    nxt = [10_000]
    def nid():
        nxt[0] += 1; return nxt[0]
    res = {}
    def sync_ms(fn):
        torch.cuda.synchronize(); t = time.perf_counter(); fn(); torch.cuda.synchronize(); return (time.perf_counter() - t) * 1e3
    # decodes of 16 requests at 1K
    dec = [nid() for _ in range(16)]
    r.add_requests({q: 1024 for q in dec})
    for _ in range(3): r.step()
    # same shape repeated: 4 prompts of 512 in a mixed step
    def mixed(lens):
        ids = [nid() for _ in lens]
        for q in ids: r.begin_prefill(q)
        ms = sync_ms(lambda: r.step(list(zip(ids, lens)), decode=True))
        return ms, ids
    same, fresh = [], []
    for i in range(6):
        ms, ids = mixed([512, 512, 512, 512]); same.append(ms)
    for i in range(6):
        ms, ids = mixed([500 + 3 * i, 517 - i, 509 + i, 2048 - (500 + 3 * i) - (517 - i) - (509 + i)]); fresh.append(ms)
    res["mixed_same_shape_ms"] = same
    res["mixed_fresh_shape_ms"] = fresh
    # a continuation chunk of a prompt already partly prefilled (what serving does for long prompts)
    q = nid(); r.begin_prefill(q)
    cont = [sync_ms(lambda: r.step([(q, 1000)], decode=True)) for _ in range(4)]
    res["continuation_ms"] = cont
    # host profile of a fresh-shape mixed step
    pr = cProfile.Profile()
    ids = [nid() for _ in range(3)]
    for x in ids: r.begin_prefill(x)
    torch.cuda.synchronize()
    pr.enable(); r.step(list(zip(ids, [611, 707, 730])), decode=True); torch.cuda.synchronize(); pr.disable()
    s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(30)
    res["profile"] = s.getvalue()[-6000:]
    # torch profiler of one fresh mixed step
    ids = [nid() for _ in range(2)]
    for x in ids: r.begin_prefill(x)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as p:
        r.step(list(zip(ids, [1013, 1029])), decode=True); torch.cuda.synchronize()
    res["torch_profile"] = p.key_averages().table(sort_by="cuda_time_total", row_limit=18)[-5000:]
    json.dump(res, open(os.path.join(out_dir, "diag.json"), "w"), indent=1)
    print(json.dumps({k: v for k, v in res.items() if "profile" not in k}))
    print(res["profile"][-3500:])
    print(res["torch_profile"][-4000:])
    return 0


if __name__ == "__main__":
    spawn_ranks(diag, 1, os.environ["OUT"], use_cuda=True)
