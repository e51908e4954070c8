"""The host KV tier on one device: pinned host pages, a device cache, and the tiered sparse-MLA step.

What it does: `TorchOps` runs `executor.host_cache`'s resolver on device tensors (fixed shapes, no
host reads, so a step can be captured in a CUDA graph). `HostKVTier` holds every layer's KV rows of
its requests in host memory ([L, rows, E], pinned on CUDA: a request's region is max_rows rows), a
device cache of `total_slots` pages per layer, and the resolver state; it admits requests with a
per-request budget, preloads pages, fetches a step's misses (`host_fetch.copy_units`, zero-copy
over PCIe), and writes a decoded token through to host and, where its page is resident, to the
cache. `tiered_layer` is one layer of a DSA-shaped decode step: resolve the layer's top-k, fetch the
misses of request chunk c on a copy stream while the attention of chunk c-1 runs (the only overlap
the dependency allows: a layer's indices exist only after its indexer, and its attention needs
every selected row), read hits in place. `resident_layer` is the same step with all KV in device
memory. Both run the same attention on the same rows in the same chunks, so their outputs are
bit-identical (tested).
What it does not do: the indexer and the top-k themselves (the step takes the indices), fp8 KV,
prefetching ahead of the indices, or moving a request's pages between GPUs.

`sparse_mla_attention` is plain torch (gather the K selected rows, two bf16 batched matmuls, fp32
softmax): a stand-in for FlashMLA's sparse decode kernel, which the timing figures say how far off.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from executor.host_cache import HostCacheSpec, HostTierCache, LayerResolution

from .host_fetch import copy_units, words


class TorchOps:
    """The array operations of `HostTierCache` on int64 torch tensors of one device."""

    eager = False

    def __init__(self, device):
        self.device = torch.device(device)

    def full(self, shape, value):
        return torch.full(shape, value, dtype=torch.int64, device=self.device)

    def asarray(self, a):
        if isinstance(a, torch.Tensor):
            return a.to(self.device, torch.int64)
        return torch.as_tensor(np.asarray(a, dtype=np.int64), device=self.device)

    def arange(self, n):
        return torch.arange(n, dtype=torch.int64, device=self.device)

    def to_numpy(self, a):
        return a.cpu().numpy()

    def where(self, c, a, b):
        return torch.where(c, a, b)

    def clamp_min(self, a, v):
        return torch.clamp(a, min=v)

    def clamp_max(self, a, v):
        return torch.clamp(a, max=v)

    def as_int(self, a):
        return a.long()

    def take_rows(self, a, idx):
        return torch.gather(a, 1, idx)

    def put_rows(self, a, idx, values):
        if isinstance(values, torch.Tensor):
            a.scatter_(1, idx, values.expand(idx.shape))
        else:
            a.scatter_(1, idx, values)

    def put(self, a, idx, values):
        a.scatter_(0, idx, values)

    def sort_rows(self, a):
        return torch.sort(a, dim=1).values

    def cumsum_rows(self, a):
        return torch.cumsum(a, 1)

    def cumsum(self, a):
        return torch.cumsum(a, 0)

    def sum_rows(self, a):
        return a.sum(1)

    def concat_cols(self, a, b):
        return torch.cat([a, b], 1)

    def concat(self, a, b):
        return torch.cat([a, b])

    def stack(self, xs):
        return torch.stack(xs)

    def histogram_rows(self, v, bins):
        # NOTE: a compare-and-sum per bin, not scatter_add_: a few bins take every slot of a row, and
        # atomics on them would serialize.
        return (v[:, :, None] == torch.arange(bins, device=v.device)).sum(1)


class HostKVTier:
    """Host pool + device cache + resolver of one device; rows are E elements of one dtype."""

    def __init__(self, spec: HostCacheSpec, total_slots: int, host: torch.Tensor, cache: torch.Tensor):
        L, P = spec.num_layers, spec.page_rows
        if host.dim() != 3 or host.shape[0] != L or host.shape[1] < spec.max_requests * spec.max_rows:
            raise ValueError(f"host pool {tuple(host.shape)} must be [L={L}, >= {spec.max_requests * spec.max_rows}, E]")
        if cache.dim() != 3 or cache.shape[0] != L or cache.shape[1] < total_slots * P or cache.shape[2] != host.shape[2]:
            raise ValueError(f"device cache {tuple(cache.shape)} must be [L={L}, >= {total_slots * P}, E={host.shape[2]}]")
        if host.device.type != "cpu":
            raise ValueError("the host pool must be a CPU tensor (pinned when the cache is on CUDA)")
        self.spec, self.host, self.dev = spec, host, cache
        self.cache = HostTierCache(spec, total_slots, TorchOps(cache.device))
        self.row_words = host.shape[2] * host.element_size() // 4
        if host.shape[2] * host.element_size() % 4:
            raise ValueError(f"a row of {host.shape[2] * host.element_size()} bytes is not a whole number of words")
        self.unit_words = P * self.row_words
        self.host_w = [words(host[layer]) for layer in range(L)]
        self.dev_w = [words(cache[layer]) for layer in range(L)]

    @property
    def unit_bytes(self) -> int:
        return self.unit_words * 4

    def host_rows(self, row: int, n: int) -> slice:
        r0 = row * self.spec.max_rows
        return slice(r0, r0 + n)

    def admit(self, row: int, ctx_rows: int, budget_pages: int, preload_pages=(), source: torch.Tensor | None = None):
        """Admit a request whose host rows are already written; preload pages from host (or `source`,
        a device tensor laid out like the host pool, e.g. the all-resident pool of a benchmark)."""
        self.cache.admit(row, ctx_rows, budget_pages)
        pages = np.asarray(preload_pages, dtype=np.int64)
        if len(pages):
            host_row, dev_row = self.cache.preload(row, pages)
            d = self.dev.device
            src_row, dst_row = torch.as_tensor(host_row, device=d), torch.as_tensor(dev_row, device=d)
            bounds = torch.tensor([0, len(pages)], dtype=torch.int64, device=d)
            for layer in range(self.spec.num_layers):
                src = self.host_w[layer] if source is None else words(source[layer])
                copy_units(src, self.dev_w[layer], src_row, dst_row, bounds, 0, 1, self.unit_words, self.row_words,
                           max_units=len(pages), row_align=self.spec.page_rows)

    def fetch(self, layer: int, res: LayerResolution, b0: int, b1: int) -> None:
        """Gather the misses of requests [b0, b1) of this layer's resolution into their cache slots.

        NOTE: always the zero-copy kernel: it is the fastest path measured for every unit of 584 B and
        more (benchmarks/results/host_tier/README.md), and batched copies would need the miss list on
        the host, a sync per layer. The one slower case, 132-B indexer keys, stays on the GPU in the
        engines (SGLang HiSparse keeps DeepSeek-V4's C4 indexer device-resident).
        """
        copy_units(self.host_w[layer], self.dev_w[layer], res.miss_src_row, res.miss_dst_row, res.miss_bounds,
                   b0, b1, self.unit_words, self.row_words, max_units=(b1 - b0) * self.spec.topk,
                   row_align=self.spec.page_rows)

    def append(self, new_rows: torch.Tensor) -> None:
        """Write one decoded token per admitted request: new_rows [L, B, E] on the device.

        NOTE: write-through in stream order (host row, and the cache row when its page is resident),
        so a later miss on that page fetches the new token too. SGLang HiSparse instead backs the
        previous token up to host asynchronously ("eager backup", docs/advanced_features/
        hisparse_guide.md); the bytes are the same, B rows per layer per step.
        """
        host_row, dev_row = self.cache.append_token()
        B, d = self.spec.max_requests, self.dev.device
        src_row = torch.arange(B, dtype=torch.int64, device=d)
        bounds = torch.tensor([0, B], dtype=torch.int64, device=d)
        for layer in range(self.spec.num_layers):
            src = words(new_rows[layer].contiguous())
            copy_units(src, self.host_w[layer], src_row, host_row, bounds, 0, 1, self.row_words, self.row_words, B)
            copy_units(src, self.dev_w[layer], src_row, dev_row[layer], bounds, 0, 1, self.row_words,
                       self.row_words, B)


def sparse_mla_attention(q: torch.Tensor, kv: torch.Tensor, rows: torch.Tensor, scale: float, kv_lora_rank: int):
    """q [b, H, C+R], kv [N, C+R] rows, rows [b, K] (-1 = none) -> (o [b, H, C] in q.dtype, lse [b, H] fp32)."""
    sel = kv[rows.clamp(min=0)]  # [b, K, C+R]
    s = torch.bmm(q, sel.transpose(1, 2)).float() * scale  # [b, H, K]
    s = s.masked_fill((rows < 0)[:, None, :], -math.inf)
    lse = torch.logsumexp(s, dim=-1)  # [b, H]
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0).to(q.dtype)
    return torch.bmm(p, sel[..., :kv_lora_rank]), lse


def chunk_bounds(batch: int, chunks: int) -> list[tuple[int, int]]:
    """Request ranges of the step's pipeline: `chunks` near-equal ranges, none empty."""
    chunks = max(1, min(chunks, batch))
    edges = [round(i * batch / chunks) for i in range(chunks + 1)]
    return list(zip(edges[:-1], edges[1:]))


def tiered_layer(tier: HostKVTier, layer: int, q: torch.Tensor, topk: torch.Tensor, out: torch.Tensor,
                 chunks: list[tuple[int, int]], scale: float, kv_lora_rank: int,
                 copy_stream=None, events=None) -> LayerResolution:
    """One layer: resolve topk [B, K], fetch misses per chunk (on copy_stream when given), attention into out [B, H, C]."""
    res = tier.cache.resolve(layer, topk)
    main = torch.cuda.current_stream() if copy_stream is not None else None
    if copy_stream is not None:
        copy_stream.wait_stream(main)
    for i, (b0, b1) in enumerate(chunks):
        if copy_stream is None:
            tier.fetch(layer, res, b0, b1)
        else:
            with torch.cuda.stream(copy_stream):
                tier.fetch(layer, res, b0, b1)
                events[i].record(copy_stream)
            main.wait_event(events[i])
        o, _ = sparse_mla_attention(q[b0:b1], tier.dev[layer], res.row_loc[b0:b1], scale, kv_lora_rank)
        out[b0:b1].copy_(o)
    if copy_stream is not None:
        main.wait_stream(copy_stream)
    return res


def resident_layer(pool: torch.Tensor, row0: torch.Tensor, q: torch.Tensor, topk: torch.Tensor, out: torch.Tensor,
                   chunks: list[tuple[int, int]], scale: float, kv_lora_rank: int) -> None:
    """The same layer with every row in device memory: pool [N, E], request b's rows start at row0[b]."""
    rows = torch.where(topk >= 0, row0[:, None] + topk, -1)
    for b0, b1 in chunks:
        o, _ = sparse_mla_attention(q[b0:b1], pool, rows[b0:b1], scale, kv_lora_rank)
        out[b0:b1].copy_(o)
