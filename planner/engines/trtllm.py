"""TensorRT-LLM's memory model and scheduler (PyTorch backend, `trtllm-serve` defaults). Read in
NVIDIA/TensorRT-LLM:

- KV memory: `kv_cache_free_gpu_mem_fraction` 0.9 of the GPU memory free after the model is loaded
  and its buffers allocated (tensorrt_llm/commands/serve.py `get_llm_args`: free_gpu_memory_fraction
  0.9; tensorrt_llm/llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction 0.9: "Free GPU memory
  fraction reserved for KV Cache, after allocating model weights and buffers"). Unlike vLLM's
  gpu_memory_utilization it is a fraction of what is left, not of the total. NOTE: the buffers are
  estimated as vLLM's profile run at the same token budget (max_num_tokens 8192: activations of a
  forward pass and the sampler's logits) plus the same non-torch memory; TRT-LLM measures them in
  its own dry run (tensorrt_llm/_torch/pyexecutor/_util.py KvCacheCreator), not reproduced here;
- pages: `tokens_per_block` 32 (KvCacheConfig);
- KV dtype `auto`: the checkpoint's (bf16 here unless the model has only fp8 caches);
- the scheduler (scheduler()): max_batch_size 2048 and max_num_tokens 8192 per rank
  (llm_args.py BaseLlmArgs; builder.py BuildConfig), context and generation requests in one token
  budget per step (pyexecutor/scheduler/scheduler.py PyMicroBatchScheduler: generation requests
  and context chunks share max_num_tokens), capacity policy GUARANTEED_NO_EVICT (SchedulerConfig
  default; trtllm-serve sets it): a request is admitted only if its prompt + max new tokens fit,
  in FCFS order, and none is ever evicted (GuaranteedNoEvictPolicy.schedule,
  kvCacheManager.cpp getRemainingBlocksToCompletion); with attention DP every rank schedules its
  own requests and new requests go, longest prompts first, to the rank with the fewest active
  prompt tokens (pyexecutor/scheduler/adp_router.py DefaultADPRouter); a rank with nothing to do
  runs a one-token dummy generation request (`_pad_attention_dp_dummy_request`).
  NOTE: chunked prefill is off by default (`enable_chunked_prefill` False), which rejects a prompt
  longer than max_num_tokens; serving results of long prompts ran with it on, so prompts are taken
  as chunked in max_num_tokens pieces.

Does not: model the TensorRT (engine-build) backend, or KV block reuse.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planner.engines.base import (ATTENTION_DP, DECODE_CONTEXT, EngineMemoryModel, LaunchLine, MemoryPlan, flag_words,
                                  infeasible_reason, kv_bytes_on_rank, line_shape, model_path, parallel_form,
                                  register_engine, state_bytes_on_rank, weights_resident, whole_page_tokens)
from planner.engines.vllm import NON_TORCH_MULTI_GPU_BYTES, NON_TORCH_ONE_GPU_BYTES, peak_activation_terms

if TYPE_CHECKING:  # pragma: no cover
    from planner.deployment import Deployment

SOURCE = ("NVIDIA/TensorRT-LLM: tensorrt_llm/commands/serve.py get_llm_args, tensorrt_llm/llmapi/llm_args.py "
          "KvCacheConfig (free_gpu_memory_fraction 0.9, tokens_per_block 32), BaseLlmArgs (max_batch_size 2048, "
          "max_num_tokens 8192)")
FREE_GPU_MEMORY_FRACTION = 0.9
TOKENS_PER_BLOCK = 32
MAX_BATCH_SIZE = 2048
MAX_NUM_TOKENS = 8192


# NOTE: w½ of TRT-LLM's CUTLASS fused MoE (planner.engines.kernels NarrowGemm), fitted by
# calibration/kernel_db.py `moe_half_width` on aiconfigurator-core 0.12.0 moe_perf tables (trtllm
# 1.3.0rc23): h100_sxm 170, h200_sxm 330 (sm90: H200's); b300_sxm 425 (sm100; b200_sxm and gb200 have no
# bf16/fp8 TP rows in that table).
TRTLLM_MOE_HALF_WIDTH = {"sm90": 330.0, "sm100": 425.0}
TRTLLM_MOE_HALF_WIDTH_SOURCE = ("aiconfigurator-core 0.12.0 moe_perf tables (per-kernel), fitted by calibration/kernel_db.py "
                                "moe_half_width: rate(w) = rate_inf * w / (w + w_half)")


# The launch line (TensorRTLLM.launch): `trtllm-serve MODEL`, its click options read in NVIDIA/TensorRT-LLM
# tensorrt_llm/commands/serve.py `serve` (`--tp_size`, `--pp_size`, `--ep_size` → moe_expert_parallel_size,
# `--kv_cache_free_gpu_memory_fraction`, `--extra_llm_api_options` "Path to a YAML file that overwrites the
# parameters specified by trtllm-serve"); what has no option goes into that YAML, keys of
# tensorrt_llm/llmapi/llm_args.py: `enable_attention_dp` (BaseLlmArgs, "Enable attention data parallel"),
# `kv_cache_config.dtype` (KvCacheConfig, "auto" by default) and `kv_cache_config.tokens_per_block`.
LAUNCH_SOURCE = ("NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py serve (click options), "
                 "tensorrt_llm/llmapi/llm_args.py BaseLlmArgs, KvCacheConfig")
EXTRA_OPTIONS_FILE = "extra_llm_api_options.yaml"
KV_CACHE_DTYPE = {"fp8": "fp8", "fp8_dsa": "fp8"}  # bf16: "auto" (the checkpoint's), the default


@register_engine
class TensorRTLLM(EngineMemoryModel):
    name = "trtllm"
    description = "TensorRT-LLM (PyTorch backend): free_gpu_memory_fraction of the memory left after weights and buffers holds KV"
    fraction_name = "free_gpu_memory_fraction"

    def default_kv_dtype(self, model, hw):
        only = model.attention.supported_kv_dtypes()
        return "bf16" if "bf16" in only else only[0]

    def default_page_tokens(self, model, hw, head_split_ranks=1, kv_dtype="bf16"):
        return TOKENS_PER_BLOCK

    def scheduler(self, dep: "Deployment"):
        from planner.engines.scheduling import SchedulerSpec

        return SchedulerSpec("trtllm", dep.placement.owner_groups, "mixed", MAX_NUM_TOKENS, float(MAX_BATCH_SIZE),
                             "fewest_prompt_tokens", "never", True,
                             "NVIDIA/TensorRT-LLM: tensorrt_llm/_torch/pyexecutor/scheduler/scheduler.py "
                             "(GuaranteedNoEvictPolicy, PyMicroBatchScheduler), scheduler/adp_router.py DefaultADPRouter")

    def kernels(self, dep):
        """What TensorRT-LLM's steps run (planner.engines.kernels), read in NVIDIA/TensorRT-LLM:
        - MoE token movement with attention DP: tensorrt_llm/_torch/modules/fused_moe/communication/
          communication_factory.py CommunicationFactory.create_strategy — MNNVL all-to-all where the
          platform has multi-node NVLink (GB200 NVL72; NOTE: priced here as all-gather + reduce-scatter),
          DeepEP only with TRTLLM_CAN_USE_DEEP_EP=1, else (and always with MoE TP) AllGatherReduceScatter;
        - the expert GEMM: the CUTLASS fused MoE (tensorrt_llm/_torch/modules/fused_moe/fused_moe_cutlass.py),
          narrow-width constant `TRTLLM_MOE_HALF_WIDTH`;
        - CUDA graphs: tensorrt_llm/llmapi/llm_args.py CudaGraphConfig: max_batch_size 128,
          enable_padding False (`_generate_cuda_graph_batch_sizes`: 1–31, 32, 64, 128): a batch is never
          padded; one not captured runs eagerly (NOTE: its launch gaps are not priced);
        - attention: the TRTLLM backend (tensorrt_llm/_torch/attention_backend/trtllm.py); its decode
          tile is not declared here, so the variants' defaults apply (NOTE: unverified);
        - per-step overhead: the stated default (planner.engines.kernels DEFAULT_STEP_OVERHEAD_S)."""
        from planner.engines.kernels import (DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE, AllGatherReduceScatter,
                                             AttentionBackend, CudaGraphs, EngineKernels, NarrowGemm, capture_sizes)

        comm = AllGatherReduceScatter("allgather_reducescatter", "tensorrt_llm/_torch/modules/fused_moe/communication/"
                                      "communication_factory.py (fallback strategy)")
        sizes = capture_sizes((range(1, 32), [32, 64, 128]))
        return EngineKernels("trtllm", comm, comm, NarrowGemm("cutlass fused_moe", TRTLLM_MOE_HALF_WIDTH, TRTLLM_MOE_HALF_WIDTH_SOURCE),
                             CudaGraphs(sizes, False, "tensorrt_llm/llmapi/llm_args.py CudaGraphConfig (enable_padding False)"),
                             {"*": AttentionBackend("TRTLLM", None, "tensorrt_llm/_torch/attention_backend/trtllm.py")},
                             DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE)

    def parallel_flags(self, dep: "Deployment") -> tuple[list[str], str]:
        """(trtllm-serve's parallel options for `dep`, '') or ([], why), from the placement
        (planner.engines.base.parallel_form): one group with heads split → `--tp_size T`; attention DP
        → `--tp_size T` with `enable_attention_dp: true` in the YAML (`launch`), where every rank is its
        own DP rank: TensorRT-LLM's attention takes dp_size = tp_size and tp_size = 1 under it
        (tensorrt_llm/_torch/modules/attention.py Attention.__init__ and MLA.__init__), so G < T groups of
        attention TP have no setting; MoE models only (NOTE: as SGLang and vLLM; TensorRT-LLM's support
        matrix lists attention DP per architecture, not checked for dense ones); experts over the group
        → `--ep_size T` (moe_tp_size = tp_size // ep_size, tensorrt_llm/mapping.py Mapping). No option runs
        decode context parallelism: TensorRT-LLM's context parallelism is Helix (`cp_config`), whose CP
        ranks come on top of TP (Mapping: world_size = tp·pp·cp), not the dcp layout priced here."""
        form, why = parallel_form(dep)
        if form is None:
            return [], why
        t, pl = dep.ranks, dep.placement
        if form == DECODE_CONTEXT:
            return [], ("trtllm-serve has no decode-context-parallel option (TensorRT-LLM's Helix context parallelism, "
                        "cp_config, adds its ranks to TP: another layout, not modelled)")
        if form == ATTENTION_DP and not dep.model.has_moe:
            return [], "TensorRT-LLM's attention DP is launched here for MoE models only (a dense model's is not checked)"
        if form == ATTENTION_DP and pl.owner_groups != t:
            return [], (f"TensorRT-LLM's enable_attention_dp makes every one of the {t} ranks a DP rank "
                        f"(_torch/modules/attention.py: tp_size 1 under attention DP); {pl.owner_groups} groups of "
                        f"{pl.group_ranks} ranks have no setting")
        flags: list[tuple] = [("--tp_size", t)]
        if dep.moe == "ep":
            flags.append(("--ep_size", t))
        return flag_words(*flags), ""

    def launch(self, dep):
        """`trtllm-serve MODEL` for `dep` (note above LAUNCH_SOURCE), with the extra LLM API options
        YAML written first where the deployment needs a key no option sets (attention DP, fp8 KV, a
        page size other than 32)."""
        flags, why = self.parallel_flags(dep)
        if why:
            return LaunchLine(self.name, None, why, source=LAUNCH_SOURCE)
        form, _ = parallel_form(dep)
        copies, nodes = line_shape(dep, form, replicas_flag=False)
        words = ["trtllm-serve", model_path(dep), *flags]
        notes: list[str] = []
        if copies > 1:
            notes.append(f"start {copies} of these servers (one per replica) behind a router")
        if nodes > 1:
            notes.append(f"one server spans {nodes} nodes: start it under MPI on all of them (mpirun with "
                         "trtllm-llmapi-launch; not written here)")
        if dep.mem_fraction is not None:
            words += flag_words(("--kv_cache_free_gpu_memory_fraction", f"{dep.mem_fraction:g}"))
        extra: list[str] = []
        if form == ATTENTION_DP:
            extra.append("enable_attention_dp: true")
        cache = []
        if dep.kv_dtype in KV_CACHE_DTYPE:
            cache.append(f"  dtype: {KV_CACHE_DTYPE[dep.kv_dtype]}")
        if dep.page_tokens != self.default_page_tokens(dep.model, dep.hardware):
            cache.append(f"  tokens_per_block: {dep.page_tokens}")
        if cache:
            extra += ["kv_cache_config:", *cache]
        files = ()
        if extra:
            words += flag_words(("--extra_llm_api_options", EXTRA_OPTIONS_FILE))
            files = ((EXTRA_OPTIONS_FILE, "\n".join(extra) + "\n"),)
        if dep.weight_dtype_given:  # NOTE: trtllm-serve has no quantization option; the checkpoint decides
            notes.append(f"the line names {model_path(dep)}; {dep.weight_dtype} weights (--weight-dtype) need a checkpoint "
                         f"stored in {dep.weight_dtype}")
        return LaunchLine(self.name, " ".join(words), files=files, copies=copies, notes=tuple(notes),
                          source=LAUNCH_SOURCE)

    def plan(self, dep):
        hw = dep.hardware
        total = hw.usable_hbm_bytes - hw.memory.context_bytes
        frac, src = ((dep.mem_fraction, "--mem-fraction") if dep.mem_fraction is not None
                     else (FREE_GPU_MEMORY_FRACTION, "engine default"))
        if dep.reserve_bytes is not None:
            terms = {"given_reserve_bytes": dep.reserve_bytes}
            held = dep.reserve_bytes
        else:
            act = peak_activation_terms(dep)
            non_torch = NON_TORCH_ONE_GPU_BYTES if dep.ranks == 1 else NON_TORCH_MULTI_GPU_BYTES
            terms = {"buffers_bytes": act["forward_peak_bytes"] + act["sampler_peak_bytes"], "non_torch_bytes": non_torch}
            held = terms["buffers_bytes"] + non_torch
        weights = weights_resident(dep)
        free = total - weights - held
        budget = frac * free
        bpt = kv_bytes_on_rank(dep)
        tokens = whole_page_tokens(budget, bpt, dep.page_tokens)
        kw = dict(
            engine=self.name, datasheet_hbm_bytes=hw.peak.hbm_bytes, usable_hbm_bytes=hw.usable_hbm_bytes,
            total_bytes=total, fraction=frac, fraction_source=src, reserve_bytes=held + (1.0 - frac) * max(free, 0.0),
            reserve_terms=terms, weights_bytes=weights, kv_budget_bytes=budget if free > 0 else free,
            kv_cell_bytes_per_token=bpt, kv_bytes_per_token=bpt, kv_pool_tokens=tokens, page_tokens=dep.page_tokens,
            kv_dtype=dep.kv_dtype,
            defaults={"free_gpu_memory_fraction": frac, "tokens_per_block": dep.page_tokens,
                      "max_batch_size": MAX_BATCH_SIZE, "max_num_tokens": MAX_NUM_TOKENS,
                      "capacity_scheduler_policy": "GUARANTEED_NO_EVICT"},
            source=SOURCE, state_bytes_per_request=state_bytes_on_rank(dep),
        )
        feasible = tokens > 0
        return MemoryPlan(**kw, feasible=feasible, reason="" if feasible else infeasible_reason(kw, self.fraction_name))
