"""What the runtime reads from each registered layout: its declared KV placement agrees with the
planner's own share of it (conformance, over every layout in the registry), and the tables take a
layout's KV share and owner semantics from those, not from its name."""

import numpy as np
import pytest

import planner
from planner.layouts import attention_layouts
from planner.layouts.base import KV_PLACEMENTS
from runtime_policy.tables import kv_share, layout_names

T = 8


@pytest.mark.parametrize("name", sorted(attention_layouts()))
@pytest.mark.parametrize("model", ["deepseek-v3.2", "llama-3.1-70b"])
def test_declared_kv_placement_matches_the_planners_share(name, model):
    """owner: one rank holds a request whole (share 1 of one request); token_split: 1/T of it;
    every_rank: every token on every rank, whole (MLA) or a head slice of ≥ 1/T (GQA)."""
    lay = attention_layouts()[name]
    assert lay.kv_placement in KV_PLACEMENTS
    m = planner.load_model(model)
    dep = planner.make_deployment(m, planner.load_hardware("h200"), attn=name, moe="ep" if m.mlp.kind == "moe" else "tp",
                                  gpus=T)
    share = kv_share(dep)
    if lay.kv_placement == "owner":
        assert share == pytest.approx(1.0)
    elif lay.kv_placement == "token_split":
        assert share == pytest.approx(1.0 / T)
    else:
        assert 1.0 / T - 1e-12 <= share <= 1.0


def test_tables_follow_the_registry_and_the_declarations(dsv32):
    _, pol = dsv32
    info = pol.tables.info
    assert pol.tables.layouts == layout_names()
    # DS-V3.2 (MLA): TP keeps every request's KV on every rank, CP and DCP 1/8 of it (tokens
    # interleaved over ranks); DP-attention and DOP own whole requests (share 0 by convention: their
    # busiest owner is what counts)
    assert dict(zip(pol.tables.layouts, info.kv_total_share.tolist())) == {"tp": 1.0, "cp": 0.125, "dcp": 0.125,
                                                                          "dp": 0.0, "dop": 0.0}
    assert dict(zip(pol.tables.layouts, info.is_owner.tolist())) == {"tp": False, "cp": False, "dcp": False,
                                                                     "dp": True, "dop": True}
    assert info.kv_placement == tuple(attention_layouts()[n].kv_placement for n in pol.tables.layouts)
    assert np.all(np.isfinite(pol.tables.base_s[1:]))
