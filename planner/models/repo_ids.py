"""A Hugging Face repo id read as the checkpoint it names: `--model Qwen/Qwen3-235B-A22B-FP8` and a
launch line's model (planner.launch) resolve here, through `planner.load_model`, so both give one
model.

In order:
1. the repo a built-in card was taken from (card_sources.json) → that card;
2. with huggingface_hub installed (the `hf` extra), the repo's config.json in the local Hugging Face
   cache, with its hf_quant_config.json when that is cached too: read offline, never downloaded
   (`huggingface_hub.try_to_load_from_cache` only looks in the cache folder, HF_HUB_CACHE or
   HF_HOME/hub), so its quantization files set the weight dtypes exactly;
3. the built-in card of the same architecture (release suffixes -Instruct, -Chat, -Exp, -Base, a
   date dropped; `card_for_name`) with the weights its quantization suffix names (`SUFFIX_RULES`):
   `-FP8`, `-NVFP4`, `-FP4`, `-MXFP4`, `-BF16`, anywhere after the name ("-Instruct-2507-FP8",
   "-FP8-Static-PerTensor");
otherwise one line saying what was tried. An integer checkpoint (-AWQ, -GPTQ, -Int4, -W4A16, …) is
refused by name: floorfirst prices bf16, fp8 and fp4 weights only (planner.units.WEIGHT_DTYPES).

Does not: download, read a token, or guess an architecture from a name with no card.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from planner.errors import SpecError
from planner.models.quant import PARTS

# A quantization marker in a repo name: what follows it ("-Static-PerTensor", "-dynamic", "-v2")
# details the same format.
_MARKER = re.compile(r"[-_.](fp8|nvfp4|mxfp4|fp4|bf16|awq|gptq|int4|int8|w4a16|w4a8|w8a8|w8a16|gguf|[48]bit|bnb)"
                     r"(?=$|[-_.])", re.IGNORECASE)
# Release suffixes of the same architecture (a date, -Instruct, -Exp): dropped to find the card.
_RELEASE = re.compile(r"-(instruct|chat|exp|base|it|\d{4}(-\d{2})?)$")
_INTEGER = {"awq": "int4 (AWQ)", "gptq": "int4/int8 (GPTQ)", "int4": "int4", "int8": "int8", "w4a16": "int4 (W4A16)",
            "w4a8": "int4 (W4A8)", "w8a8": "int8 (W8A8)", "w8a16": "int8 (W8A16)", "gguf": "GGUF",
            "4bit": "4-bit (bitsandbytes/MLX)", "8bit": "8-bit (bitsandbytes/MLX)", "bnb": "bitsandbytes"}


@dataclass(frozen=True)
class SuffixRule:
    """The weight dtypes a checkpoint named with this suffix stores, part by part
    (planner.models.quant.PARTS), when no quantization file can be read."""

    marker: str
    dtypes: tuple[tuple[str, str], ...]  # (part, dtype) for every part
    convention: str  # what the rule follows, for the reading

    def signature(self, layer: int) -> tuple[tuple[str, str], ...]:
        return self.dtypes

    def describe(self) -> dict[str, object]:
        return {"quant_algo": self.marker.upper(), "from_repo_id_suffix": True, "convention": self.convention}


def _rule(marker: str, dtype: str, parts: tuple[str, ...], convention: str) -> SuffixRule:
    return SuffixRule(marker, tuple((p, dtype if p in parts else "bf16") for p in PARTS), convention)


_MLP = ("routed_experts", "shared_experts", "dense_mlp")
# NOTE: each convention is what the quantized releases in tests/fixtures/hf_configs store
# (tests/planner/test_repo_ids.py checks the rule against every one of them):
# - FP8 (block or per-tensor: Qwen3-*-FP8, GLM-5.x-FP8, DeepSeek-V4-*-FP8, Step-3.7-Flash-FP8,
#   Nemotron-3-*-FP8, Llama-3.1-70B-Instruct-FP8): every decoder linear layer in fp8;
# - NVFP4/FP4 (NVIDIA ModelOpt): the MLPs in fp4 and attention left in bf16 by `exclude_modules`
#   (DeepSeek-V3.1/V3.2, GLM-5, Kimi-K2.5, MiniMax-M2.5/M2.7, Gemma-4, Qwen3.5). Nemotron-3 and
#   Qwen3-235B-A22B quantize attention too and DeepSeek-V4 keeps it FP8: for them the attention
#   bytes are an upper bound (their hf_quant_config.json, read from the cache, is exact);
# - MXFP4 (gpt-oss, Kimi-K3): the routed experts only.
SUFFIX_RULES: dict[str, SuffixRule] = {
    "fp8": _rule("fp8", "fp8", PARTS, "every decoder linear layer fp8"),
    "nvfp4": _rule("nvfp4", "fp4", _MLP, "MLPs fp4, attention bf16 (NVIDIA ModelOpt's exclusions)"),
    "fp4": _rule("fp4", "fp4", _MLP, "MLPs fp4, attention bf16 (NVIDIA ModelOpt's exclusions)"),
    "mxfp4": _rule("mxfp4", "fp4", ("routed_experts",), "routed experts fp4, the rest bf16"),
    "bf16": _rule("bf16", "bf16", PARTS, "unquantized"),
}


def looks_like_repo_id(name: str) -> bool:
    """'org/name' (one slash, no .json): what `load_model` tries as a repo id when no such path exists."""
    parts = name.split("/")
    return len(parts) == 2 and all(parts) and not name.endswith(".json")


def split_marker(name: str) -> tuple[str, str | None]:
    """(the name before its quantization marker, the marker lowercased or None):
    'Qwen3-235B-A22B-Instruct-2507-FP8' → ('Qwen3-235B-A22B-Instruct-2507', 'fp8')."""
    stem = name.rstrip("/").rsplit("/", 1)[-1]
    m = _MARKER.search(stem)
    return (stem[:m.start()], m.group(1).lower()) if m else (stem, None)


def _forms(stem: str):
    """The stem and each shorter form with one more release suffix dropped."""
    stem = stem.lower()
    while True:
        yield stem
        shorter = _RELEASE.sub("", stem)
        if shorter == stem:
            return
        stem = shorter


@lru_cache(maxsize=1)
def _card_index() -> dict[str, str]:
    """Every name a card answers to: its own, and each form of its source repo's name."""
    from planner.models.loader import builtin_model_names, card_sources

    index = {c: c for c in builtin_model_names()}
    for card, src in card_sources().items():
        for form in _forms(split_marker(src.get("repo", ""))[0]):
            index.setdefault(form, card)
    return index


def card_for_name(name: str) -> str | None:
    """The built-in card of the architecture a repo id or folder name names ('deepseek-ai/DeepSeek-V3.2-Exp'
    → 'deepseek-v3.2', 'nvidia/DeepSeek-V3.2-NVFP4' → 'deepseek-v3.2'), or None. A name is matched
    whole after dropping release suffixes and the quantization marker, so V3.2 is never read as V3
    and V3.1 (another release, its own config) finds no card."""
    index = _card_index()
    for form in _forms(split_marker(name)[0]):
        if form in index:
            return index[form]
    return None


def cached_config(repo_id: str) -> tuple[Path | None, Path | None, str]:
    """(config.json, hf_quant_config.json or None, why not) from the local Hugging Face cache, offline.
    Not where reads are confined (the MCP root, planner.path_policy): the cache lies outside it."""
    from planner.path_policy import active

    if active() is not None:
        return None, None, "reads are confined to the MCP root (the Hugging Face cache is outside it)"
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None, None, ("huggingface_hub is not installed (the hf extra: pip install huggingface_hub, "
                            "to read its cache)")

    def one(filename: str) -> Path | None:
        try:
            found = try_to_load_from_cache(repo_id, filename)
        except (ValueError, OSError):  # an id huggingface_hub refuses (HFValidationError is a ValueError)
            return None
        return Path(found) if isinstance(found, str) else None

    config = one("config.json")
    if config is None:
        return None, None, f"it is not in the Hugging Face cache (hf download {repo_id} config.json puts it there)"
    return config, one("hf_quant_config.json"), ""


@dataclass(frozen=True)
class Resolution:
    """What a repo id was read as: `model` is what load_model loads (a card name, a cached config
    path, or the repo id itself for a card with a suffix rule)."""

    repo_id: str
    model: str
    how: str  # for a launch line's reading
    card: str | None = None
    rule: SuffixRule | None = None
    config: Path | None = None  # the config.json read (the card file, or the cached one)
    quant_file: Path | None = None


def resolve_repo_id(repo_id: str) -> Resolution:
    """Resolve in the order of the module docstring; SpecError (one line) when nothing matches."""
    from planner.models.loader import CARDS_DIR, card_for_repo

    card = card_for_repo(repo_id)
    if card is not None:
        return Resolution(repo_id, card, f"{card} (the built-in card of this repo id)", card,
                          config=CARDS_DIR / f"{card}.json")
    config, quant, why = cached_config(repo_id)
    if config is not None:
        extra = f" and {quant.name}" if quant is not None else ""
        return Resolution(repo_id, repo_id, f"{repo_id} (its config.json{extra} in the Hugging Face cache)",
                          config=config, quant_file=quant)
    base, marker = split_marker(repo_id)
    if marker in _INTEGER:
        raise SpecError(f"model {repo_id!r}: {_INTEGER[marker]} weights are not a dtype floorfirst prices (bf16, fp8, "
                        f"fp4); price the base model with --weight-dtype fp4 (4-bit) or fp8 (8-bit) instead")
    card = card_for_name(repo_id)
    if card is None:
        raise SpecError(f"model {repo_id!r} is not a config path, a built-in card, nor a Hugging Face repo id of a "
                        f"built-in card, and {why}; pass its config.json or folder")
    path = CARDS_DIR / f"{card}.json"
    if marker is None:
        return Resolution(repo_id, card, f"{card} (the built-in card of this architecture)", card, config=path)
    rule = SUFFIX_RULES[marker]
    how = f"{repo_id}: the {card} card with {rule.convention}, from its -{marker.upper()} suffix"
    return Resolution(repo_id, repo_id, how, card, rule, config=path)
