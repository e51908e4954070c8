"""The step-time formula, in one place: a step's per-resource seconds from the compiled tables
(runtime_policy/tables.py), and the step time those give.

For layout l and timed resource r (R = len(planner.TIMED_RESOURCES)), a step of B decodes and a
prefill chunk of P tokens attending to a cached prefix of C tokens costs

    t_r = base_r[B + P] + chunk_r(P, C) + c1_r·S1 + c2_r·S2
    chunk_r(P, C) = prefill_r[P] + (min(C, knee)·lo_r[P] + (C − min(C, knee))·hi_r[P])   (0 without a chunk)
    step = overhead + max_r t_r + α·(Σ_r t_r − max_r t_r)

(a step with a chunk: `overhead` is the table's chunk-step overhead, which adds the fixed host cost of
a step no full CUDA graph runs, tables.StepTimeTable.chunk_overhead_s; callers pass it)

(S1 = Σ min(L, top-k), S2 = Σ L over the requests the busiest rank reads; tables.py says what each
table holds). Owner layouts run a chunk on its requests' owner, so a step with a chunk is the slower
candidate of two ranks — the decode-busiest owner (no chunk terms) and the owner running most of
the chunk (its chunk, its own S) — the one with the larger max term, the chunk's owner on a tie.
Where the table's α_h < 1 (`host_overlap_alpha`, fitted from rows of an engine whose chunk steps
launch eagerly), a step with a chunk takes overhead + max(E, D) + α_h·min(E, D) instead, E its eager
host seconds and D the formula above with overhead 0 (`host_overlap_s`).

Two evaluations of the one formula: `step_seconds` in plain Python floats (the policy's `decide`
and the simulator's short runs: a numpy call costs ~1 µs to dispatch, more than the arithmetic of
a row; compiled for R from `step_seconds_reference`, see `_unrolled_kernels`), and `combine` on
numpy arrays vectorized over a run's steps (`StepTimeTable.step_s`). All add in the same order —
base, then chunk, then c1·S1, then c2·S2; the terms' sum left to right — so they agree bit for bit
(tests/runtime_policy/test_step_time.py).

Does not: know about requests, layouts' names or batches (tables.py, policy.py, executor/sim.py).
"""

from __future__ import annotations

import numpy as np

from planner.resources.vector import TIMED_RESOURCES

NO_TOPK = 1e18  # top-k of attention that is not sparse: min(L, top-k) = L
NET_BYTES = TIMED_RESOURCES.index("network_bytes")
_NEG_INF = float("-inf")


def prefix_split(prefix_tokens: float | None, knee_tokens: float) -> tuple[float, float]:
    """(lo, hi): a chunk's cached prefix below and above the knee (None: no prefix, 0 and 0)."""
    if prefix_tokens is None:
        return 0.0, 0.0
    lo = knee_tokens if knee_tokens < prefix_tokens else prefix_tokens  # = min(C, knee)
    return lo, prefix_tokens - lo


def step_seconds_reference(base_row, chunk_row, lo: float, hi: float, c1_row, c2_row, s1: float, s2: float,
                           alpha: float, overhead_s: float) -> float:
    """Seconds of one step, the formula as written: `base_row` [R] the base table's row for its
    B + P tokens; `chunk_row` [3R] the table's chunk row for its chunk size (prefill, prefix slope
    below the knee, above it), or None (no chunk), with `lo`/`hi` its prefix below and above the
    knee (`prefix_split`); `c1_row`/`c2_row` [R] the per-token coefficients; `s1`/`s2` the step's
    sums (module docstring). `step_seconds` is this compiled for the table's R
    (`_unrolled_kernels`)."""
    mx, tot = _NEG_INF, 0.0
    n = len(base_row)
    for r, (b, k1, k2) in enumerate(zip(base_row, c1_row, c2_row)):
        if chunk_row is not None:
            b = b + (chunk_row[r] + (lo * chunk_row[n + r] + hi * chunk_row[2 * n + r]))
        v = b + s1 * k1 + s2 * k2
        tot += v
        if v > mx:
            mx = v
    return overhead_s + mx + alpha * (tot - mx)


def owner_step_seconds_reference(base_row, chunk_row, lo: float, hi: float, c1_row, c2_row, busy_s1: float,
                                 busy_s2: float, own_s1: float, own_s2: float, alpha: float, overhead_s: float) -> float:
    """An owner layout's step with a chunk: the slower of the decode-busiest owner (S = busy_*, no
    chunk) and the chunk's owner (S = own_*, with the chunk), by the larger max term (a tie: the
    chunk's owner)."""
    def terms(chunk, s1, s2):
        out = []
        for r in range(len(base_row)):
            x = base_row[r]
            if chunk is not None:
                x = x + (chunk[r] + (lo * chunk[len(base_row) + r] + hi * chunk[2 * len(base_row) + r]))
            out.append(x + s1 * c1_row[r] + s2 * c2_row[r])
        return out

    busy, own = terms(None, busy_s1, busy_s2), terms(chunk_row, own_s1, own_s2)
    pick = own if max(own) >= max(busy) else busy
    mx, tot = max(pick), 0.0
    for v in pick:
        tot += v
    return overhead_s + mx + alpha * (tot - mx)


def blended_seconds_reference(base_row, chunk_base_row, chunk_row, lo: float, hi: float, c1_row, c2_row, s1: float,
                              s2: float, f: float, alpha: float, overhead_s: float) -> float:
    """(1 − f) × a decode step (`base_row`) + f × the same step with a chunk (`chunk_base_row`, the
    base row for B + P tokens, and `chunk_row`): the policy's prefill blend (pricing.py)."""
    return ((1.0 - f) * step_seconds_reference(base_row, None, 0.0, 0.0, c1_row, c2_row, s1, s2, alpha, overhead_s)
            + f * step_seconds_reference(chunk_base_row, chunk_row, lo, hi, c1_row, c2_row, s1, s2, alpha, overhead_s))


def owner_blended_seconds_reference(base_row, chunk_base_row, chunk_row, lo: float, hi: float, c1_row, c2_row,
                                    busy_s1: float, busy_s2: float, own_s1: float, own_s2: float, f: float,
                                    alpha: float, overhead_s: float) -> float:
    """The prefill blend of an owner layout: (1 − f) × the decode-busiest owner's decode step + f ×
    `owner_step_seconds_reference` of the step with the chunk."""
    return ((1.0 - f) * step_seconds_reference(base_row, None, 0.0, 0.0, c1_row, c2_row, busy_s1, busy_s2, alpha,
                                               overhead_s)
            + f * owner_step_seconds_reference(chunk_base_row, chunk_row, lo, hi, c1_row, c2_row, busy_s1, busy_s2,
                                               own_s1, own_s2, alpha, overhead_s))


def _kernel_source(n: int, net_index: int) -> str:
    """Python source of the formula's kernels for n resources, their loops over resources unrolled
    (the same operations in the same order as the `*_reference` functions, so equal bit for bit;
    tests/runtime_policy/test_step_time.py). A blend reuses each resource's decode products
    (s·k is the same value either way, so the same sums). One step: `step_seconds`,
    `owner_step_seconds`, `blended_seconds`, `owner_blended_seconds`; every layout of a set at
    once (the policy's pricing: one call for every layout, not one per layout), writing `out[i]`
    and the decode step's network-bytes term (term `net_index`) `net[i]`: `decode_steps` (spread
    layouts at S, owner layouts at their busiest owner's) and `blended_steps` (the prefill blend,
    owner layouts' chunk on the chunk's owner); in their owned loops each layout's busiest and
    chunk-owner sums (its own owner groups') are one tuple of an [L] sequence, `owner_sums[i]` =
    (busy_s1, busy_s2, own_s1, own_s2), unpacked once (NOTE: 20 subscripts each were ~7 % of the
    kernel)."""
    r = range(n)

    def unpack(names: str, row: str) -> str:
        return f"{', '.join(f'{x}{i}' for x in names for i in r)}, = {row}\n"

    def products(a: str, c: str, x: str, y: str) -> str:
        return "".join(f"{x}{i}, {y}{i} = {a} * k{i}, {c} * g{i}\n" for i in r)

    def terms(t: str, base: str, x: str, y: str, chunked: bool = False) -> str:
        add = (lambda i: f"{base}{i} + (p{i} + (lo * l{i} + hi * h{i}))") if chunked else (lambda i: f"{base}{i}")
        return "".join(f"{t}{i} = {add(i)} + {x}{i} + {y}{i}\n" for i in r)

    def finish(t: str, mx: str) -> str:
        """`mx` = the first largest term (max()'s semantics); `{t}_s` = the step's seconds."""
        out = f"{mx} = {t}0\n" + "".join(f"if {t}{i} > {mx}:\n    {mx} = {t}{i}\n" for i in r[1:])
        return out + f"{t}_s = overhead_s + {mx} + alpha * ({' + '.join(f'{t}{i}' for i in r)} - {mx})\n"

    def fn(header: str, body: str, loop_rows: str | None = None, loops: tuple = ()) -> str:
        """A def around `body`; with `loop_rows`, the body runs for every i in idx after unpacking
        those rows (name=expression pairs); `loops`: several such loops, (index set, body) each."""
        if loop_rows is None:
            return header + "".join("    " + line + "\n" for line in body.splitlines())
        pre = "".join(unpack(x, f"{row}[i]") for x, row in loop_rows)
        return header + "".join(f"    for i in {idx}:\n" + "".join("        " + line + "\n"
                                                               for line in (pre + part).splitlines())
                                for idx, part in (loops or (("idx", body),)))

    owner_pick = "if mu < mv:\n    u_s = v_s\n"
    decode = products("s1", "s2", "x", "y") + terms("t", "b", "x", "y") + finish("t", "mt")
    blend = (unpack("plh", "chunk_row") + products("s1", "s2", "x", "y") + terms("t", "b", "x", "y")
             + terms("u", "n", "x", "y", chunked=True) + finish("t", "mt") + finish("u", "mu"))
    owner = (unpack("plh", "chunk_row") + products("busy_s1", "busy_s2", "x", "y")
             + products("own_s1", "own_s2", "xo", "yo"))
    owner_step = owner + terms("v", "b", "x", "y") + terms("u", "b", "xo", "yo", True) + finish("u", "mu") \
        + finish("v", "mv") + owner_pick
    owner_blend = (owner + terms("t", "b", "x", "y") + terms("v", "n", "x", "y") + terms("u", "n", "xo", "yo", True)
                   + finish("t", "mt") + finish("u", "mu") + finish("v", "mv") + owner_pick)
    one = unpack("b", "base_row") + unpack("k", "c1_row") + unpack("g", "c2_row")
    two = one + unpack("n", "chunk_base_row")
    rows = [("b", "rows"), ("k", "c1s"), ("g", "c2s")]
    sums = "busy_s1, busy_s2, own_s1, own_s2, = owner_sums[i]\n"
    net = f"net[i] = t{net_index}\n"
    chunk_body = (unpack("plh", "chunk_row") + products("s1", "s2", "x", "y")
                  + terms("t", "b", "x", "y", chunked=True) + finish("t", "mt"))
    return "\n\n".join((
        fn("def step_seconds(base_row, chunk_row, lo, hi, c1_row, c2_row, s1, s2, alpha, overhead_s):\n",
           one + "if chunk_row is None:\n" + "".join("    " + x + "\n" for x in decode.splitlines())
           + "    return t_s\n" + chunk_body + "return t_s"),
        fn("def owner_step_seconds(base_row, chunk_row, lo, hi, c1_row, c2_row, busy_s1, busy_s2, own_s1, own_s2, "
           "alpha, overhead_s):\n", one + owner_step + "return u_s"),
        fn("def blended_seconds(base_row, chunk_base_row, chunk_row, lo, hi, c1_row, c2_row, s1, s2, f, alpha, "
           "overhead_s):\n", two + blend + "return (1.0 - f) * t_s + f * u_s"),
        fn("def owner_blended_seconds(base_row, chunk_base_row, chunk_row, lo, hi, c1_row, c2_row, busy_s1, busy_s2, "
           "own_s1, own_s2, f, alpha, overhead_s):\n", two + owner_blend + "return (1.0 - f) * t_s + f * u_s"),
        fn("def decode_steps(spread, owned, rows, c1s, c2s, s1, s2, owner_sums, alpha, overhead_s, out, net):\n",
           "", rows, (("spread", decode + "out[i] = t_s\n" + net),
                      ("owned", sums + decode.replace("= s1 * k", "= busy_s1 * k").replace(", s2 * g", ", busy_s2 * g")
                       + "out[i] = t_s\n" + net))),
        fn("def blended_steps(spread, owned, rows, chunk_base_rows, chunk_rows, lo, hi, c1s, c2s, s1, s2, owner_sums, "
           "f, alpha, overhead_s, out, net):\n", "", rows + [("n", "chunk_base_rows")],
           (("spread", blend.replace("= chunk_row\n", "= chunk_rows[i]\n") + "out[i] = (1.0 - f) * t_s + f * u_s\n"
             + net),
            ("owned", sums + owner_blend.replace("= chunk_row\n", "= chunk_rows[i]\n")
             + "out[i] = (1.0 - f) * t_s + f * u_s\n" + net))),
    )) + "\n"


KERNELS = ("step_seconds", "owner_step_seconds", "blended_seconds", "owner_blended_seconds", "decode_steps",
           "blended_steps")


def _compile_kernels(n: int) -> tuple:
    """The kernels (`KERNELS`) for n resources, compiled from `_kernel_source(n)`, and the source.
    NOTE: generated, not written out by hand, so R stays whatever planner.TIMED_RESOURCES says and
    the formula is written once (the references above); unrolled, and the policy's per-layout loop
    inside one call per layout set, because per-run Python work bounds the simulator: with a loop
    over resources and a kernel call per layout, decide and the simulator executed ~50 % more
    machine instructions per run on the chat workload than the hand-unrolled code they replace
    (valgrind: 274K against 183K per run), ~80k decode steps/s where the target is 100k."""
    src = _kernel_source(n, min(NET_BYTES, n - 1))
    namespace: dict = {}
    exec(compile(src, f"<step_time kernels, {n} resources>", "exec"), namespace)  # noqa: S102
    return tuple(namespace[k] for k in KERNELS) + (src,)


(step_seconds, owner_step_seconds, blended_seconds, owner_blended_seconds, decode_steps, blended_steps,
 KERNEL_SOURCE) = _compile_kernels(len(TIMED_RESOURCES))


def host_overlap_s(device_s: float, eager_s: float, host_alpha: float, overhead_s: float) -> float:
    """A step with a chunk whose eager host time `eager_s` overlaps its device time `device_s` (the
    formula above with overhead 0): overhead + max(E, D) + α_h·min(E, D) (calibration/artifact.py,
    `host_overlap_alpha`; tables.StepTimeTable.host_overlap). `host_overlap_np` vectorized, and the
    layout kernels inline, in the same operations and order."""
    if eager_s > device_s:
        return overhead_s + eager_s + host_alpha * device_s
    return overhead_s + device_s + host_alpha * eager_s


def host_overlap_np(device_s: np.ndarray, eager_s: float, host_alpha: float, overhead_s: float) -> np.ndarray:
    """`host_overlap_s` over an array of device times."""
    return np.where(eager_s > device_s, overhead_s + eager_s + host_alpha * device_s,
                    overhead_s + device_s + host_alpha * eager_s)


def combine(terms: np.ndarray, alpha: float, overhead_s: float) -> np.ndarray:
    """Step seconds from per-resource seconds on the last axis (`step_seconds` vectorized)."""
    mx = terms.max(axis=-1)
    return overhead_s + mx + alpha * (terms.sum(axis=-1) - mx)


def chunk_terms_np(prefill_s: np.ndarray, lo_s: np.ndarray, hi_s: np.ndarray, prefix_tokens: np.ndarray | None,
                   knee_tokens: float) -> np.ndarray:
    """[k, R] a chunk's terms (prefill + prefix below and above the knee) of k steps: the tables' rows [k, R] for each step's chunk size, and each
    step's prefix [k] (None: 0)."""
    if prefix_tokens is None:
        return prefill_s
    c = np.asarray(prefix_tokens, dtype=np.float64)
    lo = np.minimum(c, knee_tokens)
    return prefill_s + (lo[:, None] * lo_s + (c - lo)[:, None] * hi_s)


def decode_terms_np(base: np.ndarray, chunk: np.ndarray | None, c1_row: np.ndarray, c2_row: np.ndarray,
                    s1: np.ndarray, s2: np.ndarray) -> np.ndarray:
    """[k, R] per-resource seconds of k steps (`step_seconds`'s terms vectorized): base [k, R],
    chunk [k, R] or None, coefficient rows [R], sums [k]."""
    t = base if chunk is None else base + chunk
    return t + s1[:, None] * c1_row + s2[:, None] * c2_row


def owner_choice_np(busy: np.ndarray, own: np.ndarray, has_chunk: np.ndarray) -> np.ndarray:
    """[k, R] `owner_step_seconds`'s choice vectorized: the chunk owner's terms where the step has
    a chunk and their max is at least the decode-busiest owner's."""
    use_own = has_chunk & (own.max(axis=-1) >= busy.max(axis=-1))
    return np.where(use_own[:, None], own, busy)


class LayoutKernels:
    """The policy's two per-set kernels (`decode_steps`, `blended_steps`) compiled for one table's
    layouts, each layout's per-token coefficients written into the code as constants, and the
    terms a coefficient or chunk column that is zero in every row of the table can't change left
    out (`layout_kernels`). Called with a bit mask of the layouts to price (bit i: layout i);
    writes `out[i]` and the decode step's network term `net[i]` of those, as the generic kernels
    do; a layout of several owner groups derives its busiest and lightest group's sums from
    `own[i]` and `own_min[i]` (KV tokens) itself, as `pricing.StepPricer` did before calling them.

    `chunk_cols[i]`: the columns of a [3R] chunk row that layout i's blend reads, in order (the
    pricer caches each layout's chunk row cut to them). Equal bit for bit to `decode_steps` /
    `blended_steps` for finite s1, s2, lo, hi (tests/runtime_policy/test_layout_kernels.py)."""

    def __init__(self, decode, blend, chunk_cols: tuple, source: str):
        self.decode_steps, self.blended_steps, self.chunk_cols, self.source = decode, blend, chunk_cols, source


def _negative_zero_layouts(a: np.ndarray) -> np.ndarray:
    """[L] whether any entry of `a` [N, L, X] in each layout is −0.0 (such a layout keeps every
    term: x + 0.0 == x for every other float, so a left-out s·0 or lo·0 changes no bit)."""
    return ((a == 0) & np.signbit(a)).any(axis=(0, 2))


def layout_kernels(base_s: np.ndarray, chunk_rows_s: np.ndarray, c1_s: np.ndarray, c2_s: np.ndarray,
                   owner: list[bool], alpha: float, overhead_s: float,
                   chunk_overhead_s: list[float] | None = None, host_overlap: tuple[list[float], float] | None = None
                   ) -> LayoutKernels:
    """`LayoutKernels` of one table (base_s [N, L, R], chunk_rows_s [P, L, 3R], c1_s / c2_s [L, R],
    `owner[i]`: layout i has several owner groups; `chunk_overhead_s[i]`: the fixed seconds of layout
    i's step with a chunk, the blend's chunk step — tables.StepTimeTable.chunk_overhead_s; default
    `overhead_s`; `host_overlap` = (each layout's eager host seconds E, α_h): the chunk step is then
    `host_overlap_s` of its device time, overhead `overhead_s`, where E > 0 and α_h < 1).
    NOTE: a term is left out where its coefficient is zero in every row of the table: s1·k with
    k = 0 is ±0.0 for a finite s1, and a table entry plus ±0.0 is that entry (no entry is −0.0,
    `_negative_zero_layouts`, else the layout keeps every term); DS-V3.2's network and host-link columns carry
    no per-token cost, so about half the products and sums go (decide p99 ~22 → ≤ 20 µs)."""
    n_lay, n_res = c1_s.shape
    net_index = min(NET_BYTES, n_res - 1)
    consts: dict[str, float] = {}

    def lit(x: float) -> str:
        x = float(x)
        if np.isfinite(x):
            return repr(x)
        name = f"_c{len(consts)}"
        consts[name] = x
        return name

    over, a = lit(overhead_s), lit(alpha)
    ind = "        "

    def finish(t: str, mx: str, over: str = over, host: tuple[str, str] | None = None) -> str:
        out = f"{mx} = {t}0\n" + "".join(f"if {t}{r} > {mx}:\n    {mx} = {t}{r}\n" for r in range(1, n_res))
        if host is None:
            return out + f"{t}_s = {over} + {mx} + {a} * ({' + '.join(f'{t}{r}' for r in range(n_res))} - {mx})\n"
        e, ah = host  # = host_overlap_s(0.0 + max + α(sum − max), E, α_h, overhead)
        return (out + f"{t}_s = 0.0 + {mx} + {a} * ({' + '.join(f'{t}{r}' for r in range(n_res))} - {mx})\n"
                + f"if {e} > {t}_s:\n    {t}_s = {over} + {e} + {ah} * {t}_s\n"
                + f"else:\n    {t}_s = {over} + {t}_s + {ah} * {e}\n")

    decode_src, blend_src, cols_all = [], [], []
    keeps_all = _negative_zero_layouts(base_s) | _negative_zero_layouts(chunk_rows_s)
    zero_cols = (chunk_rows_s == 0).all(axis=0)  # [L, 3R]
    for i in range(n_lay):
        fold = not keeps_all[i]
        oc = over if chunk_overhead_s is None else lit(chunk_overhead_s[i])  # the chunk step's fixed seconds
        hv = None
        if host_overlap is not None and host_overlap[1] < 1.0 and host_overlap[0][i] > 0:
            oc, hv = over, (lit(host_overlap[0][i]), lit(host_overlap[1]))  # overlapped: E apart from the overhead
        k, g = c1_s[i].tolist(), c2_s[i].tolist()
        nz_k = [r for r in range(n_res) if not (fold and k[r] == 0)]
        nz_g = [r for r in range(n_res) if not (fold and g[r] == 0)]
        col_used = [not (fold and bool(zero_cols[i, c])) for c in range(3 * n_res)]
        cols = tuple(c for c in range(3 * n_res) if col_used[c])
        cols_all.append(cols)
        names = {c: ("p", "l", "h")[c // n_res] + str(c % n_res) for c in range(3 * n_res)}

        def products(sa: str, sb: str, x: str, y: str) -> str:
            return ("".join(f"{x}{r} = {sa} * {lit(k[r])}\n" for r in nz_k)
                    + "".join(f"{y}{r} = {sb} * {lit(g[r])}\n" for r in nz_g))

        def terms(t: str, base: str, x: str, y: str, chunked: bool = False) -> str:
            lines = []
            for r in range(n_res):
                e = f"{base}{r}"
                if chunked:
                    parts = [f"{w} * {names[c]}" for w, c in (("lo", n_res + r), ("hi", 2 * n_res + r))
                             if col_used[c]]
                    inner = " + ".join(parts)
                    if col_used[r]:
                        e += f" + (p{r} + ({inner}))" if inner else f" + p{r}"
                    elif inner:
                        e += f" + ({inner})"
                e += (f" + {x}{r}" if r in nz_k else "") + (f" + {y}{r}" if r in nz_g else "")
                lines.append(f"{t}{r} = {e}\n")
            return "".join(lines)

        unpack_b = f"{', '.join(f'b{r}' for r in range(n_res))}, = rows[{i}]\n"
        unpack_n = f"{', '.join(f'n{r}' for r in range(n_res))}, = rows_n[{i}]\n"
        unpack_c = f"{', '.join(names[c] for c in cols)}, = crows[{i}]\n" if cols else ""
        tail = f"net[{i}] = t{net_index}\n"
        if owner[i]:
            sums = (f"gb, gl = own[{i}], own_min[{i}]\nfb = fl = 0.0\nif s2 > 0:\n    fb, fl = gb / s2, gl / s2\n"
                    "    if fb > 1.0:\n        fb = 1.0\n    if fl > 1.0:\n        fl = 1.0\n")
            dec = (unpack_b + sums + "bs1, bs2 = s1 * fb, s2 * fb\n" + products("bs1", "bs2", "x", "y")
                   + terms("t", "b", "x", "y") + finish("t", "mt") + f"out[{i}] = t_s\n" + tail)
            bl = (unpack_b + unpack_n + unpack_c + sums + "bs1, bs2 = s1 * fb, s2 * fb\nos1, os2 = s1 * fl, s2 * fl\n"
                  + products("bs1", "bs2", "x", "y") + products("os1", "os2", "xo", "yo")
                  + terms("t", "b", "x", "y") + terms("v", "n", "x", "y") + terms("u", "n", "xo", "yo", True)
                  + finish("t", "mt") + finish("u", "mu", oc, hv) + finish("v", "mv", oc, hv) + "if mu < mv:\n    u_s = v_s\n"
                  + f"out[{i}] = (1.0 - f) * t_s + f * u_s\n" + tail)
        else:
            dec = (unpack_b + products("s1", "s2", "x", "y") + terms("t", "b", "x", "y") + finish("t", "mt")
                   + f"out[{i}] = t_s\n" + tail)
            bl = (unpack_b + unpack_n + unpack_c + products("s1", "s2", "x", "y") + terms("t", "b", "x", "y")
                  + terms("u", "n", "x", "y", True) + finish("t", "mt") + finish("u", "mu", oc, hv)
                  + f"out[{i}] = (1.0 - f) * t_s + f * u_s\n" + tail)
        for src, body in ((decode_src, dec), (blend_src, bl)):
            src.append(f"    if mask & {1 << i}:  # layout {i}\n" + "".join(ind + x + "\n" for x in body.splitlines()))
    source = ("def decode_steps(mask, rows, s1, s2, own, own_min, out, net):\n" + "".join(decode_src)
              + "    return out\n\n\n"
              + "def blended_steps(mask, rows, rows_n, crows, lo, hi, s1, s2, own, own_min, f, out, net):\n"
              + "".join(blend_src) + "    return out\n")
    namespace: dict = dict(consts)
    exec(compile(source, f"<step_time layout kernels, {n_lay} layouts>", "exec"), namespace)  # noqa: S102
    return LayoutKernels(namespace["decode_steps"], namespace["blended_steps"], tuple(cols_all), source)
