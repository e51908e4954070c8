"""Load a model: a built-in card by name, or any Hugging Face config.json by path, offline.

Every field the planner needs is checked once here; a config the planner can't model gives one
SpecError naming the architecture or the field.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from planner.errors import SpecError
from planner.models.attention.base import variant_from_hf_config
from planner.models.mlp.base import mlp_from_hf_config
from planner.models.spec import ModelSpec

CARDS_DIR = Path(__file__).parent / "cards"

_QUANT_TO_DTYPE = {"fp8": "fp8", "mxfp4": "fp4", "nvfp4": "fp4", "modelopt_fp4": "fp4", "fbgemm_fp8": "fp8",
                   "compressed-tensors": None, "modelopt": "fp8"}

# Architectures with state-space or linear-attention layers have no per-token KV to cost yet.
_UNMODELLED_FIELDS = ("linear_num_key_heads", "ssm_cfg", "mamba_d_state", "state_size", "attn_layer_period")


def builtin_model_names() -> list[str]:
    return sorted(p.stem for p in CARDS_DIR.glob("*.json"))


def _positive_int(cfg: dict[str, Any], key: str, where: str) -> int:
    v = cfg.get(key)
    if v is None:
        raise SpecError(f"{where}: missing field '{key}'")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0 or int(v) != v:
        raise SpecError(f"{where}: field '{key}'={v!r} must be a positive integer")
    return int(v)


def model_from_hf_config(cfg: dict[str, Any], name: str) -> ModelSpec:
    where = f"config {name}"
    if not isinstance(cfg, dict):
        raise SpecError(f"{where}: expected a JSON object")
    if isinstance(cfg.get("text_config"), dict):  # multimodal wrappers keep the LM in text_config
        cfg = {**cfg["text_config"], "architectures": cfg.get("architectures")}
    arch = (cfg.get("architectures") or [cfg.get("model_type") or "unknown"])[0]
    for f in _UNMODELLED_FIELDS:
        if f in cfg:
            raise SpecError(f"{where}: architecture {arch} has field '{f}' (state-space/linear attention), which the planner cannot model")
    layers = _positive_int(cfg, "num_hidden_layers", where)
    hidden = _positive_int(cfg, "hidden_size", where)
    vocab = _positive_int(cfg, "vocab_size", where)
    for key in ("num_attention_heads", "num_key_value_heads", "head_dim", "kv_lora_rank", "q_lora_rank",
                "intermediate_size", "moe_intermediate_size", "n_routed_experts", "num_experts_per_tok"):
        if cfg.get(key) is not None:
            _positive_int(cfg, key, where)
    try:
        attention = variant_from_hf_config(cfg)
    except SpecError as exc:
        raise SpecError(f"{where} ({arch}): {exc}") from None
    if attention is None:
        raise SpecError(f"{where}: architecture {arch} has no attention the planner can model (no 'num_attention_heads')")
    mlp = mlp_from_hf_config(cfg, layers)
    if mlp is None:
        raise SpecError(f"{where}: architecture {arch} has no MLP the planner can model (no 'intermediate_size' or experts)")
    if attention.num_heads % max(1, getattr(attention, "num_kv_heads", 1)):
        raise SpecError(f"{where}: num_attention_heads={attention.num_heads} is not a multiple of num_key_value_heads")
    quant = (cfg.get("quantization_config") or {}).get("quant_method")
    wdt = _QUANT_TO_DTYPE.get(quant) if quant else None
    if wdt is None:
        wdt = "bf16"
    return ModelSpec(
        name=name,
        architecture=arch,
        num_layers=layers,
        hidden_size=hidden,
        vocab_size=vocab,
        intermediate_size=cfg.get("intermediate_size"),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        mtp_layers=int(cfg.get("num_nextn_predict_layers") or 0),
        default_weight_dtype=wdt,
        attention=attention,
        mlp=mlp,
    )


@lru_cache(maxsize=64)
def _load_path(path: str, name: str) -> ModelSpec:
    try:
        cfg = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    return model_from_hf_config(cfg, name)


def load_model(name_or_path: str) -> ModelSpec:
    """A built-in card (case-insensitive name) or a config.json path (a directory holding one works too)."""
    card = CARDS_DIR / f"{name_or_path.lower()}.json"
    if card.is_file():
        return _load_path(str(card), name_or_path.lower())
    path = Path(name_or_path)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.is_file():
        return _load_path(str(path.resolve()), str(name_or_path))
    if path.suffix == ".json" or "/" in name_or_path:
        raise SpecError(f"model config not found: {name_or_path}")
    raise SpecError(f"unknown model '{name_or_path}'; built in: {', '.join(builtin_model_names())}, or a path to a config.json")
