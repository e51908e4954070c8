"""Weight dtypes from a checkpoint's quantization files: `quantization_config` in config.json (also
inside text_config) or a model folder's `hf_quant_config.json` (NVIDIA ModelOpt), down to each
layer's mixer, routed experts, shared experts and dense MLP.

What each file says (the fixture configs in tests/fixtures/hf_configs):
- ModelOpt (`quant_method: modelopt`, or hf_quant_config.json's `quantization`): `quant_algo`
  NVFP4 → fp4, FP8 → fp8; `exclude_modules` / `ignore`: glob patterns of modules left unquantized
  (bf16); MIXED_PRECISION lists each quantized module in `quantized_layers` ({name: {quant_algo}}),
  everything else keeps the checkpoint's base (block fp8 when `quant_method` is fp8, as
  DeepSeek-V4-NVFP4's NVFP4 experts over an FP8 model, else bf16);
- compressed-tensors: the weights' `num_bits` of its `config_groups` (4 → fp4, 8 → fp8), `ignore`
  patterns, `re:` for a regular expression (Kimi-K3: MXFP4 experts, attention and shared experts
  not quantized);
- block FP8 (`quant_method: fp8`) and MXFP4 (`mxfp4`, gpt-oss): `modules_to_not_convert`;
  DeepSeek-V4's `expert_dtype: fp4` (MXFP4 experts in an FP8 checkpoint).
A layer's part is named by the module names its family's modeling code uses (`FAMILIES`: HF's
self_attn/linear_attn/mlp.experts, Nemotron-H's backbone.layers.N.mixer, DeepSeek-V4's
layers.N.attn/ffn, Gemma-4's experts beside its mlp) and counts as excluded if a pattern matches
any of its main projections. NOTE: a part excluded only in some of its projections (DeepSeek-V3.2
NVFP4 keeps o_proj in NVFP4 but q/kv in bf16) is counted whole at the excluded dtype: an upper
bound on its bytes.

Does not: price anything (planner.step reads `LayerGroup.weight_dtypes`), or read KV scales
(`kv_cache_quant_algo` is recorded in ModelSpec.quantization; the KV dtype is the engine's).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from planner.errors import SpecError
from planner.inputs import shown
from planner.models.bounded_regex import BoundedRegex, BoundedRegexError

PARTS = ("mixer", "routed_experts", "shared_experts", "dense_mlp")
_ALGO = {"nvfp4": "fp4", "w4a16_nvfp4": "fp4", "mxfp4": "fp4", "fp4": "fp4", "fp8": "fp8", "w8a8_fp8": "fp8",
         "fp8_pb_wo": "fp8", "modelopt_fp4": "fp4", "fbgemm_fp8": "fp8", "nvfp4_awq": "fp4",
         "fp8_per_channel_per_token": "fp8", "w4a8_nvfp4_fp8": "fp4", "w4a8_mxfp4_fp8": "fp4"}
# Integer weights: no floorfirst dtype prices them (W4A16/W8A16 kernels dequantize to bf16 for the
# MMA, so neither the fp4/fp8 bytes nor their FLOP peaks are theirs). Refused by name.
# NOTE: compressed-tensors `type: int` groups (Kimi-K2.5's W4A16, group 32 with bf16 scales:
# 0.5 + 2/32 bytes a parameter, NVFP4's exactly) keep being read by their bits, as fp4/fp8 bytes.
_INTEGER_METHODS = {"awq": "int4 (AWQ)", "gptq": "int4/int8 (GPTQ)", "bitsandbytes": "int4/int8 (bitsandbytes)",
                    "gguf": "GGUF", "aqlm": "AQLM", "hqq": "HQQ", "eetq": "int8 (EETQ)", "exl2": "EXL2",
                    "awq_marlin": "int4 (AWQ)", "gptq_marlin": "int4/int8 (GPTQ)"}
_INTEGER_ALGO = re.compile(r"int[48]|w4a16_awq|w4a8_awq|_sq($|_)", re.IGNORECASE)

# family -> (layer prefix, {part: module names under a layer})
FAMILIES: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "hf": ("model.layers", {
        "mixer": ("self_attn.q_proj", "self_attn.q_b_proj", "self_attn.o_proj", "linear_attn.in_proj_qkvz",
                  "linear_attn.in_proj_qkv", "linear_attn.out_proj"),
        "routed_experts": ("mlp.experts.0.gate_proj", "mlp.experts.gate_up_proj", "block_sparse_moe.experts.0.w1"),
        "shared_experts": ("mlp.shared_expert.gate_proj", "mlp.shared_experts.gate_proj"),
        "dense_mlp": ("mlp.gate_proj", "mlp.down_proj")}),
    "gemma4": ("model.language_model.layers", {
        "mixer": ("self_attn.q_proj", "self_attn.o_proj"),
        "routed_experts": ("experts.gate_up_proj", "experts.down_proj"),
        "shared_experts": (),
        "dense_mlp": ("mlp.gate_proj", "mlp.down_proj")}),
    "nemotron_h": ("backbone.layers", {
        "mixer": ("mixer.in_proj", "mixer.out_proj", "mixer.q_proj", "mixer.o_proj"),
        "routed_experts": ("mixer.experts.0.up_proj", "mixer.experts.0.down_proj"),
        "shared_experts": ("mixer.shared_experts.up_proj",),
        "dense_mlp": ("mixer.up_proj", "mixer.down_proj")}),
    "deepseek_v4": ("layers", {
        "mixer": ("attn.wq_a", "attn.wq_b", "attn.wo_a", "attn.wo_b"),
        "routed_experts": ("ffn.experts.0.w1", "ffn.experts.0.w2"),
        "shared_experts": ("ffn.shared_experts.w1",),
        "dense_mlp": ()}),
}


def family(cfg: dict[str, Any]) -> str:
    mt = str(cfg.get("model_type", ""))
    if mt.startswith("nemotron_h"):
        return "nemotron_h"
    if mt.startswith("deepseek_v4"):
        return "deepseek_v4"
    if mt.startswith("gemma4"):
        return "gemma4"
    return "hf"


def _dtype(algo: Any) -> str | None:
    return _ALGO.get(str(algo).lower()) if isinstance(algo, str) else None


@dataclass(frozen=True)
class WeightQuant:
    """What one checkpoint's quantization files say, resolved per (layer, part) by `dtype`."""

    base: str  # a quantized linear's dtype
    fallback: str  # what a module left out of `per_module` keeps (MIXED_PRECISION)
    excluded: tuple[str, ...] = ()
    per_module: tuple[tuple[str, str], ...] = ()
    experts: str | None = None  # an expert-only dtype (DeepSeek-V4's expert_dtype)
    family: str = "hf"
    prefix: str = "model.layers"

    def _names(self, layer: int, part: str) -> list[str]:
        return [f"{self.prefix}.{layer}.{s}" for s in FAMILIES[self.family][1][part]]

    def _excluded(self, name: str) -> bool:
        exact, pattern, regexes = _matchers(self.excluded)
        if exact:
            parts = name.split(".")
            if any(".".join(parts[:i]) in exact for i in range(1, len(parts) + 1)):  # the module or a parent
                return True
        if pattern is not None and pattern.fullmatch(name) is not None:
            return True
        return any(r.match(name) for r in regexes)

    def dtype(self, layer: int, part: str) -> str:
        names = self._names(layer, part)
        if self.per_module:
            for key, dt in self.per_module:
                if any(n == key or n.startswith(key + ".") for n in names):
                    return dt
            return self.fallback
        if part == "routed_experts" and self.experts:
            return self.experts
        if any(self._excluded(n) for n in names):
            return "bf16"
        return self.base

    def signature(self, layer: int) -> tuple[tuple[str, str], ...]:
        return tuple((p, self.dtype(layer, p)) for p in PARTS)


@lru_cache(maxsize=256)
def _matchers(patterns: tuple[str, ...]) -> tuple[frozenset[str], re.Pattern | None, tuple[BoundedRegex, ...]]:
    """(plain module names, one regex of every glob pattern, each `re:` pattern's bounded matcher):
    a checkpoint lists up to ~700 exclusions (GLM-5-FP8), matched against a few names per layer part.
    NOTE: globs go through fnmatch.translate, whose regexes don't backtrack catastrophically; `re:`
    patterns are the checkpoint's own regexes, matched as the engines do (re.match: anchored at the
    start only) by planner.models.bounded_regex in time linear in the name, whatever they say."""
    exact, alts, res = set(), [], []
    for p in patterns:
        if p.startswith("re:"):
            try:
                res.append(BoundedRegex(p[3:]))
            except re.error:
                continue  # NOTE: a pattern no engine could compile excludes nothing
            except BoundedRegexError as exc:
                raise BoundedRegexError(f"quantization ignore pattern {shown(p, 80)}: {exc}") from None
        elif any(c in p for c in "*?["):
            alts += [fnmatch.translate(p), fnmatch.translate(p + ".*")]  # the module and what is under it
        else:
            exact.add(p)
    return frozenset(exact), (re.compile("|".join(alts)) if alts else None), tuple(res)


def _patterns(q: dict[str, Any]) -> tuple[str, ...]:
    for key in ("exclude_modules", "ignore", "modules_to_not_convert"):
        v = q.get(key)
        if isinstance(v, list):
            return tuple(x for x in v if isinstance(x, str))
    return ()


def _prefix(names, default: str) -> str:
    """The decoder layers' module prefix the file's names use most ('model.language_model.layers'),
    MTP layers' names left out."""
    seen: dict[str, int] = {}
    for p in names:
        m = re.match(r"^([A-Za-z0-9_.]*layers)\.\d+", p)
        if m and not m.group(1).startswith("mtp"):
            seen[m.group(1)] = seen.get(m.group(1), 0) + 1
    return max(seen, key=seen.get) if seen else default


def weight_quant(cfg: dict[str, Any], quant_file: dict[str, Any] | None = None) -> WeightQuant | None:
    """The checkpoint's weight quantization, or None for an unquantized (bf16) checkpoint. Values of
    the wrong type are ignored here (the loader's field checks refuse the ones it reads)."""
    q = cfg.get("quantization_config")
    q = q if isinstance(q, dict) else {}
    hq = quant_file.get("quantization") if isinstance(quant_file, dict) else None
    hq = hq if isinstance(hq, dict) else {}
    fam = family(cfg)
    expert = _dtype(cfg.get("expert_dtype")) or _dtype(q.get("moe_quant_algo"))
    method = str(q.get("quant_method", "")).lower()
    algo = q.get("quant_algo") or hq.get("quant_algo")
    if not q and not hq:
        return None
    if method in _INTEGER_METHODS or (isinstance(algo, str) and _INTEGER_ALGO.search(algo)):
        what = _INTEGER_METHODS.get(method) or f"quant_algo {algo}"
        raise SpecError(f"{what} weights are not a dtype floorfirst prices (bf16, fp8, fp4); price the unquantized "
                        "config with --weight-dtype fp4 (4-bit) or fp8 (8-bit) instead")
    base = _dtype(algo) or _dtype(method)
    if method == "compressed-tensors":
        groups = q.get("config_groups") if isinstance(q.get("config_groups"), dict) else {}
        bits = {g.get("weights", {}).get("num_bits") for g in groups.values()
                if isinstance(g, dict) and isinstance(g.get("weights"), dict)}
        base = "fp4" if 4 in bits else "fp8" if 8 in bits else None
    if method == "mxfp4":  # gpt-oss: MXFP4 experts, the rest is listed in modules_to_not_convert
        base = "fp4"
    if base is None and str(algo).upper() != "MIXED_PRECISION":
        return None
    layers = q.get("quantized_layers") if isinstance(q.get("quantized_layers"), dict) else hq.get("quantized_layers")
    per = tuple((k, _dtype(v.get("quant_algo")) or "bf16") for k, v in layers.items()
                if isinstance(v, dict)) if isinstance(layers, dict) else ()
    fallback = "fp8" if method == "fp8" else "bf16"
    pats = _patterns(q) or _patterns(hq)
    keys = pats + tuple(k for k, _ in per)
    return WeightQuant(base=base or fallback, fallback=fallback, excluded=pats, per_module=per, experts=expert,
                       family=fam, prefix=_prefix(keys, FAMILIES[fam][0]))


def describe(cfg: dict[str, Any], quant_file: dict[str, Any] | None) -> dict[str, Any]:
    """What ModelSpec.quantization records: the method and algorithm, the KV-cache algorithm the
    checkpoint was calibrated for, and how many exclusion patterns it lists."""
    q = cfg.get("quantization_config") if isinstance(cfg.get("quantization_config"), dict) else {}
    hq = quant_file.get("quantization") if isinstance(quant_file, dict) and isinstance(quant_file.get("quantization"), dict) else {}
    out = {"quant_method": q.get("quant_method"), "quant_algo": q.get("quant_algo") or hq.get("quant_algo"),
           "kv_cache_quant_algo": q.get("kv_cache_quant_algo") or hq.get("kv_cache_quant_algo")}
    out = {k: v for k, v in out.items() if isinstance(v, str) and v}
    if q or hq:
        out.update(excluded_patterns=len(_patterns(q) or _patterns(hq)), from_hf_quant_config=bool(hq))
    return out
