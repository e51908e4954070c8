"""The KV hand-off between a prefill instance and a decode instance, priced as a resource.

Bytes. A request's hand-off is its KV as the decode pool stores it: each mixer variant's record
(`kv_stored_bytes`: MLA's latent, DSA's latent + index key, GQA's K and V heads, a window capped at
its window, a recurrent state once) × the prompt's tokens (whole decode pages) × its layers. The
engines never forward between decode ranks: every decode rank of the request's owner group pulls
(vLLM) or is sent (SGLang) its own share straight from a prefill rank, so the bytes on the wire are
the decode copies × the request: MLA into a TP decode group of R ranks crosses the network R times.

Ranks. Inside a request's prefill group (R_p ranks) and decode group (R_d ranks) — the placements'
owner groups, attention TP inside them — the engines map decode rank j to prefill ranks by the
ratio of the two attention TP sizes:
- R_d ≥ R_p: j reads from prefill rank j // (R_d/R_p) (one prefill rank feeds R_d/R_p decode ranks);
- R_d < R_p: j reads from prefill ranks [j·s, (j+1)·s), s = R_p/R_d; where those hold copies of
  the same data (MLA's latent, a replicated GQA head) only the first sends;
(SGLang: python/sglang/srt/disaggregation/common/conn.py `CommonKVManager._resolve_rank_mapping`,
"For MLA models, we can retrieve KVCache from only one prefill rank"; vLLM:
vllm/distributed/kv_transfer/kv_connector/utils.py `TpKVTopology.get_target_remote_ranks` and
kv_connector/v1/nixl_connector.py `_read_blocks_for_req`, "MLA opt: when P TP > D TP, only a single
read is executed"). Which bytes a prefill rank holds and a decode rank needs follow from the
placements (planner/layouts/placement.py): a rank of a head-split group holds one head slice, of a
token-split group one token slice, and the bytes from i to j are the overlap of the two (slices of
heads as intervals; token slices as independent interleavings, as runtime_policy/transitions.py
takes them). So TP prefill (MLA, KV replicated) into DP-attention decode (one owner) is sent by
prefill rank 0 alone, through one NIC; into a DCP decode group each prefill rank sends 1/R of the
tokens. A pair whose mapped ranks don't hold what a decode rank needs (a token-split prefill into a
head-split decode) falls back to every rank of the prefill group sending its slice — SGLang's
all-CP-ranks pull (common/conn.py, SGLANG_DISAGGREGATION_ALL_CP_RANKS_TRANSFER), which vLLM's NIXL
connector has not.

Messages. Per (sender, receiver) pair and per layer, one block per cache buffer and contiguous page
run (taken as one per page, the fragmented case):
- SGLang Mooncake (python/sglang/srt/disaggregation/mooncake/conn.py `_send_kvcache_generic`: per
  layer, `group_concurrent_contiguous` page runs, all layers in one `batch_transfer_sync`): MLA one
  buffer per layer, K and V two for a head-split cache, DSA's index keys one more (StateType.DSA);
  a head-sliced pair (different attention TP on a head-split cache) goes through
  `send_kvcache_slice`, "the transfer engine for each token slot within each page": one block per
  token; a DCP decode gets its interleaved tokens through `send_kvcache_dcp` (`build_dcp_token_
  transfer_plan`, the strided source tokens packed first, common/dcp_pack.py), one block per decode
  page. The sender's worker sends a chunk's blocks to each destination in turn, one synchronous
  batch each (`transfer_worker`): chunks × destinations round trips on the busiest sender.
- vLLM NIXL (nixl_connector.py `register_kv_caches` / `add_remote_agent` / `_read_blocks`): one
  descriptor per (region, block), regions K and V per layer (one per layer for MLA), head slices cut
  inside each block's descriptor; one asynchronous READ per (decode rank, prefill rank): one round
  trip.

Overlap with prefill (what the hand-off adds to TTFT):
- SGLang sends each chunk's finished pages as soon as the chunk's forward is done
  (python/sglang/srt/disaggregation/prefill.py `send_kv_chunk`, called per chunk; the last partial
  page waits for the last chunk), so only the tail past the last chunk is exposed (`exposed_s`);
- vLLM's decode instance reads the blocks once the prefill request has finished
  (nixl_connector.py `request_finished` → `_reqs_need_send`; `get_num_new_matched_tokens`: "pull all
  prompt blocks from remote asynchronously"), the whole transfer is exposed, and the decode instance
  computes the prompt's last token itself before the first output token (one decode step).

Time: the busiest NIC (a sender's or a receiver's) at the scale-out rate, plus the serial round
trips at the scale-out latency. Ignores: HBM reads and writes of the transfer (≤ 1 % of HBM time at
NIC rates), the metadata/aux buffers, the bootstrap handshake, NVLink transports inside one node
(Mooncake's custom memory pool), and staging buffers (SGLANG_DISAGG_STAGING_BUFFER).

Does not: decide how many instances (planner.disagg.search) or price the pools (planner.disagg.pools).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from planner.deployment import Deployment
from planner.errors import SpecError
from planner.layouts.placement import Placement
from planner.models.attention.base import STATE
from planner.resources.vector import Pricing

EPS = 1e-12


@dataclass(frozen=True)
class TransferBackend:
    """How one engine's KV connector moves a request's KV (module docstring)."""

    engine: str
    name: str
    overlap: Literal["per_chunk", "after_prefill"]
    head_slice_blocks: Literal["per_token", "per_page"]  # a head-sliced pair's blocks
    token_relayout: bool  # a token-interleaved (DCP) decode group of a latent (MLA/DSA) cache is supported
    all_ranks_fallback: bool  # a token-split (CP) prefill group may send from every rank
    replicated_p_above_d: bool  # a replicated head-split cache from a larger prefill group is supported
    round_trips: Literal["per_chunk_and_destination", "per_read"]
    decode_step_in_ttft: bool  # the decode instance computes the last prompt token before the first output
    source: str


BACKENDS: dict[str, TransferBackend] = {
    "sglang": TransferBackend(
        "sglang", "mooncake", "per_chunk", "per_token", True, True, True, "per_chunk_and_destination", False,
        "sgl-project/sglang python/sglang/srt/disaggregation: mooncake/conn.py MooncakeKVManager (send_kvcache, "
        "send_kvcache_slice, send_kvcache_dcp, transfer_worker; commit 0005973a), common/conn.py "
        "CommonKVManager._resolve_rank_mapping (commit 0094505d), prefill.py send_kv_chunk"),
    "vllm": TransferBackend(
        "vllm", "nixl", "after_prefill", "per_page", False, False, False, "per_read", True,
        "vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py NixlConnectorWorker "
        "(add_remote_agent, _read_blocks_for_req, _read_blocks; commit 002a1057), kv_connector/utils.py "
        "TpKVTopology.get_target_remote_ranks; docs/features/nixl_connector_compatibility.md"),
}


def backend_for(engine: str) -> TransferBackend:
    if engine not in BACKENDS:
        raise SpecError(f"engine={engine!r} has no KV transfer backend modelled for disaggregation; "
                        f"choose one of {', '.join(BACKENDS)}")
    return BACKENDS[engine]


@dataclass(frozen=True)
class RankSlice:
    """What one rank of a group holds of a request (or needs of it): a head interval and a token slice."""

    head_lo: float
    head_hi: float
    token_slice: int  # which of `token_ways` interleaved slices
    token_ways: int

    @property
    def fraction(self) -> float:
        return (self.head_hi - self.head_lo) / self.token_ways


def rank_slices(pl: Placement, variant) -> list[RankSlice]:
    """Each rank of one owner group: the head interval and token slice of a request's KV it holds
    (ranks that split heads keep consecutive slices, replicas next to each other: SGLang's and vLLM's
    `tp_rank // num_kv_head_replicas`)."""
    r, tok = pl.group_ranks, pl.token_split
    if tok > 1:
        return [RankSlice(0.0, 1.0, i % tok, tok) for i in range(r)]
    h = int(pl.head_split(variant))
    rep = max(r // h, 1)
    return [RankSlice((i // rep) / h, (i // rep + 1) / h, 0, 1) for i in range(r)]


def _overlap(a: RankSlice, b: RankSlice) -> float:
    heads = max(min(a.head_hi, b.head_hi) - max(a.head_lo, b.head_lo), 0.0)
    return heads / (a.token_ways * b.token_ways)


def target_ranks(prefill_ranks: int, decode_ranks: int, j: int) -> list[int]:
    """Prefill ranks decode rank j reads from, by the attention-TP ratio (module docstring)."""
    if decode_ranks >= prefill_ranks:
        if decode_ranks % prefill_ranks:
            raise SpecError(f"a decode group of {decode_ranks} ranks can't pair with a prefill group of "
                            f"{prefill_ranks}: the engines map ranks by whole ratios")
        return [j // (decode_ranks // prefill_ranks)]
    if prefill_ranks % decode_ranks:
        raise SpecError(f"a prefill group of {prefill_ranks} ranks can't pair with a decode group of "
                        f"{decode_ranks}: the engines map ranks by whole ratios")
    span = prefill_ranks // decode_ranks
    return list(range(j * span, (j + 1) * span))


def share_matrix(prefill: Placement, decode: Placement, variant) -> tuple[np.ndarray, bool]:
    """[R_p, R_d] fraction of one request's KV (of `variant`) that prefill rank i sends to decode rank
    j, and whether the TP mapping alone covered every decode rank's need (False: every prefill rank
    sends its slice, the all-ranks fallback)."""
    src, dst = rank_slices(prefill, variant), rank_slices(decode, variant)
    rp, rd = len(src), len(dst)
    out = np.zeros((rp, rd))
    mapped = True
    for j, need in enumerate(dst):
        targets = target_ranks(rp, rd, j)
        for attempt in (targets, list(range(rp))):
            col = np.zeros(rp)
            seen: list[RankSlice] = []
            for i in attempt:
                # NOTE: copies of the same data on several targets: only the first sends (both engines)
                if any(s == src[i] for s in seen):
                    continue
                seen.append(src[i])
                col[i] = _overlap(src[i], need)
            if col.sum() >= need.fraction - EPS:
                break
            mapped = False
        if col.sum() < need.fraction - EPS:
            raise SpecError(f"no prefill rank of {prefill.layout} holds what decode rank {j} of {decode.layout} needs")
        out[:, j] = col
    return out, mapped


def _entries_per_layer(variant, kv_dtype: str) -> int:
    """Cache buffers a layer registers with the transfer engine: K and V for a head-split cache, one
    for a latent (MLA) or an index key (DSA) or a state (module docstring)."""
    one = np.asarray([1.0])
    n = 0
    for comp in variant.kv_stored_bytes(one, kv_dtype):
        split = variant.kv_splittable_heads() > 1 and variant.kv_head_split(comp) and variant.memory_kind(comp) != STATE
        n += 2 if split else 1
    return n


def request_bytes(dep: Deployment, prompt_tokens: float) -> float:
    """Bytes of one request's KV as `dep` stores it (one copy, all layers): the hand-off's payload."""
    tokens = np.asarray([math.ceil(prompt_tokens / dep.page_tokens) * dep.page_tokens], dtype=np.float64)
    return float(sum(sum(x[0] for x in v.kv_stored_bytes(tokens, dep.kv_dtype).values()) * n
                     for v, n in dep.model.mixers))


@dataclass(frozen=True)
class HandOffPlan:
    """One request's hand-off between a prefill and a decode instance (module docstring); bytes and
    counts per request, rank matrices over the request's prefill group × decode group."""

    engine: str  # whose transfer backend (BACKENDS)
    prompt_tokens: float
    request_bytes: float  # one copy of the request's KV as the decode pool stores it
    rank_bytes: np.ndarray  # [R_p, R_d] bytes prefill rank i sends decode rank j
    messages_per_layer: np.ndarray  # [R_p, R_d] blocks per layer of each pair
    round_trips: int  # serial synchronous batches on the busiest sender
    mapped: bool  # the engines' TP mapping alone covers every decode rank (False: all-ranks fallback)
    supported: bool
    reason: str  # '' when supported
    chunks: int  # prefill chunks the prompt runs in (SGLang sends one batch per chunk)

    @property
    def wire_bytes(self) -> float:
        """Bytes on the scale-out tier for the request: the decode copies × the request."""
        return float(self.rank_bytes.sum())

    @property
    def busiest_send_bytes(self) -> float:
        return float(self.rank_bytes.sum(axis=1).max())

    @property
    def busiest_recv_bytes(self) -> float:
        return float(self.rank_bytes.sum(axis=0).max())

    @property
    def senders(self) -> int:
        return int((self.rank_bytes.sum(axis=1) > 0).sum())

    @property
    def receivers(self) -> int:
        return int((self.rank_bytes.sum(axis=0) > 0).sum())

    def transfer_s(self, pricing: Pricing, nic_free_fraction: float = 1.0) -> float:
        """Seconds from the first byte to the last of one request alone: its busiest NIC at the
        scale-out rate (the share `nic_free_fraction` its pools' own collectives leave), plus the
        serial round trips at the scale-out latency."""
        bw = pricing.scaleout_link_bytes_per_s * max(min(nic_free_fraction, 1.0), EPS)
        return (max(self.busiest_send_bytes, self.busiest_recv_bytes) / bw
                + self.round_trips * pricing.scaleout_message_latency_s)

    def describe(self, pricing: Pricing) -> dict:
        be = BACKENDS[self.engine]
        return {"engine": self.engine, "backend": be.name, "overlap": be.overlap, "prompt_tokens": self.prompt_tokens, "request_bytes": self.request_bytes,
                "wire_bytes": self.wire_bytes, "busiest_send_bytes": self.busiest_send_bytes,
                "busiest_recv_bytes": self.busiest_recv_bytes, "sender_gpus": self.senders,
                "receiver_gpus": self.receivers, "rank_bytes": self.rank_bytes.tolist(),
                "messages_per_layer": float(self.messages_per_layer.sum()),
                "busiest_sender_messages_per_layer": float(self.messages_per_layer.sum(axis=1).max()),
                "round_trips_count": self.round_trips, "chunks_count": self.chunks,
                "mapped_by_tp_ratio": self.mapped, "transfer_s": self.transfer_s(pricing),
                "source": be.source}


def plan_handoff(prefill: Deployment, decode: Deployment, prompt_tokens: float,
                 chunk_tokens: float | None = None) -> HandOffPlan:
    """Plan one request's hand-off from a `prefill` instance to a `decode` instance (module docstring).
    `chunk_tokens`: the prefill group's chunk (SGLang sends per chunk; default: the prefill engine's)."""
    if not (math.isfinite(prompt_tokens) and prompt_tokens >= 1):
        raise SpecError(f"prompt tokens={prompt_tokens} must be ≥ 1")
    be = backend_for(decode.engine)
    pp, pd = prefill.placement, decode.placement
    if chunk_tokens is None:
        chunk_tokens = prefill.engine_model.scheduler(prefill).chunk_tokens_per_group
    chunks = max(math.ceil(prompt_tokens / chunk_tokens), 1)
    rp, rd = pp.group_ranks, pd.group_ranks
    rank_bytes = np.zeros((rp, rd))
    messages = np.zeros((rp, rd))
    mapped, reasons = True, []
    tokens = math.ceil(prompt_tokens / decode.page_tokens) * decode.page_tokens
    for v, n in decode.model.mixers:
        share, ok = share_matrix(pp, pd, v)
        mapped &= ok
        one = np.asarray([float(tokens)])
        per_layer = float(sum(x[0] for x in v.kv_stored_bytes(one, decode.kv_dtype).values()))
        rank_bytes += share * per_layer * n
        entries = _entries_per_layer(v, decode.kv_dtype)
        src, dst = rank_slices(pp, v), rank_slices(pd, v)
        for i in range(rp):
            for j in range(rd):
                if share[i, j] <= 0:
                    continue
                pair_tokens = tokens / (src[i].token_ways * dst[j].token_ways)
                head_sliced = (src[i].head_lo, src[i].head_hi) != (dst[j].head_lo, dst[j].head_hi)
                if dst[j].token_ways > 1:
                    blocks = math.ceil(pair_tokens / decode.page_tokens)
                elif head_sliced and be.head_slice_blocks == "per_token":
                    blocks = pair_tokens
                else:
                    blocks = math.ceil(pair_tokens / min(prefill.page_tokens, decode.page_tokens))
                messages[i, j] += entries * blocks
        h_p = int(pp.head_split(v))
        if rp > rd and h_p < rp and v.kv_splittable_heads() > 1 and not be.replicated_p_above_d:
            reasons.append(f"{be.name}: a replicated head-split cache from a prefill group of {rp} ranks into one of "
                           f"{rd} is not supported (nixl_connector.py _validate_remote_agent_handshake)")
    latent = all(v.kv_splittable_heads() <= 1 for v, _ in decode.model.mixers)
    if pd.token_split > 1 and not (be.token_relayout and latent):
        reasons.append(f"{be.name}: no token-interleaved (DCP) decode relayout for this cache (SGLang's send_kvcache_dcp "
                       "pairs one latent buffer per layer; vLLM's NixlConnector compatibility matrix lists none)")
    if not mapped and not (be.all_ranks_fallback and pp.token_split > 1):
        reasons.append(f"{be.name}: the decode ranks' shares are not on the prefill ranks the TP ratio maps them to")
    per_sender_dest = (rank_bytes > 0).sum(axis=1).max()
    trips = int(chunks * per_sender_dest) if be.round_trips == "per_chunk_and_destination" else 1
    return HandOffPlan(be.engine, float(prompt_tokens), request_bytes(decode, prompt_tokens),
                       rank_bytes, messages, trips, mapped, not reasons, "; ".join(reasons), chunks)


def exposed_s(transfer_s: float, chunk_compute_s, chunk_tokens, overlap: str) -> float:
    """Seconds the hand-off adds after the prefill's last chunk (module docstring). SGLang
    ("per_chunk"): chunk k's pages leave when its forward ends and queue behind chunk k−1's, each a
    share of the transfer proportional to its tokens; the tail past the last chunk is exposed.
    vLLM ("after_prefill"): all of it."""
    if overlap == "after_prefill":
        return float(transfer_s)
    c = np.asarray(chunk_compute_s, dtype=np.float64).ravel()
    w = np.asarray(chunk_tokens, dtype=np.float64).ravel()
    if c.size <= 1:
        return float(transfer_s)
    parts = transfer_s * w / w.sum()
    done = np.cumsum(c)
    sent = 0.0
    for end, part in zip(done, parts):
        sent = max(sent, end) + part
    return float(sent - done[-1])
