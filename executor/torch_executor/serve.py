"""Serve a workload on real decode layers: one process per rank (torch.multiprocessing; gloo on
CPU, NCCL on CUDA), each running the serving loop with the compiled policy and a TorchExecutor
(serving.py) — `floorfirst serve --executor torch`.

What it does: `stack_deployment` is the planner's model of the stack the executor runs (its MLA
dimensions and depth, a dense FFN) on a GPU spec; `torch_tables` compiles the policy's tables for
it and puts the executor's own capacity in (`executor_tables`); `serve_torch` spawns the ranks,
`build_rank` makes one rank's policy, runner and executor (a test wraps them), `serve_loop` is
runtime_policy.loop.serve with the loop's prefill queue bound to the executor (so a step's chunk
runs on the requests the loop prefills), `serve_rank` captures the decode graphs of every batch
bucket up to the loop's max_batch, runs the loop and returns the simulator's metrics plus what was
measured (step times, commit stalls, graph captures, KV checks), from rank 0.

What it does not do: multi-node launch (torchrun would start the same `serve_rank`), or replicas.
"""

from __future__ import annotations

from contextlib import contextmanager

from dataclasses import dataclass, field, replace

import numpy as np

import planner
from planner.errors import SpecError
from planner.models.loader import model_from_hf_config
from runtime_policy.serving_types import LoopConfig
from runtime_policy.policy import FixedPolicy, LayoutPolicy, PolicyKnobs
from runtime_policy.tables import StepTimeModel, StepTimeTable, compile_tables

from .config import MLADims
from .serving import TorchServeOptions, executor_tables, table_refusals

DTYPES = {"float32": 4, "bfloat16": 2}


def stack_hf_config(dims: MLADims) -> dict:
    """The Hugging Face config.json of the stack the executor runs (no LM head: vocab 1024, the
    executor's next inputs come from `layers.token_embeddings`)."""
    return {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": dims.hidden_size,
            "intermediate_size": dims.intermediate_size, "num_hidden_layers": dims.num_layers,
            "num_attention_heads": dims.num_heads, "num_key_value_heads": dims.num_heads,
            "q_lora_rank": dims.q_lora_rank, "kv_lora_rank": dims.kv_lora_rank,
            "qk_nope_head_dim": dims.qk_nope_head_dim, "qk_rope_head_dim": dims.qk_rope_head_dim,
            "v_head_dim": dims.v_head_dim, "vocab_size": 1024}


def stack_deployment(dims: MLADims, hardware: planner.HardwareSpec, ranks: int) -> planner.Deployment:
    """The planner's deployment of the stack the executor runs: `dims` as an MLA model with a dense
    FFN (what layers.py computes), on `ranks` GPUs of `hardware`, pages of `dims.page_size`."""
    model = model_from_hf_config(stack_hf_config(dims), f"mla-stack-{dims.num_layers}l-{dims.num_heads}h")
    # NOTE: floorfirst's own executor runs these steps, no serving engine: the layout's ideal kernels
    # (no engine terms, planner/engines/kernels.py), so no engine's prior prices its tables
    return planner.make_deployment(model, hardware, attn="tp", moe="tp", gpus=ranks, page_tokens=dims.page_size,
                                   engine_kernels=False)


def torch_tables(dims: MLADims, hardware: planner.HardwareSpec, ranks: int, kv_pages: int, dtype: str = "float32",
                 model: StepTimeModel | None = None, max_batch: int = 256, max_prefill_tokens: int = 512) -> StepTimeTable:
    """The policy's tables for the torch executor's stack, with its capacity: `kv_pages` page slots
    per rank (serving.executor_tables)."""
    dims.check_world_size(ranks)
    if kv_pages < 2:
        raise SpecError(f"kv_pages={kv_pages} must be ≥ 2 (one page slot takes padded writes)")
    tables = compile_tables(stack_deployment(dims, hardware, ranks), model, max_batch=max_batch,
                            max_prefill_tokens=max_prefill_tokens)
    return executor_tables(tables, dims, kv_pages, DTYPES[dtype])


@dataclass(frozen=True)
class TorchServeSpec:
    """Everything a rank needs (the same on every rank; pickled to each)."""

    tables: StepTimeTable  # torch_tables(...)
    dims: MLADims
    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    kv_pages: int  # page slots per rank the tables count (the runner gets `slack_pages` more)
    policy: str = "dynamic"  # or a layout name
    order: str = "fcfs"
    knobs: PolicyKnobs = field(default_factory=PolicyKnobs)
    loop: LoopConfig = field(default_factory=lambda: LoopConfig(max_batch=256, prefill_chunk_tokens=512))
    options: TorchServeOptions = field(default_factory=TorchServeOptions)
    dtype: str = "float32"
    seed: int = 0
    # NOTE: pages beyond the tables' count: the loop counts one page of slack per request, and CP's
    # page interleaving can put up to one page more than its 1/T share of a request on a rank
    slack_pages: int = 0


def build_rank(groups, spec: TorchServeSpec):
    """One rank's (policy, executor) for `spec`: the policy compiled tables allow only layouts the
    executor runs (read off the tables' placements); the runner starts in the layout the loop will
    start in and resolves every layout name to the tables' placement of it."""
    import torch

    from .runner import RankRunner
    from .serving import TorchExecutor

    tables = spec.tables
    refused = table_refusals(tables)
    runnable = tuple(n for n in tables.layouts if n not in refused)
    knobs = replace(spec.knobs, max_batch=spec.loop.max_batch,
                    allowed=tuple(n for n in (spec.knobs.allowed or tables.layouts) if n in runnable))
    if spec.policy == "dynamic":
        policy = LayoutPolicy(tables, knobs)
    else:
        if spec.policy not in runnable:
            why = refused.get(spec.policy, f"layout {spec.policy!r} is not in the tables ({', '.join(tables.layouts)})")
            raise SpecError(f"the torch executor cannot run layout {spec.policy!r}: {why}; it runs {', '.join(runnable)}")
        policy = FixedPolicy(tables.layouts.index(spec.policy))
    arr, inp = np.asarray(spec.arrival_s, dtype=np.float64), np.asarray(spec.input_tokens)
    layout = tables.layouts[int(policy.initial_layout(inp[arr <= arr[0]].astype(np.float64)))]  # as serve() does
    runner = RankRunner(spec.dims, groups, layout, spec.kv_pages + spec.slack_pages, getattr(torch, spec.dtype),
                        spec.seed, buckets=spec.options.buckets, max_batch=spec.loop.max_batch,
                        placements=dict(zip(tables.layouts, tables.info.placements)))
    return policy, TorchExecutor(runner, tables, spec.options)


def serve_loop(arrival_s, input_tokens, output_tokens, tables: StepTimeTable, policy, ordering, executor,
               config: LoopConfig):
    """runtime_policy.loop.serve on the torch executor: the same loop, its prefill queue bound to the
    executor (`TorchExecutor.bind_prefill_queue`), which runs each step's chunk on the requests the
    loop prefills, in its order. NOTE: reads the loop's queue state (`ServingLoop.prefill_q`,
    `pre_left`, `ctx`, `owner`) because the Executor protocol hands over a chunk's size, not its
    requests; a protocol that passed the (request, tokens) pieces would need no binding."""
    from runtime_policy.loop import make_loop

    loop = make_loop(arrival_s, input_tokens, output_tokens, tables, policy, ordering, executor, config)
    executor.bind_prefill_queue(lambda: [(i, loop.pre_left[i], int(loop.ctx[i]), loop.owner[i])
                                         for i in loop.prefill_q])
    return loop.run()


def serve_rank(groups, spec: TorchServeSpec) -> dict:
    """Run the loop on this rank; rank 0 returns the metrics (others an empty dict)."""
    from runtime_policy.metrics import summarize
    from runtime_policy.ordering import Ordering

    policy, ex = build_rank(groups, spec)
    captured = 0
    if spec.options.capture_at_start and groups.is_cuda:  # engines capture every bucket before serving
        longest = int(np.max(np.asarray(spec.input_tokens) + np.asarray(spec.output_tokens)))
        captured = ex.runner.prepare_buckets(spec.loop.max_batch, longest)
        if ex.options.prefill == "real":
            warm_prefill(ex.runner, spec.loop.prefill_chunk_tokens)
    with frozen_gc(ex.options.freeze_gc):
        res = serve_loop(spec.arrival_s, spec.input_tokens, spec.output_tokens, spec.tables, policy,
                         Ordering(spec.order), ex, spec.loop)
    if groups.rank != 0:
        return {}
    return {**summarize(res), "measured": {**measured_summary(ex), "graphs_at_start_count": captured},
            "step_time_model": spec.tables.model_label}


WARMUP_REQUEST = 1 << 40  # a request id no workload uses


@contextmanager
def frozen_gc(on: bool = True):
    """While serving, the objects alive after start-up (weights' wrappers, graphs, tables, the
    workload) sit in Python's permanent generation, so a collection walks only what serving made.
    NOTE: engines do this after their warm-up: vLLM's worker ends `compile_or_warm_up_model` with
    `freeze_gc_heap()` (gc.collect + gc.freeze), SGLang has `freeze_gc` (python/sglang/srt/utils,
    its /freeze_gc endpoint, recommended after a few warm-up requests). On the twin's chat load it
    changes no step time measurably (H100, benchmarks/executor_served_diag.py, alternated in one
    process: small-chunk steps' median 17.2 / 17.3 ms collected as usual, 17.7 / 19.4 ms frozen,
    benchmarks/results/executor_gpu/twin_1gpu/served_diag_h100.json); it is kept for the engines'
    behaviour, not for a measured gain. Unfrozen on exit, so a process that serves again (the
    benchmarks, the tests) collects what this run left."""
    import gc

    if not on:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def warm_prefill(runner, tokens: int) -> None:
    """One prefill chunk of `tokens` on a request never served, run and freed before serving, so the
    first served prefill doesn't pay the kernels' first-use loading (it took 117 ms against 27 ms
    for the next, measured on H200: benchmarks/results/executor_gpu/twin_1gpu/README.md).
    NOTE: engines run a full-size forward before they serve: vLLM's GPUModelRunner.profile_run
    (vllm/v1/worker/gpu_model_runner.py: `_dummy_run(self.max_num_tokens)`, the token budget of
    one step) and SGLang's warm-up request (python/sglang/srt/entrypoints/http_server.py
    `_execute_server_warmup`)."""
    import torch

    runner.begin_prefill(WARMUP_REQUEST)
    runner.step([(WARMUP_REQUEST, int(tokens))], decode=False)
    runner.finish_request(WARMUP_REQUEST)
    if runner.g.is_cuda:
        torch.cuda.synchronize(runner.g.device)


def measured_summary(ex) -> dict:
    """What the torch executor measured: step times (slowest rank), commit stalls, graph captures,
    KV checks, and (`log_steps`) one row per step."""
    steps = np.asarray(ex.measured_steps_s)
    out = {"steps": int(steps.size),
           "step_p50_s": float(np.percentile(steps, 50)) if steps.size else None,
           "step_p99_s": float(np.percentile(steps, 99)) if steps.size else None,
           "switch_stalls_s": list(ex.measured_stalls_s),
           "kv_identical_across_commits": list(ex.kv_identical),
           "graphs_captured_count": int(ex.runner.exec.captures), "prefill": ex.options.prefill,
           "prefill_step": ex.options.prefill_step}
    if ex.options.log_steps:
        out["step_rows"] = {"columns": ["batch", "context_sum_tokens", "prefill_tokens", "prefill_prefix_tokens",
                                        "step_s"], "rows": [list(r) for r in ex.step_rows]}
        if ex.step_host_s:
            out["step_host_s"] = list(ex.step_host_s)  # the host's time in each step (CUDA), beside step_rows
    return out


def serve_torch(spec: TorchServeSpec, ranks: int, use_cuda: bool = False) -> dict:
    """Spawn `ranks` processes, serve, return rank 0's metrics."""
    from .dist import spawn_ranks

    if ranks != spec.tables.ranks:
        raise SpecError(f"ranks={ranks} must be the tables' group of {spec.tables.ranks}")
    return spawn_ranks(serve_rank, ranks, spec, use_cuda=use_cuda)[0]
