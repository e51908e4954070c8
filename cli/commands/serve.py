"""`floorfirst serve`: serve a workload through the serving loop and the dynamic policy (or a fixed
layout) on real MLA decode layers — the torch executor, one process per rank (gloo on CPU, NCCL on
CUDA) — or on the simulator over the same tables; print the same metrics as `simulate`, plus the
measured step times and switch stalls (table, `--json`).

The executor runs the model card's MLA dimensions at `--layers` depth (`--dims model`), or small
dimensions a CPU runs quickly (`--dims tiny`), with `--kv-pages` page slots per rank; the policy's
tables are the planner's model of that stack on `--hardware`, with the executor's capacity.
"""

from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Optional

import typer

from cli.commands.simulate import OrderChoice, PolicyOpt, render
from cli.registry_options import live
from cli.common import DEFAULTS, GpusOpt, HardwareOpt, JsonOpt, ModelOpt, emit_json, load_specs
from planner.errors import SpecError

MAX_TORCH_RANKS = 8
TINY_PAGE_TOKENS = 16


class ExecutorChoice(str, Enum):
    torch = "torch"
    sim = "sim"


class DimsChoice(str, Enum):
    tiny = "tiny"
    model = "model"


class ClockChoice(str, Enum):
    measured = "measured"
    table = "table"


def _dims(choice: DimsChoice, model, layers: int):
    from executor.torch_executor.config import MLADims, tiny_dims

    if layers < 1 or layers > 256:
        raise SpecError(f"layers={layers} must be in [1, 256]")
    if choice == DimsChoice.tiny:
        return tiny_dims(num_heads=8, num_layers=layers, page_size=TINY_PAGE_TOKENS)
    try:
        return MLADims.from_model_spec(model, num_layers=layers)
    except ValueError as exc:
        raise SpecError(f"--dims model needs an MLA model: {exc}") from None


def serve_cmd(
    model: ModelOpt = DEFAULTS["model"], hardware: HardwareOpt = DEFAULTS["hardware"],
    gpus: GpusOpt = 2,
    executor: Annotated[ExecutorChoice, typer.Option("--executor", help="torch: real decode layers on one process per rank; sim: the simulator over the same tables.")] = ExecutorChoice.torch,
    workload: Annotated[str, typer.Option("--workload", "-w", help="chat, shrinking, bursty, longprompt, rollout, reasoning, agentic (runtime_policy/workloads.py says how each is drawn), or a trace: CSV (arrival_s,input_tokens,output_tokens), an Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens) Mooncake JSONL (timestamp ms, input_length, output_length), or a benchmark result listing its requests (vllm bench serve --save-result JSON, SGLang bench_serving --output-details JSONL).")] = "chat",
    requests: Annotated[int, typer.Option("--requests", "-n", help="Requests to generate (or to take from a trace).")] = 32,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the workload.")] = 0,
    policy: PolicyOpt = "dynamic",
    order: Annotated[OrderChoice, typer.Option("--order", help="Request ordering.")] = OrderChoice.fcfs,
    rate: Annotated[Optional[float], typer.Option("--rate", help="Mean arrival rate of chat/bursty/longprompt/reasoning, requests/s (rollout and agentic arrive as a batch).")] = None,
    dims: Annotated[DimsChoice, typer.Option("--dims", help="tiny: small dimensions a CPU runs quickly; model: the model card's MLA dimensions.")] = DimsChoice.tiny,
    layers: Annotated[int, typer.Option("--layers", help="Layers of the stack the executor runs.")] = 2,
    kv_pages: Annotated[int, typer.Option("--kv-pages", help="KV page slots per rank.")] = 8192,
    device: Annotated[str, typer.Option("--device", help="cpu, cuda, or auto (cuda when there are enough GPUs).")] = "auto",
    clock: Annotated[ClockChoice, typer.Option("--clock", help="The durations the loop reads: measured, or the tables' (the simulator's prices while the real steps run).")] = ClockChoice.measured,
    max_batch: Annotated[int, typer.Option("--max-batch", help="Most requests holding KV at once.")] = 256,
    json_out: JsonOpt = False,
) -> None:
    """Serve a workload on real decode layers (or the simulator): the policy decides every switch."""
    from runtime_policy.loop import LoopConfig
    from runtime_policy.workloads import make_workload

    if rate is not None and (not math.isfinite(rate) or rate <= 0):
        raise SpecError(f"rate={rate} must be a positive number of requests per second")
    if not 1 <= gpus <= MAX_TORCH_RANKS:
        raise SpecError(f"gpus={gpus} must be in [1, {MAX_TORCH_RANKS}] (one process per rank on one host)")
    if not 1 <= max_batch <= 4096:
        raise SpecError(f"max_batch={max_batch} must be in [1, 4096]")
    if device not in ("auto", "cpu", "cuda"):
        raise SpecError(f"device={device!r} is not one of auto, cpu, cuda")
    m, hw = load_specs(model, hardware)
    stack = _dims(dims, m, layers)
    try:
        stack.check_world_size(gpus)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    w = make_workload(workload, requests, seed, rate)
    use_cuda = _use_cuda(device, gpus) if executor == ExecutorChoice.torch else False
    dtype = "bfloat16" if use_cuda else "float32"
    from executor.torch_executor.serve import stack_deployment, torch_tables  # torch imported here, only when serving
    from runtime_policy.tables import default_step_model

    loop = LoopConfig(max_batch=max_batch, prefill_chunk_tokens=2048)
    # NOTE: the default model of the stack's deployment (issue 26): floorfirst's executor is no engine,
    # so no shipped prior prices it and its label says the datasheet midpoint does
    step_model = default_step_model(stack_deployment(stack, hw, gpus))
    tables = torch_tables(stack, hw, gpus, kv_pages, dtype, model=step_model, max_batch=max_batch, max_prefill_tokens=2048)
    if executor == ExecutorChoice.sim:
        doc = _serve_sim(tables, w, policy, order.value, loop)
    else:
        doc = _serve_torch(tables, stack, w, policy, order.value, loop, kv_pages, clock.value, dtype, seed,
                           use_cuda)
    doc = {"model": m.name, "hardware": hw.name, "gpus": gpus, "replicas": 1, "moe": "tp",
           "kv_dtype": dtype, "workload": w.name, "workload_params": w.params, "seed": seed,
           "policy": policy, "order": order.value, "executor": executor.value,
           "stack": {"layers": stack.num_layers, "heads": stack.num_heads, "hidden_size": stack.hidden_size,
                     "latent_dim": stack.latent_dim, "page_tokens": stack.page_size, "kv_pages_per_rank": kv_pages,
                     "device": "cuda" if use_cuda else "cpu", "clock": clock.value}, **doc}
    doc.pop("timeline", None)
    doc.pop("per_request", None)
    # NOTE: printed as built, a dict, as floor and simulate print theirs: typing it here imports
    # floorfirst.results (53 pydantic models whose validators build at import: ~0.2 s more CPU a call).
    # Its model, floorfirst.served.ServeResult, is held to it by tests/agent/test_schemas_from_models.py.
    if json_out:
        emit_json("serve", doc)
        return
    render(doc, f"{m.name} stack ({stack.num_layers} layers) on {gpus} ranks ({doc['stack']['device']}): {w.name} "
                f"({w.requests} requests), policy {policy}, order {order.value}, {executor.value} executor")
    if "measured" in doc:
        me = doc["measured"]
        from cli.common import console

        console().print(f"measured: {me['steps']} steps, p50 {me['step_p50_s'] * 1e3:.2f} ms, p99 "
                        f"{me['step_p99_s'] * 1e3:.2f} ms; switch stalls "
                        + (", ".join(f"{x * 1e3:.3f} ms" for x in me["switch_stalls_s"]) or "none"))


def _use_cuda(device: str, ranks: int) -> bool:
    import torch

    have = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device == "cuda" and have < ranks:
        raise SpecError(f"device=cuda needs {ranks} GPUs, {have} visible")
    return device == "cuda" or (device == "auto" and have >= ranks)


def _serve_sim(tables, w, policy: str, order: str, loop) -> dict:
    from executor.sim import SimExecutor
    from runtime_policy.loop import serve
    from runtime_policy.metrics import summarize
    from runtime_policy.ordering import Ordering
    from runtime_policy.policy import FixedPolicy, LayoutPolicy, PolicyKnobs

    runnable = tuple(n for n in tables.layouts if tables.info.kv_pool_bytes[tables.layouts.index(n)] > 0)
    pol = (LayoutPolicy(tables, PolicyKnobs(max_batch=loop.max_batch, allowed=runnable)) if policy == "dynamic"
           else FixedPolicy(_layout_index(tables, policy)))
    res = serve(w.arrival_s, w.input_tokens, w.output_tokens, tables, pol, Ordering(order), SimExecutor(tables), loop)
    return {**summarize(res), "step_time_model": tables.model_label}


def _layout_index(tables, policy: str) -> int:
    i = tables.layouts.index(policy)
    if tables.info.kv_pool_bytes[i] <= 0:
        raise SpecError(f"layout {policy} leaves no KV pool on this executor (raise --kv-pages)")
    return i


def _serve_torch(tables, stack, w, policy: str, order: str, loop, kv_pages: int, clock: str, dtype: str, seed: int,
                 use_cuda: bool) -> dict:
    from executor.torch_executor.serve import TorchServeSpec, serve_torch
    from executor.torch_executor.serving import TorchServeOptions
    from runtime_policy.policy import PolicyKnobs

    if policy != "dynamic":
        _layout_index(tables, policy)
    spec = TorchServeSpec(tables, stack, w.arrival_s, w.input_tokens, w.output_tokens, kv_pages, policy, order,
                          PolicyKnobs(max_batch=loop.max_batch), loop, TorchServeOptions(clock=clock), dtype, seed,
                          slack_pages=loop.max_batch)
    return serve_torch(spec, tables.ranks, use_cuda)


def register(app: typer.Typer) -> None:
    app.command("serve")(live(serve_cmd))
