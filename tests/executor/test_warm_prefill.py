"""The executor's warm-up chunk before serving (serve.warm_prefill, issue 30): it runs a full prefill
chunk on a request no workload uses and leaves nothing behind — every page back in the pool, no
request held, and the next served request computes as if the warm-up never ran."""

import pytest

torch = pytest.importorskip("torch")

from executor.torch_executor import RankRunner, tiny_dims  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402
from executor.torch_executor.serve import WARMUP_REQUEST, warm_prefill  # noqa: E402


def _warm(g, warm: bool) -> dict:
    r = RankRunner(tiny_dims(num_heads=8), g, "tp", num_slots=256, dtype=torch.float32, seed=3)
    free0 = r.alloc.num_free
    if warm:
        warm_prefill(r, 100)
    after = r.alloc.num_free
    r.begin_prefill(5)
    r.step([(5, 37)], decode=False)
    r.finish_prefill(5)
    x = r.step().clone()
    return {"free": (free0, after), "held": sorted(set(r.seq_lens) | set(r.prefilled)), "x": x}


def test_the_warm_up_chunk_leaves_no_trace():
    cold = spawn_ranks(_warm, 1, False)[0]
    warm = spawn_ranks(_warm, 1, True)[0]
    assert warm["free"][0] == warm["free"][1]  # every page it took is back
    assert WARMUP_REQUEST not in warm["held"] and warm["held"] == cold["held"] == [5]
    assert torch.equal(warm["x"], cold["x"])  # the served request computes as without it
