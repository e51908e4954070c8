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
- The cell the pool is sized by: MLA (kv_lora + rope)·layers·element_size, + for NSA/DSA models
  (index_head_dim + index_head_dim/128·4)·layers = 132 B/layer. With fp8 KV on a DSA model, SGLang's
  current pool configurator sizes by the record it stores: python/sglang/srt/model_executor/
  pool_configurator.py `DefaultPoolConfigurator._compute_cell_size` (commit 003fca80) takes
  `calculate_mla_kv_cache_dim` (mem_cache/kv_cache_configurator.py: kv_lora + kv_lora/128·4 +
  rope·2 = 512 + 16 + 128 = 656 B, the rope kept in bf16) + the 132-B indexer key = 788 B per layer
  (`DSATokenToKVPool` stores exactly that). NOTE: older releases' `get_cell_size_per_token`
  (model_runner_kv_cache_mixin.py, commit 001ccef0) divided by (512 + 64)·1 + 132 = 708 while
  storing 788, so they admitted 11 % more tokens than their pool's bytes (the extra came out of the
  reserve); this model follows the current code (tests/planner/test_engines.py).
- `_handle_model_specific_adjustments`: DeepSeek DSA gets page_size 64 on CUDA (1 on ROCm) and
  `_set_default_nsa_kv_cache_dtype(major)`: fp8_e4m3 when the compute capability major ≥ 10
  (Blackwell), bfloat16 below. Other models keep page_size 1 and kv_cache_dtype auto (bf16).

Layouts map to SGLang flags through their placement: tp → `--tp T`; dp → `--tp T --dp T
--enable-dp-attention`; dptp with G groups → `--tp T --dp G --enable-dp-attention` (attention TP
of T/G inside each); cp and dop (no SGLang flag of their own) are sized like TP. Ignores (NOTE): speculative decoding
(+2 GiB EAGLE, +6 GiB STANDALONE), piecewise CUDA graphs (+8 MiB per captured size),
multimodal adjustments, and NCCL/custom-all-reduce/DeepEP buffers allocated before profiling
(they lower `total`; give `--reserve-gib` if they matter).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from planner.engines.base import (ATTENTION_DP, DECODE_CONTEXT, EngineMemoryModel, LaunchLine, MemoryPlan, flag_words,
                                  infeasible_reason, kind_bytes_on_rank, kv_bytes_on_rank, line_shape, model_path,
                                  parallel_form, register_engine, single_kv_head, state_bytes_on_rank,
                                  weight_flag_note, weights_resident, whole_page_tokens)
from planner.errors import SpecError
from planner.models.attention.base import TOKEN, WINDOW
from planner.units import MiB

if TYPE_CHECKING:  # pragma: no cover
    from planner.deployment import Deployment

SOURCE = ("sgl-project/sglang python/sglang/srt: server_args.py ServerArgs._handle_gpu_memory_settings, "
          "model_executor/model_runner_kv_cache_mixin.py profile_max_num_token (v0.5.7-v0.5.8)")
INDEXER_CELL_BYTES = 128 + 128 // 128 * 4  # index_head_dim + index_head_dim // quant_block_size * 4 (uint8)
QUANT_BLOCK = 128  # DSATokenToKVPool.quant_block_size: one fp32 scale per 128 latent channels


def mla_kv_cache_dim_bytes(v, kv_dtype: str) -> float:
    """Bytes of one DSA layer's MLA record per token as SGLang stores it: with fp8 (`fp8_dsa`)
    kv_lora fp8 + one fp32 scale per 128 + the rope in bf16 (mem_cache/kv_cache_configurator.py
    `calculate_mla_kv_cache_dim`: 656 B for DeepSeek-V3.2), else (kv_lora + rope) × 2 B."""
    if kv_dtype == "fp8_dsa":
        return v.kv_lora_rank + v.kv_lora_rank // QUANT_BLOCK * 4 + v.qk_rope_head_dim * 2
    return (v.kv_lora_rank + v.qk_rope_head_dim) * 2.0


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


DEFAULT_MOE_A2A_BACKEND = "none"  # server_args.py ServerArgs.moe_a2a_backend
# NOTE: w½ of SGLang's fused_moe_triton by GPU generation (planner.engines.kernels NarrowGemm): fitted by
# calibration/kernel_db.py `moe_half_width` on aiconfigurator-core 0.12.0's per-kernel MoE tables
# (moe_perf, sglang 0.5.14, balanced routing, ≤ 16 tokens, the same experts at moe_tp 1 against 2–32):
# h100_sxm 200, h200_sxm 240 (sm90: H200's); b200_sxm 420, b300_sxm 310, gb200 430 (sm100: B200's).
SGLANG_MOE_HALF_WIDTH = {"sm90": 240.0, "sm100": 420.0}
MOE_HALF_WIDTH_SOURCE = ("aiconfigurator-core 0.12.0 moe_perf tables (per-kernel), fitted by calibration/kernel_db.py "
                         "moe_half_width: rate(w) = rate_inf * w / (w + w_half)")


# NOTE: sgl-project/sglang model_runner_kv_cache_mixin.py `handle_max_mamba_cache` (radix cache on,
# no max_mamba_cache_size given): mamba_state_memory = rest·r/(1 + r), max_mamba_cache_size =
# mamba_state_memory // mamba_cache_per_req, the KV pool gets rest − slots·per_req; then
# `init_memory_pool`: max_num_reqs ≤ max_mamba_cache_size // MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO (3).
# r = server_args `mamba_full_memory_ratio`, 0.9 (shared/reference/frontier-models-and-engines.md §1.1).
MAMBA_FULL_MEMORY_RATIO = 0.9
MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3


def mamba_pool(dep: "Deployment", rest_bytes: float, state_per_request: float) -> tuple[float | None, float, float]:
    """(state pool bytes, state slots, what is left for the KV pool) of one GPU. Only models with a
    recurrent mixer get SGLang's mamba pool (its `mambaish_config`); others: (None, 0, rest)."""
    if not any(v.recurrent for v, _ in dep.model.mixers) or state_per_request <= 0 or rest_bytes <= 0:
        return None, 0.0, rest_bytes
    r = MAMBA_FULL_MEMORY_RATIO
    slots = math.floor(rest_bytes * r / (1.0 + r) / state_per_request)
    pool = slots * state_per_request
    return pool, float(slots), rest_bytes - pool


# NOTE: sgl-project/sglang, python/sglang/srt/configs/model_config.py `is_hybrid_swa_model` (the
# architectures whose sliding layers get a pool of their own; `--disable-hybrid-swa-memory` turns
# it off) and model_executor/model_runner_kv_cache_mixin.py `_resolve_hybrid_swa_tokens`: the
# profiled token_capacity (rest over the cell of every layer) is re-split so that
#   full_tokens·F·n_full + swa_tokens·S·n_swa = token_capacity·(F·n_full + S·n_swa),
#   swa_tokens = swa_full_tokens_ratio·full_tokens          (server_args.py default 0.8),
# each aligned down to whole pages; max_total_num_tokens = full_tokens, and an allocation must
# succeed in both pools (SWATokenToKVPoolAllocator.available_size is their min). The sliding pool
# frees what slides out of the window during decode (ScheduleBatch.maybe_evict_swa, once per
# window of steps: a request holds between one and two windows there; this model charges the
# variant's one window). Ignores: DeepSeek-V4's own compressed-pool sizing (not this path).
HYBRID_SWA_ARCHITECTURES = frozenset({
    "Llama4ForConditionalGeneration", "GptOssForCausalLM", "MiMoV2FlashForCausalLM", "MiMoV2MTP",
    "Step3p5ForCausalLM", "Step3p5MTP", "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration"})
SWA_FULL_TOKENS_RATIO = 0.8


def swa_full_tokens_ratio(dep: "Deployment") -> float:
    """r of the split: the deployment's `--swa-full-tokens-ratio`, else SGLang's default."""
    return SWA_FULL_TOKENS_RATIO if dep.swa_full_tokens_ratio is None else dep.swa_full_tokens_ratio
# NOTE: sgl-project/sglang python/sglang/srt/arg_groups/deepseek_v4_hook.py `apply_deepseek_v4_defaults`:
# max_running_requests defaults to 256 for DeepseekV4ForCausalLM (the whole engine: 256 // dp_size per
# DP-attention rank). Recorded in the plan's defaults and reported by `capacity`; the KV walls here
# stay what memory holds (its DSV4PoolConfigurator sizing is not modelled: docs/worked-examples.md, host tier).
DSV4_MAX_RUNNING_REQUESTS = 256


def swa_pools(dep: "Deployment", token_capacity: float) -> tuple[float, float, float] | None:
    """(full_tokens, full-layer pool bytes, sliding-layer pool bytes) of SGLang's hybrid SWA split
    of `token_capacity` on one GPU; None when SGLang keeps one pool for the model (an architecture
    outside `HYBRID_SWA_ARCHITECTURES`, or not a stack of only full and sliding layers)."""
    m = dep.model
    if m.architecture not in HYBRID_SWA_ARCHITECTURES:
        return None
    if any(v.memory_kinds() not in ({TOKEN}, {WINDOW}) for v, _ in m.mixers):
        return None
    full, swa = kind_bytes_on_rank(dep, TOKEN), kind_bytes_on_rank(dep, WINDOW)
    if full <= 0 or swa <= 0:
        return None
    page = dep.page_tokens
    r = swa_full_tokens_ratio(dep)
    full_tokens = math.floor(token_capacity * (full + swa) / (full + r * swa) / page) * page
    swa_tokens = math.floor(full_tokens * r / page) * page
    return float(full_tokens), full_tokens * full, swa_tokens * swa


# The launch line (SGLang.launch): `python -m sglang.launch_server`, its flags read in sgl-project/sglang
# python/sglang/srt/server_args.py ServerArgs and its fields (arg_groups/fields/parallel.py Parallel:
# `--tp-size` alias --tensor-parallel-size, `--dp-size`, `--enable-dp-attention`, `--dcp-size` alias
# --decode-context-parallel-size, `--ep-size`, `--nnodes`, `--node-rank`, `--dist-init-addr`; and
# `--model-path`, `--kv-cache-dtype` with choices auto/fp8_e5m2/fp8_e4m3/bf16/bfloat16, `--quantization`,
# `--mem-fraction-static`, `--page-size`, `--swa-full-tokens-ratio`, `--moe-a2a-backend`). Full flag
# names are written: `--tp` works only through argparse's prefix matching.
LAUNCH_SOURCE = "sgl-project/sglang python/sglang/srt/server_args.py ServerArgs (arg_groups/fields/parallel.py Parallel)"
KV_CACHE_DTYPE = {"bf16": "bfloat16", "fp8": "fp8_e4m3", "fp8_dsa": "fp8_e4m3"}
DIST_INIT_PORT = 5000


def dp_size(dep: "Deployment") -> int:
    """SGLang's `--dp-size` with `--enable-dp-attention` for the deployment's layout: its placement's
    data-parallel attention size (dp: T; dptp: the groups); 1 where SGLang runs no DP attention."""
    return dep.placement.attention_dp_size


def _dp_attention(dep: "Deployment") -> bool:
    return dp_size(dep) > 1


@register_engine
class SGLang(EngineMemoryModel):
    name = "sglang"
    description = "SGLang: mem_fraction_static of the free memory before weights holds weights + KV"
    fraction_name = "mem_fraction_static"
    takes_swa_full_tokens_ratio = True
    moe_a2a_backends = ("none", "deepep")

    def default_kv_dtype(self, model, hw):
        only = model.attention.supported_kv_dtypes()
        if "bf16" not in only:  # NOTE: DeepSeek-V4: `apply_deepseek_v4_defaults` forces fp8_e4m3
            return only[0]
        if model.attention.kind == "dsa":
            major = hw.compute_capability_major
            return "fp8_dsa" if hw.vendor == "nvidia" and major is not None and major >= 10 else "bf16"
        return "bf16"

    def default_page_tokens(self, model, hw, head_split_ranks=1, kv_dtype="bf16"):
        if model.attention.kind == "dsa":
            return 1 if hw.vendor == "amd" else 64
        if model.attention.kind == "dsv4":  # `apply_deepseek_v4_defaults`: page_size 256
            return 256
        return 1

    def scheduler(self, dep):
        """SGLang's scheduler per owner group (sgl-project/sglang, python/sglang/srt):
        - one Scheduler per DP attention rank, each with its own waiting queue, running batch and KV
          pool; all ranks step together, an idle one running an IDLE batch for the MoE collectives
          (managers/data_parallel_controller.py launch_tensor_parallel_group; managers/
          scheduler_components/dp_attn.py MLPSyncBatchInfo, `get_idle_batch`);
        - a step runs a prefill batch or a decode batch, prefill first (managers/scheduler.py
          get_next_batch_to_run: "Run prefill first if possible"; --enable-mixed-chunk off by default);
          the prefill batch packs whole prompts up to the chunk, then one chunked request
          (managers/schedule_policy.py PrefillAdder);
        - the chunk per DP rank is chunked_prefill_size // dp_size (arg_groups/parallel_hook.py
          handle_data_parallelism);
        - max_running_requests per DP worker: the given value // dp_size, else
          min(clamp(int(pool tokens / context_len · 512), 2048, 4096), pool tokens // 2)
          (mem_cache/kv_cache_configurator.py KVCacheConfigurator.resolve_max_num_reqs); DeepSeek-V4's
          256 for the whole engine (arg_groups/deepseek_v4_hook.py apply_deepseek_v4_defaults);
        - requests are dispatched round robin (load_balance_method "auto" → round_robin,
          arg_groups/serving_hook.py handle_load_balance_method; data_parallel_controller.py
          round_robin_scheduler);
        - when a decode step doesn't fit, retract_decode retracts the request with the fewest output
          tokens, ties the longest prompt, back to the queue (managers/schedule_batch.py).
        NOTE: a layout SGLang does not launch as DP attention but whose requests sit on G owner groups
        (DOP) is given G schedulers with chunked_prefill_size // G, as DP attention would be. Not
        modelled: the admission's output reservation (the new request's min(max_new_tokens, 4096)
        and the running ones' remaining × a new_token_ratio decaying 0.7 → 0.098 over 600 steps,
        0.21 → 0.029 with DP attention) — admission here reserves what the ledger holds."""
        from planner.engines.scheduling import SchedulerSpec

        g = dep.placement.owner_groups
        chunk, _ = graph_and_chunk_defaults(dep.hardware.smi_total_mib, dep.ranks)
        if any(v.kind == "dsv4" for v, _ in dep.model.mixers):
            cap = float(max(DSV4_MAX_RUNNING_REQUESTS // g, 1))
        else:
            pool = dep.memory.kv_pool_tokens
            ctx = dep.model.context_window_tokens
            est = max(min(int(pool / ctx * 512), 4096), 2048) if ctx else 2048
            cap = float(max(min(est, int(pool // 2)), 1))
        return SchedulerSpec("sglang", g, "separate", max(chunk // g, 1), cap, "round_robin", "fewest_output_first",
                             False, "sgl-project/sglang python/sglang/srt: managers/scheduler.py, schedule_policy.py, "
                                    "data_parallel_controller.py; mem_cache/kv_cache_configurator.py",
                             chunk_split_over_groups=True)

    def kernels(self, dep, moe_a2a_backend: str | None = None):
        """What SGLang's steps run (planner.engines.kernels), read in sgl-project/sglang python/sglang/srt:
        - MoE token movement with DP attention, `--moe-a2a-backend none` (server_args.py ServerArgs:
          moe_a2a_backend "none", deepep_mode "auto"): layers/dp_attention.py `_dp_gather` — a decode
          batch in a CUDA graph runs DpPaddingMode.MAX_LEN (`get_default_mode_in_cuda_graph`): every
          rank's batch padded to the largest, `all_gather_into_tensor`, and `dp_reduce_scatter_tensor`
          after the experts; an extend batch with dp > 1 runs SUM_LEN (`get_dp_padding_mode`):
          `_dp_gather_via_all_reduce` of a zeroed buffer and an all-reduce of the MoE output before
          `dp_scatter` slices it. With `deepep`, `deepep_mode` auto runs DeepEP low-latency for decode
          and normal for extend batches;
        - the expert GEMM: fused_moe_triton (layers/moe/fused_moe_triton), narrow-width constant
          `SGLANG_MOE_HALF_WIDTH`;
        - CUDA graphs: server_args.py `_generate_cuda_graph_batch_sizes`: [1, 2, 4, 8, 12] +
          range(16, 257, 8) + range(272, 512, 16) + range(512, cuda_graph_max_bs + 1, 32), padded
          (disable_cuda_graph_padding False); cuda_graph_max_bs from `_handle_gpu_memory_settings`;
        - attention: the variants' defaults are SGLang's (planner/models/attention: FA3 / FlashMLA on
          Hopper, TRT-LLM's MLA kernels on Blackwell, DSA's flashmla_kv for the fp8 record);
        - per-step overhead: the stated default (planner.engines.kernels DEFAULT_STEP_OVERHEAD_S)."""
        from planner.engines.kernels import (DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE, AllGatherReduceScatter,
                                             AllReduceGather, AttentionBackend, CudaGraphs, DeepEPLowLatency,
                                             DeepEPNormal, EngineKernels, NarrowGemm, capture_sizes)

        moe_a2a_backend = moe_a2a_backend or dep.moe_a2a or DEFAULT_MOE_A2A_BACKEND
        if moe_a2a_backend == "deepep":
            decode = DeepEPLowLatency("deepep_low_latency", "sglang layers/moe/token_dispatcher/deepep.py (deepep_mode auto: decode)")
            prefill = DeepEPNormal("deepep_normal", "sglang layers/moe/token_dispatcher/deepep.py (deepep_mode auto: extend)")
        else:
            decode = AllGatherReduceScatter("dp_gather_max_len", "sglang layers/dp_attention.py _dp_gather_via_all_gather, "
                                            "dp_reduce_scatter_tensor (DpPaddingMode.MAX_LEN in CUDA graphs)", pad_to_max=True)
            prefill = AllReduceGather("dp_gather_sum_len", "sglang layers/dp_attention.py _dp_gather_via_all_reduce "
                                      "(DpPaddingMode.SUM_LEN for extend batches), tensor_model_parallel_all_reduce")
        _, max_bs = graph_and_chunk_defaults(dep.hardware.smi_total_mib, dep.ranks)
        sizes = capture_sizes(([1, 2, 4, 8, 12], range(16, 257, 8), range(272, 512, 16), range(512, max_bs + 1, 32)))
        sizes = tuple(x for x in sizes if x <= max_bs)
        src = "sglang python/sglang/srt/server_args.py _generate_cuda_graph_batch_sizes, _handle_gpu_memory_settings"
        return EngineKernels(
            "sglang", decode, prefill, NarrowGemm("fused_moe_triton", SGLANG_MOE_HALF_WIDTH, MOE_HALF_WIDTH_SOURCE),
            CudaGraphs(sizes, True, src),
            {"*": AttentionBackend("fa3 (Hopper) / trtllm_mla (Blackwell)", None,
                                   "planner/models/attention/*.py decode_kernel: SGLang's defaults")},
            DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE)

    def check(self, mem_fraction, reserve_bytes):
        if mem_fraction is not None and reserve_bytes is not None:
            raise SpecError("sglang: --mem-fraction and --reserve-gib set the same thing "
                            "(mem_fraction_static = (memory − reserve)/memory); give one of them")

    def cell_bytes_per_token(self, dep: "Deployment") -> float:
        """What SGLang divides the KV budget by, per token on the rank (all layers): the pool
        configurator's cell (module docstring), the stored MLA record + the indexer key for DSA."""
        dsa = [(v, n) for v, n in dep.model.mixers if v.kind == "dsa"]
        if not dsa:
            return kv_bytes_on_rank(dep)
        # NOTE: GLM-5.2's 'shared' layers (no indexer of their own) are counted without the indexer cell
        return sum((mla_kv_cache_dim_bytes(v, dep.kv_dtype) + (INDEXER_CELL_BYTES if v.own_indexer else 0.0)) * n
                   for v, n in dsa)

    def parallel_flags(self, dep: "Deployment") -> tuple[list[str], str]:
        """(SGLang's parallel flags for `dep`, '') or ([], why no flag runs it), from the placement
        (planner.engines.base.parallel_form):
        - one group, heads split → `--tp-size T`;
        - G groups with attention TP inside → `--tp-size T --dp-size G --enable-dp-attention`
          (attn_tp_size = tp_size // dp_size, layers/dp_attention.py compute_dp_attention_world_info);
          NOTE: on MoE models only: the flag's help names MoE model code ("Currently DeepSeek-V2 and
          Qwen 2/3 MoE models are supported"), and floorfirst prices a dense MLP under DP attention
          that no dense model file of SGLang was checked to run;
        - tokens interleaved over the group → `--tp-size T --dcp-size T`, for models with one KV head
          and no top-k indexer: NOTE: SGLang's DCP attention backends are MLA's (one latent head;
          the cap of dcp at tp / KV heads is vLLM's, taken as SGLang's), and SGLang's DCP keeps
          DSA's indexer whole on every rank (PR #31821) where floorfirst's dcp layout prices vLLM's
          split indexer (planner/layouts/dcp.py);
        - experts over the group → `--ep-size T`."""
        form, why = parallel_form(dep)
        if form is None:
            return [], why
        t, pl = dep.ranks, dep.placement
        if form == ATTENTION_DP and not dep.model.has_moe:
            return [], ("SGLang runs --enable-dp-attention on MoE model code (server_args.py enable_dp_attention: "
                        "'DeepSeek-V2 and Qwen 2/3 MoE models'); a dense model's DP attention is not launched")
        if form == DECODE_CONTEXT:
            heads = single_kv_head(dep)
            if heads:
                return [], f"SGLang's DCP (--dcp-size {t}) runs MLA's single KV head split by tokens: {heads}"
            if any(v.topk_tokens() is not None for v, _ in dep.model.mixers):
                return [], ("SGLang's DCP keeps the top-k indexer whole on every rank (PR #31821); floorfirst's dcp "
                            "layout prices vLLM's indexer split by tokens")
        flags: list[tuple] = [("--tp-size", t)]
        if form == ATTENTION_DP:
            flags += [("--dp-size", pl.owner_groups), ("--enable-dp-attention", True)]
        elif form == DECODE_CONTEXT:
            flags.append(("--dcp-size", t))
        if dep.moe == "ep":
            flags.append(("--ep-size", t))
        return flag_words(*flags), ""

    def launch(self, dep):
        """`python -m sglang.launch_server` for `dep` (module note above LAUNCH_SOURCE): the parallel
        flags, replicas as `--dp-size` where DP attention does not take it, the nodes one server spans,
        and the memory settings the deployment gives (the KV dtype always, the fraction, page size and
        SWA ratio when not the engine's default)."""
        flags, why = self.parallel_flags(dep)
        if why:
            return LaunchLine(self.name, None, why, source=LAUNCH_SOURCE)
        form, _ = parallel_form(dep)
        copies, nodes = line_shape(dep, form, replicas_flag=True)
        words = ["python", "-m", "sglang.launch_server", "--model-path", model_path(dep), *flags]
        notes: list[str] = []
        if dep.replicas > 1 and copies == 1:
            words += flag_words(("--dp-size", dep.replicas))  # without DP attention: replicas of the tp group
        if copies > 1:
            notes.append(f"start {copies} of these servers (one per replica) behind a router (sglang_router)")
        if dep.moe == "ep" and dep.moe_a2a not in (None, DEFAULT_MOE_A2A_BACKEND):
            words += flag_words(("--moe-a2a-backend", dep.moe_a2a))
        if nodes > 1:
            words += flag_words(("--nnodes", nodes), ("--node-rank", "${NODE_RANK}"),
                                ("--dist-init-addr", f"${{HEAD_ADDR}}:{DIST_INIT_PORT}"))
            notes.append(f"run it on each of the {nodes} nodes with NODE_RANK 0..{nodes - 1} and HEAD_ADDR the first node's")
        words += flag_words(("--kv-cache-dtype", KV_CACHE_DTYPE[dep.kv_dtype]))
        if dep.mem_fraction is not None:
            words += flag_words(("--mem-fraction-static", f"{dep.mem_fraction:g}"))
        if dep.page_tokens != self.default_page_tokens(dep.model, dep.hardware, dep.placement.head_split_ranks,
                                                       dep.kv_dtype):
            words += flag_words(("--page-size", dep.page_tokens))
        if dep.swa_full_tokens_ratio is not None:
            words += flag_words(("--swa-full-tokens-ratio", f"{dep.swa_full_tokens_ratio:g}"))
        if dep.weight_dtype_given and dep.weight_dtype == "fp8":
            words += flag_words(("--quantization", "fp8"))  # QUANTIZATION_CHOICES: "fp8", online quantization
        notes += [n for n in (weight_flag_note(dep),) if n]
        return LaunchLine(self.name, " ".join(words), copies=copies, notes=tuple(notes), source=LAUNCH_SOURCE)

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
                terms, src = reserved_mem_terms_mib(gpu_mem, dep.ranks, dp_size(dep), dp_att), "engine default"
            frac = default_mem_fraction_static(gpu_mem, sum(terms.values()))
        total = hw.usable_hbm_bytes - hw.memory.context_bytes
        weights = weights_resident(dep)
        rest = frac * total - weights
        state = state_bytes_on_rank(dep)
        state_pool, slots, budget = mamba_pool(dep, rest, state)
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
                      "tp_size": dep.ranks, "dp_size": dp_size(dep), "enable_dp_attention": dp_att,
                      "page_size": dep.page_tokens, "context_bytes": hw.memory.context_bytes},
            source=SOURCE,
        )
        if any(v.kind == "dsv4" for v, _ in dep.model.mixers):  # an explicit default (the derived one reads the pool)
            kw["defaults"]["max_running_requests"] = DSV4_MAX_RUNNING_REQUESTS
        split = swa_pools(dep, tokens) if tokens > 0 else None
        if split is not None:
            full_tokens, full_pool, swa_pool = split
            kw.update(kv_pool_tokens=full_tokens, swa_pool_bytes=(full_pool, swa_pool))
            kw["defaults"].update(swa_full_tokens_ratio=swa_full_tokens_ratio(dep), full_max_total_num_tokens=full_tokens,
                                  swa_max_total_num_tokens=swa_pool / kind_bytes_on_rank(dep, WINDOW))
        if state_pool is not None:
            kw.update(state_pool_bytes=state_pool, state_bytes_per_request=state,
                      max_running_requests=math.floor(slots / MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO))
            kw["defaults"].update(mamba_full_memory_ratio=MAMBA_FULL_MEMORY_RATIO, max_mamba_cache_size=slots)
        elif state:
            kw.update(state_bytes_per_request=state)
        feasible = tokens > 0 and (state_pool is None or kw["max_running_requests"] >= 1)
        return MemoryPlan(**kw, feasible=feasible, reason="" if feasible else infeasible_reason(kw, self.fraction_name))
