"""vLLM's memory model (V1 engine): gpu_memory_utilization of total memory holds weights, the
profiled peak activations, non-torch memory and the KV cache. Read in vllm-project/vllm:

- `vllm/v1/worker/gpu_worker.py Worker.determine_available_memory`:
  available_kv = requested_memory − non_kv_cache_memory, with requested_memory =
  total_memory × gpu_memory_utilization (`init_device`, from the torch snapshot's total) and
  non_kv_cache_memory = weights + torch_peak_increase (the profile run) + non_torch_increase;
  `--kv-cache-memory` bypasses it. The CUDA context is inside total and outside the request,
  so it lives in the (1 − utilization) headroom.
- `vllm/v1/core/kv_cache_utils.py get_num_blocks`: num_blocks = available // page_size //
  num_layers, page_size = block_size × bytes per token and layer; `BlockPool` keeps one null
  block, so num_blocks − 1 hold tokens.
- Defaults: gpu_memory_utilization 0.9 (`CacheConfig`); block_size 16, forced to 64 for MLA on
  FlashMLA and for DSA on FlashMLASparse (`vllm/platforms/cuda.py check_and_update_config`);
  max_num_batched_tokens 8192 for `vllm serve` on GPUs with ≥ 70 GiB that are not A100, 2048
  otherwise (`vllm/engine/arg_utils.py EngineArgs.get_batch_defaults`), max_num_seqs 1024 / 256.
  KV dtype auto = the model dtype; for DeepSeek-V3.2 every fp8 spelling becomes the custom
  `fp8_ds_mla` record (656 B + the 132-B indexer key), `DeepseekV32ForCausalLM.
  verify_and_update_config` in `vllm/model_executor/models/config.py`. NOTE: v0.11.0 also mapped
  `auto` to fp8_ds_mla for V3.2; the stored current code keeps auto = bf16, which this follows.

The profile run's peak (NOTE: an estimate, vLLM measures it): the profile run pushes
max_num_batched_tokens tokens through the model and the sampler over max_num_seqs rows. Its
peak here is tokens × 2 B × (4·hidden live residual/normed/attention/MLP tensors + the widest
MLP transient) + rows × vocab × 4 B × 2 (fp32 logits and probabilities). The MLP transient is
the fused-MoE workspace `fused_experts_impl` allocates, top_k × (2·I + I + hidden) per token
(intermediate_cache1/2/3, I the rank's expert width), or 3·I for a dense MLP (gate_up + act).
Non-torch memory (cuBLAS workspaces, NCCL and custom all-reduce buffers): 1.79 GiB on one GPU
and 3.58 GiB per GPU at TP2, the figures vLLM PR #10511 logs on H100; a lead elsewhere.
Ignores: the CUDA-graph estimate newer versions may subtract (`cudagraph_memory_estimate_applied`),
`VLLM_FUSED_MOE_CHUNK_SIZE` chunking and the extra tokens an all-gather EP path sees.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from planner.engines.base import (ATTENTION_DP, DECODE_CONTEXT, EngineMemoryModel, LaunchLine, MemoryPlan, flag_words,
                                  infeasible_reason, kv_bytes_on_rank, line_shape, model_path, parallel_form,
                                  register_engine, single_kv_head, state_bytes_on_rank, weight_flag_note,
                                  weights_resident, whole_page_tokens)
from planner.units import GiB

if TYPE_CHECKING:  # pragma: no cover
    from planner.deployment import Deployment

SOURCE = ("vllm-project/vllm: vllm/v1/worker/gpu_worker.py Worker.determine_available_memory, "
          "vllm/v1/core/kv_cache_utils.py get_num_blocks")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
NON_TORCH_ONE_GPU_BYTES = 1.79 * GiB  # vLLM PR #10511 memory-profiling log, Llama-3-8B on H100, TP1
NON_TORCH_MULTI_GPU_BYTES = 3.58 * GiB  # same log at TP2 (NCCL / custom all-reduce buffers added)
ACTIVATION_BYTES = 2.0  # bf16 activations
LOGIT_BYTES = 4.0  # fp32 logits in the sampler
LIVE_HIDDEN_TENSORS = 4  # residual, normed input, attention output, MLP output


# NOTE: vllm/config/vllm.py `_set_cudagraph_sizes`: max_cudagraph_capture_size = min(max_num_seqs * 2, 512)
MAX_CUDAGRAPH_CAPTURE_SIZE = 512
# NOTE: w½ of vLLM's fused MoE by GPU generation (planner.engines.kernels NarrowGemm), fitted by
# calibration/kernel_db.py `moe_half_width` on aiconfigurator-core 0.12.0 moe_perf tables (vllm 0.24.0):
# h100_sxm 145, h200_sxm 160 (sm90: H200's); b200_sxm 720, b300_sxm 535, gb200 550 (sm100: B200's).
VLLM_MOE_HALF_WIDTH = {"sm90": 160.0, "sm100": 720.0}
VLLM_MOE_HALF_WIDTH_SOURCE = ("aiconfigurator-core 0.12.0 moe_perf tables (per-kernel), fitted by calibration/kernel_db.py "
                              "moe_half_width: rate(w) = rate_inf * w / (w + w_half)")


def batch_defaults(hw) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) of `vllm serve`, `EngineArgs.get_batch_defaults`."""
    if hw.usable_hbm_bytes >= 70 * GiB and hw.arch != "ampere":
        return 8192, 1024
    return 2048, 256


def _mlp_transient_elems_per_token(dep: "Deployment") -> float:
    return max(v.profile_transient_elems_per_token(dep.ranks, dep.moe) for v, _ in dep.model.mlps)


def hybrid_block_tokens(model, tp: int, block_size: int, kv_dtype: str = "bf16", kernel_block: int = 16) -> int:
    """Attention block size of a hybrid (attention + recurrent) model, vLLM
    `vllm/platforms/interface.py _align_hybrid_block_size`: every KV group shares one page size, so
    the attention block grows until its page holds one layer's recurrent state on the rank:
    align·⌈mamba_page / (align·attn_page_1_token)⌉ tokens, align = max(kernel block, block_size),
    and the state page is padded up to it. Qwen3.5-397B at TP8: GDN page 4,268,032 / 8 =
    533,504 B, 1 KV head × 256 × 2 × 2 B = 1,024 B per token → 16·⌈533,504 / 16,384⌉ = 528 tokens
    (shared/reference/frontier-models-and-engines.md §0). Without recurrent layers: `block_size`.
    NOTE: the smallest kernel block is taken as 16 (FlashAttention's), as in the reference's example."""
    rec = [v for v, _ in model.mixers if v.recurrent]
    att = [v for v, _ in model.mixers if not v.recurrent and v.token_bytes(kv_dtype) > 0]
    if not rec or not att:
        return block_size
    from planner.layouts.tp import kv_split_ways

    mamba_page = max(v.state_bytes(kv_dtype) / kv_split_ways(v, tp) for v in rec)
    attn_1tok = max(v.token_bytes(kv_dtype) / kv_split_ways(v, tp) for v in att)
    align = max(kernel_block, block_size)
    return int(align * math.ceil(mamba_page / (align * attn_1tok)))


def peak_activation_terms(dep: "Deployment") -> dict[str, float]:
    tokens, rows = batch_defaults(dep.hardware)
    rows = min(rows, tokens)
    h = dep.model.hidden_size
    return {
        "profile_tokens": float(tokens),
        "forward_peak_bytes": tokens * ACTIVATION_BYTES * (LIVE_HIDDEN_TENSORS * h + _mlp_transient_elems_per_token(dep)),
        "sampler_peak_bytes": rows * dep.model.vocab_size * LOGIT_BYTES * 2.0,
    }


# The launch line (VLLM.launch): `vllm serve MODEL`, its flags read in vllm-project/vllm
# vllm/engine/arg_utils.py EngineArgs.add_cli_args (ParallelConfig group: `--tensor-parallel-size`/-tp,
# `--decode-context-parallel-size`/-dcp, `--data-parallel-size`/-dp, `--data-parallel-size-local`/-dpl,
# `--data-parallel-address`, `--data-parallel-start-rank`, `--enable-expert-parallel`, `--all2all-backend`;
# CacheConfig group: `--block-size`, `--gpu-memory-utilization`, `--kv-cache-dtype` with
# vllm/config/cache.py CacheDType auto/bfloat16/fp8/fp8_e4m3/fp8_e5m2/fp8_inc/fp8_ds_mla; `--quantization`/-q;
# multi-node TP `--nnodes`, `--node-rank`, `--master-addr`, vllm/config/parallel.py ParallelConfig).
LAUNCH_SOURCE = "vllm-project/vllm vllm/engine/arg_utils.py EngineArgs.add_cli_args, vllm/config/parallel.py ParallelConfig"
KV_CACHE_DTYPE = {"bf16": "bfloat16", "fp8": "fp8", "fp8_dsa": "fp8"}  # fp8 on a DSA model: vLLM's fp8_ds_mla
DEFAULT_ALL2ALL_BACKEND = "allgather_reducescatter"  # ParallelConfig.all2all_backend


@register_engine
class VLLM(EngineMemoryModel):
    name = "vllm"
    description = "vLLM: gpu_memory_utilization of total memory minus weights, profiled peak and non-torch memory"
    fraction_name = "gpu_memory_utilization"
    moe_a2a_backends = ("allgather_reducescatter", "deepep_low_latency", "deepep_high_throughput")

    def default_kv_dtype(self, model, hw):
        only = model.attention.supported_kv_dtypes()
        # NOTE: DeepSeek-V4: "DeepseekV4 only supports fp8 kv-cache format" (vLLM deepseek_v4_attention.py)
        return "bf16" if "bf16" in only else only[0]

    def default_page_tokens(self, model, hw, head_split_ranks=1, kv_dtype="bf16"):
        # NOTE: DeepSeek-V4's 256-token logical blocks (vLLM deepseek_compressor.py)
        block = 256 if model.attention.kind == "dsv4" else 64 if model.attention.kind in ("mla", "dsa") else 16
        return hybrid_block_tokens(model, head_split_ranks, block, kv_dtype)

    def scheduler(self, dep):
        """vLLM V1's scheduler per owner group (vllm-project/vllm):
        - one EngineCore per DP rank of a MoE model, each with its own Scheduler, max_num_seqs and
          max_num_batched_tokens (vllm/v1/engine/core.py EngineCoreProc.run_engine_core:
          DPEngineCoreProc per dp_rank); an idle rank runs a dummy batch while others step
          (DPEngineCoreProc.run_busy_loop `execute_dummy_batch`);
        - one token budget per step, the running requests first, then waiting ones, a prefill chunk
          in the same step as the decodes (vllm/v1/core/sched/scheduler.py Scheduler.schedule: "no
          decoding phase nor prefill phase"); the waiting loop stops at max_num_seqs running;
        - defaults for `vllm serve` on ≥ 70 GiB GPUs other than A100: 8192 tokens, 1024 sequences
          (vllm/engine/arg_utils.py get_batch_defaults);
        - requests go to the engine core with the smallest waiting·4 + running
          (vllm/v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request);
        - when a running request can't get blocks, the last one in the running list (the newest)
          is preempted and recomputed (Scheduler.schedule, `self.running.pop()`); admission needs the
          whole prompt's blocks (`scheduler_reserve_full_isl`, default on), no output reserve.
        NOTE: a layout of G owner groups vLLM can't launch (DOP) gets G engine cores' budgets, as
        data-parallel attention would."""
        from planner.engines.scheduling import SchedulerSpec

        tokens, seqs = batch_defaults(dep.hardware)
        return SchedulerSpec("vllm", dep.placement.owner_groups, "mixed", tokens, float(seqs), "least_loaded",
                             "newest_first", False, "vllm-project/vllm: vllm/v1/core/sched/scheduler.py Scheduler.schedule, "
                                                    "vllm/v1/engine/core.py, vllm/v1/engine/core_client.py")

    def kernels(self, dep):
        """What vLLM's steps run (planner.engines.kernels), read in vllm-project/vllm:
        - MoE token movement with DP attention: vllm/config/parallel.py ParallelConfig.all2all_backend
          "allgather_reducescatter" (the default), vllm/distributed/device_communicators/all2all.py
          AgRsAll2AllManager: dispatch = all_gatherv of [hidden_states, topk_weights, topk_ids] over the
          DP group, combine = reduce_scatterv — the same for decode and mixed steps;
        - the expert GEMM: vllm/model_executor/layers/fused_moe (Triton fused_experts), narrow-width
          constant `VLLM_MOE_HALF_WIDTH`;
        - CUDA graphs: vllm/config/vllm.py `_set_cudagraph_sizes`: [1, 2, 4] + range(8, 256, 8) +
          range(256, max + 1, 16), max = min(2·max_num_seqs, 512); a batch is padded to the next size
          (cudagraph_mode FULL_AND_PIECEWISE, vllm/config/compilation.py);
        - attention: vllm/platforms/cuda.py `_get_backend_priorities`: MLA on Hopper FLASH_ATTN_MLA
          (FA3's 64-row tiles), on Blackwell FLASHINFER_MLA; sparse MLA FLASHMLA_SPARSE; other
          attention FLASH_ATTN (Hopper) / FLASHINFER (Blackwell);
        - per-step overhead: the stated default (planner.engines.kernels DEFAULT_STEP_OVERHEAD_S)."""
        from planner.engines.kernels import (DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE, AllGatherReduceScatter,
                                             AttentionBackend, CudaGraphs, DeepEPLowLatency, DeepEPNormal, EngineKernels,
                                             NarrowGemm, capture_sizes)
        from planner.models.attention.kernels import HOPPER

        comm = AllGatherReduceScatter("allgather_reducescatter", "vllm/distributed/device_communicators/all2all.py "
                                      "AgRsAll2AllManager (ParallelConfig.all2all_backend default)", routes_in_dispatch=True)
        # NOTE: --all2all-backend deepep_low_latency / deepep_high_throughput run DeepEP's low-latency or
        # normal kernels for every step (all2all.py DeepEPLLAll2AllManager / DeepEPHTAll2AllManager)
        if dep.moe_a2a == "deepep_low_latency":
            comm = DeepEPLowLatency("deepep_low_latency", "vllm all2all.py DeepEPLLAll2AllManager")
        elif dep.moe_a2a == "deepep_high_throughput":
            comm = DeepEPNormal("deepep_high_throughput", "vllm all2all.py DeepEPHTAll2AllManager")
        _, seqs = batch_defaults(dep.hardware)
        top = min(2 * seqs, MAX_CUDAGRAPH_CAPTURE_SIZE)
        sizes = tuple(x for x in capture_sizes(([1, 2, 4], range(8, 256, 8), range(256, top + 1, 16))) if x <= top)
        hopper = dep.arch == HOPPER
        src = "vllm/platforms/cuda.py _get_backend_priorities"
        attention = {
            "mla": AttentionBackend("FLASH_ATTN_MLA" if hopper else "FLASHINFER_MLA", "fa3_mla" if hopper else None, src),
            "dsa": AttentionBackend("FLASHMLA_SPARSE", None, src),
            "*": AttentionBackend("FLASH_ATTN" if hopper else "FLASHINFER", None, src),
        }
        return EngineKernels("vllm", comm, comm, NarrowGemm("fused_moe (triton)", VLLM_MOE_HALF_WIDTH, VLLM_MOE_HALF_WIDTH_SOURCE),
                             CudaGraphs(sizes, True, "vllm/config/vllm.py _set_cudagraph_sizes"), attention,
                             DEFAULT_STEP_OVERHEAD_S, DEFAULT_STEP_OVERHEAD_SOURCE)

    def parallel_flags(self, dep: "Deployment") -> tuple[list[str], str]:
        """(vLLM's parallel flags for `dep`, '') or ([], why), from the placement
        (planner.engines.base.parallel_form):
        - one group, heads split → `--tensor-parallel-size T`;
        - G groups of attention TP R on a MoE model → `--data-parallel-size G --tensor-parallel-size R`
          (one engine core per DP rank, the experts over DP×TP: vllm/config/parallel.py
          ParallelConfig.data_parallel_size "MoE layers will be sharded according to the product of
          the tensor, prefill-context, and data parallel sizes"); a dense model's DP ranks are
          independent replicas ("non-MoE models should use independent vLLM instances"), so a dense
          DP-attention layout has no flag;
        - tokens interleaved over the group → `--tensor-parallel-size T --decode-context-parallel-size T`
          where the model has one KV head: vLLM caps dcp at tp / KV heads (vllm/config/model.py
          ModelConfig.verify_with_parallel_config; docs/serving/context_parallel_deployment.md: "dcp size
          should lie in the range of [1, tp_size/H]"), tp % dcp == 0 (ParallelConfig._validate_parallel_config).
          NOTE: vLLM also needs an attention backend that returns the decode LSE
          (vllm/v1/worker/cp_utils.py check_attention_cp_compatibility); not checked per GPU here;
        - experts over the group → `--enable-expert-parallel`."""
        form, why = parallel_form(dep)
        if form is None:
            return [], why
        t, pl = dep.ranks, dep.placement
        if form == ATTENTION_DP and not dep.model.has_moe:
            return [], ("vLLM's --data-parallel-size on a dense model starts independent replicas (vllm/config/parallel.py "
                        "ParallelConfig), not DP attention over one shared MLP")
        if form == DECODE_CONTEXT:
            heads = single_kv_head(dep)
            if heads:
                return [], (f"vLLM caps --decode-context-parallel-size at tp / KV heads (vllm/config/model.py "
                            f"ModelConfig.verify_with_parallel_config): {heads}, so -dcp {t} is refused")
        if form == ATTENTION_DP:
            flags: list[tuple] = [("--data-parallel-size", pl.owner_groups), ("--tensor-parallel-size", pl.group_ranks)]
        else:
            flags = [("--tensor-parallel-size", t)]
            if form == DECODE_CONTEXT:
                flags.append(("--decode-context-parallel-size", t))
        if dep.moe == "ep":
            flags.append(("--enable-expert-parallel", True))
        return flag_words(*flags), ""

    def launch(self, dep):
        """`vllm serve MODEL` for `dep` (note above LAUNCH_SOURCE): the parallel flags, a dense
        model's replicas as `--data-parallel-size` (independent engines), the nodes one server spans
        (DP ranks per node for DP attention, else multi-node TP), and the memory settings (the KV
        dtype always, the utilization and block size when not the engine's default)."""
        flags, why = self.parallel_flags(dep)
        if why:
            return LaunchLine(self.name, None, why, source=LAUNCH_SOURCE)
        form, _ = parallel_form(dep)
        copies, nodes = line_shape(dep, form, replicas_flag=not dep.model.has_moe)
        words = ["vllm", "serve", model_path(dep), *flags]
        notes: list[str] = []
        if dep.replicas > 1 and copies == 1:
            words += flag_words(("--data-parallel-size", dep.replicas))  # a dense model: independent replicas
        if copies > 1:
            notes.append(f"start {copies} of these servers (one per replica) behind a router")
        if dep.moe == "ep" and dep.moe_a2a not in (None, DEFAULT_ALL2ALL_BACKEND):
            words += flag_words(("--all2all-backend", dep.moe_a2a))
        groups = dep.placement.owner_groups
        if nodes > 1 and form == ATTENTION_DP and groups % nodes == 0:
            # docs/serving/data_parallel_deployment.md: DP ranks per node, the head node's address, each node's first rank
            words += flag_words(("--data-parallel-size-local", groups // nodes),
                                ("--data-parallel-address", "${HEAD_ADDR}"), ("--data-parallel-start-rank", "${START_RANK}"))
            notes.append(f"run it on each of the {nodes} nodes with START_RANK 0, {groups // nodes}, … and HEAD_ADDR the first node's")
        elif nodes > 1:
            words += flag_words(("--nnodes", nodes), ("--node-rank", "${NODE_RANK}"), ("--master-addr", "${HEAD_ADDR}"))
            notes.append(f"run it on each of the {nodes} nodes with NODE_RANK 0..{nodes - 1} and HEAD_ADDR the first node's")
        words += flag_words(("--kv-cache-dtype", KV_CACHE_DTYPE[dep.kv_dtype]))
        if dep.mem_fraction is not None:
            words += flag_words(("--gpu-memory-utilization", f"{dep.mem_fraction:g}"))
        if dep.page_tokens != self.default_page_tokens(dep.model, dep.hardware, dep.placement.head_split_ranks,
                                                       dep.kv_dtype):
            words += flag_words(("--block-size", dep.page_tokens))
        if dep.weight_dtype_given and dep.weight_dtype == "fp8":
            words += flag_words(("--quantization", "fp8"))  # online fp8 quantization
        notes += [n for n in (weight_flag_note(dep),) if n]
        return LaunchLine(self.name, " ".join(words), copies=copies, notes=tuple(notes), source=LAUNCH_SOURCE)

    def plan(self, dep):
        hw = dep.hardware
        total = hw.usable_hbm_bytes
        if dep.mem_fraction is not None:
            frac, src = dep.mem_fraction, "--mem-fraction"
        else:
            frac, src = DEFAULT_GPU_MEMORY_UTILIZATION, "engine default"
        if dep.reserve_bytes is not None:
            terms = {"given_reserve_bytes": dep.reserve_bytes}
            held = dep.reserve_bytes
        else:
            act = peak_activation_terms(dep)
            non_torch = NON_TORCH_ONE_GPU_BYTES if dep.ranks == 1 else NON_TORCH_MULTI_GPU_BYTES
            terms = {"peak_activation_bytes": act["forward_peak_bytes"] + act["sampler_peak_bytes"],
                     "non_torch_bytes": non_torch, **{f"activation_{k}": v for k, v in act.items()}}
            held = terms["peak_activation_bytes"] + non_torch
        weights = weights_resident(dep)
        budget = frac * total - weights - held
        bpt = kv_bytes_on_rank(dep)
        tokens = whole_page_tokens(budget, bpt, dep.page_tokens, spare_pages=1)
        max_tokens, max_seqs = batch_defaults(hw)
        kw = dict(
            engine=self.name, datasheet_hbm_bytes=hw.peak.hbm_bytes, usable_hbm_bytes=total, total_bytes=total,
            fraction=frac, fraction_source=src, reserve_bytes=total * (1.0 - frac) + held, reserve_terms=terms,
            weights_bytes=weights, kv_budget_bytes=budget, kv_cell_bytes_per_token=bpt, kv_bytes_per_token=bpt,
            kv_pool_tokens=tokens, page_tokens=dep.page_tokens, kv_dtype=dep.kv_dtype,
            defaults={"gpu_memory_utilization": frac, "block_size": dep.page_tokens,
                      "max_num_batched_tokens": max_tokens, "max_num_seqs": max_seqs},
            source=SOURCE,
        )
        # NOTE: one pool for pages and states (vLLM's KV cache groups share the page size); a state
        # page padded up to the attention page (`hybrid_block_tokens`) is counted at its own size
        kw["state_bytes_per_request"] = state_bytes_on_rank(dep)
        feasible = tokens > 0
        return MemoryPlan(**kw, feasible=feasible, reason="" if feasible else infeasible_reason(kw, self.fraction_name))
