"""Load a model: a built-in card by name, or any Hugging Face config.json by path, offline.

A config becomes a stack of layers: planner.models.patterns reads whatever pattern fields the
config uses into one LayerType per decoder layer (refusing, in one line naming it, a field that
shapes the stack and isn't read); each distinct layer type is claimed by the most specific
registered mixer variant and MLP variant; identical layers are grouped (`LayerGroup`). Multimodal
wrappers are unwrapped (`text_config`). Every value a variant reads passes through
planner.models.config.HFConfig, so a config the planner can't model gives one SpecError naming
the architecture and the field. The file is read through planner.inputs (regular files only, a
size limit, UTF-8, bounded nesting, finite numbers), and `check_config_fields` refuses a field
of the wrong type or range, and cross-field nonsense, before any variant reads it.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.inputs import MODEL_CONFIG_MAX_BYTES, check_number, file_stamp, is_file, load_json_file, path_kind, shown, shown_path
from planner.models.attention.base import variant_for_layer
from planner.path_policy import active as active_root
from planner.models.config import STRUCTURE_MAX, HFConfig, LayerType
from planner.models.mlp.base import mlp_for_layer
from planner.models.patterns import layer_types, mtp_layers
from planner.models.quant import WeightQuant, weight_quant
from planner.models.quant import describe as quant_describe
from planner.models.repo_ids import looks_like_repo_id
from planner.models.spec import LayerGroup, ModelSpec

CARDS_DIR = Path(__file__).parent / "cards"

_QUANT_TO_DTYPE = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4", "modelopt_fp4": "fp4", "fbgemm_fp8": "fp8",
                   "compressed-tensors": None, "modelopt": "fp8"}


CARD_SOURCES = Path(__file__).parent / "card_sources.json"


def builtin_model_names() -> list[str]:
    return sorted(p.stem for p in CARDS_DIR.glob("*.json"))


@lru_cache(maxsize=1)
def card_sources() -> dict[str, dict[str, str]]:
    """Card name → its Hugging Face repo id (and the fixture file it was taken from)."""
    return load_json_file(CARD_SOURCES, "card sources", MODEL_CONFIG_MAX_BYTES)


def card_for_repo(repo_id: str) -> str | None:
    """The built-in card whose source is this Hugging Face repo id (case-insensitive), or None."""
    want = repo_id.strip().strip("/").lower()
    for card, src in card_sources().items():
        if src.get("repo", "").lower() == want:
            return card
    return None


# Integer fields a variant reads, with the least value each may hold when present (None and absent
# both mean "not given"). NOTE: the upper bound is far above any real model and keeps products of
# sizes well inside float range.
CONFIG_INT_FIELDS: dict[str, int] = {
    **{k: 1 for k in ("num_hidden_layers", "hidden_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
                      "head_dim", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
                      "index_n_heads", "index_head_dim", "index_topk", "intermediate_size", "moe_intermediate_size",
                      "shared_expert_intermediate_size", "n_routed_experts", "num_local_experts", "num_experts",
                      "num_experts_per_tok", "experts_per_token", "moe_topk", "decoder_sparse_step", "sliding_window")},
    **{k: 0 for k in ("first_k_dense_replace", "n_shared_experts", "num_nextn_predict_layers",
                      "shared_expert_intermediate_size")},  # 0 shared width: no shared expert (Qwen3-Coder)
}
CONFIG_INT_MAX = 2**31 - 1


def check_config_fields(cfg: dict[str, Any], where: str) -> None:
    """Types, ranges and cross-field sanity of the config fields the planner reads, checked once
    before any variant sees them: a string, list or fraction in an integer field, a negative size,
    more key-value heads than heads, a layer index or mask that doesn't fit the layers. (The MoE's
    own rules — top-k ≤ experts, dense layers ≤ layers — live in planner.models.mlp.moe.)"""
    for key, lo in CONFIG_INT_FIELDS.items():
        v = cfg.get(key)
        if v is None or (key == "sliding_window" and v is False):
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SpecError(f"{where}: field '{key}'={shown(v)} must be an integer, not {type(v).__name__}")
        check_number(v, f"{where}: field '{key}'", lo=lo, hi=STRUCTURE_MAX.get(key, CONFIG_INT_MAX), integer=True)
    layers = cfg.get("num_hidden_layers")
    only = cfg.get("mlp_only_layers")
    if only is not None:
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise SpecError(f"{where}: field 'mlp_only_layers' must be a list of layer indices")
        if layers is not None and any(not 0 <= i < layers for i in only):
            raise SpecError(f"{where}: field 'mlp_only_layers' names a layer outside 0..{layers - 1}")
    freq = cfg.get("moe_layer_freq")
    if isinstance(freq, list):
        if not all(isinstance(f, int) and f in (0, 1) for f in freq):
            raise SpecError(f"{where}: field 'moe_layer_freq' as a list must hold 0 (dense) or 1 (MoE) per layer")
        if layers is not None and len(freq) != layers:
            raise SpecError(f"{where}: field 'moe_layer_freq' has {len(freq)} entries for num_hidden_layers={layers}")
    elif freq is not None:
        if isinstance(freq, bool) or not isinstance(freq, (int, float)):
            raise SpecError(f"{where}: field 'moe_layer_freq'={shown(freq)} must be an integer or a per-layer list")
        check_number(freq, f"{where}: field 'moe_layer_freq'", lo=1, hi=CONFIG_INT_MAX, integer=True)
    heads, kv = cfg.get("num_attention_heads"), cfg.get("num_key_value_heads")
    if heads is not None and kv is not None and kv > heads:
        raise SpecError(f"{where}: num_key_value_heads={kv} exceeds num_attention_heads={heads}")
    types = cfg.get("layer_types")
    if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
        raise SpecError(f"{where}: field 'layer_types' must be a list of strings")
    quant = cfg.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise SpecError(f"{where}: field 'quantization_config' must be an object")
    if isinstance(quant, dict) and not isinstance(quant.get("quant_method", ""), (str, type(None))):
        raise SpecError(f"{where}: field 'quantization_config.quant_method' must be a string")


def _group_layers(cfg: HFConfig, types: list[LayerType], quant: WeightQuant | None) -> tuple[LayerGroup, ...]:
    """One variant per distinct layer type, identical layers (same variants, same weight dtypes)
    grouped (first index kept)."""
    built: dict[LayerType, tuple[Any, Any]] = {}
    groups: dict[tuple[Any, Any, Any], list[int]] = {}
    for i, t in enumerate(types):
        if t not in built:
            mixer = None
            if t.mixer != "none":
                mixer = variant_for_layer(cfg, t)
                if mixer is None:
                    raise SpecError(f"layer {i} is {t.mixer!r}, and no attention variant claims it from this config")
            mlp = None
            if t.mlp != "none":
                mlp = mlp_for_layer(cfg, t)
                if mlp is None:
                    raise SpecError(f"layer {i} has a {t.mlp!r} MLP, and no MLP variant claims it from this config")
            built[t] = (mixer, mlp)
        sig = quant.signature(i) if quant is not None else ()
        groups.setdefault((*built[t], sig), []).append(i)
    if all(m is None for m, _, _ in groups):
        raise SpecError("no layer has attention or a recurrent mixer the planner can model")
    return tuple(LayerGroup(count=len(ix), first_layer=ix[0], mixer=m, mlp=f, weight_dtypes=sig)
                 for (m, f, sig), ix in groups.items())


def _main_dtype(groups: tuple[LayerGroup, ...]) -> str:
    """The dtype most linear-weight parameters are stored in."""
    probe = ModelSpec(name="_", architecture="_", num_layers=1, hidden_size=1, vocab_size=1,
                      default_weight_dtype="bf16", layers=groups)
    by = probe.params_by_dtype()
    return max(by, key=by.get) if by else "bf16"


def model_from_hf_config(cfg: dict[str, Any], name: str, quant_file: dict[str, Any] | None = None,
                         quant: Any = None) -> ModelSpec:
    """`quant`: the weight dtypes per part (anything with `signature(layer)` and `describe()`, a repo
    id's suffix rule) in place of what the config's quantization files say."""
    where = f"config {name}"
    if not isinstance(cfg, dict):
        raise SpecError(f"{where}: expected a JSON object")
    outer = cfg
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM in text_config
        cfg = {**cfg["text_config"], "architectures": cfg.get("architectures")}
        if "quantization_config" in outer and "quantization_config" not in cfg:
            cfg["quantization_config"] = outer["quantization_config"]
    archs = cfg.get("architectures")
    arch = str(archs[0]) if isinstance(archs, list) and archs else archs if isinstance(archs, str) and archs else \
        str(cfg.get("model_type") or "unknown")
    check_config_fields(cfg, where)
    c = HFConfig(cfg, where)
    try:
        types = layer_types(c)
        layers = _group_layers(c, types, quant if quant is not None else weight_quant(cfg, quant_file))
        hidden, vocab = c.int("hidden_size"), c.int("vocab_size")
        mtp = mtp_layers(c)
        spec = ModelSpec(
            name=name, architecture=arch, num_layers=len(types), hidden_size=hidden, vocab_size=vocab,
            intermediate_size=c.int("intermediate_size", None), tie_word_embeddings=c.flag("tie_word_embeddings"),
            mtp_layers=mtp, default_weight_dtype=_main_dtype(layers), layers=layers,
            quantization=quant.describe() if quant is not None else quant_describe(cfg, quant_file),
            context_window_tokens=_window(cfg),
        )
    except SpecError as exc:
        raise SpecError(f"{where} ({arch}): {str(exc).removeprefix('config.json: ')}") from None
    return spec


def _window(cfg: dict) -> int | None:
    """max_position_embeddings when it is a positive whole number (the engines' context length)."""
    v = cfg.get("max_position_embeddings")
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 1 and v == int(v) else None


QUANT_FILE = "hf_quant_config.json"  # NVIDIA ModelOpt checkpoints ship it beside config.json


@lru_cache(maxsize=64)
def _load_path(path: str, name: str, stamp: tuple[int, int], quant_path: str | None = None,
               quant_stamp: tuple[int, int] = (0, 0), rule: Any = None) -> ModelSpec:
    """`stamp` (mtime, size) keys the cache, so an edited file is read again in a long-lived
    process; `quant_path` is the hf_quant_config.json read with it (None: none) and `quant_stamp`
    its stamp; `rule` a repo id's suffix rule that sets the weight dtypes instead."""
    card = Path(path)
    if card.parent == CARDS_DIR and card.stem == name and quant_path is None and rule is None:
        # a built-in card's spec is kept between processes (planner.spec_cache)
        from planner.spec_cache import cached_spec

        return cached_spec("model", card, lambda: _read_config(path, name, None, None))
    return _read_config(path, name, quant_path, rule)


def _read_config(path: str, name: str, quant_path: str | None, rule: Any) -> ModelSpec:
    # NOTE: finite=False: real configs hold Infinity in fields the planner never reads (Nemotron-H's
    # time_step_limit); check_config_fields refuses a non-finite value in any field it does read.
    cfg = load_json_file(path, "model config", MODEL_CONFIG_MAX_BYTES, finite=False)
    quant = None
    if quant_path is not None:
        quant = load_json_file(quant_path, "quantization config", MODEL_CONFIG_MAX_BYTES, finite=False)
        if not isinstance(quant, dict):
            raise SpecError(f"{shown_path(quant_path)}: expected a JSON object")
    return model_from_hf_config(cfg, name, quant, quant=rule)


def _quant_file(config_path: Path) -> str | None:
    """The hf_quant_config.json beside a config.json, or None. NOTE: beside the path as given, not
    the file it links to: a Hugging Face cache snapshot links each file to a blob of its own."""
    q = config_path.parent / QUANT_FILE
    return str(q) if path_kind(q, "quantization config") != "missing" else None


def _load_config(config: Path, name: str, quant_path: str | None) -> ModelSpec:
    canonical = str(config.parent.resolve() / config.name)
    return _load_path(canonical, name, file_stamp(str(config)), quant_path,
                      file_stamp(quant_path) if quant_path else (0, 0))


def _load_repo_id(repo_id: str) -> ModelSpec:
    """A Hugging Face repo id (planner.models.repo_ids): its card, its cached config, or a card with
    the weight dtypes of the id's quantization suffix."""
    from planner.models.repo_ids import resolve_repo_id

    r = resolve_repo_id(repo_id)
    if r.rule is not None:
        return _load_path(str(r.config), repo_id, file_stamp(str(r.config)), rule=r.rule)
    if r.card is not None:
        return load_model(r.card)
    return _load_config(r.config, repo_id, None if r.quant_file is None else str(r.quant_file))


def load_model(name_or_path: str) -> ModelSpec:
    """A built-in card (case-insensitive name) or a config.json path (a directory holding one works too)."""
    card = CARDS_DIR / f"{name_or_path.lower()}.json"
    if "/" not in name_or_path and is_file(card):
        return _load_path(str(card), name_or_path.lower(), file_stamp(str(card)))
    if name_or_path.count("/") == 1 and not name_or_path.endswith(".json") and active_root() is not None:
        # NOTE: confined to a root (the MCP server), a repo id of a built-in card is the card, whatever
        # the root holds: a name means the same to every client (planner.path_policy)
        card = card_for_repo(name_or_path)
        if card is not None:
            return load_model(card)
    path = Path(name_or_path)
    kind = path_kind(path, "model config")
    if kind == "folder" and path_kind(path / "config.json", "model config") != "missing":
        path, kind = path / "config.json", "file"
    if kind in ("file", "other"):  # a FIFO or a device is refused by the read, not called missing
        return _load_config(path, str(name_or_path), _quant_file(path))
    if kind == "missing" and looks_like_repo_id(name_or_path):
        return _load_repo_id(name_or_path)
    if path.suffix == ".json" or "/" in name_or_path:
        raise SpecError(f"model config not found: {shown_path(name_or_path)}")
    raise SpecError(f"unknown model '{shown_path(name_or_path)}'; built in: {', '.join(builtin_model_names())}, or a path to a config.json")
