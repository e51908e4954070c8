"""Decode attention kernels as the step model sees them: how many query rows one MMA tile holds,
so a rank with fewer query heads than a tile pays for the whole tile (`head_padding`).

A kernel is a property of the engine and the GPU generation, not of the model: the same 16
heads per rank fill a quarter of a 64-row tile in SGLang's FA3 decode and the whole of a 16-row
block in floorfirst's own Triton kernel. Each declaration names its source. The GPU generation
comes from `gpu_arch(hw)`, read from the hardware spec's declared compute capability (or, without
one, its declared `arch`), never from its name.

Rows and padding, per decode query token of one request on one rank with `h` query heads:
- kernels that fold query tokens into the M dimension (FlashMLA dense, FlashInfer MLA, FA3 with
  PackGQA) compute ceil(q·h / tile)·tile rows for q query tokens of a request;
- FlashMLA's sparse decode takes h_q ∈ {64, 128} per query token: q·pad(h) rows.
The padded rows do the same per-(head, KV token) work as real ones, so the waste is
(padded − q·h)/(q·h) of the decode attention core. Prefill kernels are not padded here (their M
dimension is the chunk's tokens).

Does not: pick a kernel for a deployment (`AttentionVariant.decode_kernel` does, with the
deployment's override), or model anything but the tile (dequantisation, split-KV scheduling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import SpecError

HOPPER, BLACKWELL = "sm90", "sm100"

# Declared generation -> the kernels' arch keys. NOTE: engines branch on the compute capability's
# major (SGLang nsa_backend.py `required_padding = 128 if self.device_sm_major >= 10 else 64`), so a
# declared capability decides first; a spec of unknown generation gets no head tile (its floors
# stay lower bounds).
_ARCH_KEYS = {"hopper": HOPPER, "blackwell": BLACKWELL}


def gpu_arch(hw) -> str | None:
    """The GPU generation ('sm90', 'sm100') of a HardwareSpec, or None when unknown."""
    major = getattr(hw, "compute_capability_major", None)
    if major is not None and getattr(hw, "vendor", "nvidia") == "nvidia":
        return HOPPER if major == 9 else BLACKWELL if major >= 10 else None
    return _ARCH_KEYS.get(str(getattr(hw, "arch", "unknown")))


@dataclass(frozen=True)
class DecodeKernel:
    """One decode attention kernel: its query-row tile per GPU generation."""

    name: str
    tiles: dict[str, int]  # arch -> rows per tile ('*': any arch)
    packs_query_tokens: bool  # q query tokens of a request share the tile's rows
    source: str
    head_options: tuple[int, ...] = ()  # fixed head counts a kernel takes (pad to the first that fits)
    min_tile: int = 0  # power-of-two blocks from this size up to the tile (Triton BLOCK_H)

    def tile(self, arch: str | None) -> int:
        t = self.tiles.get(arch or "", self.tiles.get("*", 1))
        return int(t)

    def pads(self, arch: str | None) -> bool:
        """Whether a decode query can compute idle rows here (False: a 1-row tile, nothing to pad)."""
        return not (self.tile(arch) == 1 and self.packs_query_tokens and not self.head_options and not self.min_tile)

    def padded_heads(self, heads: float, arch: str | None) -> float:
        """Query rows one query token costs on a rank holding `heads` query heads (no token folding)."""
        if heads <= 0:
            return 0.0
        options = self.head_options
        if options:
            for o in options:
                if heads <= o:
                    return float(o)
            return float(math.ceil(heads / options[-1]) * options[-1])
        t = self.tile(arch)
        if self.min_tile:
            t = min(t, max(self.min_tile, 1 << (int(math.ceil(heads)) - 1).bit_length()))
        return float(math.ceil(heads / t) * t)

    def padded_rows(self, heads: float, query_tokens, arch: str | None):
        """Rows computed for one request's `query_tokens` (scalar or array) decode queries."""
        q = np.asarray(query_tokens, dtype=np.float64)
        if heads <= 0:
            return np.zeros_like(q)
        if self.packs_query_tokens:
            t = self.tile(arch)
            rows = q * heads  # ⌈q·heads / t⌉ · t, in place
            rows /= t
            rows = np.ceil(rows, out=rows) if isinstance(rows, np.ndarray) else np.ceil(rows)
            rows *= t
            return rows
        return q * self.padded_heads(heads, arch)


_KERNELS = {k.name: k for k in (
    DecodeKernel("fa3_mla", {"*": 64}, True,
                 "Dao-AILab/flash-attention hopper/tile_size.h tile_size_fwd_sm90: kBlockM = 64 for headdim 64 / "
                 "headdim_v 512 (the MLA path; PackGQA folds a token's heads into M); SGLang's DSA decode on "
                 "H200 with bf16 KV (sglang docs/basic_usage/deepseek_v32.md, server_args _set_default_nsa_backends)"),
    DecodeKernel("flashmla_dense", {"*": 64}, True,
                 "deepseek-ai/FlashMLA csrc/sm90/decode/dense/config.h BLOCK_SIZE_M = 64; csrc/api/dense_decode.h "
                 "q_seq_per_hk = seqlen_q * num_q_heads_per_hk (tokens × heads in M)"),
    DecodeKernel("flashinfer_mla", {"*": 64}, True,
                 "flashinfer-ai/flashinfer include/flashinfer/attention/mla_hopper.cuh BatchMLAPageAttentionHopper: "
                 "CTA_TILE_Q = 64 over (token, head) packed rows"),
    DecodeKernel("flashmla_sparse", {HOPPER: 64, BLACKWELL: 128, "*": 64}, False,
                 "sglang python/sglang/srt/layers/attention/nsa_backend.py _forward_flashmla_sparse: "
                 "required_padding = 128 if device_sm_major >= 10 else 64; FlashMLA csrc/api/sparse_decode.h "
                 "takes only h_q 64 or 128"),
    DecodeKernel("flashmla_kv", {"*": 64}, False,
                 "sglang python/sglang/srt/layers/attention/dsa_backend.py DeepseekSparseAttnBackend.__init__: "
                 "flashmla_kv_num_q_heads = 64 if num_q_heads <= 64 else 128; vLLM flashmla_sparse.py "
                 "_compute_fp8_decode_padded_heads: 64 if num_heads <= 64 else 128", head_options=(64, 128)),
    DecodeKernel("triton_executor", {"*": 64}, False,
                 "floorfirst executor/torch_executor/kernels.py mla_decode_triton: block_h = min(64, max(16, "
                 "next power of two ≥ heads)); ceil(heads / block_h) head blocks", min_tile=16),
    DecodeKernel("unpadded", {"*": 1}, True,
                 "no tile declared: cuBLAS-chosen tiles (calibration/step_probe.py's torch bmm), GQA decode, "
                 "or a GPU generation the planner doesn't know"),
)}


def decode_kernels() -> dict[str, DecodeKernel]:
    return dict(_KERNELS)


def decode_kernel(name: str) -> DecodeKernel:
    if name not in _KERNELS:
        raise SpecError(f"attention_kernel={name!r} is not a known decode kernel; choose one of {', '.join(_KERNELS)}")
    return _KERNELS[name]
