"""The Triton MLA decode kernels against the fp32 torch reference under Triton's CPU interpreter
(run by test_triton_interpret.py in a subprocess with TRITON_INTERPRET=1; needs Triton installed).

Checks, at tiny dims (latent 64, rope 16, 64-token pages): outputs and log-sum-exp for uniform,
mixed, empty and one-token requests, with and without TMA tile loads and with the host-sized
unit rule, where every pool row past a request's length is NaN (a kernel that reads one unmasked
fails); and the schedule kernel's map (every (request, unit) exactly once, full-size units
first, a request's output rows adjacent, spare programs marked -1) on random lengths and slot
counts. Prints one line per case; exits 1 on the first mismatch.
"""

from __future__ import annotations

import random
import sys

import torch

from executor.torch_executor import kernels
from executor.torch_executor.kernels import KernelConfig, mla_decode_torch, mla_decode_triton

C, R, PAGE = 64, 16, 64


def check_outputs(sms: int) -> None:
    kernels._num_sms = lambda _i: sms  # no GPU: the slot count the schedule sizes units for
    torch.manual_seed(0)
    cases = [([300, 1, 130], KernelConfig(block_h=16, block_n=32)),
             ([64 * 9 + 3, 0, 5, 64 * 2, 700], KernelConfig(block_h=16, block_n=64)),
             ([20, 20, 20, 20, 2000, 3000], KernelConfig(block_h=32, block_n=32)),
             ([100, 0, 0, 4000], KernelConfig(block_h=16, balance=False)),
             ([0], KernelConfig(block_h=16)),
             ([640] * 4, KernelConfig(block_h=16)),
             ([5000, 1], KernelConfig(block_h=16, min_pages_per_unit=1, unit_overhead_pages=0))]
    for tma in (False, True):
        for lens, cfg in cases:
            cfg = KernelConfig(**{**vars(cfg), "tma": tma})
            b, h = len(lens), 32 if cfg.block_h == 32 else 16
            maxp = max(1, max(-(-n // PAGE) for n in lens))
            pool = torch.randn(b * maxp + 4, PAGE, C + R)
            bt = torch.randperm(b * maxp + 4)[: b * maxp].view(b, maxp).int()
            for i, n in enumerate(lens):  # poison every row past the length
                for t in range(n, maxp * PAGE):
                    pool[bt[i, t // PAGE], t % PAGE] = float("nan")
            q = torch.randn(b, h, C + R)
            lt = torch.tensor(lens, dtype=torch.int32)
            o, lse = mla_decode_triton(q, pool, bt, lt, 0.1, C, maxp, cfg)
            ro, rl = mla_decode_torch(q, torch.nan_to_num(pool, nan=0.0), bt, lt, 0.1, C)
            fin = torch.isfinite(rl)
            err = float((o - ro).abs().max())
            lerr = float((lse[fin] - rl[fin]).abs().max()) if fin.any() else 0.0
            print(f"sms={sms} tma={tma} lens={lens}: |o| err {err:.1e}, lse err {lerr:.1e}", flush=True)
            if not torch.equal(torch.isfinite(lse), fin) or err > 1e-4 or lerr > 1e-4:
                sys.exit(1)


def check_schedule(trials: int) -> None:
    from executor.torch_executor import mla_triton

    rng = random.Random(1)
    for trial in range(trials):
        b, slots = rng.randint(1, 40), rng.randint(1, 70)
        lens = [rng.choice([0, rng.randint(1, 300), rng.randint(1, 30000)]) for _ in range(b)]
        if trial % 3 == 0:
            lens = [rng.randint(1, 20000)] * b
        units = 2 * slots + b
        bb = max(2, 1 << (b - 1).bit_length())
        meta = torch.full((8 + 3 * units + 4 * bb,), -7, dtype=torch.int32)
        mla_triton.schedule_kernel[(1,)](torch.tensor(lens, dtype=torch.int32), meta, b, slots, 0, 3, 2, units,
                                         PAGE=PAGE, BLOCK_B=bb, LOG2_B=bb.bit_length() - 1,
                                         BLOCK_U=min(256, max(16, 1 << (units - 1).bit_length())))
        c, total = int(meta[0]), int(meta[1])
        req, j, row = (meta[8 + k * units: 8 + (k + 1) * units].tolist() for k in range(3))
        pages = [-(-n // PAGE) for n in lens]
        want = {(r, u) for r in range(b) for u in range(-(-pages[r] // c))}
        got = [(req[u], j[u]) for u in range(total)]
        sizes = [min(c, pages[r] - u * c) for r, u in got]
        n_full = sizes.count(c)
        start: dict[int, int] = {}
        ok = (len(got) == len(want) and set(got) == want and all(x == -1 for x in row[total:])
              and sorted(row[:total]) == list(range(total)) and all(s == c for s in sizes[:n_full])
              and all(start.setdefault(r, row[u] - ju) == row[u] - ju for u, (r, ju) in enumerate(got)))
        if not ok:
            print(f"schedule wrong: lens={lens} slots={slots} c={c}", flush=True)
            sys.exit(1)
    print(f"schedule: {trials} random batches ok", flush=True)


if __name__ == "__main__":
    check_schedule(40)
    for sms in (8, 200):  # few slots (units of many pages) and many (the merge's wide path)
        check_outputs(sms)
