"""floorfirst as a Model Context Protocol server: the planning, triage, calibration and
simulation commands as MCP tools with typed inputs, served over stdio by `floorfirst mcp`.

Each tool returns exactly the document `floorfirst <command> … --json` prints (the contracts in
schemas/ and docs/json-contracts.md), produced by cli.inprocess's WorkerPool: each call runs in a
worker process under a time limit, an argument-size limit, an output-size limit and a memory
limit, calls run side by side (a FIFO given as a workload or a very long simulate never holds up
`models`), and no lock is held while a call runs. A user error, a call stopped at a limit, an
argument the schema refuses, and an internal error all come back as an MCP tool error of one line.

Does not: compute anything itself, shell out, or expose `microbench` (it needs a GPU and torch;
run it on the machine). Needs the `mcp` extra (`pip install 'floorfirst[mcp]'`); nothing else
imports this module, so plain CLI start-up never loads the SDK.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Literal, Optional

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import ToolAnnotations
from pydantic import Field, ValidationError

from cli.common import DEFAULTS
from cli.inprocess import CommandError, CommandRunner, Limits, WorkerPool, option_args
from planner.engines import KV_DTYPE_MAPPING, KV_DTYPE_NAMES, engine_names
from planner.inputs import shown

COMMAND_MODULES = ("specs", "floor", "walls", "triage", "calibration", "simulate")

INSTRUCTIONS = """floorfirst prices an LLM decode step on a deployment from first principles: five resources on the
busiest rank (HBM bytes, FLOPs, network bytes, network messages, KV capacity), an optimistic floor
(max) and a pessimistic one (sum). Work floor-first: estimate with floor/compare/capacity/walls before
measuring; after a measurement call triage and open a profiler only when it says profile=true, on
profile_resource. Compare layouts by walls (which binds first, where), not by grid search. Do no
arithmetic yourself: every figure you report comes from a tool's JSON (units are in the key names)."""

Model = Annotated[str, Field(description="Built-in model (deepseek-v3, deepseek-v3.2, glm-5, kimi-k2, qwen3-235b-a22b, "
                                         "llama-3.1-70b, gpt-oss-120b) or a path to a Hugging Face config.json.")]
Hardware = Annotated[str, Field(description="Built-in GPU (h20, h100, h200, b200, gb200, b300, mi300x, mi355x) or a path to a hardware YAML.")]
Gpus = Annotated[int, Field(ge=1, description="GPUs in the deployment, all replicas.")]
Replicas = Annotated[int, Field(ge=1, description="Replicas of the whole group; a group is gpus/replicas GPUs.")]
Attn = Annotated[Literal["tp", "cp", "dcp", "dp", "dop"], Field(description="Attention layout: tp, cp (SPLASH's context parallel), dcp (vLLM's decode context parallel), dp (DP-attention), dop (TP weights, each request's KV on one owner).")]
Moe = Annotated[Optional[Literal["ep", "tp"]], Field(description="MoE split; default ep for MoE models, tp for dense.")]
Batch = Annotated[Optional[int], Field(ge=1, description="Concurrent decode requests (whole deployment); default 32 with one context length.")]
Context = Annotated[str, Field(description="Context per request: one length (32768 or 32k), a comma list (4k,4k,64k) or a histogram (4k*60,64k*4).")]
Prefill = Annotated[float, Field(ge=0, description="Prefill tokens each group runs in the same step.")]
PrefillContext = Annotated[Optional[str], Field(description="Tokens the prefilling request already has cached (its prefix), e.g. 32k.")]
KvDtype = Annotated[Optional[Literal[KV_DTYPE_NAMES]], Field(description=f"KV cache dtype as engines spell it ({KV_DTYPE_MAPPING}); default auto.")]
WeightDtype = Annotated[Optional[Literal["bf16", "fp8", "fp4"]], Field(description="Weight dtype; default the checkpoint's.")]
MemFraction = Annotated[Optional[float], Field(gt=0, le=1, description="The engine's memory fraction (SGLang mem_fraction_static, vLLM gpu_memory_utilization); default the engine's own for this GPU and layout.")]
Engine = Annotated[Literal[engine_names()], Field(description="Whose memory model sizes the KV pool and sets page size and KV dtype defaults.")]
Nodes = Annotated[Optional[int], Field(ge=1, description="Scale-up domains (nodes) the deployment spans; default as few as hold gpus.")]
Pricing = Annotated[Literal["datasheet", "achieved"], Field(description="Floors at datasheet peaks or at the hardware file's achieved efficiencies.")]
Calibration = Annotated[Optional[str], Field(description="A calibration artifact path (from calibrate); adds predicted_s.")]
Layouts = Annotated[Optional[str], Field(description="Comma list of attn/moe to include, e.g. tp/ep,dp/ep; default all the model can run.")]
Plot = Annotated[Optional[str], Field(description="Also write a PNG plot to this path.")]
Threshold = Annotated[float, Field(ge=0, description="Residual over floor_sum that calls for a profiler (0.15 = 15 %).")]
Profiles = Annotated[list[str], Field(min_length=1, description="Profile files (CSV, JSONL, vLLM/SGLang results).")]
Sets = Annotated[Optional[list[str]], Field(description="key=value filling fields the rows lack, e.g. hardware=h200, gpus=8.")]

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)


# The tools' signatures: typed inputs whose names are the CLI option names (measured_ms →
# --measured-ms), and docstrings that become the tool descriptions. Bodies are empty: build_server
# binds each signature to `floorfirst <command> … --json` run in-process.


def models(model: Annotated[Optional[str], Field(description="One model (name or config.json path); default all built-in.")] = None) -> dict[str, Any]:
    """Built-in model cards and their parameter split (floorfirst.models/1)."""


def hardware(hardware: Annotated[Optional[str], Field(description="One GPU (name or YAML path); default all built-in.")] = None) -> dict[str, Any]:
    """Built-in GPUs: datasheet peaks, efficiency defaults, ridge points (floorfirst.hardware/1)."""


def floor(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
          attn: Attn = "tp", moe: Moe = None, replicas: Replicas = 1, batch: Batch = None,
          context: Context = DEFAULTS["context"], prefill_tokens: Prefill = 0.0, prefill_context: PrefillContext = None,
          kv_dtype: KvDtype = None, weight_dtype: WeightDtype = None, mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None,
          pricing: Pricing = "datasheet", calibration: Calibration = None) -> dict[str, Any]:
    """One step on one layout: five resources on the busiest rank, floor_max_s / floor_sum_s, what binds, components (floorfirst.floor/1)."""


def compare(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
            replicas: Replicas = 1, batch: Batch = None, context: Context = DEFAULTS["context"],
            prefill_tokens: Prefill = 0.0, prefill_context: PrefillContext = None, kv_dtype: KvDtype = None,
            weight_dtype: WeightDtype = None,
            mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None, pricing: Pricing = "datasheet",
            calibration: Calibration = None) -> dict[str, Any]:
    """Every layout side by side at one operating point; best_by_max / best_by_sum among those whose KV fits (floorfirst.compare/1)."""


def capacity(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
             replicas: Replicas = 1, context: Annotated[str, Field(description="Context per request (32k).")] = DEFAULTS["context"],
             kv_dtype: KvDtype = None, weight_dtype: WeightDtype = None,
             mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None) -> dict[str, Any]:
    """KV pool per GPU, KV copies, distinct tokens and max concurrency at a context, every layout (floorfirst.capacity/2)."""


def walls(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
          replicas: Replicas = 1,
          along: Annotated[Literal["batch", "context"], Field(description="Grow batch at fixed context, or context at fixed batch.")] = "batch",
          batch: Annotated[int, Field(ge=1, description="Fixed batch when growing context.")] = DEFAULTS["batch"],
          context: Annotated[str, Field(description="Fixed context when growing batch.")] = DEFAULTS["context"],
          load_range: Annotated[Optional[str], Field(description="LO:HI of the growing axis (default 1:4096 requests or 512:512k tokens).")] = None,
          layouts: Layouts = None, kv_dtype: KvDtype = None, weight_dtype: WeightDtype = None,
          mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None, calibration: Calibration = None,
          plot: Plot = None) -> dict[str, Any]:
    """As load grows: where each resource starts to bind and where KV runs out, per layout, in order (floorfirst.walls/1)."""


def regimes(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
            replicas: Replicas = 1,
            batch_range: Annotated[str, Field(description="LO:HI[:N] requests, geometric.")] = "1:1024:11",
            context_range: Annotated[str, Field(description="LO:HI[:N] tokens, geometric.")] = "1k:256k:9",
            floor: Annotated[Literal["max", "sum"], Field(description="Rank layouts by the optimistic or pessimistic floor.")] = "max",
            layouts: Layouts = None, kv_dtype: KvDtype = None, weight_dtype: WeightDtype = None,
            mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None, calibration: Calibration = None,
            plot: Plot = None) -> dict[str, Any]:
    """The best layout over a batch × context grid, KV-infeasible cells marked (floorfirst.regimes/1)."""


def triage(measured_ms: Annotated[float, Field(gt=0, description="The measured step time, ms.")],
           model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
           attn: Attn = "tp", moe: Moe = None, replicas: Replicas = 1, batch: Batch = None,
           context: Context = DEFAULTS["context"], prefill_tokens: Prefill = 0.0, prefill_context: PrefillContext = None,
           kv_dtype: KvDtype = None, weight_dtype: WeightDtype = None, mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
          engine: Engine = DEFAULTS["engine"].value, nodes: Nodes = None,
           pricing: Pricing = "datasheet", threshold: Threshold = 0.15) -> dict[str, Any]:
    """A measured step against its floors: verdict (below_floor | inside | above_sum), overlap quality or residual, and whether and what to profile (floorfirst.triage/1)."""


def triage_profile(profile: Annotated[str, Field(description="A profile file (CSV, JSONL, vLLM/SGLang result).")],
                   threshold: Threshold = 0.15) -> dict[str, Any]:
    """Every row of a profile triaged against its datasheet floors (floorfirst.triage_profile/1)."""


def calibrate(profile: Profiles, out: Annotated[str, Field(description="Where to write the calibration artifact (JSON); an existing file is replaced only if it is a floorfirst calibration, or with force.")],
              microbench: Annotated[Optional[str], Field(description="A microbench result used as priors.")] = None,
              sets: Sets = None,
              force: Annotated[bool, Field(description="Replace out even if it is not a floorfirst calibration.")] = False) -> dict[str, Any]:
    """Fit efficiencies, message latency, overlap α and overhead to measured steps; writes the artifact to out (floorfirst.calibrate/1)."""


def validate(calibration: Annotated[str, Field(description="A calibration artifact (from calibrate).")], profile: Profiles,
             sets: Sets = None, folds: Annotated[int, Field(ge=2, description="k of k-fold cross-validation.")] = 5,
             seed: Annotated[int, Field(description="Fold shuffle seed.")] = 0) -> dict[str, Any]:
    """A calibration's per-row residuals on a profile, k-fold cross-validated error, floor violations (floorfirst.validate/1)."""


def simulate(model: Model = DEFAULTS["model"], hardware: Hardware = DEFAULTS["hardware"], gpus: Gpus = DEFAULTS["gpus"],
             workload: Annotated[str, Field(description="chat, shrinking, bursty, or a trace CSV (arrival_s,input_tokens,output_tokens).")] = "chat",
             requests: Annotated[int, Field(ge=1, description="Requests to generate (or take from a trace).")] = 1000,
             seed: Annotated[int, Field(description="Seed of the workload and the step-time noise.")] = 0,
             policy: Annotated[Literal["tp", "cp", "dp", "dop", "dynamic"], Field(description="A fixed attention layout, or dynamic switching.")] = "dynamic",
             order: Annotated[Literal["fcfs", "srpt-oracle", "boost"], Field(description="Request ordering.")] = "fcfs",
             calibration: Calibration = None, moe: Moe = None, replicas: Replicas = 1, kv_dtype: KvDtype = None,
             mem_fraction: MemFraction = DEFAULTS["mem_fraction"],
             rate: Annotated[Optional[float], Field(gt=0, description="Mean arrival rate of chat/bursty, requests/s.")] = None,
             noise: Annotated[float, Field(ge=0, description="Relative σ of seeded step-time noise.")] = 0.0,
             plot: Plot = None) -> dict[str, Any]:
    """Serve a workload with the simulated executor under a fixed layout or the dynamic policy: throughput, TTFT/TPOT/TTLT percentiles, switches (floorfirst.simulate/1)."""


@dataclass(frozen=True)
class ToolSpec:
    command: str  # the CLI command that answers
    signature: Callable[..., dict[str, Any]]  # the tool's name, typed inputs and description
    annotations: ToolAnnotations
    rename: dict[str, str] = field(default_factory=dict)  # parameter → CLI option, where they differ


TOOLS = (
    ToolSpec("models", models, READ_ONLY), ToolSpec("hardware", hardware, READ_ONLY), ToolSpec("floor", floor, READ_ONLY),
    ToolSpec("compare", compare, READ_ONLY), ToolSpec("capacity", capacity, READ_ONLY),
    ToolSpec("walls", walls, WRITES, {"load_range": "--range"}), ToolSpec("regimes", regimes, WRITES),
    ToolSpec("triage", triage, READ_ONLY), ToolSpec("triage", triage_profile, READ_ONLY),
    ToolSpec("calibrate", calibrate, WRITES, {"sets": "--set"}), ToolSpec("validate", validate, READ_ONLY, {"sets": "--set"}),
    ToolSpec("simulate", simulate, WRITES),
)


def _bind(spec: ToolSpec, runner: "CommandRunner | WorkerPool") -> Callable[..., dict[str, Any]]:
    """The tool function: spec's signature, answered by running its command in-process."""
    sig = inspect.signature(spec.signature)

    @functools.wraps(spec.signature)
    def tool(*args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            return runner.run(spec.command, option_args(bound.arguments, spec.rename))
        except CommandError as exc:
            raise ToolError(str(exc)) from None

    return tool


def _validation_line(tool: str, exc: ValidationError) -> str:
    errs = exc.errors()
    e = errs[0]
    loc = ".".join(str(x) for x in e["loc"]) or "(arguments)"
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{tool}: argument '{loc}'={shown(e.get('input'))}: {e['msg']}{more}"


class FloorfirstServer(MCPServer):
    """MCPServer whose tool errors are one line: an argument the schema refuses names the argument,
    its value and the rule (not pydantic's multi-line dump); a crash names its exception type."""

    async def call_tool(self, name, arguments, context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_validation_line(name, cause)) from None
            first = (str(cause).splitlines() or [""])[0][:200] if cause else ""
            raise ToolError(f"{name}: internal error: {type(cause).__name__}: {first}") from None
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_validation_line(name, exc.__cause__)) from None
            raise


def build_server(runner: "CommandRunner | WorkerPool | None" = None) -> MCPServer:
    """An MCP server with one tool per floorfirst command that exists in this checkout, answered by
    `runner` (default: a WorkerPool with the default Limits; a CommandRunner runs calls in this
    process one at a time, for tests of the tools themselves)."""
    if runner is None:
        runner = WorkerPool(COMMAND_MODULES)
        runner.warm()
    server = FloorfirstServer("floorfirst", instructions=INSTRUCTIONS)
    for spec in TOOLS:
        if spec.command in runner.commands:
            server.add_tool(_bind(spec, runner), name=spec.signature.__name__, annotations=spec.annotations)
    return server


def serve(workers: int = 4, limits: Limits = Limits()) -> None:
    """Serve over stdio until the client closes the connection."""
    pool = WorkerPool(COMMAND_MODULES, workers=workers, limits=limits)
    pool.warm()
    try:
        build_server(pool).run("stdio")
    finally:
        pool.close()
