"""The serving loop's KV ledger, priced as the planner's capacity prices a request: one token rate,
one per-request slack in tokens and the pool the ledger fills, compiled into the tables from the
deployment's model and memory plan (never retyped).

The loop counts KV in tokens (loop.py): a request of context c costs `c + request_slack_tokens`
tokens, a token `kv_bytes_per_token` bytes, against each layout's `kv_pool_bytes` (per owner, or
all ranks' tokens × the layout's share). The planner prices one request on the busiest rank as
rate · pages(c) + its fixed bytes (planner/step.py `decode_resident_bytes`, `memory_fits`), so:

- the rate is the growth past every window (`ModelSpec.token_bytes_per_token`: DeepSeek-V4-Flash
  3,850 B, its C4/C128 entries and indexer keys; gpt-oss-120b the 18 full layers' K/V). A model
  without window components keeps `ModelSpec.kv_bytes_per_token` (the same components; kept as
  the figure it was, so DSA/MLA/GQA tables are bit-identical);
- the slack is `page_tokens` (page rounding) + the request's fixed bytes / the rate, rounded up to
  a whole token (NOTE: whole tokens keep the ledger's sums exact in any order, loop.py; the page
  is the rounding's upper bound, one page more than the planner's at a page-aligned context). Fixed
  bytes: the windows at full (where they share the pool) and the per-request states where they
  share the KV pool (vLLM's hybrid pages; DeepSeek-V4's compressor rings). Flash: 3,214,336 B of
  windows + 12,206,080 B of rings = 4,006 tokens at 3,850.25 B, + SGLang's 256-token page
  = 4,262 tokens;
- the pool: with SGLang's hybrid SWA pools (`MemoryPlan.swa_pool_bytes`: planner/engines/
  sglang.py `swa_pools`, after SGLang model_runner_kv_cache_mixin.py
  `_resolve_hybrid_swa_tokens`) the full-attention layers' pool, which long requests fill: the
  windows live in the sliding pool, left out of the slack. NOTE: that sliding pool holds
  swa_full_tokens_ratio = 0.8 of the full pool's tokens, so it binds only for requests whose
  window part exceeds 0.8 of their context (gpt-oss's 128-token window: contexts below 160
  tokens); the ledger doesn't check it. With a separate state pool (SGLang's mamba pool:
  `MemoryPlan.state_pool_bytes`) states are not counted here: the loop caps the running set by
  `LayoutInfo.max_requests` instead.

NOTE: one slack for every layout (a request's ledger entry must be the same in every layout, or a
switch would leave the sums wrong), read off the deployment's own layout on its busiest rank and
divided by that rank's share of a token (`request_slack_tokens`): exact there, and in every layout
that keeps the fixed part in the share it keeps tokens (owner layouts: whole requests; TP:
DeepSeek-V4's single latent replicates everything, GQA heads split windows like tokens). A
token-split layout (CP) keeps each request's windows and rings whole on every rank while it
splits the tokens: compiled for CP the slack covers them (30,938 tokens at its 0.1305 share for
V4-Flash; the ledger then holds 3.6 % fewer 128K requests than the planner), but tables compiled
for another layout (a dynamic run from DP) price CP's fixed part at CP's token share, so there
CP's ledger is loose: V4-Flash CP admits 25,322 requests of 4K where the planner holds 5,789,
5,716 of 32K for 3,306, 1,564 of 128K for 1,338 (tests/runtime_policy/test_kv_ledger.py). The
fix is a per-layout fixed part times the ledger's request count (not done: every KV check would
read the count). Qwen3.5-397B under vLLM TP on 8 ranks splits its 45
GDN layers' states 8 ways (16 heads) and its 15 attention layers' KV 2 ways (2 KV heads): its
slack, 528 (the page) + 1,563 tokens, is the states at the token share (a full copy / the rate:
6,252).
"""

from __future__ import annotations

import math

import numpy as np

from planner.models.attention.base import STATE, WINDOW

FAR_TOKENS = float(1 << 24)  # a context past every window (the windows' full bytes)
FAR_PAGES = 4096  # the slack's probes: 4,096 and 8,192 pages per rank, past every window
FIXED_ROUNDING_TOKENS = 1e-6  # the probes' float noise, so an exact whole number doesn't round up by one


def ledger_rate(model, kv_dtype: str) -> float:
    """Bytes per context token the ledger counts: the growth past every window, or the bytes below
    every window for a model without windows (module docstring)."""
    below = model.kv_bytes_per_token(kv_dtype)
    past = model.token_bytes_per_token(kv_dtype)
    has_windows = any(WINDOW in v.memory_kinds() for v, _ in model.mixers if v is not None)
    return past if has_windows and past > 0 else below


def fixed_bytes(dep) -> float:
    """One request's fixed bytes in the pool the ledger fills (one full copy, all layers): its
    windows at full unless SGLang gives them a pool of their own, and its states unless they have
    one (module docstring)."""
    mem = dep.model.memory_bytes(np.array([FAR_TOKENS]), dep.kv_dtype)
    plan = dep.memory
    windows = float(mem[WINDOW][0]) if plan.swa_pool_bytes is None else 0.0
    states = float(mem[STATE][0]) if plan.state_pool_bytes is None else 0.0
    return windows + states


def rank_request_bytes(d, context) -> np.ndarray:
    """[P] the bytes one request of each context takes in the ledger's pool on the busiest rank of
    `d`'s layout, as the planner's capacity counts them (planner.step.decode_resident_bytes; an
    owner layout's busiest owner holds one of T requests)."""
    from planner.layouts import attention_layouts
    from planner.load import DecodeLoad
    from planner.step import decode_resident_bytes

    owner = attention_layouts()[d.attn].kv_placement == "owner"
    kv, state, window = decode_resident_bytes(d, DecodeLoad.equal(float(d.ranks) if owner else 1.0,
                                                                 np.asarray(context, dtype=np.float64)))
    out = kv - window if window is not None else kv
    return out + state if d.memory.state_pool_bytes is None else out


def request_slack_tokens(dep, rate: float, share: float) -> float:
    """page_tokens + the request's fixed bytes / the rate, rounded up (a whole number of tokens).
    The fixed bytes are read off the planner on the busiest rank of `dep`'s layout (what one
    request holds past every window less its growth) and divided by that rank's share of a token
    (`share`: 1 for owner layouts, tables.kv_share for the others), so the slack is exact for the
    deployment's own layout whatever share of the windows and states its ranks keep (TP splits a
    GQA model's windows and Qwen3.5's recurrent states by heads; MLA-like DeepSeek-V4 replicates
    them). A model without fixed bytes keeps page_tokens."""
    if fixed_bytes(dep) <= 0 or rate <= 0 or share <= 0:
        return float(dep.page_tokens)
    far = float(dep.page_tokens * dep.ranks) * np.array([FAR_PAGES, 2 * FAR_PAGES])  # page-aligned on every rank
    per = rank_request_bytes(dep, far)
    growth = (per[1] - per[0]) / (far[1] - far[0])
    fixed = float(per[0] - growth * far[0])
    return float(dep.page_tokens + max(math.ceil(fixed / (rate * share) - FIXED_ROUNDING_TOKENS), 0))


def ledger_pool_bytes(d) -> float:
    """The pool one GPU's ledger fills under deployment `d`: SGLang's full-attention pool when the
    sliding layers have their own, else the KV pool (planner.step.kv_pool_bytes)."""
    plan = d.memory
    if plan.swa_pool_bytes is not None:
        return float(plan.swa_pool_bytes[0]) if plan.kv_pool_bytes > 0 else 0.0
    return float(plan.kv_pool_bytes)


def ledger_budget_bytes(d) -> float:
    """Weights + KV the engine allows per GPU, less the sliding pool the ledger doesn't fill."""
    plan = d.memory
    sliding = float(plan.swa_pool_bytes[1]) if plan.swa_pool_bytes is not None else 0.0
    return plan.static_budget_bytes - sliding


def ledger_admits(tables, layout: int, context: float) -> float:
    """Requests of `context` tokens the compiled ledger admits on an empty group under `layout`
    (the loop's test, admission.py; no watermark), capped by the layout's request cap."""
    info = tables.info
    pool, per = float(info.kv_pool_bytes[layout]), (context + tables.request_slack_tokens) * tables.kv_bytes_per_token
    if bool(info.is_owner[layout]):
        n = math.floor(pool / per) * tables.ranks
    else:
        n = math.floor(pool / (per * float(info.kv_total_share[layout])))
    cap = float(info.max_requests[layout]) if info.max_requests.size else math.inf
    return float(min(n, cap))
