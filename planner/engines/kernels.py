"""What an engine's steps run, as declared facts the step model prices: the engine as a dimension
of the step model (issue 26). Each engine module (planner/engines/{sglang,vllm,trtllm}.py) answers
`kernels(dep)` with one `EngineKernels`, every fact cited to that engine's code next to it; the step
model (planner.step `engine_layer`) reads it through `Deployment.kernels`, never an engine's name.

Four kinds of fact, each priced as its own component of the step (`StepCost.engine`):
- **MoE token movement** when activations are partitioned over ranks (DP attention): a `MoEComm`
  for decode steps and one for steps that carry a prefill chunk — all-gather + reduce-scatter of the
  hidden states (vLLM's and TRT-LLM's default, SGLang's decode path without `--moe-a2a-backend`),
  two all-reduces of a zero-padded buffer (SGLang's prefill path), or DeepEP's dispatch / combine
  (low-latency: one copy per selected expert; normal: one copy per destination rank, plus a
  layout notification). Byte and message counts are in each class;
- **thin expert GEMMs**: a grouped expert GEMM of per-rank width w (the expert's intermediate size
  under EP, a 1/T slice of it under TP) streams its weights at rate(w) = rate_∞ · w / (w + w½),
  i.e. as if every touched expert were w½ columns wider: `NarrowGemm.penalty_fraction` prices the
  extra as HBM bytes at the datasheet rate (component `experts_narrow_gemm`). w½ per GPU generation
  is fitted on aiconfigurator-core's per-kernel MoE tables (calibration/kernel_db.py `moe_half_width`);
- **CUDA-graph padding**: a decode batch runs the smallest captured size ≥ it (`CudaGraphs`), so the
  padded rows do the projections' and MLPs' FLOPs (component `cuda_graph_padding`); batches above
  the largest captured size run eagerly (not priced: NOTE);
- **the attention backend** per GPU generation (its name, and the decode kernel whose head tile the
  floors pad to), and a **per-step overhead** outside the kernels (sampling, scheduling, launches
  outside the graph), a stated default with its source: the calibrated prior of a (GPU, engine)
  starts from it, a fit replaces it.

The datasheet floors keep the layout's ideal collectives and no engine term: they stay lower bounds
on what the hardware can do. The engine's terms enter the calibrated step model (calibration.artifact
`step_features`), which the runtime, `simulate` and every tokens/s figure use by default.

Does not: model DeepEP's internode forwarding (normal mode sends one copy per remote node there),
MNNVL all-to-all (TRT-LLM on GB200 NVL72: priced as all-gather + reduce-scatter, NOTE), two-batch
overlap, eager launch gaps above the largest graph, routing skew.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from planner.layouts.base import ACTIVATION_BYTES, Collective

if TYPE_CHECKING:  # pragma: no cover
    from planner.layouts.base import ShareInputs

FP8_WITH_SCALES_BYTES = 1.0 + 4.0 / 128.0  # fp8 value + one fp32 scale per 128 channels (DeepEP's FP8 dispatch)
TOPK_ROUTE_BYTES = 8.0  # one (fp32 weight, int32 expert id) pair per selected expert


@dataclass(frozen=True)
class MoEComm:
    """How partitioned tokens reach their experts and come back, one MoE layer (module docstring).
    `collectives(inp, mlp, padded_group_tokens, steps)` lists them; `steps` [P] is 1 where this
    scheme runs (the step model picks the decode or the prefill scheme per point), so their bytes and
    launches vanish elsewhere."""

    name: str
    source: str
    expert_parallel_only: bool = False  # DeepEP moves tokens to experts; it can't serve TP-sharded experts

    def collectives(self, inp: "ShareInputs", mlp, padded_group_tokens: np.ndarray, steps: np.ndarray) -> list[Collective]:
        raise NotImplementedError


def _hidden_bytes(inp: "ShareInputs", tokens) -> np.ndarray:
    return tokens * inp.model.hidden_size * ACTIVATION_BYTES


@dataclass(frozen=True)
class AllGatherReduceScatter(MoEComm):
    """Dispatch = all-gather of every group's hidden states (bf16) and their routing over the DP
    group, combine = reduce-scatter of the outputs: 2 launches per layer, each (T−1)/T·S link bytes
    with S the whole group's tokens × hidden × 2 B. `pad_to_max`: every rank contributes its
    CUDA-graph batch padded to the largest rank's (SGLang's MAX_LEN mode), else the actual tokens
    (all_gatherv / reduce_scatterv)."""

    pad_to_max: bool = False
    routes_in_dispatch: bool = False  # the dispatch also gathers each token's top-k (weight, id) pairs

    def collectives(self, inp, mlp, padded_group_tokens, steps):
        tokens = padded_group_tokens * max(inp.owner_groups, 1) if self.pad_to_max else inp.step_tokens
        extra = tokens * mlp.top_k * TOPK_ROUTE_BYTES if (self.routes_in_dispatch and mlp.is_moe) else 0.0
        full = _hidden_bytes(inp, tokens)
        return [Collective("moe_allgather_dispatch", "all_gather", full + extra, steps),
                Collective("moe_reducescatter_combine", "reduce_scatter", full, steps)]


@dataclass(frozen=True)
class AllReduceGather(MoEComm):
    """SGLang's SUM_LEN path (an extend batch with DP attention): each rank writes its tokens into a
    zeroed buffer of the whole group's tokens and all-reduces it (the gather), and the MoE output is
    all-reduced before each rank slices its own rows back: 2 all-reduces of S = tokens × hidden × 2 B."""

    def collectives(self, inp, mlp, padded_group_tokens, steps):
        full = _hidden_bytes(inp, inp.step_tokens)
        return [Collective("moe_allreduce_gather", "all_reduce", full, steps),
                Collective("moe_allreduce_combine", "all_reduce", full, steps)]


def expected_ranks_per_token(num_experts: int, top_k: int, ranks: int) -> float:
    """Ranks one token's top-k experts land on, experts spread evenly over `ranks`:
    T·(1 − C(E − E/T, k)/C(E, k)) (a rank holds none of the k with the hypergeometric odds)."""
    e, k, t = float(num_experts), int(top_k), int(ranks)
    if t <= 1:
        return 1.0
    miss = 1.0
    for i in range(k):
        miss *= max(e - e / t - i, 0.0) / (e - i)
    return t * (1.0 - miss)


@dataclass(frozen=True)
class DeepEPLowLatency(MoEComm):
    """DeepEP's low-latency kernels (decode, CUDA-graph safe): every token sends one copy per
    selected expert — k copies of the dispatch width in FP8 with scales — and receives k BF16 copies
    back; 2 launches per layer (deepseek-ai/DeepEP README: "FP8 dispatch / BF16 combine";
    low_latency_dispatch / low_latency_combine)."""

    expert_parallel_only: bool = True

    def collectives(self, inp, mlp, padded_group_tokens, steps):
        copies = (inp.step_tokens / inp.ranks) * mlp.top_k * mlp.dispatch_width()
        return [Collective("ep_ll_dispatch_a2a", "all_to_all", copies * FP8_WITH_SCALES_BYTES, steps),
                Collective("ep_ll_combine_a2a", "all_to_all", copies * ACTIVATION_BYTES, steps)]


@dataclass(frozen=True)
class DeepEPNormal(MoEComm):
    """DeepEP's normal kernels (prefill): a token is sent once to each rank that holds one of its
    experts (`expected_ranks_per_token`), FP8 with scales out and BF16 back, after a layout
    notification (notify_dispatch, a CPU-synchronised count exchange): 3 launches per layer
    (deepseek-ai/DeepEP deep_ep/buffer.py Buffer.dispatch → notify_dispatch + intranode dispatch,
    Buffer.combine)."""

    expert_parallel_only: bool = True

    def collectives(self, inp, mlp, padded_group_tokens, steps):
        ranks = expected_ranks_per_token(mlp.num_experts, mlp.top_k, inp.ranks)
        copies = (inp.step_tokens / inp.ranks) * ranks * mlp.dispatch_width()
        counts = np.full_like(np.asarray(inp.step_tokens, dtype=np.float64), 4.0 * inp.ranks)
        return [Collective("ep_normal_notify", "all_to_all", counts, steps),
                Collective("ep_normal_dispatch_a2a", "all_to_all", copies * FP8_WITH_SCALES_BYTES, steps),
                Collective("ep_normal_combine_a2a", "all_to_all", copies * ACTIVATION_BYTES, steps)]


@dataclass(frozen=True)
class NarrowGemm:
    """The engine's grouped expert GEMM: rate(w) = rate_∞ · w / (w + w½) for per-rank width w; w½
    (columns) per GPU generation ('sm90', 'sm100'; '*' otherwise)."""

    kernel: str
    half_width_columns: dict[str, float]
    source: str

    def half_width(self, arch: str | None) -> float:
        return float(self.half_width_columns.get(arch or "", self.half_width_columns.get("*", 0.0)))

    def penalty_fraction(self, width: float, arch: str | None) -> float:
        """Extra weight-streaming time over the bytes' datasheet time, as a fraction of those bytes."""
        return self.half_width(arch) / width if width > 0 else 0.0


@dataclass(frozen=True)
class CudaGraphs:
    """Captured decode batch sizes and whether a batch is padded up to the next one."""

    sizes: tuple[int, ...]  # ascending
    pads: bool
    source: str

    def padded(self, batch: np.ndarray) -> np.ndarray:
        """[P] the batch each decode batch runs at: the smallest captured size ≥ it; itself when the
        engine doesn't pad, above the largest size (eager), or 0."""
        b = np.asarray(batch, dtype=np.float64)
        if not self.pads or not self.sizes:
            return b
        top = self.sizes[-1]
        inside = (b > 0) & (b <= top)
        # NOTE: the smallest size ≥ ⌈b⌉ read from a table by ⌈b⌉ (1 … the largest size): a sweep's
        # points each pay one lookup, not a binary search
        idx = np.where(inside, np.ceil(b), 0.0).astype(np.intp)
        return np.where(inside, self._smallest_size_at_least[idx], b)

    @cached_property
    def _smallest_size_at_least(self) -> np.ndarray:
        """[largest size + 1] the smallest captured size ≥ k, for k = 0 … the largest size."""
        sizes = np.asarray(self.sizes, dtype=np.float64)
        return sizes[np.searchsorted(sizes, np.arange(self.sizes[-1] + 1, dtype=np.float64), side="left")]


@dataclass(frozen=True)
class AttentionBackend:
    """The decode attention backend an engine runs for one (GPU generation, attention family) and
    the decode kernel (planner.models.attention.kernels) whose head tile it pads to; None: the
    variant's own default."""

    name: str
    decode_kernel: str | None
    source: str


@dataclass(frozen=True)
class EngineKernels:
    """What one engine's steps run on one deployment (module docstring)."""

    engine: str
    moe_decode: MoEComm | None  # None: the layout's ideal collectives (no engine term)
    moe_prefill: MoEComm | None
    moe_gemm: NarrowGemm | None
    graphs: CudaGraphs | None
    attention: dict[str, AttentionBackend] = field(default_factory=dict)  # attention family -> backend
    step_overhead_s: float = 0.0
    step_overhead_source: str = ""

    def backend_for(self, variant) -> AttentionBackend | None:
        """The backend this engine decodes `variant` with (by its kind, then '*'), or None."""
        return self.attention.get(variant.kind, self.attention.get("*"))

    def describe(self) -> dict:
        """JSON view: which kernels the engine runs here (names and sources)."""
        return {
            "engine": self.engine,
            "moe_decode": None if self.moe_decode is None else self.moe_decode.name,
            "moe_prefill": None if self.moe_prefill is None else self.moe_prefill.name,
            "moe_gemm": None if self.moe_gemm is None else self.moe_gemm.kernel,
            "cuda_graph_max_batch_requests": (self.graphs.sizes[-1] if self.graphs is not None and self.graphs.sizes else 0),
            "cuda_graph_padding": bool(self.graphs is not None and self.graphs.pads),
            "attention_backends": {k: v.name for k, v in self.attention.items()},
            "step_overhead_s": self.step_overhead_s,
            "step_overhead_source": self.step_overhead_source,
        }


# NOTE: the per-step overhead outside the kernels when no engine measurement exists. No table of
# aiconfigurator-core 0.12.0 measures one (its tables time kernels alone), so the default is the
# overhead floorfirst fitted on its own CUDA-graph-replayed decode steps on H200 (graph launch,
# host sync, Python; benchmarks/results/calibration_report.txt: 0.62 ms on the step probe's 135
# rows, 0.59 ms on the executor's 116): a lower bound for an engine, which also samples and
# schedules. A fit on an engine's own rows replaces it (calibration.fit, per engine).
DEFAULT_STEP_OVERHEAD_S = 0.6e-3
DEFAULT_STEP_OVERHEAD_SOURCE = ("floorfirst's own graph-replayed H200 decode steps: fitted overhead 0.62 ms (step probe) "
                                "and 0.59 ms (executor), benchmarks/results/calibration_report.txt; no per-kernel table "
                                "measures one")

BARE = EngineKernels("bare", None, None, None, None, {}, 0.0, "no engine: the layout's ideal kernels")


def capture_sizes(parts) -> tuple[int, ...]:
    """Sorted unique sizes from ranges and lists (the engines write theirs as list + range sums)."""
    return tuple(sorted({int(x) for p in parts for x in p}))
