"""Engine memory models: how a serving engine turns one GPU's memory into a KV pool, and the
engine defaults the rest of the planner needs (page size, KV dtype per GPU generation, prefill
chunk size).

A layout is an idea; an engine is how it runs. SGLang and vLLM size the KV pool from what torch
reports, not from the datasheet, with their own fractions and reserves; each engine is one small
module in this package (`@register_engine`), reproducing that engine's arithmetic with the
source named next to the code. `plan(dep)` answers for one GPU of the deployment's busiest group
with a `MemoryPlan`: the engine's "total", its fraction and reserve, the weights, and the pool in
bytes and tokens — or, when the weights or the reserve don't fit, `feasible=False` and the
reason in words (a pool is never negative).

Pools are whole pages of whole tokens: `tokens = ⌊budget / cell / page⌋ · page` (SGLang aligns
its token count to pages; vLLM counts blocks and keeps one null block), and the pool's bytes are
those tokens × the bytes a token really occupies on the rank.

Does not: price time (planner.resources), or model what the engine allocates after profiling
beyond its own reserve (the reserve is the engine's, exactly as the engine computes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from planner.registry import Registry
from planner.units import GiB

if TYPE_CHECKING:  # pragma: no cover
    from planner.deployment import Deployment
    from planner.engines.kernels import EngineKernels
    from planner.engines.scheduling import SchedulerSpec
    from planner.hardware.spec import HardwareSpec
    from planner.models.spec import ModelSpec

DEFAULT_ENGINE = "sglang"

_ENGINES: Registry = Registry(__package__, "engine memory model", key=lambda obj: obj.name)


def register_engine(cls):
    _ENGINES.register(cls())
    return cls


def engines() -> dict[str, "EngineMemoryModel"]:
    """Every registered engine memory model, by name."""
    return _ENGINES.discover()


def engine_names() -> tuple[str, ...]:
    return tuple(sorted(engines()))


@dataclass(frozen=True)
class MemoryPlan:
    """One GPU's memory as the engine divides it (bytes; the group's busiest rank)."""

    engine: str
    datasheet_hbm_bytes: float  # the datasheet "GB", kept for reference
    usable_hbm_bytes: float  # torch total_memory (what the runtime reports)
    total_bytes: float  # what the engine calls total memory (SGLang: free before weights; vLLM: total_memory)
    fraction: float  # mem_fraction_static (SGLang) or gpu_memory_utilization (vLLM)
    fraction_source: str  # 'engine default' | '--mem-fraction'
    reserve_bytes: float  # held out of weights + KV: activations, graphs, workspaces, the (1 − fraction) share
    reserve_terms: dict[str, float]  # how the engine built its reserve (names carry units)
    weights_bytes: float
    kv_budget_bytes: float  # what the engine sizes the pool from; negative when the weights don't fit
    kv_cell_bytes_per_token: float  # bytes per token the engine divides the budget by (its profile)
    kv_bytes_per_token: float  # bytes a token really occupies on this rank (all layers)
    kv_pool_tokens: float  # tokens per GPU, whole pages
    page_tokens: int
    kv_dtype: str
    feasible: bool
    reason: str  # '' when feasible
    defaults: dict[str, Any] = field(default_factory=dict)  # engine defaults that produced the plan
    source: str = ""  # which engine code this reproduces
    state_pool_bytes: float | None = None  # a separate per-request state pool (SGLang's mamba pool); None: shared
    state_bytes_per_request: float = 0.0  # per-request state on this rank (all layers)
    max_running_requests: float = math.inf  # the engine's cap on running requests per GPU (SGLang: mamba slots / ratio)
    # SGLang's hybrid SWA pools (engines/sglang.py swa_pools): (full-attention layers' pool bytes,
    # sliding layers' pool bytes) on this GPU; None: window layers share the KV pool
    swa_pool_bytes: tuple[float, float] | None = None

    @property
    def kv_pool_bytes(self) -> float:
        """KV bytes the pool holds on this GPU (0 when infeasible; never negative); with SGLang's
        hybrid SWA pools, both pools together."""
        if self.swa_pool_bytes is not None:
            return self.swa_pool_bytes[0] + self.swa_pool_bytes[1]
        return self.kv_pool_tokens * self.kv_bytes_per_token

    @property
    def window_pool_bytes(self) -> float | None:
        """The sliding layers' own pool (SGLang hybrid SWA); None: windows share the KV pool."""
        return None if self.swa_pool_bytes is None else self.swa_pool_bytes[1]

    @property
    def state_wall_bytes(self) -> float | None:
        """State bytes the busiest rank may hold: the state pool, capped by the engine's running-
        request limit (SGLang admits max_mamba_cache_size // 3 requests); None: states share the KV pool."""
        if self.state_pool_bytes is None:
            return None
        return min(self.state_pool_bytes, self.max_running_requests * self.state_bytes_per_request)

    @property
    def static_budget_bytes(self) -> float:
        """Memory the engine lets weights + KV occupy on this GPU (the runtime's memory budget)."""
        return self.weights_bytes + max(self.kv_budget_bytes, 0.0)

    def describe(self) -> dict[str, Any]:
        """JSON view: which engine model and which defaults produced the pool (units in keys)."""
        return {
            "engine": self.engine, "source": self.source, "feasible": self.feasible,
            "infeasible_reason": self.reason or None,
            "datasheet_hbm_bytes": self.datasheet_hbm_bytes, "usable_hbm_bytes": self.usable_hbm_bytes,
            "engine_total_bytes": self.total_bytes, "fraction": self.fraction, "fraction_source": self.fraction_source,
            "reserve_bytes": self.reserve_bytes, "reserve_terms": dict(self.reserve_terms),
            "weights_bytes": self.weights_bytes, "kv_budget_bytes": self.kv_budget_bytes,
            "kv_cell_bytes_per_token": self.kv_cell_bytes_per_token, "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_pool_tokens": self.kv_pool_tokens, "kv_pool_bytes": self.kv_pool_bytes,
            "page_tokens": self.page_tokens, "kv_dtype": self.kv_dtype, "defaults": dict(self.defaults),
            "state_bytes_per_request": self.state_bytes_per_request,
            # NOTE: present only with a separate state pool (no nulls: the documents' nullable fields are a contract)
            **({} if self.state_pool_bytes is None else
               {"state_pool_bytes": self.state_pool_bytes, "max_running_requests": self.max_running_requests}),
            **({} if self.swa_pool_bytes is None else
               {"full_attention_pool_bytes": self.swa_pool_bytes[0], "sliding_window_pool_bytes": self.swa_pool_bytes[1]}),
        }


class EngineMemoryModel:
    """An engine's memory arithmetic and defaults. Subclasses set `name` and answer each method."""

    name: ClassVar[str]
    description: ClassVar[str]
    fraction_name: ClassVar[str]  # the engine's own name for the fraction (for messages)
    # NOTE: SGLang's --swa-full-tokens-ratio is that engine's own flag (vLLM sizes one pool of
    # hybrid blocks, no such ratio): an engine that does not take it refuses it at make_deployment
    takes_swa_full_tokens_ratio: ClassVar[bool] = False
    # the MoE all-to-all backends a deployment may name (`Deployment.moe_a2a`; planner.engines.kernels)
    moe_a2a_backends: ClassVar[tuple[str, ...]] = ()

    def default_kv_dtype(self, model: "ModelSpec", hw: "HardwareSpec") -> str:
        """The canonical KV dtype ('bf16', 'fp8', 'fp8_dsa') the engine picks for `auto`."""
        raise NotImplementedError

    def default_page_tokens(self, model: "ModelSpec", hw: "HardwareSpec", head_split_ranks: int = 1,
                            kv_dtype: str = "bf16") -> int:
        """Tokens per KV page (SGLang page_size, vLLM block_size) the engine uses by default for
        the model when `head_split_ranks` ranks split its KV by heads (the placement's: T under TP;
        vLLM's hybrid pages depend on it)."""
        raise NotImplementedError

    def scheduler(self, dep: "Deployment") -> "SchedulerSpec":
        """How the engine schedules `dep` (planner.engines.scheduling): one scheduler per owner
        group of the placement, its chunk budget and running cap, mixed or separate prefill, how
        requests are routed and preempted, each cited in the engine's module."""
        raise NotImplementedError

    def kernels(self, dep: "Deployment") -> "EngineKernels":
        """What the engine's steps run on `dep` (planner.engines.kernels): MoE token movement, its
        expert GEMM's narrow-width rate, CUDA-graph capture sizes, attention backends and a per-step
        overhead, each cited in the engine's module. The base answer is the layout's ideal kernels
        (no engine term), for an engine module that declares none."""
        from planner.engines.kernels import BARE

        return BARE

    def chunked_prefill_tokens(self, dep: "Deployment") -> int:
        """Prefill tokens one engine step takes per owner group by default (SGLang
        chunked_prefill_size after its DP-attention split, vLLM max_num_batched_tokens per core)."""
        return self.scheduler(dep).chunk_tokens_per_group

    def running_requests_cap(self, dep: "Deployment") -> float:
        """Requests the engine runs at once by default across one deployment group (its schedulers'
        caps together, not memory); inf where it sets none."""
        return self.scheduler(dep).running_cap

    def check(self, mem_fraction: float | None, reserve_bytes: float | None) -> None:
        """Raise SpecError if the overrides don't make sense for this engine."""

    def plan(self, dep: "Deployment") -> MemoryPlan:
        raise NotImplementedError

    def launch(self, dep: "Deployment") -> "LaunchLine":
        """The engine's launch command that runs `dep` (its parallel flags from the placement, never
        the layout's name: `parallel_form`), or why none does. The base answer: no line written."""
        return LaunchLine(self.name, None, f"floorfirst writes no launch line for engine {self.name}")


def _tp_split(dep: "Deployment", variant) -> float:
    """Ways the deployment's placement splits one variant's cache by heads inside an owner group
    (TP over T, attention TP over a DP group's R; 1 for MLA's single latent and for layouts that
    keep a request whole or split it by tokens)."""
    return dep.placement.head_split(variant)


def kv_bytes_on_rank(dep: "Deployment") -> float:
    """Bytes one cached token occupies on a rank that holds it, all layers with per-token pages:
    the full record for owner and CP layouts, the record over each variant's head split where the
    placement splits heads (TP; attention TP inside a DP group; 1 for MLA's single latent)."""
    return float(sum(v.token_bytes(dep.kv_dtype) * n / _tp_split(dep, v) for v, n in dep.model.mixers))


def kind_bytes_on_rank(dep: "Deployment", kind: str) -> float:
    """`kv_bytes_on_rank` of the layer groups whose cache is all of one memory kind ('token' or
    'window'): what SGLang's hybrid SWA split calls F·n_full and S·n_swa."""
    return float(sum(v.token_bytes(dep.kv_dtype) * n / _tp_split(dep, v) for v, n in dep.model.mixers
                     if v.memory_kinds() == {kind}))


def state_bytes_on_rank(dep: "Deployment") -> float:
    """Per-request state bytes on the rank that owns a request, all layers (split by heads under TP)."""
    return float(sum(v.state_bytes(dep.kv_dtype) * n / _tp_split(dep, v) for v, n in dep.model.mixers))


def whole_page_tokens(budget_bytes: float, cell_bytes: float, page_tokens: int, spare_pages: int = 0) -> float:
    """⌊budget / cell / page⌋ · page − spare pages, floored at 0."""
    if cell_bytes <= 0:
        return 0.0
    pages = math.floor(budget_bytes / cell_bytes / page_tokens) - spare_pages
    return float(max(pages, 0) * page_tokens)


def weights_resident(dep: "Deployment") -> float:
    from planner.step import weights_resident_bytes  # lazy: the step model imports deployments

    return float(sum(weights_resident_bytes(dep).values()))


def infeasible_reason(plan_kwargs: dict[str, Any], fraction_name: str) -> str:
    """Words for a pool that cannot hold one page, from the plan's own figures (GiB per GPU)."""
    w, b, total, frac = (plan_kwargs[k] for k in ("weights_bytes", "kv_budget_bytes", "total_bytes", "fraction"))
    if frac <= 0:
        return (f"the reserve ({plan_kwargs['reserve_bytes'] / GiB:.1f} GiB/GPU) leaves no memory for weights and KV "
                f"({fraction_name} would be {frac:.3f})")
    if b < 0:
        return (f"weights {w / GiB:.1f} GiB/GPU exceed the {(w + b) / GiB:.1f} GiB the engine allows for weights + KV "
                f"({fraction_name} {frac:.3f} of {total / GiB:.1f} GiB)")
    return (f"after weights ({w / GiB:.1f} GiB/GPU) the KV budget is {b / GiB:.2f} GiB, "
            f"less than one {plan_kwargs['page_tokens']}-token page")


# --- launch lines (each engine module's `launch`; planner.launch reads them back) -------------------

TENSOR, DECODE_CONTEXT, ATTENTION_DP = "tensor", "decode_context", "attention_dp"
SWITCHING_RUNTIME = "needs a switching runtime"


@dataclass(frozen=True)
class LaunchLine:
    """How an engine starts one deployment, or why it can't (`command` None, `reason` in words)."""

    engine: str
    command: str | None  # one shell command; None: no flag of this engine runs the deployment
    reason: str = ""  # why not ('' when launchable)
    files: tuple[tuple[str, str], ...] = ()  # (file name, text) the command reads, written before it
    copies: int = 1  # identical servers to start behind a router (replicas no flag of the line expresses)
    notes: tuple[str, ...] = ()  # what the line leaves to the operator (per-node ranks, a router)
    source: str = ""  # the engine's argument parser the flags are read from

    @property
    def launchable(self) -> bool:
        return self.command is not None

    def text(self) -> str:
        """Runnable shell text: each file as a heredoc, then the command ('' when not launchable).
        planner.launch.parse_launch reads it back whole."""
        if self.command is None:
            return ""
        docs = [f"cat > {name} <<'EOF'\n{body.rstrip(chr(10))}\nEOF" for name, body in self.files]
        return "\n".join([*docs, self.command])

    def describe(self) -> dict[str, Any]:
        """The JSON view (compare and floor rows)."""
        return {"launchable": self.launchable, "launch_line": self.text() or None,
                "launch_reason": self.reason or None, "launch_replicas": self.copies, "launch_notes": list(self.notes)}


def parallel_form(dep: "Deployment") -> tuple[str | None, str]:
    """(form, '') for a placement some engine flag runs, else (None, why), read from the placement
    alone (planner/layouts/placement.py), never from the layout's name:
    - TENSOR: one owner group whose ranks split heads and head-sharded weights (TP);
    - DECODE_CONTEXT: one group, weights split over it like TP, each request's tokens interleaved
      over all its ranks (vLLM's DCP with dcp = tp);
    - ATTENTION_DP: G > 1 groups, weights split inside each group and replicated across groups
      (`attention_dp_size` = G: SGLang --dp with DP attention, vLLM -dp on a MoE model);
    anything else (weights over all T ranks while KV sits in one group, as DOP; weights replicated
    with KV split by tokens, as SPLASH's CP) is started by no engine flag."""
    pl, t = dep.placement, dep.ranks
    g, r = pl.owner_groups, pl.group_ranks
    if pl.token_split == 1 and pl.weight_split == r and pl.head_split_ranks == r:
        return (TENSOR if g == 1 else ATTENTION_DP), ""
    if g == 1 and pl.token_split == t and pl.weight_split == t:
        return DECODE_CONTEXT, ""
    if pl.token_split > 1:
        held = "replicated on every rank" if pl.weight_split == 1 else f"split {pl.weight_split} ways"
        return None, (f"attention weights {held} with each request's KV split by tokens over {pl.token_split} ranks: "
                      f"no engine flag runs it ({SWITCHING_RUNTIME})")
    if pl.weight_split > r:
        return None, (f"attention weights split over all {t} ranks while each request's KV sits in one of {g} owner "
                      f"groups: no engine flag runs it ({SWITCHING_RUNTIME})")
    return None, f"no engine flag runs this placement ({SWITCHING_RUNTIME})"


def single_kv_head(dep: "Deployment") -> str:
    """'' when every mixer keeps one KV head (MLA's latent, DSA, DeepSeek-V4), else the first
    variant with more, in words: decode context parallelism over the whole group needs one head."""
    for v, _ in dep.model.mixers:
        if v.kv_splittable_heads() > 1:
            return f"{dep.model.name}'s {v.describe()} layers have {v.kv_splittable_heads()} KV heads"
    return ""


def model_path(dep: "Deployment") -> str:
    """What a launch line names as the model: the Hugging Face repository the card was taken from
    (planner/models/card_sources.json), else the model's own name (a repo id or a config path)."""
    from planner.models.loader import card_sources

    return card_sources().get(dep.model.name, {}).get("repo", dep.model.name)


def flag_words(*pairs) -> list[str]:
    """['--flag', 'value', '--switch', …] from (flag, value) pairs; a value of True is a bare switch."""
    out: list[str] = []
    for flag, value in pairs:
        out += [flag] if value is True else [flag, str(value)]
    return out


def line_shape(dep: "Deployment", form: str, replicas_flag: bool) -> tuple[int, int]:
    """(identical servers to start, nodes one server spans). Replicas go into the line where the
    engine has a flag for them (`replicas_flag`: SGLang's --dp-size without DP attention, vLLM's -dp
    on a dense model) on one node and outside DP attention (which takes that flag); otherwise each
    replica is its own server behind a router."""
    copies = dep.replicas if dep.replicas > 1 and (not replicas_flag or form == ATTENTION_DP or dep.nodes > 1) else 1
    return copies, max(1, dep.nodes // copies)


def weight_flag_note(dep: "Deployment") -> str:
    """A note when the deployment prices weights the line's checkpoint does not hold ('' otherwise):
    only fp8 has an online-quantization flag (written by the engines); bf16 and fp4 need a checkpoint."""
    if not dep.weight_dtype_given or dep.weight_dtype == "fp8":
        return ""
    return (f"the line names {model_path(dep)}; {dep.weight_dtype} weights (--weight-dtype) need a checkpoint stored "
            f"in {dep.weight_dtype} (e.g. its -NVFP4 or -BF16 repository)")
