"""The one step-time formula (runtime_policy/step_time.py): its arithmetic with the numbers written
out, the compiled kernels equal to the formula as written bit for bit (for any number of
resources), and the vectorized table path equal to the kernels."""

import numpy as np
import pytest

from runtime_policy import step_time


def test_the_formula_with_numbers_written_out():
    # resources in planner.TIMED_RESOURCES order (hbm, compute, net bytes, net msgs, host link);
    # S1 = 1,000, S2 = 4,000: terms 1 + 0.5 + 1.0 = 2.5 ms, 3 + 1.0 = 4.0 ms, 0.5 ms, 0.5 ms, and a
    # host tier's 0.4 µs per token of S1 = 0.4 ms; overhead 0.1 + max 4.0 + α 0.5 × (sum 7.9 − max 4.0) = 6.05 ms
    base, c1, c2 = [1e-3, 3e-3, 0.5e-3, 0.5e-3, 0.0], [0.5e-6, 0.0, 0.0, 0.0, 0.4e-6], [0.25e-6, 0.25e-6, 0.0, 0.0, 0.0]
    got = step_time.step_seconds(base, None, 0.0, 0.0, c1, c2, 1000.0, 4000.0, 0.5, 1e-4)
    assert got == pytest.approx(6.05e-3, rel=1e-12)
    # a chunk adds to the first term prefill 1 ms + a 3,000-token prefix, 2,000 below the knee at
    # 1 µs and 1,000 above at 0.5 µs: 2.5 + 3.5 = 6.0 ms, now the max: 0.1 + 6.0 + 0.5 × 5.4 = 8.8 ms
    chunk = [1e-3, 0, 0, 0, 0, 1e-6, 0, 0, 0, 0, 0.5e-6, 0, 0, 0, 0]
    lo, hi = step_time.prefix_split(3000.0, 2000.0)
    assert (lo, hi) == (2000.0, 1000.0)
    got = step_time.step_seconds(base, chunk, lo, hi, c1, c2, 1000.0, 4000.0, 0.5, 1e-4)
    assert got == pytest.approx(8.8e-3, rel=1e-12)
    # an owner layout: the chunk's owner (S = 0, no misses) has max 1 + 3.5 = 4.5 ms against the
    # decode-busiest owner's 4.0 ms, so the step is the chunk owner's: 0.1 + 4.5 + 0.5 × (8.5 − 4.5) = 6.6 ms
    got = step_time.owner_step_seconds(base, chunk, lo, hi, c1, c2, 1000.0, 4000.0, 0.0, 0.0, 0.5, 1e-4)
    assert got == pytest.approx(6.6e-3, rel=1e-12)


@pytest.mark.parametrize("n", [1, 4, 5, 7])
def test_compiled_kernels_equal_the_formula_as_written(n):
    """Generated for n resources (another resource, e.g. a host link, needs no edit); the per-set
    kernels the policy calls equal the one-step references layout by layout, network term included."""
    k = dict(zip(step_time.KERNELS, step_time._compile_kernels(n)))
    ref_step, ref_owner = step_time.step_seconds_reference, step_time.owner_step_seconds_reference
    rng = np.random.default_rng(n)
    net_i = min(step_time.NET_BYTES, n - 1)
    for _ in range(1000):
        row, row_n, c1, c2 = (list(rng.random(n) * 10.0 ** rng.uniform(-6, -2, n)) for _ in range(4))
        chunk = list(rng.standard_normal(3 * n) * 1e-4)
        lo, hi, s1, s2, t1, t2, f = (float(x) for x in rng.random(7) * [1e4, 1e4, 1e5, 1e5, 1e5, 1e5, 1.0])
        a, o = float(rng.random()), float(rng.random() * 1e-4)
        assert k["step_seconds"](row, None, 0.0, 0.0, c1, c2, s1, s2, a, o) == ref_step(row, None, 0.0, 0.0, c1, c2, s1, s2, a, o)
        assert k["step_seconds"](row, chunk, lo, hi, c1, c2, s1, s2, a, o) == ref_step(row, chunk, lo, hi, c1, c2, s1, s2, a, o)
        assert k["owner_step_seconds"](row, chunk, lo, hi, c1, c2, s1, s2, t1, t2, a, o) == \
            ref_owner(row, chunk, lo, hi, c1, c2, s1, s2, t1, t2, a, o)
        blend = step_time.blended_seconds_reference(row, row_n, chunk, lo, hi, c1, c2, s1, s2, f, a, o)
        owner_blend = step_time.owner_blended_seconds_reference(row, row_n, chunk, lo, hi, c1, c2, s1, s2, t1, t2, f, a, o)
        assert k["blended_seconds"](row, row_n, chunk, lo, hi, c1, c2, s1, s2, f, a, o) == blend
        assert k["owner_blended_seconds"](row, row_n, chunk, lo, hi, c1, c2, s1, s2, t1, t2, f, a, o) == owner_blend
        # the all-layout kernels: layout 1 spread, layout 2 an owner layout (index 0 left alone)
        out, net = [0.0] * 3, [0.0] * 3
        rows, rows_n, chunks, c1s, c2s = [None, row, row], [None, row_n, row_n], [None, chunk, chunk], \
            [None, c1, c1], [None, c2, c2]
        u1, u2 = s1 / 3, s2 / 3  # the busiest owner's sums (per layout [L]: busy s1, s2, chunk owner's s1, s2)
        k["decode_steps"]((1,), (2,), rows, c1s, c2s, s1, s2, [None, None, (u1, u2, 0.0, 0.0)], a, o, out, net)
        assert out[1] == ref_step(row, None, 0.0, 0.0, c1, c2, s1, s2, a, o)
        assert out[2] == ref_step(row, None, 0.0, 0.0, c1, c2, u1, u2, a, o)
        assert net[1] == row[net_i] + s1 * c1[net_i] + s2 * c2[net_i] and out[0] == net[0] == 0.0
        assert net[2] == row[net_i] + u1 * c1[net_i] + u2 * c2[net_i]
        k["blended_steps"]((1,), (2,), rows, rows_n, chunks, lo, hi, c1s, c2s, s1, s2, [None, None, (s1, s2, t1, t2)],
                           f, a, o, out, net)
        assert out[1] == blend and out[2] == owner_blend


def test_the_tables_vectorized_steps_equal_the_kernels(dsv32):
    """StepTimeTable.step_s (numpy over a run's steps) and step_seconds (one step in floats) are
    the same formula: equal bit for bit, with and without chunks, spread and owner layouts."""
    _, pol = dsv32
    t = pol.tables
    rng = np.random.default_rng(0)
    for layout in range(len(t.layouts)):
        c1, c2 = t.c1_s[layout].tolist(), t.c2_s[layout].tolist()
        for _ in range(50):
            b, p = int(rng.integers(0, 500)), int(rng.choice([0, 1, 700, 2048]))
            s1, s2, c = (float(x) for x in rng.integers(0, 10**6, 3))
            crow = t.chunk_rows_s[p, layout].tolist()
            row = t.base_s[min(b + p, t.max_tokens), layout].tolist()
            lo, hi = step_time.prefix_split(c, t.prefix_knee_tokens)
            want = t.step_s(layout, b, np.array([float(p)]), np.array([s1]), np.array([s2]),
                            prefill_context=np.array([c]))[0]
            got = step_time.step_seconds(row, crow if p else None, lo, hi, c1, c2, s1, s2, t.alpha, t.overhead_s)
            assert got == want
            if t.info.owner_groups[layout] > 1 and p:
                own_p = int(rng.integers(1, p + 1))
                s1c, s2c = s1 / 3, s2 / 3
                co = (np.array([float(own_p)]), np.array([c]), np.array([s1c]), np.array([s2c]))
                want = t.step_s(layout, b, np.array([float(p)]), np.array([s1]), np.array([s2]), chunk_owner=co)[0]
                got = step_time.owner_step_seconds(row, t.chunk_rows_s[own_p, layout].tolist(), lo, hi, c1, c2, s1,
                                                   s2, s1c, s2c, t.alpha, t.overhead_s)
                assert got == want
