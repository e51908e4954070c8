"""A validated deployment: model, hardware, layout, topology, dtypes and the engine that sizes
its memory.

Validation happens once here (SpecError with the field and both values); the step model then
takes the deployment as plain numbers and arrays. A group of T ranks may span nodes: `nodes` is
how many scale-up domains the whole deployment spans (default: as few as hold it), so a group
spans `group_nodes` of them with `ranks_per_node` ranks on each. The memory plan (the KV pool as
the engine computes it) is derived on first use; an infeasible plan is an answer, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from planner.engines.base import DEFAULT_ENGINE, EngineMemoryModel, MemoryPlan, engines
from planner.engines.kv_dtype import resolve_kv_dtype
from planner.errors import SpecError
from planner.hardware.spec import HardwareSpec
from planner.host_tier import HostTierSpec, check_tier
from planner.layouts.base import AttentionLayout, MoESplit, attention_layouts, moe_splits
from planner.layouts.placement import Placement
from planner.models.attention.kernels import DecodeKernel, decode_kernel, gpu_arch
from planner.models.spec import ModelSpec
from planner.units import WEIGHT_BYTES_PER_PARAM, WEIGHT_DTYPES, GiB

class RegistryNames(Sequence):
    """The names a registry holds now, in each entry's declared `order` (then by name; undeclared:
    after the built-ins): a layout module registered later (a test's toy layout, a user's plug-in)
    is listed without a central edit."""

    def __init__(self, entries):
        self._entries = entries

    def _names(self) -> tuple[str, ...]:
        items = self._entries()
        # NOTE: a layout's own `order` only (a subclass of cp is not listed next to cp), then by name
        return tuple(sorted(items, key=lambda n: (vars(type(items[n])).get("order", 100), n)))

    def __getitem__(self, i):
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __eq__(self, other) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (tuple, list, RegistryNames)) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._names())

    def __add__(self, other) -> tuple[str, ...]:
        return self._names() + tuple(other)

    def __radd__(self, other) -> tuple[str, ...]:
        return tuple(other) + self._names()

    def __repr__(self) -> str:
        return repr(self._names())


ATTN_LAYOUTS: Sequence[str] = RegistryNames(attention_layouts)
MOE_SPLITS: Sequence[str] = RegistryNames(moe_splits)


@dataclass(frozen=True)
class Deployment:
    model: ModelSpec
    hardware: HardwareSpec
    attn: str
    moe: str
    gpus: int
    replicas: int
    weight_dtype: str
    kv_dtype: str  # the planner's record: 'bf16', 'fp8' or 'fp8_dsa'
    page_tokens: int
    engine: str
    nodes: int  # scale-up domains the whole deployment spans
    mem_fraction: float | None  # explicit engine fraction; None = the engine's default
    reserve_bytes: float | None  # explicit reserve per GPU; None = the engine's estimate
    attention_kernel: str | None = None  # decode kernel override (planner.models.attention.kernels); None: the variant's engine default
    host_tier: HostTierSpec | None = None  # a host KV tier (planner.host_tier); None: all KV in HBM
    weight_dtype_given: bool = False  # True: every linear weight at `weight_dtype`; False: the checkpoint's per-part dtypes
    swa_full_tokens_ratio: float | None = None  # SGLang --swa-full-tokens-ratio; None: the engine's default
    # owner groups of a layout that takes a count (group_rule "given": dptp, SGLang's --dp with DP
    # attention and --dp < --tp); None for every other layout (their count follows from T)
    attn_groups: int | None = None
    # the engine's kernels price the step's engine terms (planner.engines.kernels); False: the
    # layout's ideal kernels alone (a row measured outside any engine: floorfirst's own executor)
    engine_kernels: bool = True
    # the engine's MoE all-to-all backend (SGLang --moe-a2a-backend: none, deepep; vLLM --all2all-backend:
    # allgather_reducescatter, deepep_low_latency, deepep_high_throughput); None: the engine's default
    moe_a2a: str | None = None

    @property
    def ranks(self) -> int:
        """T: GPUs in one group (gpus / replicas)."""
        return self.gpus // self.replicas

    @property
    def gpus_per_node(self) -> int:
        return self.gpus // self.nodes

    @property
    def group_nodes(self) -> int:
        """Scale-up domains one group spans (1 unless the group is larger than a node)."""
        return max(1, self.ranks // self.gpus_per_node)

    @property
    def ranks_per_node(self) -> int:
        """Ranks of one group inside one scale-up domain."""
        return self.ranks // self.group_nodes

    @property
    def attention_layout(self) -> AttentionLayout:
        return attention_layouts()[self.attn]

    @cached_property
    def placement(self) -> Placement:
        """Who holds what under this layout on one group (planner.layouts.placement)."""
        return self.attention_layout.placement(self.ranks, self.attn_groups)

    @property
    def moe_split(self) -> MoESplit:
        return moe_splits()[self.moe]

    @property
    def weight_bytes_per_param(self) -> float:
        return WEIGHT_BYTES_PER_PARAM[self.weight_dtype]

    def part_dtype(self, group, part: str) -> str:
        """The dtype one part of a layer group's weights is stored in: a `--weight-dtype` given
        applies to every linear weight; otherwise the checkpoint's (planner.models.quant)."""
        return self.weight_dtype if self.weight_dtype_given else group.part_dtype(part)

    @property
    def arch(self) -> str | None:
        """The GPU generation (planner.models.attention.kernels.gpu_arch)."""
        return gpu_arch(self.hardware)

    @property
    def decode_kernel(self) -> DecodeKernel:
        """The decode attention kernel whose head tile the step pads to (the primary mixer's): the
        deployment's override, else the engine's backend's, else the variant's default."""
        if self.attention_kernel:
            return decode_kernel(self.attention_kernel)
        backend = self.kernels.backend_for(self.model.attention)
        if backend is not None and backend.decode_kernel is not None:
            return decode_kernel(backend.decode_kernel)
        return decode_kernel(self.model.attention.decode_kernel(self.arch, self.kv_dtype))

    @cached_property
    def kernels(self):
        """What the engine's steps run here (planner.engines.kernels.EngineKernels); the layout's
        ideal kernels when `engine_kernels` is False."""
        if not self.engine_kernels:
            from planner.engines.kernels import BARE

            return BARE
        return self.engine_model.kernels(self)

    @property
    def engine_model(self) -> EngineMemoryModel:
        return engines()[self.engine]

    @cached_property
    def memory(self) -> MemoryPlan:
        """The KV pool and reserve per GPU as the engine computes them (see planner.engines)."""
        return self.engine_model.plan(self)

    def label(self) -> str:
        rep = f"×{self.replicas}" if self.replicas > 1 else ""
        span = f" over {self.group_nodes} nodes" if self.group_nodes > 1 else ""
        tier = f" +host(b={self.host_tier.hbm_budget_tokens})" if self.host_tier is not None else ""
        groups = f" G={self.attn_groups}" if self.attn_groups is not None else ""
        return f"{self.attn}/{self.moe} T={self.ranks}{groups}{rep}{span}{tier}"


def _whole(name: str, value) -> int:
    if isinstance(value, bool) or value is None or int(value) != value or value < 1:
        raise SpecError(f"{name}={value} must be a positive whole number")
    return int(value)


def _topology(hardware: HardwareSpec, gpus: int, replicas: int, nodes: int | None) -> int:
    domain = hardware.peak.scaleup_domain_gpus
    nodes = math.ceil(gpus / domain) if nodes is None else _whole("nodes", nodes)
    if gpus % nodes:
        raise SpecError(f"gpus={gpus} is not divisible by nodes={nodes}")
    per_node = gpus // nodes
    if per_node > domain:
        raise SpecError(f"{per_node} GPUs per node exceeds {hardware.name}'s scale-up domain of {domain}; "
                        f"use --nodes {math.ceil(gpus / domain)} or more")
    ranks = gpus // replicas
    if (ranks <= per_node and per_node % ranks) or (ranks > per_node and ranks % per_node):
        raise SpecError(f"a group of {ranks} GPUs does not tile nodes of {per_node} GPUs "
                        f"(gpus={gpus}, nodes={nodes}, replicas={replicas})")
    return nodes


def make_deployment(model: ModelSpec, hardware: HardwareSpec, *, attn: str = "tp", moe: str = "ep", gpus: int = 8,
                    replicas: int = 1, weight_dtype: str | None = None, kv_dtype: str | None = None,
                    mem_fraction: float | None = None, page_tokens: int | None = None,
                    reserve_bytes: float | None = None, engine: str = DEFAULT_ENGINE,
                    nodes: int | None = None, attention_kernel: str | None = None,
                    host_tier: HostTierSpec | None = None,
                    swa_full_tokens_ratio: float | None = None, attn_groups: int | None = None,
                    engine_kernels: bool = True, moe_a2a: str | None = None) -> Deployment:
    if attn not in ATTN_LAYOUTS:
        raise SpecError(f"attn={attn!r} is not a layout; choose one of {', '.join(ATTN_LAYOUTS)}")
    if moe not in MOE_SPLITS:
        raise SpecError(f"moe={moe!r} is not a split; choose one of {', '.join(MOE_SPLITS)}")
    known = engines()
    if engine not in known:
        raise SpecError(f"engine={engine!r} is not an engine model; choose one of {', '.join(sorted(known))}")
    eng = known[engine]
    gpus, replicas = _whole("gpus", gpus), _whole("replicas", replicas)
    if gpus % replicas:
        raise SpecError(f"gpus={gpus} is not divisible by replicas={replicas}")
    nodes = _topology(hardware, gpus, replicas, nodes)
    if mem_fraction is not None:
        if not math.isfinite(mem_fraction) or not 0 < mem_fraction <= 1.0:
            raise SpecError(f"mem_fraction={mem_fraction} must be in (0, 1]")
        mem_fraction = float(mem_fraction)
    if reserve_bytes is not None:
        if not math.isfinite(reserve_bytes) or reserve_bytes < 0:
            raise SpecError(f"reserve={reserve_bytes} must be ≥ 0")
        reserve_bytes = float(reserve_bytes)
        # NOTE: a reserve is part of the GPU's memory: one of the whole memory or more leaves the engine
        # a fraction ≤ 0 (SGLang's (memory − reserve)/memory), which no engine starts with
        usable = hardware.usable_hbm_bytes - hardware.memory.context_bytes
        if reserve_bytes >= usable:
            raise SpecError(f"reserve={reserve_bytes / GiB:g} GiB per GPU is not below the {usable / GiB:.2f} GiB a "
                            f"{hardware.name} has for the engine (its usable memory less the CUDA context)")
    eng.check(mem_fraction, reserve_bytes)
    if moe_a2a is not None and moe_a2a not in eng.moe_a2a_backends:
        raise SpecError(f"moe_a2a={moe_a2a!r} is not one of engine {engine}'s MoE all-to-all backends"
                        f"{': ' + ', '.join(eng.moe_a2a_backends) if eng.moe_a2a_backends else ' (it declares none)'}")
    if swa_full_tokens_ratio is not None:
        swa_full_tokens_ratio = _swa_ratio(eng, swa_full_tokens_ratio)
    wdt = weight_dtype or model.default_weight_dtype
    if wdt not in WEIGHT_DTYPES:
        raise SpecError(f"weight_dtype={wdt!r} is not one of {', '.join(WEIGHT_DTYPES)}")
    kdt = resolve_kv_dtype(model, kv_dtype, eng, hardware)
    if not model.has_moe and moe == "ep":
        raise SpecError(f"moe=ep needs a mixture-of-experts model; {model.name} is dense (use --moe tp)")
    ranks = gpus // replicas
    layout = attention_layouts()[attn]
    attn_groups = _attn_groups(layout, attn_groups, ranks, max(1, ranks // (gpus // nodes)))
    layout.check(model, ranks, attn_groups)
    page = eng.default_page_tokens(model, hardware, layout.placement(ranks, attn_groups).head_split_ranks, kdt) \
        if page_tokens is None else _whole("page_tokens", page_tokens)
    for v, _ in model.mlps:
        v.check_tp(ranks, moe)
    if attention_kernel is not None:
        decode_kernel(attention_kernel)  # SpecError naming the known kernels
    if host_tier is not None:
        check_tier(model, host_tier)
    return Deployment(model, hardware, attn, moe, gpus, replicas, wdt, kdt, page, engine, nodes, mem_fraction,
                      reserve_bytes, attention_kernel, host_tier, weight_dtype is not None, swa_full_tokens_ratio,
                      attn_groups, bool(engine_kernels), moe_a2a)


def _attn_groups(layout: AttentionLayout, groups, ranks: int, group_nodes: int) -> int | None:
    """The deployment's owner-group count for a layout that takes one (its default when None),
    validated: a whole divisor of the group's ranks; refused for layouts whose count follows from T."""
    if layout.group_rule != "given":
        if groups is not None:
            raise SpecError(f"attn_groups={groups} applies to a layout with a group count ("
                            f"{', '.join(n for n, x in attention_layouts().items() if x.group_rule == 'given')}); "
                            f"attn={layout.name} has {layout.owner_groups(ranks)} group(s) of its own")
        return None
    if groups is None:
        groups = layout.default_groups(ranks, group_nodes)
    groups = _whole("attn_groups", groups)
    if ranks % groups:
        raise SpecError(f"attn_groups={groups} does not divide the group's {ranks} ranks (attn={layout.name})")
    return groups


# NOTE: sgl-project/sglang python/sglang/srt/server_args.py, the `--swa-full-tokens-ratio` argument's
# help: "It should be between 0 and 1" (SGLang itself does not assert it). Above 1 the sliding pool
# would hold more tokens than the full one, which no allocation can use (SWATokenToKVPoolAllocator's
# available_size is the min of the two), so (0, 1] is the bound here.
SWA_FULL_TOKENS_RATIO_MAX = 1.0


def _swa_ratio(eng: EngineMemoryModel, ratio) -> float:
    if not eng.takes_swa_full_tokens_ratio:
        raise SpecError(f"swa_full_tokens_ratio={ratio} is SGLang's --swa-full-tokens-ratio; engine {eng.name} has no such setting")
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not math.isfinite(ratio) \
            or not 0 < ratio <= SWA_FULL_TOKENS_RATIO_MAX:
        raise SpecError(f"swa_full_tokens_ratio={ratio} must be in (0, {SWA_FULL_TOKENS_RATIO_MAX:g}]")
    return float(ratio)


def replace_deployment(dep: Deployment, **changes) -> Deployment:
    """The same deployment with some settings changed, validated again (the memory plan is
    recomputed: an engine's default fraction depends on the layout). `gpus` without `nodes`
    keeps the GPUs per node; the explicit overrides (fraction, reserve, SWA ratio) carry over."""
    if "gpus" in changes and "nodes" not in changes:
        changes["nodes"] = max(1, changes["gpus"] // dep.gpus_per_node)
    kw = dict(attn=dep.attn, moe=dep.moe, gpus=dep.gpus, replicas=dep.replicas,
              weight_dtype=dep.weight_dtype if dep.weight_dtype_given else None,
              kv_dtype=dep.kv_dtype, mem_fraction=dep.mem_fraction, page_tokens=dep.page_tokens,
              reserve_bytes=dep.reserve_bytes, engine=dep.engine, nodes=dep.nodes,
              attention_kernel=dep.attention_kernel, host_tier=dep.host_tier,
              swa_full_tokens_ratio=dep.swa_full_tokens_ratio, attn_groups=dep.attn_groups,
              engine_kernels=dep.engine_kernels, moe_a2a=dep.moe_a2a)
    kw.update(changes)
    # NOTE: a group count belongs to its layout: another layout takes its own (or its default)
    if "attn_groups" not in changes and (kw["attn"] != dep.attn or kw["gpus"] != dep.gpus
                                         or kw["replicas"] != dep.replicas):
        kw["attn_groups"] = None
    return make_deployment(dep.model, dep.hardware, **kw)
