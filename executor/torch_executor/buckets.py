"""Batch-size buckets and the step executables of one layout state, one per bucket.

What it does: the batch sizes engines capture CUDA graphs for (`BUCKETS`: SGLang's and vLLM's
ladders), the bucket a batch pads to, and `ExecCache`: one layout state's step executables keyed
by (batch bucket, owner bucket, block-table pages), built on first use or ahead of it (`prepare`,
`prepare_keys`: at start-up for every bucket up to the largest batch; a switch prepares the
destination's current bucket before it copies and its neighbours during the copy steps, the rest
on first use). A batch change inside a bucket reuses its executable — a replay, no recapture.
The graphs of one cache share one memory pool (captured largest first, as vLLM and SGLang do:
their replays never overlap) and one FlashInfer float workspace.
NOTE: the block-table width is a power of two of pages (at least 8): a key changes with it only
when the longest request doubles, and a caller that knows the longest context ahead (the serving
loop's workload) captures at that width once.
What it does not do: run steps (runner.py) or decide when a switch prepares (transitions.py).
"""

from __future__ import annotations

import bisect

import torch

from .kv_pages import pages_for
from .layouts import LayoutState
from .step_graph import StepExec

MIN_CAP_PAGES = 8


def sglang_buckets(max_bs: int) -> list[int]:
    """SGLang's decode CUDA-graph batch sizes up to max_bs (python/sglang/srt/arg_groups/
    cuda_graph_hook.py `generate_decode_cuda_graph_batch_sizes`, no speculative decoding):
    [1, 2, 4, 8, 12] + range(16, 257, 8) + range(272, 512, 16) + range(512, max_bs + 1, 32), and max_bs."""
    bs = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    bs = [b for b in bs if b <= max_bs]
    return bs if max_bs in bs else bs + [max_bs]


def vllm_buckets(max_bs: int) -> list[int]:
    """vLLM's CUDA-graph capture sizes (vllm/config/vllm.py `VllmConfig._set_cudagraph_sizes`):
    [1, 2, 4] + range(8, 256, 8) + range(256, cap + 1, 16) with cap = min(2 · max_num_seqs, 512)."""
    cap = min(2 * max_bs, 512)
    bs = [b for b in (1, 2, 4) if b <= cap] + list(range(8, min(cap + 1, 256), 8)) + list(range(256, cap + 1, 16))
    return bs


BUCKETS = {"sglang": sglang_buckets, "vllm": vllm_buckets}


def bucket_for(n: int, buckets: list[int]) -> tuple[int, bool]:
    """(rows to pad n requests to, whether that shape is graphed): the smallest bucket >= n; past the
    largest, n itself run eagerly (SGLang's and vLLM's rule for a batch past the largest graph)."""
    i = bisect.bisect_left(buckets, max(n, 1))
    return (buckets[i], True) if i < len(buckets) else (n, False)


def cap_bucket(pages: int, min_cap: int = MIN_CAP_PAGES) -> int:
    """Block-table width for requests of up to `pages` pages: a power of two, at least `min_cap`."""
    need = max(pages, min_cap, 1)
    return 1 << (need - 1).bit_length()


class ExecCache:
    """The step executables of one layout state (module docstring)."""

    def __init__(self, runner, state: LayoutState, min_cap: int = MIN_CAP_PAGES):
        self.runner, self.state, self.min_cap = runner, state, min_cap
        self.entries: dict[tuple[int, int, int], StepExec] = {}
        self.graphs = runner.use_graphs and runner.g.is_cuda
        self.pool = torch.cuda.graph_pool_handle() if self.graphs else None
        self.workspace = None  # FlashInfer's float workspace, made by the first FlashInfer kernel
        self.captures = 0  # graphs captured (a recapture of a key never happens: keys are kept)
        self.pending: list[tuple[int, int, int]] = []  # keys to prepare in the background

    def key(self, order: list[int], seq_lens: dict[int, int]) -> tuple[tuple[int, int, int], bool]:
        """(rows, owner rows, block-table pages) for decoding `order`, and whether it is graphed.
        Replicated facts only (order, global lengths, owners), so every rank picks the same key."""
        buckets = self.runner.buckets
        rows, graphed = bucket_for(len(order), buckets)
        own = 0
        lay = self.state.resolve(getattr(self.runner.g, "world_size", None))
        if lay.owned:  # rows per owner group: the busiest group's count
            counts: dict[int, int] = {}
            r = lay.group_ranks
            for q in order:
                k = self.state.table.owners[q] // r
                counts[k] = counts.get(k, 0) + 1
            most = max(counts.values(), default=1)
            own = min(bucket_for(most, buckets)[0], rows)
        page = self.runner.dims.page_size
        longest = max([pages_for(seq_lens[q] + 1, page) for q in order] + [1])
        return (rows, own, cap_bucket(longest, self.min_cap)), graphed

    def get(self, key: tuple[int, int, int], graphed: bool = True) -> StepExec:
        ex = self.entries.get(key)
        if ex is None:
            ex = self.entries[key] = self._build(key, graphed)
        return ex

    def _build(self, key: tuple[int, int, int], graphed: bool) -> StepExec:
        from .kernels import decode_kernel
        from .step_inputs import StepInputs

        r = self.runner
        rows, own, cap = key
        inputs = StepInputs(self.state, rows, own, cap, r.g.rank, r.g.world_size, r.dims.page_size, r.trash_token,
                            r.g.device)
        heads = self.state.resolve(r.g.world_size).kernel_heads(r.dims.num_heads)
        kernel = decode_kernel(r.kernel_config, heads, inputs.n_att, cap, r.dims, r.dtype, r.g.device,
                               workspace=self.workspace)
        if kernel is not None and self.workspace is None:
            self.workspace = getattr(kernel, "float_workspace", None)
        inputs.batch.kernel = kernel
        return StepExec(inputs, r._forward, graphed and self.graphs, self.pool)

    def prepare(self, key: tuple[int, int, int], graphed: bool = True) -> StepExec:
        """Build and capture `key` now (every rank at the same point)."""
        ex = self.get(key, graphed)
        if ex.prepare():
            self.captures += 1
        return ex

    def prepare_keys(self, keys: list[tuple[int, int, int]]) -> None:
        """Capture several keys, largest first (the shared pool then serves the smaller ones)."""
        for key in sorted(keys, reverse=True):
            self.prepare(key)

    def queue_neighbours(self, key: tuple[int, int, int], count: int = 2) -> None:
        """Queue the `count` buckets above and below `key`'s for `prepare_next` (a switch's copy steps)."""
        buckets = self.runner.buckets
        rows, own, cap = key
        if rows not in buckets:
            return
        i = buckets.index(rows)
        near = buckets[i + 1:i + 1 + count] + buckets[max(0, i - count):i][::-1]
        for b in near:
            k = (b, min(own, b) if own else 0, cap)
            if k not in self.entries and k not in self.pending:
                self.pending.append(k)

    def prepare_next(self) -> None:
        """Capture one queued key (every rank at the same point: the queue is replicated)."""
        if self.pending:
            self.prepare(self.pending.pop(0))
