"""Moving KV units between pinned host memory and the GPU: a zero-copy gather kernel and batched copies.

What it does: `copy_units` copies units of `unit_words` 4-byte words from rows `src_row[i]` of one
buffer to rows `dst_row[i]` of another, for the entries [lo, hi) of compacted lists whose bounds
are read on the device (so a step with a data-dependent miss count launches a fixed grid and can be
captured in a CUDA graph). On CUDA it is a Triton kernel whose loads read mapped pinned host memory
directly over PCIe (zero-copy, as SGLang HiSparse's swap-in does: each miss read from pinned host
DRAM by the GPU's own load instructions, sgl-project/sglang PR #33085) with a persistent grid; on
CPU, plain indexing. `BatchCopier` issues one `cudaMemcpyBatchAsync` (CUDA >= 12.8; the 13.x
signature has no failIdx) for a host-side list of (dst, src, bytes), the copy-engine path vLLM's
offloading connector uses (vllm-project/vllm PR #38460; PR #42212 added a Triton load path because
batched copies "fall off a cliff for H2D copies under ~28 KiB", issue #57342). `pinned_empty`
allocates the host pool.
What it does not do: choose between the two, or copy across devices. Measured on 1 x H200
(benchmarks/results/host_tier): the kernel moves 584/656/1152-B rows at 27/30/51 GB/s and every
64-row page at 51 GB/s (the contiguous copy: 55 GB/s); batched copies 0.1-0.7 GB/s per row and
24-32 GB/s per page; only 132-B rows go faster through a host-side gather (17 vs 7 GB/s).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import numpy as np
import torch

#: kernel tile: at most this many words (8 KB) per program iteration
TILE_WORDS = 2048


def pinned_empty(shape, dtype, device) -> torch.Tensor:
    """Host memory the GPU reads in place: pinned (hence mapped, under UVA) when device is CUDA."""
    return torch.empty(shape, dtype=dtype, pin_memory=torch.device(device).type == "cuda")


def words(t: torch.Tensor) -> torch.Tensor:
    """A contiguous tensor's bytes as a flat int32 view (row sizes are multiples of 4 bytes)."""
    if not t.is_contiguous() or t.numel() * t.element_size() % 4:
        raise ValueError("a unit buffer must be contiguous and a whole number of 4-byte words")
    return t.view(-1).view(torch.uint8).view(torch.int32) if t.dtype != torch.int32 else t.view(-1)


def tile_shape(unit_words: int) -> tuple[int, int]:
    """(units, words) per program iteration: a tile of up to TILE_WORDS words."""
    block = min(TILE_WORDS, 1 << max(0, (unit_words - 1).bit_length()))
    return max(1, TILE_WORDS // block), block


@functools.lru_cache(maxsize=None)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def copy_units_kernel(src, dst, src_row, dst_row, bounds, lo_idx, hi_idx, unit_vecs, align_rows, align_vecs,
                          UNITS: tl.constexpr, BLOCK: tl.constexpr, VEC: tl.constexpr):
        # sizes in VEC-word vectors: a listed row is a multiple of align_rows, whose span is align_vecs
        # vectors; multiplying by the constexpr VEC is how the compiler learns it may issue VEC-word
        # loads (tl.multiple_of on a select crashed Triton 3.6's layout pass)
        unit_words = unit_vecs * VEC
        pid, nprog = tl.program_id(0), tl.num_programs(0)
        lo = tl.load(bounds + lo_idx)
        hi = tl.load(bounds + hi_idx)
        n_iter = tl.cdiv(tl.maximum(hi - lo - pid * UNITS, 0), nprog * UNITS)
        lanes = tl.arange(0, BLOCK)
        for it in range(0, n_iter):
            u = lo + (pid + it * nprog) * UNITS + tl.arange(0, UNITS)  # [UNITS]
            live = u < hi
            s = tl.load(src_row + u, mask=live, other=-1)
            d = tl.load(dst_row + u, mask=live, other=-1)
            ok = (s >= 0) & (d >= 0)
            s_off = (s // align_rows) * align_vecs * VEC
            d_off = (d // align_rows) * align_vecs * VEC
            for w0 in range(0, unit_words, BLOCK):
                w = w0 + lanes
                m = ok[:, None] & (w < unit_words)[None, :]
                x = tl.load(src + s_off[:, None] + w[None, :], mask=m)
                tl.store(dst + d_off[:, None] + w[None, :], x, mask=m)

    return copy_units_kernel


def copy_units(src: torch.Tensor, dst: torch.Tensor, src_row: torch.Tensor, dst_row: torch.Tensor,
               bounds: torch.Tensor, lo_idx: int, hi_idx: int, unit_words: int, row_words: int,
               max_units: int, row_align: int = 1, grid: int | None = None, num_warps: int = 4,
               backend: str = "auto") -> None:
    """dst rows dst_row[i] .. +unit_words words = src rows src_row[i] .., for i in [bounds[lo_idx], bounds[hi_idx]).

    src / dst: int32 word views (`words`); rows are row_words words apart; entries with a negative
    row are skipped. max_units bounds hi - lo (it sizes the grid; fixed for graph capture). Every row
    listed is a multiple of row_align (a page start), which lets the kernel use wider loads.
    backend: "triton" (the kernel; CUDA, or CPU under TRITON_INTERPRET=1), "torch" (indexing, host
    reads of the bounds), "auto" = triton on CUDA, torch elsewhere.
    """
    if backend not in ("auto", "triton", "torch"):
        raise ValueError(f"backend={backend!r} is not one of ('auto', 'triton', 'torch')")
    if backend == "triton" or (backend == "auto" and dst.device.type == "cuda"):
        units, block = tile_shape(unit_words)
        span = row_align * row_words
        vec = next(v for v in (4, 2, 1) if span % v == 0 and unit_words % v == 0)
        if grid is None:
            grid = max(1, min(-(-max_units // units), 4 * _num_sms(dst.device)))
        _kernel()[(grid,)](src, dst, src_row, dst_row, bounds, lo_idx, hi_idx, unit_words // vec, row_align,
                           span // vec, UNITS=units, BLOCK=block, VEC=vec, num_warps=num_warps)
        return
    lo, hi = int(bounds[lo_idx]), int(bounds[hi_idx])
    s, d = src_row[lo:hi].cpu(), dst_row[lo:hi].cpu()
    ok = (s >= 0) & (d >= 0)
    s, d = s[ok], d[ok]
    if len(s):
        w = torch.arange(unit_words)
        dst[(d * row_words)[:, None] + w[None, :]] = src[(s * row_words)[:, None] + w[None, :]].to(dst.device)


@functools.lru_cache(maxsize=None)
def _num_sms(device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _MemcpyAttributes(ctypes.Structure):
    # cudaMemcpyAttributes: srcAccessOrder, srcLocHint, dstLocHint, flags (cuda_runtime_api.h, CUDA 12.8+)
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", _MemLocation), ("dstLocHint", _MemLocation),
                ("flags", ctypes.c_uint)]


SRC_ACCESS_ORDER_STREAM = 1  # cudaMemcpySrcAccessOrderStream
MEMCPY_HOST_TO_DEVICE = 1  # cudaMemcpyHostToDevice


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime torch already loaded (same library, same context)."""
    torch.cuda.init()
    names = [f"libcudart.so.{torch.version.cuda.split('.')[0]}", "libcudart.so"]
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            pass
    roots = [os.path.dirname(torch.__file__), os.path.join(os.path.dirname(torch.__file__), "..", "nvidia")]
    for root in roots:
        for path in glob.glob(os.path.join(root, "**", "libcudart.so*"), recursive=True):
            return ctypes.CDLL(path)
    raise OSError("libcudart not found beside torch")


class BatchCopier:
    """cudaMemcpyBatchAsync for host-side lists of copies; also one cudaMemcpyAsync per copy, to compare."""

    def __init__(self):
        self.rt = _cudart()
        self.rt.cudaMemcpyBatchAsync.restype = ctypes.c_int
        self.rt.cudaMemcpyBatchAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                                 ctypes.POINTER(_MemcpyAttributes), ctypes.c_void_p, ctypes.c_size_t,
                                                 ctypes.c_void_p]
        self.rt.cudaMemcpyAsync.restype = ctypes.c_int
        self.rt.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                            ctypes.c_void_p]
        self.rt.cudaGetErrorString.restype = ctypes.c_char_p
        self.attr = _MemcpyAttributes(SRC_ACCESS_ORDER_STREAM, _MemLocation(0, 0), _MemLocation(0, 0), 0)
        self.attr_idx = np.zeros(1, dtype=np.uint64)

    def _check(self, err: int, what: str) -> None:
        if err:
            raise RuntimeError(f"{what} failed: {self.rt.cudaGetErrorString(err).decode()} ({err})")

    def batch(self, dst_ptrs: np.ndarray, src_ptrs: np.ndarray, sizes: np.ndarray, stream: torch.cuda.Stream) -> None:
        """One batched call. Arrays of uint64; stream must not be the legacy default stream."""
        n = len(sizes)
        if n == 0:
            return
        dst_ptrs, src_ptrs, sizes = (np.ascontiguousarray(a, dtype=np.uint64) for a in (dst_ptrs, src_ptrs, sizes))
        self._check(self.rt.cudaMemcpyBatchAsync(dst_ptrs.ctypes.data, src_ptrs.ctypes.data, sizes.ctypes.data, n,
                                                 ctypes.byref(self.attr), self.attr_idx.ctypes.data, 1,
                                                 stream.cuda_stream), "cudaMemcpyBatchAsync")

    def each(self, dst_ptrs: np.ndarray, src_ptrs: np.ndarray, sizes: np.ndarray, stream: torch.cuda.Stream) -> None:
        """One cudaMemcpyAsync per copy (the issue cost per call is part of what this measures)."""
        for d, s, n in zip(dst_ptrs.tolist(), src_ptrs.tolist(), sizes.tolist()):
            self._check(self.rt.cudaMemcpyAsync(d, s, n, MEMCPY_HOST_TO_DEVICE, stream.cuda_stream), "cudaMemcpyAsync")
