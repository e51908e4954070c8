"""SGLang's memory model (the default engine): its default mem_fraction_static, its KV pool, and
the defaults that go with them. Read in sgl-project/sglang, python/sglang/srt (v0.5.7–v0.5.8
server_args with the nsa_* arguments; shared/reference/dsa-in-engines.md §6):

- `server_args.py ServerArgs._handle_gpu_memory_settings(gpu_mem)`, gpu_mem = nvidia-smi
  memory.total in MiB, minimum over GPUs (`utils/common.py get_nvgpu_memory_capacity`; on
  ROCm torch total_memory // MiB, `get_amdgpu_memory_capacity`):
    buckets: gpu_mem < 20 GiB → chunked_prefill 2048, cuda_graph_max_bs 8; < 35 GiB → 2048,
    24 (tp < 4) or 80; < 60 GiB → 4096, 32 or 160; < 90 GiB → 8192, 256 or 512; < 160 GiB
    (H20, H200) → 8192, 256 or 512; else (B200, MI300) → 16384, 512;
    reserved_mem = 512 + 1.5·max(chunked_prefill, 2048) + 2·cuda_graph_max_bs + 1024·tp·pp/8
                   [+ 3·cuda_graph_max_bs·dp_size with DP attention,
                    + 1.5·cuda_graph_max_bs·dp_size more if cuda_graph_max_bs > 300]
    reserved_mem = max(reserved_mem, 10240) when gpu_mem > 60 GiB;
    mem_fraction_static = round((gpu_mem − reserved_mem) / gpu_mem, 3)   (all MiB).
  It runs before `_handle_data_parallelism` divides chunked_prefill_size by dp_size, so the
  reserve sees the undivided chunk.
- `model_executor/model_runner_kv_cache_mixin.py profile_max_num_token`: total_gpu_memory =
  free memory after distributed init, before weights (`model_runner.py ModelRunner.__init__`,
  `get_available_gpu_memory` = torch.cuda.mem_get_info, MIN over ranks); after weights
  rest = available − total·(1 − mem_fraction_static) = mem_fraction_static·total − weights;
  max_total_num_tokens = rest // cell_size, then aligned down to whole pages (`init_memory_pool`).
- `get_cell_size_per_token`: MLA (kv_lora + rope)·layers·element_size, + for NSA/DSA models
  (index_head_dim + index_head_dim/128·4)·layers = 132 B/layer. NOTE: with fp8 the NSA pool
  really stores the 656-byte record (`NSATokenToKVPool`, `calculate_mla_kv_cache_dim`), but the
  profile divides by 576 + 132: SGLang admits rest/708 tokens per layer and the extra 80 B/token
  come out of the reserve. This model does the same: tokens from the profiled cell, bytes from
  the real record.
- `_handle_model_specific_adjustments`: DeepSeek DSA gets page_size 64 on CUDA (1 on ROCm) and
  `_set_default_nsa_kv_cache_dtype(major)`: fp8_e4m3 when the compute capability major ≥ 10
  (Blackwell), bfloat16 below. Other models keep page_size 1 and kv_cache_dtype auto (bf16).

Layouts map to SGLang flags as: tp → `--tp T`; dp → `--tp T --dp T --enable-dp-attention`;
cp and dop (no SGLang flag of their own) are sized like TP. Ignores (NOTE): speculative decoding
(+2 GiB EAGLE, +6 GiB STANDALONE), piecewise CUDA graphs (+8 MiB per captured size),
multimodal adjustments, and NCCL/custom-all-reduce/DeepEP buffers allocated before profiling
(they lower `total`; give `--reserve-gib` if they matter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.engines.base import (EngineMemoryModel, MemoryPlan, infeasible_reason, kv_bytes_on_rank,
                                  register_engine, weights_resident, whole_page_tokens)
from planner.errors import SpecError
from planner.units import MiB

if TYPE_CHECKING:  # pragma: no cover
    from planner.deployment import Deployment

SOURCE = ("sgl-project/sglang python/sglang/srt: server_args.py ServerArgs._handle_gpu_memory_settings, "
          "model_executor/model_runner_kv_cache_mixin.py profile_max_num_token (v0.5.7-v0.5.8)")
INDEXER_CELL_BYTES = 128 + 128 // 128 * 4  # index_head_dim + index_head_dim // quant_block_size * 4 (uint8)


def graph_and_chunk_defaults(gpu_mem_mib: float, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) by nvidia-smi MiB, `_handle_gpu_memory_settings`."""
    if gpu_mem_mib < 20 * 1024:
        return 2048, 8
    if gpu_mem_mib < 35 * 1024:
        return 2048, 24 if tp_size < 4 else 80
    if gpu_mem_mib < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mem_mib < 160 * 1024:  # the < 90 GiB (H100) and < 160 GiB (H20, H200) buckets agree
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def reserved_mem_terms_mib(gpu_mem_mib: float, tp_size: int, dp_size: int, dp_attention: bool,
                           pp_size: int = 1) -> dict[str, float]:
    """The terms of SGLang's reserved_mem (MiB) in the order the code adds them."""
    chunk, graph_bs = graph_and_chunk_defaults(gpu_mem_mib, tp_size)
    terms = {
        "constant_mib": 512.0,
        "chunked_prefill_activations_mib": max(chunk, 2048) * 1.5,
        "cuda_graphs_mib": graph_bs * 2.0,
        "parallel_size_mib": tp_size * pp_size / 8 * 1024,
    }
    if dp_attention:
        terms["dp_attention_padding_mib"] = graph_bs * dp_size * 3.0
        if graph_bs > 300:
            terms["dp_attention_large_graphs_mib"] = graph_bs * dp_size * 1.5
    total = sum(terms.values())
    if gpu_mem_mib > 60 * 1024 and total < 10 * 1024:
        terms["floor_to_10_gib_mib"] = 10 * 1024 - total
    return terms


def default_mem_fraction_static(gpu_mem_mib: float, reserved_mib: float) -> float:
    return round((gpu_mem_mib - reserved_mib) / gpu_mem_mib, 3)


def _dp_attention(dep: "Deployment") -> bool:
    return dep.attn == "dp" and dep.ranks > 1


@register_engine
class SGLang(EngineMemoryModel):
    name = "sglang"
    description = "SGLang: mem_fraction_static of the free memory before weights holds weights + KV"
    fraction_name = "mem_fraction_static"

    def default_kv_dtype(self, model, hw):
        if model.attention.kind == "dsa":
            major = hw.compute_capability_major
            return "fp8_dsa" if hw.vendor == "nvidia" and major is not None and major >= 10 else "bf16"
        return "bf16"

    def default_page_tokens(self, model, hw):
        if model.attention.kind == "dsa":
            return 1 if hw.vendor == "amd" else 64
        return 1

    def chunked_prefill_tokens(self, dep):
        chunk, _ = graph_and_chunk_defaults(dep.hardware.smi_total_mib, dep.ranks)
        # NOTE: `_handle_data_parallelism` divides chunked_prefill_size by dp_size with DP attention.
        return chunk // dep.ranks if _dp_attention(dep) else chunk

    def check(self, mem_fraction, reserve_bytes):
        if mem_fraction is not None and reserve_bytes is not None:
            raise SpecError("sglang: --mem-fraction and --reserve-gib set the same thing "
                            "(mem_fraction_static = (memory − reserve)/memory); give one of them")

    def cell_bytes_per_token(self, dep: "Deployment") -> float:
        """What `get_cell_size_per_token` divides by, per token on the rank (all layers)."""
        att, layers = dep.model.attention, dep.model.num_layers
        if att.kind == "dsa":
            elem = 1.0 if dep.kv_dtype == "fp8_dsa" else 2.0
            return ((att.kv_lora_rank + att.qk_rope_head_dim) * elem + INDEXER_CELL_BYTES) * layers
        return kv_bytes_on_rank(dep)

    def plan(self, dep):
        hw = dep.hardware
        gpu_mem = hw.smi_total_mib
        dp_att = _dp_attention(dep)
        if dep.mem_fraction is not None:
            frac, src, terms = dep.mem_fraction, "--mem-fraction", {}
        else:
            if dep.reserve_bytes is not None:
                terms, src = {"given_reserve_mib": dep.reserve_bytes / MiB}, "--reserve-gib in SGLang's formula"
            else:
                terms, src = reserved_mem_terms_mib(gpu_mem, dep.ranks, dep.ranks if dp_att else 1, dp_att), "engine default"
            frac = default_mem_fraction_static(gpu_mem, sum(terms.values()))
        total = hw.usable_hbm_bytes - hw.memory.context_bytes
        weights = weights_resident(dep)
        budget = frac * total - weights
        cell = self.cell_bytes_per_token(dep)
        tokens = whole_page_tokens(budget, cell, dep.page_tokens) if frac > 0 else 0.0
        chunk, graph_bs = graph_and_chunk_defaults(gpu_mem, dep.ranks)
        kw = dict(
            engine=self.name, datasheet_hbm_bytes=hw.peak.hbm_bytes, usable_hbm_bytes=hw.usable_hbm_bytes,
            total_bytes=total, fraction=frac, fraction_source=src, reserve_bytes=total * (1.0 - frac),
            reserve_terms=terms, weights_bytes=weights, kv_budget_bytes=budget,
            kv_cell_bytes_per_token=cell, kv_bytes_per_token=kv_bytes_on_rank(dep), kv_pool_tokens=tokens,
            page_tokens=dep.page_tokens, kv_dtype=dep.kv_dtype,
            defaults={"gpu_mem_mib": gpu_mem, "chunked_prefill_size": chunk, "cuda_graph_max_bs": graph_bs,
                      "tp_size": dep.ranks, "dp_size": dep.ranks if dp_att else 1, "enable_dp_attention": dp_att,
                      "page_size": dep.page_tokens, "context_bytes": hw.memory.context_bytes},
            source=SOURCE,
        )
        feasible = tokens > 0
        return MemoryPlan(**kw, feasible=feasible, reason="" if feasible else infeasible_reason(kw, self.fraction_name))
