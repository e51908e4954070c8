"""A chunk packed from several prompts attends causally within each prompt only (engines run it as
one ragged batch: admission.py `chunk_plan`'s NOTE): the prefix it is priced at gives the pieces'
own query-key pairs, Σ (n_i·c_i + n_i²/2), through the tables' one-prompt formula P·C + P²/2; so a
chunk of many short prompts prices below one prompt of the same tokens, in every registered layout."""

import numpy as np
import pytest

import planner
from runtime_policy.admission import chunk_plan
from runtime_policy.tables import compile_tables, datasheet_model, layout_names


def _pieces(rng, n):
    """n requests at the head of a prefill queue: prompt length, tokens already prefilled, owner rank."""
    ctx = rng.integers(1, 3000, n).astype(float)
    done = np.floor(ctx * rng.random(n) * (rng.random(n) < 0.5))
    return ctx, done, rng.integers(0, 4, n)


@pytest.mark.parametrize("seed", range(20))
def test_the_prefix_of_a_packed_chunk_gives_its_pieces_query_key_pairs(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 9))
    ctx, done, owner = _pieces(rng, n)
    left = (ctx - done).astype(int)
    chunks = [float(rng.integers(1, 4096)) for _ in range(int(rng.integers(1, 4)))]
    prefix, own_rank, own_tok, own_pfx = chunk_plan(chunks, list(range(n)), list(left), list(ctx), list(owner))
    # replay the queue: each step's pieces (tokens, prefix, owner)
    rem, d, q = list(left), list(done), 0
    for j, need in enumerate(chunks):
        pieces = []
        while need > 0 and q < n:
            take = min(need, rem[q])
            pieces.append((take, d[q], owner[q]))
            need -= take
            rem[q] -= take
            d[q] += take
            if rem[q] <= 0:
                q += 1
        p = chunks[j]
        pairs = sum(t * c + t * t / 2 for t, c, _ in pieces)
        took = sum(t for t, _, _ in pieces)
        # the tables price P·C + P²/2 for the step's tokens: P the chunk, C the prefix returned
        assert p * prefix[j] + took * took / 2 == pytest.approx(pairs, rel=1e-12, abs=1e-6)
        mine = [(t, c) for t, c, r in pieces if r == own_rank[j]]
        tok = sum(t for t, _ in mine)
        assert tok == own_tok[j]
        if tok:
            assert tok * own_pfx[j] + tok * tok / 2 == pytest.approx(sum(t * c + t * t / 2 for t, c in mine),
                                                                     rel=1e-12, abs=1e-6)


def test_one_request_s_chunk_keeps_its_cached_prefix():
    prefix, _, _, own = chunk_plan([512.0, 512.0], [0, 1], [4000, 10], [5000.0, 10.0], [0, 1])
    assert prefix == [1000.0, 1512.0] and own == prefix


@pytest.fixture(scope="module")
def tables():
    m, hw = planner.load_model("deepseek-v3.2"), planner.load_hardware("h200")
    return compile_tables(planner.make_deployment(m, hw, attn="tp", gpus=8), datasheet_model(), max_batch=16,
                          max_prefill_tokens=4096)


@pytest.mark.parametrize("layout", layout_names())
def test_many_short_prompts_price_below_one_prompt_of_their_tokens(tables, layout):
    lay = tables.layouts.index(layout)
    if tables.info.kv_pool_bytes[lay] <= 0:
        pytest.skip(f"{layout} can't run this model")
    secs = []
    for k in (1, 2, 8, 32):  # 4,096 tokens as k fresh prompts
        n = 4096 // k
        pfx = chunk_plan([4096.0], list(range(k)), [n] * k, [float(n)] * k, [0] * k)[0][0]
        secs.append(float(tables.step_s(lay, 0, np.array([4096.0]), np.array([0.0]), np.array([0.0]),
                                        prefill_context=np.array([pfx]))[0]))
    assert secs[0] > secs[1] > secs[2] > secs[3] > 0


@pytest.mark.parametrize("seed", range(40))
def test_the_loops_prefix_and_rank_equal_the_full_plans(seed):
    """`chunk_plan(..., owner_pieces=False)` (what the serving loop reads: each step's prefix and busiest
    rank) equals the full plan's, bit for bit, ties between ranks included."""
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(1, 12))
    ctx, done, owner = _pieces(rng, n)
    left = (ctx - done).astype(int)
    left[left == 0] = 1
    chunks = [float(rng.choice([1, 64, 256, 1024, 4096, int(rng.integers(1, 9000))])) for _ in range(int(rng.integers(1, 6)))]
    args = (chunks, list(range(n)), left.tolist(), ctx.tolist(), owner.tolist())
    full = chunk_plan(*args)
    lean = chunk_plan(*args, owner_pieces=False)
    assert lean[0] == full[0] and lean[1] == full[1]
    assert all(np.copysign(1.0, a) == np.copysign(1.0, b) for a, b in zip(lean[0], full[0]))


def test_the_loops_busiest_rank_is_the_first_of_equal_ones():
    """Two ranks running equal tokens of a step: the busiest is the first to appear, in either plan."""
    args = ([512.0, 600.0], [0, 1, 2, 3], [256, 256, 300, 300], [256.0, 900.0, 300.0, 300.0], [3, 1, 2, 0])
    full, lean = chunk_plan(*args), chunk_plan(*args, owner_pieces=False)
    assert full[1] == lean[1] == [3, 2] and lean[0] == full[0]
