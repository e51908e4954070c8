"""The torch executor's serving pieces that need no process group: what it refuses, the capacity
it gives the policy (numbers written out), measured step times put into a table."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import tiny_dims  # noqa: E402
from executor.torch_executor.layers import make_layer_weights  # noqa: E402
from executor.torch_executor.serve import torch_tables  # noqa: E402
from executor.torch_executor.serving import check_runnable, with_step_times  # noqa: E402
from planner.errors import SpecError  # noqa: E402
from planner.hardware.spec import load_hardware  # noqa: E402


def test_refuses_a_layout_it_cannot_run_by_name_in_one_line():
    with pytest.raises(SpecError) as exc:
        check_runnable("dcp")
    msg = str(exc.value)
    assert "'dcp'" in msg and "tp, cp, dp, dop" in msg and "\n" not in msg
    assert check_runnable("dop") == "dop"


def test_head_params_are_what_the_layers_hold():
    dims = tiny_dims(num_heads=8)
    lw = make_layer_weights(dims, 0, 1, 0, dims.num_heads, 0, 1, "cpu", torch.float32)
    # 8 heads × ((16 + 8)·32 + 16·32 + 32·16 + 16·64) = 8 × 2,816 = 22,528
    assert dims.head_params() == 22_528 == lw.heads.nbytes() // 4


def test_the_policy_sees_the_executors_pages_and_weight_slots():
    """T = 2, 100 slots of 4 tokens: one slot takes padded writes; CP and DP-attention replicate the
    heads, 2 layers × 22,528 params × 4 B = 180,224 B, of which each rank lacks half (90,112 B) =
    ⌈90,112 / 1,280⌉ = 71 slots of 2 layers × 4 tokens × 40 × 4 B. Pools, in the tables' units:
    TP and DOP 99 pages, CP and DP 99 − 71 = 28 pages (× 4 tokens × the table's bytes per token);
    DPTP at T = 2 is 2 groups of one rank, DP's placement: 28 pages too (T = 4, G = 2:
    tests/executor/test_placement_kind.py); DCP, whose placement the executor has no attention for,
    no pool (−1 B: the policy never picks it)."""
    dims = tiny_dims(num_heads=8)
    t = torch_tables(dims, load_hardware("h200"), 2, 100)
    page = 4 * t.kv_bytes_per_token
    pools = dict(zip(t.layouts, t.info.kv_pool_bytes / page))
    assert t.info.kv_pool_bytes[t.layouts.index("dcp")] == -1.0
    runs = {"tp": 99.0, "cp": 28.0, "dp": 28.0, "dop": 99.0, "dptp": 28.0}  # any other: no attention here
    assert pools == {n: runs.get(n, -1.0 / page) for n in t.layouts}
    assert {n: w for n, w in zip(t.layouts, t.info.weights_bytes / page) if n in runs} == \
        {"tp": 0.0, "cp": 71.0, "dp": 71.0, "dop": 0.0, "dptp": 71.0}
    assert t.memory_budget_bytes == 99 * page and t.page_tokens == 4


def test_measured_step_times_replace_a_layouts_table():
    t = torch_tables(tiny_dims(num_heads=8), load_hardware("h200"), 2, 100)
    m = with_step_times(t, {"tp": (1e-3, 2e-5, 1e-7)})
    tp, cp = t.layouts.index("tp"), t.layouts.index("cp")
    # 10 decodes over Σ context 500: 1 ms + 10 × 20 µs + 500 × 0.1 µs = 1.25 ms
    got = m.step_s(tp, 10, np.zeros(1), np.array([500.0]), np.array([500.0]))[0]
    assert got == pytest.approx(1.25e-3, rel=1e-12)
    np.testing.assert_array_equal(m.step_s(cp, 10, np.zeros(1), np.array([500.0]), np.array([500.0])),
                                  t.step_s(cp, 10, np.zeros(1), np.array([500.0]), np.array([500.0])))
