"""Every number `planner.step_cost` returns, pinned against a golden file written at commit 32df848
(before the sweep's speed work): floors, per-resource times, every component, the engine's terms,
the tiers, the resident bytes and the binding resource, for every registered layout under every
registered engine (and none), decode-only and with prefill chunks / cached prefixes / draft tokens /
several prefill groups, one and two nodes, hybrid, sliding-window, dense and host-tier deployments,
and unequal lengths.

A refactor of the step model for speed must leave all of them unchanged: each array is compared
through a digest, sum(x · w) over its points with fixed weights w in [0.5, 1.5) (a weighted sum of
non-negative values moves by at most the largest relative change of an element, so rtol 1e-12 admits
a reassociated sum and catches a changed point). Names, their order and their kinds (float, array,
bool) are compared exactly.

Regenerate only when a formula is meant to change (and say so in the commit):
    python tests/planner/test_step_cost_identity.py --write
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import planner
from planner.engines.base import engines
from planner.host_tier import HostTierSpec
from planner.layouts.base import attention_layouts

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "step_cost_golden.json"
RTOL = 1e-12
POINTS = 200


def engine_names() -> list[str]:
    return ["bare", *sorted(engines())]


def _dep(model, hw, attn, engine, gpus=8, moe=None, **kw):
    m = planner.load_model(model)
    moe = moe or ("ep" if m.has_moe else "tp")
    eng = dict(engine_kernels=False) if engine == "bare" else dict(engine=engine)
    return planner.make_deployment(m, planner.load_hardware(hw), attn=attn, moe=moe, gpus=gpus, **eng, **kw)


def _decode(seed: int, points: int = POINTS):
    rng = np.random.default_rng(seed)
    batch = rng.integers(0, 1024, points).astype(float)
    batch[:3] = (0.0, 1.0, 600.0)  # an empty step, one request, above the engines' largest CUDA graph
    return planner.DecodeLoad.equal(batch, rng.integers(1, 262_144, points)), {}


def _mixed(seed: int, groups: int, points: int = POINTS):
    """Decode plus a chunk at half the points, a cached prefix, draft tokens, several prefill groups."""
    rng = np.random.default_rng(seed)
    load, _ = _decode(seed, points)
    pre = np.where(rng.random(points) < 0.5, rng.integers(1, 16_384, points), 0).astype(float)
    kw = dict(prefill_tokens=pre, prefill_context=np.where(rng.random(points) < 0.5, rng.integers(0, 65_536, points), 0.0),
              query_tokens=rng.integers(1, 5, points).astype(float),
              prefill_groups=rng.integers(1, groups + 1, points).astype(float))
    return load, kw


def _lists(seed: int, points: int = 12, classes: int = 5):
    """Unequal lengths: `classes` request classes per point (the owners' longest-first balancing)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 131_072, (points, classes)).astype(float)
    counts = rng.integers(0, 24, (points, classes)).astype(float)
    return planner.DecodeLoad(lengths=lengths, counts=counts), dict(prefill_tokens=np.where(np.arange(points) % 2, 2048.0, 0.0))


def cases() -> dict[str, tuple]:
    """name -> (deployment args, load maker). Layouts and engines are read from their registries."""
    out: dict[str, tuple] = {}
    layouts = list(planner.ATTN_LAYOUTS)
    for i, attn in enumerate(layouts):
        for engine in engine_names():
            args = ("deepseek-v3.2", "h200", attn, engine)
            out[f"dsv32/h200x8/{attn}/{engine}/decode"] = (args, {}, ("decode", 10 + i))
            out[f"dsv32/h200x8/{attn}/{engine}/mixed"] = (args, {}, ("mixed", 20 + i))
    for attn in ("tp", "dp", "dptp"):
        for engine in engine_names():
            args = ("deepseek-v3.2", "h20", attn, engine, 16)
            out[f"dsv32/h20x16/{attn}/{engine}/decode"] = (args, {}, ("decode", 30))
            out[f"dsv32/h20x16/{attn}/{engine}/mixed"] = (args, {}, ("mixed", 31))
    for engine in sorted(engines()):
        for a2a in engines()[engine].moe_a2a_backends:
            out[f"dsv32/h200x8/dp/{engine}/a2a={a2a}/mixed"] = (("deepseek-v3.2", "h200", "dp", engine),
                                                                  dict(moe_a2a=a2a), ("mixed", 40))
        out[f"dsv32/h200x8/dp/{engine}/moe=tp/mixed"] = (("deepseek-v3.2", "h200", "dp", engine, 8, "tp"), {}, ("mixed", 41))
    for attn in layouts:
        out[f"dsv32/h200x8/{attn}/sglang/lists"] = (("deepseek-v3.2", "h200", attn, "sglang"), {}, ("lists", 50))
    tier = HostTierSpec()
    for attn in ("tp", "dp", "cp"):
        out[f"dsv32/h200x8/{attn}/sglang/host_tier/mixed"] = (("deepseek-v3.2", "h200", attn, "sglang"),
                                                              dict(host_tier=tier), ("mixed", 60))
    for attn in ("tp", "dp", "dptp"):  # hybrid: GDN + attention (several mixers, per-request states)
        for engine in ("sglang", "vllm"):
            out[f"qwen35/h200x8/{attn}/{engine}/mixed"] = (("qwen3.5-35b-a3b", "h200", attn, engine), {}, ("mixed", 70))
            out[f"qwen35/h200x8/{attn}/{engine}/lists"] = (("qwen3.5-35b-a3b", "h200", attn, engine), {}, ("lists", 71))
    for attn in ("tp", "dp"):  # sliding windows (SGLang's hybrid SWA pools)
        for engine in ("sglang", "vllm", "trtllm"):
            out[f"gptoss/h200x8/{attn}/{engine}/mixed"] = (("gpt-oss-120b", "h200", attn, engine), {}, ("mixed", 80))
    for attn in ("tp", "cp", "dcp"):  # dense, TP MLP
        out[f"llama70b/h100x8/{attn}/vllm/mixed"] = (("llama-3.1-70b", "h100", attn, "vllm"), {}, ("mixed", 90))
    return out


def run_case(spec) -> planner.StepCost:
    args, kw, (kind, seed) = spec
    dep = _dep(*args, **kw)
    if kind == "decode":
        load, extra = _decode(seed)
    elif kind == "mixed":
        load, extra = _mixed(seed, dep.placement.owner_groups)
    else:
        load, extra = _lists(seed)
    return planner.step_cost(dep, load, **extra)


def _entry(x):
    """(kind tag, digest) of one value: python numbers as themselves, names whole, arrays by digest."""
    if x is None or isinstance(x, str):
        return "n" if x is None else "s", x
    if isinstance(x, (bool, np.bool_)):
        return "B", float(x)
    if isinstance(x, (float, int, np.floating, np.integer)) and not isinstance(x, np.ndarray):
        return ("f" if isinstance(x, float) else "i"), float(x)
    a = np.asarray(x)
    tag = {"b": "b", "f": "a", "O": "o", "U": "o"}.get(a.dtype.kind, a.dtype.kind) + str(a.size)
    if tag[0] == "o":  # names (the binding resource, a variant's label): compared whole
        return tag, hashlib.sha1("\0".join(map(str, a.ravel())).encode()).hexdigest()[:16]
    a = a.astype(np.float64).ravel()
    fin = np.isfinite(a)
    x = np.where(fin, a, 0.0)
    w = 0.5 + (np.arange(a.size) * 0.6180339887498949) % 1.0
    d = float(np.sum(x * w))
    if not fin.all() or np.any(x < 0):  # what a weighted sum can't see: non-finite points, cancellation
        return tag, [d, [int(np.isnan(a).sum()), int(np.isposinf(a).sum()), int(np.isneginf(a).sum())],
                     float(np.sum(np.abs(x) * w))]
    return tag, d


def flatten(cost) -> dict[str, tuple]:
    """Every field, property and component of a StepCost, by a dotted name."""
    out: dict[str, tuple] = {}

    def put(name, value):
        if isinstance(value, dict):
            for k, v in value.items():
                put(f"{name}.{k}", v)
        elif hasattr(value, "__dataclass_fields__"):
            for f in fields(value):
                put(f"{name}.{f.name}", getattr(value, f.name))
        else:
            out[name] = _entry(value)

    for f in fields(cost):
        if f.name != "engine_terms":  # what prices `engine` on first read: its value is read below
            put(f.name, getattr(cost, f.name))
    if "engine" not in {f.name for f in fields(cost)}:
        put("engine", cost.engine)
    for p in ("floor_max_s", "floor_sum_s", "binding", "kv_fits", "feasible", "fixed_latency_s",
              "network_bytes_scaleup_equivalent", "network_messages_scaleup_equivalent"):
        put(p, getattr(cost, p))
    put("engine_network_scaleup_equivalent", dict(enumerate(cost.engine_network_scaleup_equivalent())))
    put("times.binding_index", cost.times.binding_index)
    if cost.engine is not None:
        put("engine.extra_hbm_bytes", cost.engine.extra_hbm_bytes)
        put("engine.components.overhead_s", cost.engine.components()["overhead_s"])
    if cost.host_tier is not None:
        put("host_tier.host_link_equivalent_bytes", cost.host_tier.host_link_equivalent_bytes)
    return out


def pack(flat: dict[str, tuple]) -> tuple[list[str], str, dict]:
    """(names with their kinds, the numbers as base64 float64, the rest by position)."""
    nums = np.full(len(flat), np.nan)
    rest = {}
    for i, (t, d) in enumerate(flat.values()):
        if isinstance(d, float):
            nums[i] = d
        elif isinstance(d, list):
            nums[i], rest[str(i)] = d[0], d[1:]
        else:
            rest[str(i)] = d
    return [f"{k}:{t}" for k, (t, _) in flat.items()], base64.b64encode(nums.astype("<f8").tobytes()).decode(), rest


def digest_all() -> dict:
    vocab: dict[str, int] = {}
    sets: dict[tuple, int] = {}
    docs = {}
    for name, spec in cases().items():
        names, nums, rest = pack(flatten(run_case(spec)))
        key = tuple(vocab.setdefault(n, len(vocab)) for n in names)
        docs[name] = {"k": sets.setdefault(key, len(sets)), "v": nums, "x": rest}
    return {"commit": "32df848", "rtol": RTOL, "vocab": list(vocab), "keysets": [list(k) for k in sets], "cases": docs}


def _close(want: float, got: float, scale: float) -> bool:
    return want == got or abs(want - got) <= RTOL * scale


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(GOLDEN.read_text())


def test_golden_covers_every_registered_layout_and_engine(golden):
    names = set(golden["cases"])
    for attn in attention_layouts():
        assert f"dsv32/h200x8/{attn}/sglang/mixed" in names, f"layout {attn} is not pinned: regenerate the golden file"
    for engine in engine_names():
        assert f"dsv32/h200x8/tp/{engine}/decode" in names, f"engine {engine} is not pinned: regenerate the golden file"


@pytest.mark.parametrize("name", sorted(cases()))
def test_step_cost_matches_golden(golden, name):
    want = golden["cases"].get(name)
    if want is None:
        pytest.skip(f"{name} is not in the golden file (a layout or engine registered after it was written)")
    names, nums, rest = pack(flatten(run_case(cases()[name])))
    assert names == [golden["vocab"][i] for i in golden["keysets"][want["k"]]], "fields, components or their order changed"
    w, g = (np.frombuffer(base64.b64decode(v), dtype="<f8") for v in (want["v"], nums))
    bad = [n for i, n in enumerate(names) if json.dumps(want["x"].get(str(i))) != json.dumps(rest.get(str(i)))
           and not (isinstance(want["x"].get(str(i)), list) and want["x"][str(i)][0] == rest[str(i)][0])]
    bad += [f"{n}: {a!r} -> {b!r}" for n, a, b, x in zip(names, w, g, (want["x"].get(str(i)) for i in range(len(names))))
            if not (np.isnan(a) and np.isnan(b)) and not _close(a, b, x[1] if isinstance(x, list) else abs(a))]
    assert not bad, f"{len(bad)} value(s) changed, first: {bad[:3]}"


def test_engine_terms_are_priced_when_read_and_travel_priced():
    """The engine's terms are priced on first read (a floor sweep never pays for them), once, and a
    pickled step carries them priced (a closure doesn't pickle)."""
    import pickle

    cost = run_case(cases()["dsv32/h200x8/dp/sglang/mixed"])
    assert "engine" not in vars(cost)
    first = cost.engine
    assert cost.engine is first
    back = pickle.loads(pickle.dumps(cost))
    assert back.engine_terms is None and back.engine.engine == first.engine
    assert flatten(back).keys() == flatten(cost).keys()
    assert pack(flatten(back)) == pack(flatten(cost))


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit("usage: python tests/planner/test_step_cost_identity.py --write  (regenerates the golden file)")
    doc = digest_all()
    GOLDEN.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{GOLDEN}: {len(doc['cases'])} cases, {GOLDEN.stat().st_size / 1024:.0f} KiB")
