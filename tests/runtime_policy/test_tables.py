"""What the runtime reads from each registered layout: its placement (planner/layouts/placement.py)
agrees with the planner's own share of a group's KV (conformance, over every layout in the
registry), and the tables take a layout's KV share and owner groups from those, not from its name."""

import numpy as np
import pytest

import planner
from planner.layouts import attention_layouts
from runtime_policy.tables import group_share, layout_names

T = 8


@pytest.mark.parametrize("name", sorted(attention_layouts()))
@pytest.mark.parametrize("model", ["deepseek-v3.2", "llama-3.1-70b"])
def test_placement_matches_the_planners_share(name, model):
    """A rank of an owner group stores 1/(token split × head split) of its group's KV: a group of one
    rank, or MLA's latent over a group's ranks, 1; CP/DCP 1/T; GQA with enough KV heads 1/heads."""
    m = planner.load_model(model)
    dep = planner.make_deployment(m, planner.load_hardware("h200"), attn=name, moe="ep" if m.mlp.kind == "moe" else "tp",
                                  gpus=T)
    pl = dep.placement
    assert pl.ranks == T and pl.owner_groups * pl.group_ranks == T
    want = 1.0 / (pl.token_split * pl.head_split(m.attention))
    assert group_share(dep) == pytest.approx(want)
    if pl.owner_groups == T:
        assert group_share(dep) == pytest.approx(1.0)


def test_tables_follow_the_registry_and_the_placements(dsv32):
    _, pol = dsv32
    info = pol.tables.info
    assert pol.tables.layouts == layout_names()
    # DS-V3.2 (MLA): TP keeps every request's KV on every rank, CP and DCP 1/8 of it (tokens
    # interleaved over ranks); DP-attention and DOP own whole requests in groups of one rank; DP
    # attention with attention TP keeps its group's requests whole on each of its ranks (one latent)
    shares = dict(zip(pol.tables.layouts, info.group_share.tolist()))
    assert shares == {"tp": 1.0, "cp": 0.125, "dcp": 0.125, "dp": 1.0, "dop": 1.0, "dptp": 1.0}
    groups = dict(zip(pol.tables.layouts, info.owner_groups.tolist()))
    assert groups == {"tp": 1, "cp": 1, "dcp": 1, "dp": 8, "dop": 8, "dptp": 2}
    assert tuple(p.layout for p in info.placements) == pol.tables.layouts
    assert np.all(np.isfinite(pol.tables.base_s[1:]))
