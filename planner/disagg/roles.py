"""A pool's deployment as its engine sizes it for its role, and the pair of pools.

A disaggregated deployment is two pools of the same model: prefill instances that run prompts and
hand their KV over, and decode instances that receive it and generate. Each pool is a plain
`Deployment` (its GPUs, nodes, layout, MoE split, engine memory model and KV pool); what changes
with the role is what the engine holds out of the KV pool:

- **SGLang** (sgl-project/sglang python/sglang/srt/arg_groups/memory_hook.py
  `handle_gpu_memory_settings` and `reserve_for_graph_mb`, commit 031ed82d): the default
  mem_fraction_static subtracts `reserved_mem` (MiB) from the GPU's memory, and two of its terms
  follow the role (`--disaggregation-mode`):
  - decode: the activation term is `max(running_requests × draft_tokens, 2048) × 1.5` with
    running_requests = --max-running-requests or the decode CUDA graphs' max batch (512 on a ≥ 90 GiB
    GPU at tp ≥ 4), instead of `max(chunked_prefill_size, 2048) × 1.5`: no chunked-prefill
    activations, so an H200 decode server at tp 8 reserves 3 GiB for activations instead of 12;
  - prefill: the decode CUDA graphs are not captured (`disaggregation_mode != "prefill"` gates the
    `max_bs × 2` term and DP attention's `max_bs × dp × 3 (+ × 1.5)` padding), so those terms go;
    the chunk's activations stay;
  - every role keeps the 512 MiB constant, `tp × pp / 8 × 1024` and the 10 GiB floor on GPUs above
    60 GiB. NOTE: the engine module (planner/engines/sglang.py) reproduces the colocated formula of
    the releases it cites (no prefill-graph term); the prefill role here adds none either (the current
    code's 1.5 GiB for an MLA prefill graph, or 8 MiB per captured size, is not modelled in either).
  The role's terms are handed to the engine model as its reserve (`reserve_bytes`), so its pool is
  the engine's own arithmetic (`mem_fraction_static = round((gpu_mem − reserved) / gpu_mem, 3)`).
- **vLLM** (vllm-project/vllm vllm/v1/worker/gpu_model_runner.py `GPUModelRunner.profile_run`:
  `self._dummy_run(self.max_num_tokens, is_profile=True)`): the profile run that sizes the pool
  pushes max_num_batched_tokens tokens through the model whatever the KV connector's role, so a
  decode instance holds the same activation peak as a colocated one unless its launch line lowers
  `--max-num-batched-tokens`. No role rule: the engine's own plan (planner/engines/vllm.py).
- **TensorRT-LLM**: its dry run at max_num_tokens sizes the pool the same way for context and
  generation servers; no role rule (planner/engines/trtllm.py).

An explicit `--mem-fraction` (or reserve) is the user's: no role rule replaces it.

Does not: price anything (planner.disagg.pools, planner.disagg.handoff do), or know layouts by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.deployment import Deployment, make_deployment
from planner.errors import SpecError
from planner.units import MiB

ROLES: tuple[str, ...] = ("prefill", "decode")

SGLANG_MEMORY_SOURCE = ("sgl-project/sglang python/sglang/srt/arg_groups/memory_hook.py handle_gpu_memory_settings, "
                        "reserve_for_graph_mb (commit 031ed82d)")
VLLM_MEMORY_SOURCE = ("vllm-project/vllm vllm/v1/worker/gpu_model_runner.py GPUModelRunner.profile_run "
                      "(_dummy_run(self.max_num_tokens, is_profile=True)): the same for every KV connector role")
# NOTE: memory_hook.py: `activation_tokens = max(running_requests * draft_tokens, 2048)` on a decode
# server; floorfirst prices one token per request per step (no speculative decoding), so draft = 1
DECODE_DRAFT_TOKENS = 1
ACTIVATION_MIN_TOKENS = 2048
ACTIVATION_MIB_PER_TOKEN = 1.5
FLOOR_MIB = 10 * 1024  # reserved_mem = max(reserved_mem, 10 GiB) when gpu_mem > 60 GiB
FLOOR_ABOVE_MIB = 60 * 1024
DECODE_GRAPH_TERMS = ("cuda_graphs_mib", "dp_attention_padding_mib", "dp_attention_large_graphs_mib")


@dataclass(frozen=True)
class RoleMemory:
    """What a pool's engine holds out of its KV pool for its role (module docstring)."""

    role: str
    engine: str
    rule: str  # in words
    source: str
    reserve_terms_mib: dict[str, float] = field(default_factory=dict)  # the role's reserve (empty: the engine's default)

    @property
    def reserve_bytes(self) -> float | None:
        """The reserve handed to the engine model; None: its own default stands."""
        return sum(self.reserve_terms_mib.values()) * MiB if self.reserve_terms_mib else None

    def describe(self) -> dict:
        return {"role": self.role, "engine": self.engine, "rule": self.rule, "source": self.source,
                "reserve_terms_mib": dict(self.reserve_terms_mib)}


def _floored(terms: dict[str, float], gpu_mem_mib: float) -> dict[str, float]:
    out = {k: v for k, v in terms.items() if k != "floor_to_10_gib_mib"}
    total = sum(out.values())
    if gpu_mem_mib > FLOOR_ABOVE_MIB and total < FLOOR_MIB:
        out["floor_to_10_gib_mib"] = FLOOR_MIB - total
    return out


def sglang_role_terms(dep: Deployment, role: str) -> dict[str, float]:
    """SGLang's reserved_mem terms (MiB) of `dep` run as a `role` server (module docstring)."""
    from planner.engines.sglang import dp_size, graph_and_chunk_defaults, reserved_mem_terms_mib

    gpu_mem = dep.hardware.smi_total_mib
    dp = dp_size(dep)
    terms = dict(reserved_mem_terms_mib(gpu_mem, dep.ranks, dp, dp > 1))
    if role == "decode":
        _, graph_bs = graph_and_chunk_defaults(gpu_mem, dep.ranks)
        terms.pop("chunked_prefill_activations_mib", None)
        tokens = max(graph_bs * DECODE_DRAFT_TOKENS, ACTIVATION_MIN_TOKENS)
        terms = {"decode_activations_mib": tokens * ACTIVATION_MIB_PER_TOKEN, **terms}
    else:
        terms = {k: v for k, v in terms.items() if k not in DECODE_GRAPH_TERMS}
    return _floored(terms, gpu_mem)


def role_memory(dep: Deployment, role: str) -> RoleMemory:
    """The role's memory rule for `dep`'s engine (module docstring); the engine's default where it
    has none, or where the deployment's fraction or reserve was given."""
    if role not in ROLES:
        raise SpecError(f"role={role!r} is not a pool role; choose one of {', '.join(ROLES)}")
    if dep.mem_fraction is not None or dep.reserve_bytes is not None:
        return RoleMemory(role, dep.engine, "the fraction or reserve given (no role rule replaces it)", "the launch line")
    if dep.engine == "sglang":
        rule = ("decode: activations for the running batch, not the prefill chunk" if role == "decode"
                else "prefill: no decode CUDA graphs (nor DP attention's graph padding)")
        return RoleMemory(role, dep.engine, rule, SGLANG_MEMORY_SOURCE, sglang_role_terms(dep, role))
    if dep.engine == "vllm":
        return RoleMemory(role, dep.engine, "the profile run's peak at max_num_batched_tokens, as colocated",
                          VLLM_MEMORY_SOURCE)
    return RoleMemory(role, dep.engine, "the engine's own estimate, as colocated", dep.engine_model.plan(dep).source)


def make_role_deployment(model, hardware, role: str, **kw) -> tuple[Deployment, RoleMemory]:
    """One instance of a pool: `make_deployment(model, hardware, **kw)` with the engine's memory
    rule for `role` applied (module docstring)."""
    dep = make_deployment(model, hardware, **kw)
    mem = role_memory(dep, role)
    if mem.reserve_bytes is None:
        return dep, mem
    return make_deployment(model, hardware, **{**kw, "reserve_bytes": mem.reserve_bytes}), mem


@dataclass(frozen=True)
class DisaggDeployment:
    """x prefill instances and y decode instances of one model (xPyD), each instance a Deployment."""

    prefill: Deployment
    decode: Deployment
    prefill_instances: int
    decode_instances: int
    prefill_memory: RoleMemory
    decode_memory: RoleMemory

    def __post_init__(self) -> None:
        p, d = self.prefill, self.decode
        if p.model is not d.model and p.model.name != d.model.name:
            raise SpecError(f"prefill runs {p.model.name} but decode runs {d.model.name}")
        if p.hardware.name != d.hardware.name:
            raise SpecError(f"prefill runs on {p.hardware.name} but decode on {d.hardware.name}")
        if p.engine != d.engine:
            raise SpecError(f"prefill runs {p.engine} but decode runs {d.engine}: one engine's connector on both sides")
        # NOTE: sgl-project/sglang python/sglang/srt/disaggregation/common/conn.py try_ensure_parallel_info
        # refuses a page-size or kv_cache_dtype mismatch; vLLM's NIXL compatibility hash holds the cache dtype
        if p.kv_dtype != d.kv_dtype:
            raise SpecError(f"prefill stores {p.kv_dtype} KV but decode {d.kv_dtype}: both sides must use one --kv-cache-dtype")
        if self.prefill_instances < 1 or self.decode_instances < 1:
            raise SpecError("a disaggregated deployment needs at least one prefill and one decode instance")

    @property
    def prefill_gpus(self) -> int:
        return self.prefill.gpus * self.prefill_instances

    @property
    def decode_gpus(self) -> int:
        return self.decode.gpus * self.decode_instances

    @property
    def gpus(self) -> int:
        return self.prefill_gpus + self.decode_gpus

    def label(self) -> str:
        return (f"{self.prefill_instances}P({self.prefill.label()}) + "
                f"{self.decode_instances}D({self.decode.label()})")
