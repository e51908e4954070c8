"""No config, however malformed, produces a traceback: the real fixture configs are mutated (lists
where integers go, nulls, huge and negative numbers, strings, deleted keys, nested objects, the
same mutations inside text_config and the pattern lists) and each must load or be refused in one
SpecError line. And structure the loader doesn't read is refused by name, never priced as
something else."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planner.errors import SpecError
from planner.models.loader import model_from_hf_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
CONFIGS = {p.parent.name: json.loads(p.read_text()) for p in sorted(FIXTURES.glob("*/config.json"))}
NAMES = sorted(CONFIGS)

BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.just([]), st.just([1, 2]), st.just({}), st.just("x"), st.just(""),
    st.integers(min_value=-3, max_value=3), st.just(2**40), st.just(10**300), st.just(1e308), st.just(0.5),
    st.just(-1.0), st.just([None]), st.just({"a": 1}), st.just("M*E-"), st.just(["mamba", "moe"]),
)


def _paths(cfg, prefix=()):
    """Every key path of the config (into text_config and the nested objects, and list entries)."""
    for k, v in cfg.items():
        yield prefix + (k,)
        if isinstance(v, dict) and len(prefix) < 2:
            yield from _paths(v, prefix + (k,))
        elif isinstance(v, list) and v and len(prefix) < 2:
            for i in {0, len(v) - 1}:
                yield prefix + (k, i)


PATHS = {n: sorted(_paths(c), key=str) for n, c in CONFIGS.items()}


def _set(cfg, path, value, delete):
    node = cfg
    for p in path[:-1]:
        node = node[p]
    if delete and isinstance(node, dict):
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def _loads_or_one_line(cfg):
    try:
        model_from_hf_config(cfg, "mutated.json")
    except SpecError as exc:
        assert "\n" not in str(exc) and str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(NAMES), st.data())
def test_a_mutated_real_config_loads_or_is_one_specerror_line(name, data):
    cfg = copy.deepcopy(CONFIGS[name])
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(PATHS[name]))
        try:
            _set(cfg, path, data.draw(BAD_VALUES), delete=data.draw(st.booleans()))
        except (KeyError, IndexError, TypeError):
            pass  # an earlier mutation replaced a parent of this path
    _loads_or_one_line(cfg)


@pytest.mark.parametrize("name", NAMES)
def test_every_fixture_without_each_pattern_field_still_loads_or_is_refused(name):
    for key in ("layer_types", "layers_block_type", "hybrid_override_pattern", "compress_ratios", "moe_layer_freq",
                "num_hidden_layers", "hidden_size", "text_config", "linear_attn_config", "sparse_attention_config"):
        cfg = copy.deepcopy(CONFIGS[name])
        cfg.pop(key, None)
        if isinstance(cfg.get("text_config"), dict):
            cfg["text_config"].pop(key, None)
        _loads_or_one_line(cfg)


@pytest.mark.parametrize("field, value, needle", [
    ("attn_layer_period", 8, "attn_layer_period"),  # Jamba's interleave: no variant
    ("full_attn_layer_pattern", [0, 1], "full_attn_layer_pattern"),  # an unknown pattern-looking field
    ("num_kv_shared_layers", 4, "num_kv_shared_layers"),  # Gemma-3n KV sharing: not modelled
    ("index_topk_pattern", "FSSS", "index_topk_pattern"),
])
def test_structure_the_loader_does_not_read_is_refused_by_name(field, value, needle):
    cfg = copy.deepcopy(CONFIGS["Qwen--Qwen3-32B"])
    cfg[field] = value
    with pytest.raises(SpecError, match=needle):
        model_from_hf_config(cfg, "c.json")


def test_minimax_m3_is_block_sparse_not_plain_gqa_and_nemotron_h_is_its_pattern():
    from planner.models.loader import load_model

    m3 = load_model(str(FIXTURES / "MiniMaxAI--MiniMax-M3"))
    assert m3.layer_counts()["mixer:block_sparse"] == 57 and m3.layer_counts()["mixer:gqa"] == 3
    # the totals the merge noticed wrong (1495 B, 102 B, dense 115 B) now follow hybrid_override_pattern
    for folder, total_b in (("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8", 120.6),
                            ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", 31.6), ("nvidia--Nemotron-H-56B-Base-8K", 56.3)):
        assert load_model(str(FIXTURES / folder)).total_params() / 1e9 == pytest.approx(total_b, abs=0.05)
