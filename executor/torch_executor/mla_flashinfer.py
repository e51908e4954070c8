"""FlashInfer's FA3 MLA decode as the executor's dense attention kernel on Hopper (used on CUDA only).

What it does: `FlashInferDecode` binds one `flashinfer.mla.BatchMLAPagedAttentionWrapper(backend="fa3")`
to the fixed shapes of one step's inputs (n requests, up to `max_pages` pages each, h heads).
`plan()` runs on the host before every step, outside any CUDA graph: it turns the host block
table and lengths into FlashInfer's CSR metadata (`csr_from_block_table`) and lets FlashInfer's
scheduler split the work over the SMs (the first plan through the public wrapper, later ones
straight to its native scheduler, `_fast_plan`); `__call__(q, pool)` launches the kernel on the last plan,
and is what a captured graph replays. Same contract as `kernels.mla_decode_triton`: q [n, h, C+R],
pool [P, page, C+R] -> o [n, h, C] in q's dtype, lse [n, h] fp32 natural log (CP merges partial
outputs by it), o = 0 and lse = -inf for a request with no local tokens.
`plan_indices()` is the sparse (DSA) form: with page_size 1 and a pool viewed as [P*page, 1, C+R],
each request's indices are the token slots its indexer chose (written on device into
`kv_indices` at the offsets `kv_indptr_device` holds), so the dense kernel attends exactly the
top-k tokens.
What it does not do: fp8 KV, causal chunks (one new token per request), pick itself over the
Triton kernel (`kernels.choose_backend` does), or import flashinfer before it is built.

NOTE: the plan-outside / replay-inside split is SGLang's use of this wrapper under CUDA graphs
(sglang python/sglang/srt/layers/attention/flashinfer_mla_backend.py,
`init_forward_metadata_capture_cuda_graph`: a `use_cuda_graph=True` wrapper per captured batch
with reserved qo_indptr / kv_indptr / kv_indices / kv_len_arr buffers;
`init_forward_metadata_replay_cuda_graph`: re-plan from host lengths, then replay). It holds
because FlashInfer 0.7.2 marks fa3 `supports_cuda_graph_replan=True`
(flashinfer/mla/_batch_mla/_backends/fa3_backend.py) and its plan info (grid, workspace offsets)
depends only on the SM count and the cluster size, 2 CTAs when heads > 64, never on the lengths
(include/flashinfer/attention/scheduler.cuh, `MLAPlan`): one capture serves every later plan.
"""

from __future__ import annotations

import numpy as np
import torch

# NOTE: 32 MiB of float workspace. MLAPlan (scheduler.cuh) takes from it only the split-KV partials:
# 2 x clusters x cluster_tile_q x 2 B x C for o plus 2 x clusters x cluster_tile_q x 4 B for lse,
# clusters x cluster_tile_q = 132 SMs x 64 rows either way: 2 x 8448 x 2 x 512 + 2 x 8448 x 4 =
# 17,369,088 B at C = 512 on an H200. SGLang shares one buffer across its wrappers; here the batch
# buckets of one runner's layout share one (buckets.ExecCache; no module-level state), and graphs of
# one runner never run concurrently.
FLOAT_WORKSPACE_BYTES = 32 << 20
# what `FlashInferDecode._fast_plan` reads off FlashInfer 0.7.2's planned fa3 backend
_FAST_PLAN_ATTRS = ("_cached_module", "_float_workspace_buffer", "_int_workspace_buffer",
                    "_pin_memory_int_workspace_buffer", "_plan_info")


def csr_from_block_table(block_table: np.ndarray, lens: np.ndarray, page_size: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """FlashInfer's CSR page metadata from a padded block table. block_table [n, cap] (page slots,
    a request's local pages in order), lens [n] local tokens -> (kv_indptr [n+1], kv_indices [total]).

    FlashInfer requires kv_indptr[i+1] - kv_indptr[i] == ceil(lens[i] / page_size) exactly
    (flashinfer/mla/_batch_mla/_planning.py, `_validate_csr_metadata`), so the padding is dropped.
    """
    lens = np.asarray(lens, dtype=np.int64)
    pages = (lens + page_size - 1) // page_size  # [n]
    if pages.size and int(pages.max()) > block_table.shape[1]:
        raise ValueError(f"a request needs {int(pages.max())} pages, the block table holds {block_table.shape[1]}")
    indptr = np.zeros(lens.size + 1, dtype=np.int64)
    np.cumsum(pages, out=indptr[1:])
    live = np.arange(block_table.shape[1])[None, :] < pages[:, None]  # [n, cap]
    return indptr, block_table[live]  # row-major: request by request, pages in order


class FlashInferDecode:
    """FA3 MLA decode for one fixed shape: n requests of up to max_pages pages, num_heads heads."""

    def __init__(self, num_requests: int, max_pages: int, num_heads: int, kv_lora_rank: int, rope_dim: int,
                 page_size: int, sm_scale: float, dtype: torch.dtype, device: torch.device | str,
                 workspace_bytes: int = FLOAT_WORKSPACE_BYTES, workspace: torch.Tensor | None = None):
        """workspace: a float workspace shared with the other batch buckets of one runner (their graphs
        never run concurrently: SGLang shares one buffer across its wrappers too); default its own."""
        dev = torch.device(device)
        self.num_requests, self.max_pages, self.num_heads = num_requests, max(1, max_pages), num_heads
        self.kv_lora_rank, self.rope_dim, self.page_size = kv_lora_rank, rope_dim, page_size
        self.sm_scale, self.dtype, self.device = sm_scale, dtype, dev
        n = num_requests
        i32 = dict(dtype=torch.int32, device=dev)
        # reserved graph buffers: the wrapper copies each plan's metadata into these, so a captured
        # launch keeps reading the same addresses (kv_indices: the indexer writes it in the sparse form)
        self.kv_indices = torch.zeros(max(1, n * self.max_pages), **i32)  # [n * max_pages]
        self.kv_indptr_device = torch.zeros(n + 1, **i32)  # [n + 1]
        self.wrapper = None
        self.float_workspace = None
        if n == 0:  # a DP rank that owns no request this step: nothing to plan or launch
            return
        from flashinfer.mla import BatchMLAPagedAttentionWrapper, MLAPlanMetadata

        self._metadata = MLAPlanMetadata.csr
        self.float_workspace = workspace if workspace is not None else torch.empty(workspace_bytes, dtype=torch.uint8,
                                                                                   device=dev)
        self.wrapper = BatchMLAPagedAttentionWrapper(
            self.float_workspace, use_cuda_graph=True,
            qo_indptr=torch.zeros(n + 1, **i32), kv_indptr=self.kv_indptr_device, kv_indices=self.kv_indices,
            kv_len_arr=torch.zeros(n, **i32), backend="fa3")
        # NOTE: two pinned host copies of the metadata, used in turn: a plan's host->device copies are
        # asynchronous and the host runs steps ahead of the device, so a buffer is refilled only once
        # the copy that read it (two plans back) is done (the same scheme as StepInputs.upload).
        pinned = dict(dtype=torch.int32, pin_memory=True)
        self._host = [(torch.arange(n + 1, **pinned), torch.zeros(n + 1, **pinned),
                       torch.zeros(n * self.max_pages, **pinned), torch.zeros(n, **pinned)) for _ in range(2)]
        self._copied = [torch.cuda.Event() for _ in range(2)]
        self._turn = 0
        self._fast = False  # set by the first plan when this FlashInfer has the attributes _fast_plan uses

    def plan(self, block_table: np.ndarray, lens: np.ndarray) -> None:
        """Plan the next launches from the host block table [n, >= pages] and local lengths [n]."""
        indptr, indices = csr_from_block_table(np.asarray(block_table), lens, self.page_size)
        self._plan(indptr, lens, indices)

    def plan_indices(self, lens: np.ndarray) -> None:
        """Sparse form: plan for lens[i] indices per request that the caller writes on device into
        kv_indices[kv_indptr_device[i] : kv_indptr_device[i+1]] before the launch (page_size 1)."""
        lens = np.asarray(lens, dtype=np.int64)
        if lens.size and int(lens.max()) > self.max_pages * self.page_size:
            raise ValueError(f"{int(lens.max())} indices for a request, room for {self.max_pages * self.page_size}")
        indptr = np.zeros(lens.size + 1, dtype=np.int64)
        np.cumsum((lens + self.page_size - 1) // self.page_size, out=indptr[1:])
        self._plan(indptr, lens, None)

    def _plan(self, indptr: np.ndarray, lens: np.ndarray, indices: np.ndarray | None) -> None:
        if self.wrapper is None:
            return
        qo, kv_indptr, kv_indices, kv_len = self._host[self._turn]
        self._copied[self._turn].synchronize()
        kv_indptr.numpy()[:] = indptr
        kv_len.numpy()[:] = lens
        if indices is not None:
            kv_indices.numpy()[:indices.size] = indices
        backend = getattr(self.wrapper, "_planned_backend", None)
        if self._fast and backend is not None:
            self._fast_plan(backend, qo, kv_indptr, kv_indices[:indices.size] if indices is not None else None, kv_len)
        else:  # the first plan: FlashInfer validates the whole contract and JIT-builds the kernel
            src = self.kv_indices if indices is None else kv_indices[:indices.size]  # None: in-graph indices
            self.wrapper.plan(metadata=self._metadata(qo, kv_indptr, src, kv_len), num_heads=self.num_heads,
                              head_dim_ckv=self.kv_lora_rank, head_dim_kpe=self.rope_dim, page_size=self.page_size,
                              causal=False, sm_scale=self.sm_scale, q_data_type=self.dtype, kv_data_type=self.dtype,
                              lse_mode="basee")
            self._fast = all(hasattr(self.wrapper._planned_backend, a) for a in _FAST_PLAN_ATTRS)
        self._copied[self._turn].record()
        self._turn ^= 1

    def _fast_plan(self, backend, qo, kv_indptr, kv_indices, kv_len) -> None:
        """Re-plan without the wrapper's Python layers: the native scheduler on the host lengths,
        its work lists staged into the int workspace the captured launch reads, the pages into
        the reserved kv_indices (every copy asynchronous, on the current stream).

        NOTE: SGLang does the same at every graph replay (sglang python/sglang/srt/layers/attention/
        flashinfer_mla_backend.py, `fast_mla_decode_plan`: `wrapper._cached_module.plan(...)` on the
        host indptr / lengths), because the public plan's host cost (here 0.75-1.7 ms at B = 1-64 on
        the H200 machine's CPU: validation, buffer snapshots, a new backend object) is the size of a
        whole decode step, and the host must stay ahead of the device. The offsets it returns
        depend only on the SM count and heads (see the module NOTE); a plan that moved them would
        leave the captured graph reading stale offsets, so it is refused."""
        if kv_indices is not None:
            self.kv_indices[:kv_indices.numel()].copy_(kv_indices, non_blocking=True)
        self.kv_indptr_device.copy_(kv_indptr, non_blocking=True)  # read by an in-graph indexer (sparse form)
        info, _ = backend._cached_module.plan_with_staged_workspace_bytes(
            backend._float_workspace_buffer, backend._int_workspace_buffer, backend._pin_memory_int_workspace_buffer,
            qo, kv_indptr, kv_len, self.num_heads, self.kv_lora_rank, False)
        if list(info) != list(backend._plan_info):
            raise RuntimeError(f"FlashInfer's MLA plan layout moved ({list(backend._plan_info)} -> {list(info)}): "
                               "a captured launch would read stale workspace offsets")

    def __call__(self, q: torch.Tensor, pool: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """q [n, h, C+R], pool [P, page, C+R] -> (o [n, h, C] in q.dtype, lse [n, h] fp32, natural log)."""
        if self.wrapper is None:
            return (q.new_empty(0, self.num_heads, self.kv_lora_rank),
                    torch.empty(0, self.num_heads, dtype=torch.float32, device=q.device))
        return self.wrapper.run(query=q, kv_cache=pool, return_lse=True, return_lse_base_on_e=True)
