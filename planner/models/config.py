"""Typed, checked reads of a Hugging Face config's fields: every value a variant or the loader
takes from a config passes through `HFConfig`, so a string where an integer goes, a null, a list
where a number goes, a fraction or a number past any real model is one `SpecError` line naming
the field and the value — never a TypeError inside a formula.

`LayerType` is what the loader reads for one decoder layer from the config's pattern fields
before any variant claims it: the mixer tag (full, sliding or chunked attention, a recurrent
state kind, DeepSeek-V4's compressed attention, block-sparse attention, or none), the MLP tag
(dense, MoE, both in parallel, none) and the per-layer geometry a pattern gives (DeciLM's head
groups and FFN widths, DeepSeek-V4's compression ratio, a shared indexer, hash routing).

Does not: decide what a field means for a model (planner.models.patterns, the variants do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from planner.errors import SpecError
from planner.inputs import check_number, shown

# NOTE: far above any real model and keeps products of sizes well inside float range (the same
# bound the loader applied before this module).
CONFIG_INT_MAX = 2**31 - 1
# NOTE: structure limits: a stack, an expert count or a head count past these is no model the planner
# can be asked about (the largest real ones: 126 layers in Llama-3.1-405B, 512 experts, 128 heads), and
# the per-layer work of loading one grows with them (10^5 layers took 4 s, 10^6 past 30 s). Each is
# 32 to 128 times the largest real value.
MAX_LAYERS = 4096
MAX_EXPERTS = 65_536
MAX_HEADS = 16_384
STRUCTURE_MAX = {
    "num_hidden_layers": MAX_LAYERS, "num_nextn_predict_layers": 64,
    **{k: MAX_EXPERTS for k in ("n_routed_experts", "num_local_experts", "num_experts", "num_experts_per_tok",
                                "experts_per_token", "moe_topk")},
    **{k: MAX_HEADS for k in ("num_attention_heads", "num_key_value_heads", "index_n_heads")},
}
MISSING = object()

MIXER_TAGS = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention", "kda", "mamba",
              "compressed_attention", "sparse_attention", "none")
MLP_TAGS = ("dense", "moe", "dense+moe", "none")


class HFConfig:
    """A config dict with checked accessors. `where` names the config in error lines."""

    def __init__(self, raw: dict[str, Any], where: str = "config.json"):
        if not isinstance(raw, dict):
            raise SpecError(f"{where}: expected a JSON object, not {type(raw).__name__}")
        self.raw = raw
        self.where = where

    def has(self, key: str) -> bool:
        """The field is present and not null."""
        return self.raw.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        v = self.raw.get(key)
        return default if v is None else v

    def __contains__(self, key: str) -> bool:
        return key in self.raw

    def _missing(self, key: str, default: Any, what: str) -> Any:
        if default is MISSING:
            raise SpecError(f"missing field '{key}' ({what})")
        return default

    def int(self, key: str, default: Any = MISSING, *, lo: int = 1, hi: int = CONFIG_INT_MAX, what: str = "an integer") -> Any:
        """An integer in [lo, hi]; `default` when absent or null (MISSING: refuse)."""
        v = self.raw.get(key)
        if v is None:
            return self._missing(key, default, what)
        return int_value(v, f"field '{key}'", lo=lo, hi=hi)

    def number(self, key: str, default: Any = MISSING, *, lo: float = 0.0, hi: float = 1e12) -> Any:
        v = self.raw.get(key)
        if v is None:
            return self._missing(key, default, "a number")
        return float(check_number(v, f"field '{key}'", lo=lo, hi=hi))

    def flag(self, key: str, default: bool = False) -> bool:
        v = self.raw.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            raise SpecError(f"field '{key}'={shown(v)} must be true or false, not {type(v).__name__}")
        return v

    def text(self, key: str, default: Any = MISSING) -> Any:
        v = self.raw.get(key)
        if v is None:
            return self._missing(key, default, "a string")
        if not isinstance(v, str):
            raise SpecError(f"field '{key}'={shown(v)} must be a string, not {type(v).__name__}")
        return v

    def int_list(self, key: str, *, length: int | None = None, lo: int = 0, hi: int = CONFIG_INT_MAX) -> list[int] | None:
        """A list of integers in [lo, hi] (of `length` entries if given); None when absent."""
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, list):
            raise SpecError(f"field '{key}'={shown(v)} must be a list of integers, not {type(v).__name__}")
        if length is not None and len(v) != length:
            raise SpecError(f"field '{key}' has {len(v)} entries; {length} expected")
        return [int_value(x, f"field '{key}[{i}]'", lo=lo, hi=hi) for i, x in enumerate(v)]

    def str_list(self, key: str, *, length: int | None = None) -> list[str] | None:
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise SpecError(f"field '{key}' must be a list of strings")
        if length is not None and len(v) != length:
            raise SpecError(f"field '{key}' has {len(v)} entries; {length} expected")
        return list(v)

    def sub(self, key: str) -> "HFConfig | None":
        """A nested object as its own HFConfig (None when absent); its errors name `key.field`."""
        v = self.raw.get(key)
        if v is None:
            return None
        if not isinstance(v, dict):
            raise SpecError(f"field '{key}' must be an object, not {type(v).__name__}")
        return _Prefixed(v, self.where, key)


class _Prefixed(HFConfig):
    """A nested object: error lines name the field as 'parent.field'."""

    def __init__(self, raw: dict[str, Any], where: str, prefix: str):
        super().__init__(raw, where)
        self.prefix = prefix

    def _named(self, fn, key, *a, **kw):
        try:
            return fn(key, *a, **kw)
        except SpecError as exc:
            raise SpecError(str(exc).replace(f"'{key}", f"'{self.prefix}.{key}", 1)) from None

    def int(self, key, *a, **kw):
        return self._named(super().int, key, *a, **kw)

    def number(self, key, *a, **kw):
        return self._named(super().number, key, *a, **kw)

    def flag(self, key, *a, **kw):
        return self._named(super().flag, key, *a, **kw)

    def text(self, key, *a, **kw):
        return self._named(super().text, key, *a, **kw)

    def int_list(self, key, *a, **kw):
        return self._named(super().int_list, key, *a, **kw)

    def str_list(self, key, *a, **kw):
        return self._named(super().str_list, key, *a, **kw)


def int_value(v: Any, what: str, *, lo: int = 1, hi: int = CONFIG_INT_MAX) -> int:
    """One integer field value, refused in one line if it is a bool, a string, a list, a fraction,
    not finite or outside [lo, hi]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpecError(f"{what}={shown(v)} must be an integer, not {type(v).__name__}")
    if isinstance(v, float) and not math.isfinite(v):
        raise SpecError(f"{what}={shown(v)} must be a finite number")
    return int(check_number(v, what, lo=lo, hi=hi, integer=True))


@dataclass(frozen=True)
class LayerType:
    """One decoder layer as the config's patterns describe it (see the module docstring)."""

    mixer: str
    mlp: str
    opts: tuple[tuple[str, Any], ...] = ()

    def opt(self, key: str, default: Any = None) -> Any:
        for k, v in self.opts:
            if k == key:
                return v
        return default

    def with_opts(self, **kw: Any) -> "LayerType":
        merged = dict(self.opts)
        merged.update({k: v for k, v in kw.items() if v is not None})
        return LayerType(self.mixer, self.mlp, tuple(sorted(merged.items())))
