"""What an engine's parallel and memory flags make of a deployment, in floorfirst's terms (used by
planner.launch, which cites the engines' argument definitions and semantics).

Each rule takes {canonical flag: typed value} and returns (floorfirst options, readings, what the
engine does that floorfirst does not model, the engine's context window or None); a combination
no floorfirst layout represents is a SpecError naming it.
"""

from __future__ import annotations

from typing import Any

from planner.errors import SpecError

# NOTE: SGLang's MoE all-to-all backends other than "none" set ep_size = tp_size
# (server_args.py `_handle_a2a_moe`: "The expert parallel size is adjusted to be the same as the
# tensor parallel size").
SGLANG_A2A_NONE = "none"


def _reading(flag, value, meaning):
    from planner.launch import Reading

    return Reading(flag, str(value), meaning)


def _common_memory(values: dict, flags: dict[str, str], options: dict, readings: list) -> None:
    """mem fraction, KV dtype, page size: the flags named in `flags` (floorfirst option → engine flag)."""
    what = {"mem_fraction": "--mem-fraction", "kv_dtype": "--kv-dtype", "page_tokens": "--page-tokens"}
    for opt, flag in flags.items():
        if flag in values:
            options[opt] = values[flag]
            readings.append(_reading(flag, values[flag], f"{what[opt]} {values[flag]}"))


def _weights(values: dict, flag: str, options: dict, readings: list, notes: list) -> None:
    q = values.get(flag)
    if q is None:
        return
    dtype = {"fp8": "fp8", "modelopt_fp8": "fp8", "w8a8_fp8": "fp8", "modelopt_fp4": "fp4", "mxfp4": "fp4",
             "nvfp4": "fp4", "modelopt": "fp8"}.get(str(q).lower())
    if dtype is None:
        notes.append(f"{flag} {q}: weights priced at the checkpoint's dtype (floorfirst knows bf16, fp8, fp4)")
        return
    options["weight_dtype"] = dtype
    readings.append(_reading(flag, q, f"--weight-dtype {dtype}"))


def sglang_deployment(v: dict[str, Any], moe_model: bool = True):
    readings: list = []
    notes: list[str] = []
    tp, dp, pp = v.get("--tp-size", 1), v.get("--dp-size", 1), v.get("--pp-size", 1)
    ep, dcp = v.get("--ep-size", 1), v.get("--dcp-size", 1)
    dpa = bool(v.get("--enable-dp-attention", False))
    a2a = str(v.get("--moe-a2a-backend", SGLANG_A2A_NONE))
    for name, x in (("--tp-size", tp), ("--dp-size", dp), ("--pp-size", pp), ("--ep-size", ep), ("--dcp-size", dcp)):
        if x < 1:
            raise SpecError(f"--engine-args: {name} {x} must be ≥ 1")
    if pp > 1:
        raise SpecError(f"--engine-args: --pp-size {pp}: pipeline parallelism is not a floorfirst layout")
    if dpa and dp == 1:
        notes.append("--enable-dp-attention with --dp-size 1: SGLang turns DP attention off (_handle_data_parallelism)")
        dpa = False
    if a2a != SGLANG_A2A_NONE:
        readings.append(_reading("--moe-a2a-backend", a2a, f"expert parallel over the tp group (SGLang sets ep_size = tp_size = {tp})"))
        ep = tp
        notes.append(f"--moe-a2a-backend {a2a}: floorfirst prices EP dispatch/combine as all-to-all bytes of the routed "
                     "tokens, not this backend's kernels or its normal/low-latency modes")
    if dpa:
        if tp % dp:
            raise SpecError(f"--engine-args: --dp-size {dp} does not divide --tp-size {tp}")
        if dcp > 1:
            raise SpecError(f"--engine-args: --dcp-size {dcp} with DP attention (SGLang PR #31821) is not a floorfirst layout")
        gpus, replicas = tp, 1
        if dp == tp:
            attn = "dp"
            readings.append(_reading("--enable-dp-attention", "true", f"--attn dp: {dp} DP attention ranks in the tp group of {tp} GPUs"))
        else:
            # NOTE: attn_tp_size = tp_size // dp_size inside each DP rank (python/sglang/srt/layers/
            # dp_attention.py compute_dp_attention_world_info): planner/layouts/dptp.py
            attn = "dptp"
            readings.append(_reading("--enable-dp-attention", "true",
                                     f"--attn dptp --attn-groups {dp}: {dp} DP attention ranks, attention TP {tp // dp} "
                                     f"inside each, in the tp group of {tp} GPUs"))
    else:
        gpus, replicas = tp * dp, dp
        if dcp > 1:
            if dcp != tp:
                raise SpecError(f"--engine-args: --dcp-size {dcp} below --tp-size {tp} splits KV over part of the "
                                f"group; floorfirst's dcp layout spans the whole group (use --dcp-size {tp})")
            attn = "dcp"
            readings.append(_reading("--dcp-size", dcp, f"--attn dcp over the {tp} GPUs of the tp group"))
        else:
            attn = "tp"
            readings.append(_reading("--tp-size", tp, f"--attn tp over {tp} GPUs"))
        if dp > 1:
            readings.append(_reading("--dp-size", dp, f"--replicas {dp}: without DP attention, {dp} copies of the tp group"))
    if ep not in (1, tp):
        raise SpecError(f"--engine-args: --ep-size {ep} with --tp-size {tp}: experts over part of the group "
                        "(EP inside TP) is not a floorfirst MoE split (ep = tp, or 1 for TP-sharded experts)")
    moe = "ep" if ep > 1 else "tp"
    if ep > 1 and not moe_model:
        raise SpecError("--engine-args: expert parallelism on a dense model (no experts to place)")
    if "--ep-size" in v and a2a == SGLANG_A2A_NONE:
        readings.append(_reading("--ep-size", v["--ep-size"], f"--moe {moe}"))
    if ep > 1 and a2a == SGLANG_A2A_NONE:
        notes.append("--ep-size without --moe-a2a-backend: SGLang dispatches tokens with all-reduce or all-gather "
                     "(docs: expert_parallelism); floorfirst prices EP as all-to-all")
    options: dict[str, Any] = {"gpus": gpus, "replicas": replicas, "attn": attn, "moe": moe}
    if attn == "dptp":
        options["attn_groups"] = dp
    if "--nnodes" in v:
        options["nodes"] = v["--nnodes"]
        readings.append(_reading("--nnodes", v["--nnodes"], f"--nodes {v['--nnodes']}"))
    _common_memory(v, {"mem_fraction": "--mem-fraction-static", "kv_dtype": "--kv-cache-dtype",
                       "page_tokens": "--page-size"}, options, readings)
    if "--swa-full-tokens-ratio" in v:  # the hybrid SWA split's ratio (planner.engines.sglang.swa_pools)
        options["swa_full_tokens_ratio"] = v["--swa-full-tokens-ratio"]
        readings.append(_reading("--swa-full-tokens-ratio", v["--swa-full-tokens-ratio"],
                                 f"--swa-full-tokens-ratio {v['--swa-full-tokens-ratio']}"))
    _weights(v, "--quantization", options, readings, notes)
    if "--mem-fraction-static" not in v and ("--chunked-prefill-size" in v or "--cuda-graph-max-bs" in v):
        notes.append("--chunked-prefill-size / --cuda-graph-max-bs: SGLang's default mem_fraction_static reserves "
                     "memory from them; floorfirst reserves for the GPU's default bucket (pass --mem-fraction to pin it)")
    for flag, meaning in (("--chunked-prefill-size", "the largest prefill chunk per step (price a mixed step with "
                                                     "--prefill-tokens)"),
                          ("--cuda-graph-max-bs", "CUDA graphs up to this batch (launch overhead not priced)"),
                          ("--max-running-requests", "a cap on the batch (floorfirst prices the --batch given)")):
        if flag in v:
            readings.append(_reading(flag, v[flag], meaning))
    for flag, what in (("--moe-dense-tp-size", "the dense MLP's TP size"), ("--enable-dp-lm-head", "a DP LM head"),
                       ("--deepep-mode", "DeepEP's mode"), ("--enable-two-batch-overlap", "two-batch overlap"),
                       ("--attention-backend", "the attention backend's own kernel"),
                       ("--disable-cuda-graph", "eager decode (no CUDA graphs)"),
                       ("--enable-hierarchical-cache", "HiCache's host tier"),
                       ("--disable-hybrid-swa-memory", "one pool for every layer (floorfirst keeps SGLang's hybrid SWA split)"), ("--max-total-tokens", "a fixed pool size"),
                       ("--disaggregation-mode", "prefill/decode disaggregation")):
        if v.get(flag):
            notes.append(f"{flag} {v[flag]}: {what} is not modelled")
    return options, readings, notes, v.get("--context-length")


def vllm_deployment(v: dict[str, Any], moe_model: bool = True):
    readings: list = []
    notes: list[str] = []
    tp, dp, pp = v.get("--tensor-parallel-size", 1), v.get("--data-parallel-size", 1), v.get("--pipeline-parallel-size", 1)
    dcp = v.get("--decode-context-parallel-size", 1)
    ep = bool(v.get("--enable-expert-parallel", False)) and not v.get("--no-enable-expert-parallel", False)
    for name, x in (("--tensor-parallel-size", tp), ("--data-parallel-size", dp), ("--pipeline-parallel-size", pp),
                    ("--decode-context-parallel-size", dcp)):
        if x < 1:
            raise SpecError(f"--engine-args: {name} {x} must be ≥ 1")
    if pp > 1:
        raise SpecError(f"--engine-args: --pipeline-parallel-size {pp}: pipeline parallelism is not a floorfirst layout")
    if "--kv-cache-memory-bytes" in v:
        raise SpecError("--engine-args: --kv-cache-memory-bytes sets vLLM's pool directly; floorfirst sizes it from "
                        "--gpu-memory-utilization (drop it, or pass --mem-fraction)")
    replicas = 1
    if dp > 1 and not moe_model:
        # NOTE: a dense model's DP ranks share nothing: dp independent engines of tp GPUs
        replicas = dp
    elif dp > 1 and tp > 1 and dcp > 1:
        raise SpecError(f"--engine-args: --decode-context-parallel-size {dcp} inside {dp} DP ranks of "
                        f"--tensor-parallel-size {tp} is not a floorfirst layout")
    if dcp > 1 and dcp != tp:
        raise SpecError(f"--engine-args: --decode-context-parallel-size {dcp} below --tensor-parallel-size {tp} "
                        f"splits KV over part of the group; floorfirst's dcp layout spans it (use -dcp {tp})")
    if dp > 1 and replicas == 1 and tp > 1:
        # NOTE: one engine core per DP rank, each a TP group of tp ranks, the experts over all dp·tp
        # (vllm/v1/engine/core.py DPEngineCoreProc; vllm/config/parallel.py: EP spans DP × TP)
        attn, gpus = "dptp", dp * tp
        readings.append(_reading("--data-parallel-size", dp, f"--attn dptp --attn-groups {dp}: {dp} DP ranks of "
                                                             f"attention TP {tp}, the experts over the DP×TP group of "
                                                             f"{dp * tp} GPUs"))
    elif dp > 1 and replicas == 1:
        attn, gpus = "dp", dp
        readings.append(_reading("--data-parallel-size", dp, f"--attn dp: {dp} DP ranks of one GPU, the experts over "
                                                             f"the DP×TP group of {dp} GPUs"))
    else:
        attn, gpus = ("dcp" if dcp > 1 else "tp"), tp * replicas
        readings.append(_reading("--tensor-parallel-size", tp, f"--attn {attn} over {tp} GPUs"))
        if replicas > 1:
            readings.append(_reading("--data-parallel-size", dp, f"--replicas {dp}: a dense model's DP ranks are "
                                                                 "independent engines"))
        if dcp > 1:
            readings.append(_reading("--decode-context-parallel-size", dcp, f"--attn dcp: KV interleaved over the {tp} TP ranks"))
    moe = "ep" if ep else "tp"
    if moe_model:
        readings.append(_reading("--enable-expert-parallel", str(ep).lower(), f"--moe {moe}" + (
            "" if ep else " (the default: experts TP-sharded)")))
    elif ep:
        raise SpecError("--engine-args: --enable-expert-parallel on a dense model (no experts to place)")
    options: dict[str, Any] = {"gpus": gpus, "replicas": replicas, "attn": attn, "moe": moe}
    if attn == "dptp":
        options["attn_groups"] = dp
    nodes = v.get("--nnodes")
    if nodes is None and "--data-parallel-size-local" in v:
        dpl = v["--data-parallel-size-local"]
        if dpl < 1 or dp % dpl:
            raise SpecError(f"--engine-args: --data-parallel-size-local {dpl} must divide --data-parallel-size {dp}")
        nodes = dp // dpl
        readings.append(_reading("--data-parallel-size-local", dpl, f"--nodes {nodes} ({dpl} DP ranks per node)"))
    elif nodes is not None:
        readings.append(_reading("--nnodes", nodes, f"--nodes {nodes}"))
    if nodes is not None:
        options["nodes"] = nodes
    _common_memory(v, {"mem_fraction": "--gpu-memory-utilization", "kv_dtype": "--kv-cache-dtype",
                       "page_tokens": "--block-size"}, options, readings)
    _weights(v, "--quantization", options, readings, notes)
    if "--all2all-backend" in v:
        notes.append(f"--all2all-backend {v['--all2all-backend']}: floorfirst prices EP dispatch/combine as all-to-all "
                     "bytes of the routed tokens (vLLM's default allgather_reducescatter moves more)")
    if "--speculative-config" in v:
        notes.append("--speculative-config: a step verifies several tokens per request; floorfirst prices one")
    for flag, meaning in (("--max-num-batched-tokens", "the most tokens per step, prefill chunks included (price a "
                                                       "mixed step with --prefill-tokens)"),
                          ("--max-num-seqs", "a cap on the batch (floorfirst prices the --batch given)"),
                          ("--max-model-len", "the context window (contexts above it are warned about)")):
        if flag in v:
            readings.append(_reading(flag, v[flag], meaning))
    for flag, what in (("--enforce-eager", "eager decode (no CUDA graphs)"), ("--attention-backend", "the attention "
                       "backend's own kernel"), ("--compilation-config", "compilation settings"),
                       ("--hf-overrides", "config overrides (the model is priced from its card or config as given)"),
                       ("--enable-dbo", "dual-batch overlap")):
        if v.get(flag):
            notes.append(f"{flag}: {what} is not modelled")
    return options, readings, notes, v.get("--max-model-len")


# TensorRT-LLM's extra LLM API options YAML (trtllm-serve --extra_llm_api_options), keys of
# tensorrt_llm/llmapi/llm_args.py: what each reads as. "flag:X": the trtllm-serve option X it overwrites
# (tensorrt_llm/commands/serve.py: the YAML "overwrites the parameters specified by trtllm-serve");
# "keep": read by trtllm_deployment; "note": taken but not modelled; "none": no effect on the deployment.
TRTLLM_YAML_KEYS: dict[str, str] = {
    "tensor_parallel_size": "flag:--tp_size", "pipeline_parallel_size": "flag:--pp_size",
    "moe_expert_parallel_size": "flag:--ep_size", "moe_cluster_parallel_size": "flag:--cluster_size",
    "max_seq_len": "flag:--max_seq_len", "max_batch_size": "flag:--max_batch_size",
    "max_num_tokens": "flag:--max_num_tokens", "enable_chunked_prefill": "flag:--enable_chunked_prefill",
    "kv_cache_config.free_gpu_memory_fraction": "flag:--kv_cache_free_gpu_memory_fraction",
    "enable_attention_dp": "keep", "kv_cache_config.dtype": "keep", "kv_cache_config.tokens_per_block": "keep",
    "cp_config": "keep", "speculative_config": "note", "moe_config": "note", "attn_backend": "note",
    "cuda_graph_config": "note", "enable_lm_head_tp_in_adp": "note",
    "kv_cache_config.enable_block_reuse": "none", "kv_cache_config.enable_partial_reuse": "none",
    "print_iter_log": "none", "enable_iter_perf_stats": "none", "disable_overlap_scheduler": "none",
    "stream_interval": "none", "trust_remote_code": "none", "backend": "none", "scheduler_config": "none",
    "enable_autotuner": "none", "return_perf_metrics": "none",
}


def _flatten(doc: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in doc.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and key == "kv_cache_config":
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def trtllm_extra_options(path: str, files: dict[str, str]) -> dict[str, Any]:
    """The YAML `--extra_llm_api_options` names as {canonical key: value}: the options it overwrites
    under their trtllm-serve names, the rest under their YAML keys (TRTLLM_YAML_KEYS). Its text is a
    heredoc of the launch text where there is one, else the file (read through planner.inputs)."""
    from planner.inputs import HARDWARE_MAX_BYTES, load_yaml_file, parse_yaml_text

    what = f"--engine-args: --extra_llm_api_options {path}"
    doc = parse_yaml_text(files[path], what, path) if path in files else load_yaml_file(path, what, HARDWARE_MAX_BYTES)
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise SpecError(f"{what}: not a YAML mapping of LLM API options")
    out: dict[str, Any] = {}
    for key, value in _flatten(doc).items():
        use = TRTLLM_YAML_KEYS.get(key)
        if use is None:
            raise SpecError(f"{what}: key {key} is not one floorfirst knows; it may change the deployment, so it is "
                            "refused: remove it or pass the matching floorfirst option")
        if use.startswith("flag:"):
            out[use[5:]] = value
        elif use != "none":
            out[key] = value
    return out


def _yaml_int(v: dict, key: str, default):
    x = v.get(key, default)
    if x is None or (isinstance(x, int) and not isinstance(x, bool)):
        return x
    raise SpecError(f"--engine-args: {key} {x!r} is not a whole number")


def trtllm_deployment(v: dict[str, Any], moe_model: bool = True):
    readings: list = []
    notes: list[str] = []
    tp, pp = _yaml_int(v, "--tp_size", 1), _yaml_int(v, "--pp_size", 1)
    ep, cluster = _yaml_int(v, "--ep_size", None), _yaml_int(v, "--cluster_size", None)
    for name, x in (("--tp_size", tp), ("--pp_size", pp), ("--ep_size", ep or 1), ("--cluster_size", cluster or 1)):
        if x < 1:
            raise SpecError(f"--engine-args: {name} {x} must be ≥ 1")
    if pp > 1:
        raise SpecError(f"--engine-args: --pp_size {pp}: pipeline parallelism is not a floorfirst layout")
    if (cluster or 1) > 1:
        raise SpecError(f"--engine-args: --cluster_size {cluster}: MoE cluster parallelism is not a floorfirst MoE split")
    if v.get("cp_config"):
        raise SpecError("--engine-args: cp_config: TensorRT-LLM's context parallelism (Helix) is not a floorfirst layout")
    adp = v.get("enable_attention_dp", False)
    if not isinstance(adp, bool):
        raise SpecError(f"--engine-args: enable_attention_dp {adp!r} must be true or false")
    if ep not in (None, 1, tp):
        raise SpecError(f"--engine-args: --ep_size {ep} with --tp_size {tp}: experts over part of the group (EP inside "
                        "TP) is not a floorfirst MoE split (ep = tp, or 1 for TP-sharded experts)")
    moe = "ep" if (ep or 1) > 1 else "tp"
    if moe == "ep" and not moe_model:
        raise SpecError("--engine-args: expert parallelism on a dense model (no experts to place)")
    if adp and tp > 1:
        # NOTE: every rank its own DP attention rank (tensorrt_llm/_torch/modules/attention.py Attention.__init__)
        attn = "dp"
        readings.append(_reading("enable_attention_dp", "true", f"--attn dp: each of the {tp} ranks a DP attention rank"))
    else:
        attn = "tp"
        readings.append(_reading("--tp_size", tp, f"--attn tp over {tp} GPUs"))
    readings.append(_reading("--ep_size", ep if ep is not None else "(none)", f"--moe {moe}"))
    options: dict[str, Any] = {"gpus": tp, "replicas": 1, "attn": attn, "moe": moe}
    if "--kv_cache_free_gpu_memory_fraction" in v:
        options["mem_fraction"] = float(v["--kv_cache_free_gpu_memory_fraction"])
        readings.append(_reading("--kv_cache_free_gpu_memory_fraction", v["--kv_cache_free_gpu_memory_fraction"],
                                 f"--mem-fraction {options['mem_fraction']:g}"))
    if "kv_cache_config.dtype" in v:
        options["kv_dtype"] = str(v["kv_cache_config.dtype"])
        readings.append(_reading("kv_cache_config.dtype", v["kv_cache_config.dtype"], f"--kv-dtype {options['kv_dtype']}"))
    if "kv_cache_config.tokens_per_block" in v:
        options["page_tokens"] = _yaml_int(v, "kv_cache_config.tokens_per_block", None)
        readings.append(_reading("kv_cache_config.tokens_per_block", options["page_tokens"],
                                 f"--page-tokens {options['page_tokens']}"))
    for key in ("speculative_config", "moe_config", "attn_backend", "cuda_graph_config", "enable_lm_head_tp_in_adp"):
        if v.get(key):
            notes.append(f"{key}: not modelled")
    for flag, meaning in (("--max_num_tokens", "the most tokens per step (price a mixed step with --prefill-tokens)"),
                          ("--max_batch_size", "a cap on the batch (floorfirst prices the --batch given)")):
        if flag in v:
            readings.append(_reading(flag, v[flag], meaning))
    return options, readings, notes, v.get("--max_seq_len")
