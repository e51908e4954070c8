"""A config's layer patterns → one `LayerType` per decoder layer (mixer tag, MLP tag, geometry).

Mixer patterns, the first that applies (each family's own field, HF modeling code's meaning):
- `layers_block_type` (Nemotron-3 Ultra; 'mamba' | 'attention' | 'moe' | 'mlp' blocks) and
  `hybrid_override_pattern` (Nemotron-H / Nemotron-3 Nano, Super: M = Mamba2, * = attention,
  E = MoE, - = dense MLP): each block is a mixer-only or an MLP-only layer;
- DeciLM `block_configs` (Nemotron-Super-49B): per-layer attention (`no_op`, `n_heads_in_group`,
  `window_length`) and FFN (`no_op`, `ffn_mult`: width round_up_256(int(2·ffn_mult·hidden/3)),
  HF modeling_decilm `_ffn_mult_to_intermediate_size`, reused by vLLM/SGLang/TRT-LLM);
- `layer_types` ('full_attention', 'sliding_attention', 'linear_attention' = Gated DeltaNet,
  'deepseek_sparse_attention' = DSA), or Qwen3.5's `full_attention_interval` alone;
- `hybrid_layer_pattern` (MiMo-V2-Flash: 1 = sliding, 0 = full; SGLang model_config);
- `compress_ratios` (DeepSeek-V4: one ratio per layer, an extra last entry for the MTP layer);
- `linear_attn_config.kda_layers` / `full_attn_layers` (Kimi-Linear/K3, 1-indexed:
  `is_kda_layer(i) := (i + 1) in kda_layers`);
- `sparse_attention_config.sparse_attention_freq` (MiniMax-M3: 1 = block-sparse);
- Llama-4's chunked local attention: `attention_chunk_size` on the RoPE layers, NoPE (full)
  where `no_rope_layers[i]` = 0 or, without the list, every `no_rope_layer_interval` (4)-th
  layer (HF Llama4TextConfig);
- `attn_type_list` (MiniMax M2.x: 1 = softmax attention; 0, lightning attention, is refused);
- every layer sliding when `sliding_window` is set and `use_sliding_window` is not false
  (Mistral); else every layer full attention.
MLP patterns, for layers the mixer pattern leaves open: `mlp_layer_types` (GLM-5.1+, 'dense' |
'sparse'), a per-layer `moe_layer_freq` list (0 = dense; it decides alone, SGLang minimax_m3.py
`is_layer_sparse = moe_layer_freq[layer_id] != 0`), an explicit `moe_layers` list, else the
rules of each family's modeling code, all applied: DeepSeek `i ≥ first_k_dense_replace and
i % moe_layer_freq == 0`, Qwen `i ∉ mlp_only_layers and (i + 1) % decoder_sparse_step == 0`,
Llama-4 `(i + 1) % interleave_moe_layer_step == 0`; Gemma-4's `enable_moe_block` puts a dense MLP
beside the MoE in every layer; DeepSeek-V4's first `num_hash_layers` MoE layers route by hash.

Strict about structure: a field that shapes the layer stack and is not read here, or a value no
variant models, is refused in one line naming it (`check_structure_fields`), never priced as
something else.
"""

from __future__ import annotations

import re

from planner.errors import SpecError
from planner.inputs import shown, shown_key
from planner.models.config import MAX_LAYERS, HFConfig, LayerType
from planner.models.mlp.moe import has_experts

# Fields this module (or a variant) reads that shape the stack, and fields whose names look like
# structure but which don't change what a decode step does (norm epsilons, MTP-only switches).
STRUCTURE_FIELDS = frozenset({
    "num_hidden_layers", "layers_block_type", "hybrid_override_pattern", "block_configs", "layer_types",
    "full_attention_interval", "hybrid_layer_pattern", "compress_ratios", "linear_attn_config",
    "sparse_attention_config", "attention_chunk_size", "no_rope_layers", "no_rope_layer_interval",
    "attn_type_list", "sliding_window", "sliding_window_size", "use_sliding_window", "max_window_layers",
    "mlp_layer_types", "moe_layer_freq", "moe_layers", "first_k_dense_replace", "mlp_only_layers",
    "decoder_sparse_step", "interleave_moe_layer_step", "enable_moe_block", "num_hash_layers", "indexer_types",
    "index_topk_freq", "index_skip_topk_offset", "index_topk_pattern", "index_share_for_mtp_iteration",
    "num_kv_shared_layers", "hidden_size_per_layer_input", "vocab_size_per_layer_input", "use_double_wide_mlp",
    "num_nextn_predict_layers", "mtp_num_hidden_layers", "mtp_layers_block_type", "mtp_hybrid_override_pattern",
    "mtp_transformer_layers", "num_mtp_modules", "use_mtp", "mtp_use_dedicated_embeddings", "attn_res_block_size",
})
INERT_FIELDS = frozenset({"layer_norm_epsilon", "layernorm_epsilon", "rescale_prenorm_residual", "num_logits_to_keep",
                          "output_router_logits", "moe_shared_expert_overlap", "moe_layer_freq_offset"})
_STRUCTURE_NAME = re.compile(r"(layers?_|_layers?$|_layers?_|pattern|block_type|_freq$|_interval$|_step$|_ratios$|"
                             r"block_configs|layer_types)")
_NOT_STRUCTURE = re.compile(r"(norm|eps|dropout|init|scale|bias|loss|std)")
_UNMODELLED = {"state_size": "Mamba-1's state (mamba_ssm ops)", "ssm_cfg": "a Mamba-1 state",
               "mamba_d_state": "a Mamba-1 state", "attn_layer_period": "Jamba's interleave",
               "attn_layer_offset": "Jamba's interleave", "expert_layer_period": "Jamba's interleave"}


def check_structure_fields(cfg: HFConfig) -> None:
    """Refuse a field that shapes the stack but is not read, or a value that is not modelled."""
    for key in map(str, cfg.raw):
        if key in _UNMODELLED:
            raise SpecError(f"field '{key}' ({_UNMODELLED[key]}): the planner has no variant for it")  # a known name
        if key in STRUCTURE_FIELDS or key in INERT_FIELDS:
            continue
        if _STRUCTURE_NAME.search(key) and not _NOT_STRUCTURE.search(key) and cfg.raw.get(key) not in (None, False, 0, [], ""):
            raise SpecError(f"field '{shown_key(key)}'={shown(cfg.raw[key], 40)} looks like a layer pattern the planner "
                            "does not read; refusing rather than pricing another structure")
    for key, why in (("num_kv_shared_layers", "layers that share another layer's KV"),
                     ("hidden_size_per_layer_input", "per-layer input embeddings")):
        if cfg.int(key, 0, lo=0):
            raise SpecError(f"field '{key}'={shown(cfg.raw[key])} ({why}) is not modelled")
    if cfg.flag("use_double_wide_mlp"):
        raise SpecError("field 'use_double_wide_mlp'=true is not modelled")
    if not cfg.has("indexer_types") and (cfg.has("index_topk_freq") or cfg.has("index_skip_topk_offset")):
        raise SpecError("fields 'index_topk_freq' / 'index_skip_topk_offset' need 'indexer_types' to say which layers share")
    if cfg.has("index_topk_pattern"):
        raise SpecError(f"field 'index_topk_pattern'={shown(cfg.raw['index_topk_pattern'], 40)} is not modelled")


def num_layers(cfg: HFConfig) -> int:
    """Decoder layers (MTP layers excluded), from `num_hidden_layers` or a per-layer list."""
    lists = {k: v for k, v in (("layers_block_type", cfg.get("layers_block_type")),
                               ("hybrid_override_pattern", cfg.get("hybrid_override_pattern")),
                               ("block_configs", cfg.get("block_configs"))) if v is not None}
    for k, v in lists.items():
        if not isinstance(v, (list, str)) or not v:
            raise SpecError(f"field '{k}' must be a non-empty {'string' if k == 'hybrid_override_pattern' else 'list'}")
    if cfg.has("num_hidden_layers"):
        n = cfg.int("num_hidden_layers")
        for k, v in lists.items():
            if len(v) != n:
                raise SpecError(f"field '{k}' has {len(v)} entries for num_hidden_layers={n}")
        return n
    if lists:
        k, v = next(iter(lists.items()))
        if len(v) > MAX_LAYERS:
            raise SpecError(f"field '{k}' has {len(v):,} entries; at most {MAX_LAYERS:,} layers (planner.models.config)")
        return len(v)
    raise SpecError("missing field 'num_hidden_layers'")


def _blocks(cfg: HFConfig, n: int) -> list[LayerType] | None:
    names = cfg.get("layers_block_type")
    if names is not None:
        table = {"mamba": ("mamba", "none"), "attention": ("full_attention", "none"), "moe": ("none", "moe"),
                 "mlp": ("none", "dense")}
        field, items = "layers_block_type", names
    elif cfg.has("hybrid_override_pattern"):
        items = cfg.text("hybrid_override_pattern")
        table = {"M": ("mamba", "none"), "*": ("full_attention", "none"), "E": ("none", "moe"), "-": ("none", "dense")}
        field = "hybrid_override_pattern"
    else:
        return None
    out = []
    for i, x in enumerate(items):
        if not isinstance(x, str) or x not in table:
            raise SpecError(f"field '{field}'[{i}]={shown(x)} is not one of {', '.join(map(repr, table))}")
        out.append(LayerType(*table[x]))
    return out


def _ffn_width(mult, hidden: int, where: str) -> int:
    if isinstance(mult, bool) or not isinstance(mult, (int, float)) or not 0 < mult < 1e4:
        raise SpecError(f"field '{where}.ffn_mult'={shown(mult)} must be a positive number")
    width = int(2 * mult * hidden / 3)
    return -(-width // 256) * 256


def _decilm(cfg: HFConfig, n: int) -> list[LayerType] | None:
    blocks = cfg.get("block_configs")
    if blocks is None:
        return None
    hidden, heads = cfg.int("hidden_size"), cfg.int("num_attention_heads")
    out = []
    for i, b in enumerate(blocks):
        where = f"block_configs[{i}]"
        if not isinstance(b, dict) or not isinstance(b.get("attention"), dict) or not isinstance(b.get("ffn"), dict):
            raise SpecError(f"field '{where}' must hold 'attention' and 'ffn' objects")
        a, f = b["attention"], b["ffn"]
        for part, d in (("attention", a), ("ffn", f)):
            for key in ("replace_with_linear", "sparsify"):
                if d.get(key) not in (None, False):
                    raise SpecError(f"field '{where}.{part}.{key}'={shown(d.get(key))} is not modelled")
        if a.get("num_sink_tokens") not in (None, 0):
            raise SpecError(f"field '{where}.attention.num_sink_tokens'={shown(a.get('num_sink_tokens'))} is not modelled")
        if a.get("no_op") is True:
            mixer, opts = "none", {}
        else:
            group = HFConfig(a).int("n_heads_in_group")
            if heads % group:
                raise SpecError(f"field '{where}.attention.n_heads_in_group'={group} does not divide num_attention_heads={heads}")
            window = HFConfig(a).int("window_length", None)
            mixer = "sliding_attention" if window else "full_attention"
            opts = {"num_kv_heads": heads // group, "window": window}
        if f.get("no_op") is True:
            mlp = "none"
        else:
            mlp, opts["ffn_width"] = "dense", _ffn_width(f.get("ffn_mult"), hidden, f"{where}.ffn")
        out.append(LayerType(mixer, mlp).with_opts(**opts))
    return out


def _mixers(cfg: HFConfig, n: int) -> list[str] | list[LayerType] | None:
    """One mixer tag (or LayerType with options) per layer from the first pattern that applies."""
    types = cfg.str_list("layer_types", length=n)
    if types is not None:
        table = {"full_attention": "full_attention", "sliding_attention": "sliding_attention",
                 "linear_attention": "linear_attention", "deepseek_sparse_attention": "full_attention"}
        for i, t in enumerate(types):
            if t not in table:
                raise SpecError(f"field 'layer_types'[{i}]={t!r} is a layer kind the planner cannot model")
        interval = cfg.int("full_attention_interval", None)
        if interval and any((t == "full_attention") != ((i + 1) % interval == 0) for i, t in enumerate(types)
                            if t in ("full_attention", "linear_attention")):
            raise SpecError(f"field 'layer_types' disagrees with full_attention_interval={interval}")
        return [table[t] for t in types]
    if cfg.has("full_attention_interval") and cfg.has("linear_num_key_heads"):
        k = cfg.int("full_attention_interval")
        return ["full_attention" if (i + 1) % k == 0 else "linear_attention" for i in range(n)]
    hybrid = cfg.int_list("hybrid_layer_pattern", length=n, lo=0, hi=1)
    if hybrid is not None:
        return ["sliding_attention" if x else "full_attention" for x in hybrid]
    ratios = cfg.get("compress_ratios")
    if ratios is not None:
        if not isinstance(ratios, list) or len(ratios) not in (n, n + 1):
            raise SpecError(f"field 'compress_ratios' must list one ratio per layer ({n}, or {n + 1} with the MTP layer)")
        vals = cfg.int_list("compress_ratios", lo=0, hi=1 << 20)
        return [LayerType("compressed_attention", "").with_opts(ratio=r) for r in vals[:n]]
    lin = cfg.sub("linear_attn_config")
    if lin is not None and ("kda_layers" in lin or "full_attn_layers" in lin):
        kda = set(lin.int_list("kda_layers", lo=1, hi=n) or [])
        full = set(lin.int_list("full_attn_layers", lo=1, hi=n) or [])
        if kda & full or len(kda | full) != n:
            raise SpecError(f"fields 'linear_attn_config.kda_layers' and 'full_attn_layers' must split the {n} "
                            "layers (1-indexed) between them")
        return ["kda" if i + 1 in kda else "full_attention" for i in range(n)]
    sparse = cfg.sub("sparse_attention_config")
    if sparse is not None and sparse.flag("use_sparse_attention", True):
        freq = sparse.int_list("sparse_attention_freq", length=n, lo=0, hi=1)
        if freq is None:
            raise SpecError("field 'sparse_attention_config' needs 'sparse_attention_freq' (one 0/1 per layer)")
        no_value = sparse.int_list("sparse_disable_index_value", length=n, lo=0, hi=1) or [1] * n
        if any(f and not v for f, v in zip(freq, no_value)):
            raise SpecError("field 'sparse_attention_config.sparse_disable_index_value' = 0 on a sparse layer "
                            "(an index value cache) is not modelled")
        return ["sparse_attention" if f else "full_attention" for f in freq]
    if cfg.has("attention_chunk_size") and str(cfg.get("model_type", "")).startswith("llama4"):
        nope = cfg.int_list("no_rope_layers", length=n, lo=0, hi=1)
        if nope is None:
            k = cfg.int("no_rope_layer_interval", 4)
            nope = [int((i + 1) % k != 0) for i in range(n)]
        return ["chunked_attention" if rope else "full_attention" for rope in nope]
    kinds = cfg.int_list("attn_type_list", length=n, lo=0, hi=1)
    if kinds is not None and not all(kinds):
        raise SpecError("field 'attn_type_list' holds 0 (lightning linear attention), which the planner cannot model")
    window = cfg.raw.get("sliding_window")
    if window not in (None, False) and cfg.raw.get("use_sliding_window") is not False:
        cfg.int("sliding_window")
        if cfg.raw.get("use_sliding_window") is True and cfg.int("max_window_layers", n) < n:
            raise SpecError("field 'max_window_layers' < num_hidden_layers with use_sliding_window is not modelled")
        return ["sliding_attention"] * n
    return None


def _attention_chunk_is_the_window(cfg: HFConfig) -> None:
    """`attention_chunk_size` outside Llama-4 must restate the sliding window (MiMo-V2-Flash)."""
    if cfg.has("attention_chunk_size") and not str(cfg.get("model_type", "")).startswith("llama4"):
        chunk = cfg.int("attention_chunk_size")
        if chunk != cfg.int("sliding_window", None):
            raise SpecError(f"field 'attention_chunk_size'={chunk} (chunked attention) is modelled for Llama-4 only")


def _moe_mask(cfg: HFConfig, n: int) -> list[bool] | None:
    """Per layer: a MoE layer? None for a model without experts."""
    if not has_experts(cfg):
        return None
    types = cfg.str_list("mlp_layer_types", length=n)
    if types is not None:
        if any(t not in ("dense", "sparse") for t in types):
            raise SpecError("field 'mlp_layer_types' must hold 'dense' or 'sparse' per layer")
        return [t == "sparse" for t in types]
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, list):
        return [bool(x) for x in cfg.int_list("moe_layer_freq", length=n, lo=0, hi=1)]
    explicit = cfg.int_list("moe_layers", lo=0, hi=n - 1)
    if explicit is not None:
        return [i in set(explicit) for i in range(n)]
    k = cfg.int("first_k_dense_replace", 0, lo=0)
    if k > n:
        raise SpecError(f"{k} dense layers (first_k_dense_replace + mlp_only_layers) exceed num_hidden_layers={n}")
    only = set(cfg.int_list("mlp_only_layers", lo=0, hi=n - 1) or [])
    every = cfg.int("moe_layer_freq", 1) if freq is not None else 1
    sparse_step = cfg.int("decoder_sparse_step", 1)
    interleave = cfg.int("interleave_moe_layer_step", 1)
    return [i >= k and i not in only and i % every == 0 and (i + 1) % sparse_step == 0 and (i + 1) % interleave == 0
            for i in range(n)]


def _mlps(cfg: HFConfig, n: int) -> list[LayerType]:
    mask = _moe_mask(cfg, n)
    if mask is None:
        return [LayerType("", "dense") for _ in range(n)]
    both = cfg.flag("enable_moe_block")
    hashed = cfg.int("num_hash_layers", 0, lo=0)
    out = []
    for is_moe in mask:
        if is_moe:
            opts = {"routing": "hash"} if hashed > 0 else {}
            hashed -= 1 if hashed > 0 else 0
            out.append(LayerType("", "dense+moe" if both else "moe").with_opts(**opts))
        else:
            out.append(LayerType("", "dense").with_opts(moe_model=True))
    return out


def _indexers(cfg: HFConfig, n: int) -> list[str] | None:
    types = cfg.str_list("indexer_types", length=n)
    if types is not None and any(t not in ("full", "shared") for t in types):
        raise SpecError("field 'indexer_types' must hold 'full' or 'shared' per layer")
    if types is not None and types[0] != "full":
        raise SpecError("field 'indexer_types' starts with a 'shared' layer that has no indexer to share")
    return types


def layer_types(cfg: HFConfig) -> list[LayerType]:
    """The decoder layers of a config, in order (see the module docstring)."""
    check_structure_fields(cfg)
    _attention_chunk_is_the_window(cfg)
    n = num_layers(cfg)
    blocks = _blocks(cfg, n) or _decilm(cfg, n)
    if blocks is not None:
        return blocks
    mixers = _mixers(cfg, n) or ["full_attention"] * n
    mlps = _mlps(cfg, n)
    indexers = _indexers(cfg, n)
    out = []
    for i in range(n):
        m = mixers[i] if isinstance(mixers[i], LayerType) else LayerType(mixers[i], "")
        t = LayerType(m.mixer, mlps[i].mlp, tuple(sorted({**dict(m.opts), **dict(mlps[i].opts)}.items())))
        if indexers is not None:
            t = t.with_opts(indexer=indexers[i])
        out.append(t)
    return out


def mtp_layers(cfg: HFConfig) -> int:
    """Next-token draft layers the checkpoint carries (not part of a decode step)."""
    n = max(cfg.int("num_nextn_predict_layers", 0, lo=0), cfg.int("mtp_num_hidden_layers", 0, lo=0))
    if not n and (cfg.has("mtp_layers_block_type") or cfg.has("mtp_hybrid_override_pattern")):
        n = 1
    return n
