"""Dead ranks and device failures in the torch executor, fuzzed over which rank fails, when, and
between which layouts (gloo, tiny dims, T = 4, side-group timeout 2 s): every surviving rank knows
within 5 s, a survivor holds its old layout and every request's KV, and a device failure after a
commit is rolled back and served on. `-m fuzz` only (each case spawns four processes); the default
run has one case of each in tests/executor/test_executor_faults.py."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "executor"))

import executor_fault_scenarios as sc  # noqa: E402

from executor.torch_executor import Faults, tiny_dims  # noqa: E402
from executor.torch_executor.dist import spawn_ranks  # noqa: E402

SECONDS = 5.0
# (victim, kill_at, src, dst): every rank dies once, in both phases, across layout pairs
DEAD = [(0, "copying", "cp", "tp"), (1, "probation", "cp", "tp"), (2, "copying", "dp", "cp"),
        (3, "probation", "dop", "tp"), (0, "probation", "dp", "tp"), (3, "copying", "tp", "dp")]


@pytest.mark.fuzz
@pytest.mark.parametrize("victim,kill_at,src,dst", DEAD)
def test_fuzz_a_dead_rank(victim, kill_at, src, dst):
    per_rank = spawn_ranks(sc.dead_rank, 4, kill_at, victim, src, dst, side_timeout_s=sc.SIDE_TIMEOUT_S, may_die=True)
    assert per_rank[victim] is None
    survivors = [r for k, r in enumerate(per_rank) if k != victim]
    for r in survivors:
        assert r["error"] and "\n" not in r["error"] and "a rank left the group" in r["error"], r
        assert r["after_s"] <= SECONDS and r["layout"] == src and r["state"] == "aborted", r
        assert r["kv_intact"] and r["pages_accounted"], r
    print(f"\ndead rank {victim} while {kill_at} ({src} -> {dst}): survivors knew within "
          f"{max(r['after_s'] for r in survivors) * 1e3:.0f} ms")


def device_failures(g) -> dict:
    """A rank raising inside the device work of the step after the commit, each rank in turn."""
    dims = tiny_dims(num_heads=8)
    base = {}
    out = {}
    cases = [(f"device_{k}_{src}_{dst}", src, dst, Faults(fail_device_after_commit_rank=k), 256)
             for k, (src, dst) in enumerate([("cp", "tp"), ("dp", "tp"), ("dop", "dp"), ("tp", "cp")])]
    for src in sorted({c[1] for c in cases}):
        runner = sc._fresh(g, src, dims=dims)
        base[src] = [runner.step().clone() for _ in range(sc.STEPS)]
    for name, src, dst, faults, slots in cases:
        out.update(sc.fault_case(g, name, src, dst, faults, slots, base[src], dims))
    return out


@pytest.mark.fuzz
def test_fuzz_a_device_failure_after_the_commit_on_each_rank():
    per_rank = spawn_ranks(device_failures, 4, side_timeout_s=sc.SIDE_TIMEOUT_S)
    r = per_rank[0]
    names = sorted({k.split("/", 1)[1] for k in r if k.startswith("fault_state/")})
    for name in names:
        src = name.split("_")[2]
        assert r[f"fault_state/{name}"] == "aborted" and r[f"fault_layout/{name}"] == src, name
        assert r[f"fault_err/{name}"] == 0.0 and r[f"fault_kv_prefix_identical/{name}"], name
        assert r[f"fault_slowest_step_s/{name}"] <= SECONDS and r[f"fault_retry/{name}"] == "committed", name
    print("\ndevice failures after a commit, slowest step per case (s):",
          {n: round(r[f"fault_slowest_step_s/{n}"], 2) for n in names})
