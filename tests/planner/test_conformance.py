"""Conformance: a variant and a layout are one module each, found by their registries. A toy
mixer (a windowed MQA with a per-request state, claimed from a config flag) and a toy layout
(owners like DP-attention, registered under a new name) are registered at test time, and
`compare`, `capacity`, the policy compile and a simulate run on them through the library and the
CLI (in-process), with no central edit (the runtime reads the layout registry since issue 15;
the CLI's --attn and --policy choices are still typed out, so the CLI is driven through compare,
capacity and a dynamic simulate)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

import planner
from cli.main import main
from planner.layouts import base as layout_base
from planner.layouts.dp import DataParallelAttention
from planner.layouts.dptp import DataParallelTensorParallelAttention
from planner.models.attention import base as att_base
from planner.models.attention.base import STATE, WINDOW, AttentionVariant, WeightPart, as_tokens

from tests.planner.factories import GQA_CONFIG, write_config


@dataclass(frozen=True)
class ToyWindowMQA(AttentionVariant):
    """One KV head of `width`, a window of `window` tokens, a `state_floats`-float fp32 state."""

    kind: ClassVar[str] = "toy_window_mqa"
    priority: ClassVar[int] = 1000

    hidden_size: int = 1024
    width: int = 64
    window: int = 256
    state_floats: int = 1024

    @classmethod
    def from_hf_config(cls, cfg, layer):
        if layer.mixer != "full_attention" or not cfg.flag("toy_window_mqa"):
            return None
        return cls(num_heads=cfg.int("num_attention_heads"), hidden_size=cfg.int("hidden_size"))

    def kv_splittable_heads(self):
        return 1

    def memory_kind(self, component):
        return {"kv": WINDOW, "state": STATE}[component]

    def kv_stored_bytes(self, context_tokens, kv_dtype):
        l = as_tokens(context_tokens)
        return {"kv": np.minimum(l, float(self.window)) * 2 * self.width * 2.0,
                "state": np.ones_like(l) * self.state_floats * 4.0}

    def kv_read_bytes(self, context_tokens, kv_dtype):
        return self.kv_stored_bytes(context_tokens, kv_dtype)

    def decode_flops(self, context_tokens):
        return 4.0 * self.num_heads * self.width * np.minimum(as_tokens(context_tokens), float(self.window))

    def prefill_flops(self, chunk_tokens, prefix_tokens):
        return 4.0 * self.num_heads * self.width * as_tokens(chunk_tokens) * float(self.window)

    def weight_parts(self):
        h = self.hidden_size
        return {"attention": WeightPart(float(2 * h * self.num_heads * self.width), True),
                "attention_kv": WeightPart(float(2 * h * self.width), False)}

    def decode_query_width(self):
        return self.width

    def decode_output_width(self):
        return self.width

    def window_tokens(self):
        return self.window

    def knees(self):
        return (float(self.window),)


class ToyOwners(DataParallelAttention):
    name = "toyown"
    description = "toy: DP-attention under another name (a layout module registered at test time)"
    order = 50


class ToyPairs(DataParallelTensorParallelAttention):
    """Owner groups of two ranks (T/2 groups) with attention TP inside each: a group count that is
    neither 1 nor T, declared by the layout itself (not taken from the deployment)."""

    name = "toypairs"
    description = "toy: T/2 owner groups of two ranks, attention TP inside each"
    order = 51
    group_rule = "one"  # NOTE: overridden by owner_groups below; "given" would take a deployment's count

    def owner_groups(self, ranks, groups=None):
        return max(ranks // 2, 1)


@pytest.fixture()
def toys():
    att_base._REGISTRY.register(ToyWindowMQA)
    layout_base.register_attention_layout(ToyOwners)
    layout_base.register_attention_layout(ToyPairs)
    yield
    att_base._REGISTRY._entries.pop(ToyWindowMQA.kind, None)
    layout_base._ATTN._entries.pop(ToyOwners.name, None)
    layout_base._ATTN._entries.pop(ToyPairs.name, None)


@pytest.fixture()
def toy_config(tmp_path):
    return write_config(tmp_path, {**GQA_CONFIG, "toy_window_mqa": True, "num_hidden_layers": 4})


def test_the_toy_variant_is_claimed_and_priced_by_every_layout(toys, toy_config):
    m = planner.load_model(str(toy_config))
    assert m.attention.kind == "toy_window_mqa" and "toyown" in planner.ATTN_LAYOUTS
    hw = planner.load_hardware("h200")
    load = planner.DecodeLoad.equal(16, 4096)
    # every context token past the window costs nothing: stored = 4 layers × (256 × 256 B) + state 4 KiB
    per_request = 4 * (256 * 2 * 64 * 2 + 1024 * 4)
    for attn in ("tp", "dp", "dop", "toyown"):
        d = planner.make_deployment(m, hw, attn=attn, moe="tp", gpus=8)
        c = planner.step_cost(d, load)
        assert np.all(np.isfinite(c.floor_max_s)) and c.feasible.all()
        owned = 16 if attn == "tp" else 2  # TP keeps every request on every rank (one KV head)
        assert c.kv_resident_bytes[0] + c.state_resident_bytes[0] == pytest.approx(owned * per_request)
    toy = planner.step_cost(planner.make_deployment(m, hw, attn="toyown", moe="tp", gpus=8), load)
    dp = planner.step_cost(planner.make_deployment(m, hw, attn="dp", moe="tp", gpus=8), load)
    assert toy.floor_max_s == pytest.approx(dp.floor_max_s)
    for attn in ("cp",):  # a window-and-state variant is token-splittable; DCP refuses windows (vLLM)
        planner.make_deployment(m, hw, attn=attn, moe="tp", gpus=8)
    with pytest.raises(planner.SpecError, match="layout dcp cannot run .* toy_window_mqa\\(256\\) layers"):
        planner.make_deployment(m, hw, attn="dcp", moe="tp", gpus=8)


def test_capacity_of_the_toy_variant_walls_on_the_pool(toys, toy_config):
    m = planner.load_model(str(toy_config))
    d = planner.make_deployment(m, planner.load_hardware("h200"), attn="toyown", moe="tp", gpus=8)
    from planner.capacity import capacity

    cap = capacity(d, [1024.0, 1_000_000.0])
    # past the window a request's bytes stop growing: the same concurrency at 1K... and 1M
    assert cap.max_concurrency[0] == cap.max_concurrency[1] > 0
    assert cap.state_bytes_per_request == 4 * 1024 * 4 and cap.binding_memory == ("shared_pool", "shared_pool")


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    return json.loads(out.out)


def test_compare_and_capacity_list_the_toy_layout_through_the_cli(toys, toy_config, capsys):
    d = run(capsys, "compare", "--model", str(toy_config), "--batch", "16", "--context", "4k", "--json")
    assert "toyown" in {x["attn"] for x in d["layouts"]}
    c = run(capsys, "capacity", "--model", str(toy_config), "--context", "32k", "--json")
    assert "toyown" in json.dumps(c)


def test_the_policy_compiles_and_simulate_serves_the_toy_variant(toys, toy_config, capsys):
    from executor.sim import simulate
    from runtime_policy.policy import LayoutPolicy
    from runtime_policy.workloads import make_workload

    m = planner.load_model(str(toy_config))
    d = planner.make_deployment(m, planner.load_hardware("h200"), attn="toyown", moe="tp", gpus=8)
    lp = LayoutPolicy.compile(d)
    assert "toyown" in lp.tables.layouts and lp.tables.info.kv_pool_bytes.max() > 0
    assert lp.tables.topk == 256.0  # the toy's declared knee: its window
    for policy in ("dynamic", "toyown"):
        out = simulate(d, make_workload("chat", 20, seed=1), policy=policy)
        assert out["completed"] == 20 and out["aborted"] == 0
    s = run(capsys, "simulate", "--model", str(toy_config), "--requests", "10", "--json")
    assert s["schema"].startswith("floorfirst.simulate/")


def test_a_layout_of_t_over_two_owner_groups_runs_everywhere(toys):
    """A layout module whose placement has T/2 groups of two ranks (`ToyPairs`) is priced by the
    step model (busiest group: ⌈B/4⌉ requests, MLA's latent on both ranks of a group), sized by the
    engine, compiled into the tables (4 owner groups, share 1), held to the planner's capacity by the
    ledger, and served by the simulator, fixed and dynamic, with no other edit."""
    from executor.sim import simulate
    from planner.capacity import max_concurrency
    from runtime_policy.kv_ledger import ledger_admits
    from runtime_policy.policy import LayoutPolicy, PolicyKnobs
    from runtime_policy.workloads import make_workload

    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    d = planner.make_deployment(m, hw, attn="toypairs", moe="ep", gpus=8)
    pl = d.placement
    assert (pl.owner_groups, pl.group_ranks, pl.weight_split, pl.kv_copies(m.attention)) == (4, 2, 2, 2.0)
    load = planner.DecodeLoad.equal(16, 8192.0)
    per_request = float(m.memory_bytes(np.array([8192.0]), d.kv_dtype)["token"][0])
    kv = planner.step_cost(d, load).kv_resident_bytes[0]
    assert kv == pytest.approx(4 * per_request)  # 16 requests over 4 groups, each whole on both ranks
    lp = LayoutPolicy.compile(d, knobs=PolicyKnobs(max_batch=256), max_prefill_tokens=1024)
    t = lp.tables
    k = t.layouts.index("toypairs")
    assert t.info.owner_groups[k] == 4 and t.info.group_share[k] == pytest.approx(1.0)
    for c in (4097.0, 32769.0):
        want = float(max_concurrency(d, [c])[0])
        assert want - 4 <= ledger_admits(t, k, c) <= want
    for policy in ("toypairs", "dynamic"):
        out = simulate(d, make_workload("chat", 40, seed=2), policy=policy, config=None)
        assert out["completed"] == 40 and out["aborted"] == 0
