"""A CLI call loads numpy's OpenBLAS with one thread (cli/main.py `_one_blas_thread`: its thread
server's start cost ~60-90 ms of a call on a 2-core machine), unless the user set a thread count,
and leaves the environment as it found it (children and later libraries see the user's settings)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = """
import os, sys, atexit
atexit.register(lambda: print("threads", len(os.listdir('/proc/self/task')), "env", os.environ.get("OPENBLAS_NUM_THREADS"),
                              file=sys.stderr))
from cli.main import main
main(["floor", "--json"])
"""


def _threads_env(extra: dict[str, str]) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    run = subprocess.run([sys.executable, "-c", CODE], cwd=ROOT, env={**env, **extra}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    _, n, _, value = run.stderr.strip().splitlines()[-1].split()
    return int(n), value


@pytest.mark.skipif(not Path("/proc/self/task").is_dir() or (os.cpu_count() or 1) < 2,
                    reason="counts threads in /proc; OpenBLAS starts no thread server on one core")
def test_numpy_blas_has_one_thread_and_the_env_is_restored():
    assert _threads_env({}) == (1, "None")
    # the check can fail: a user's own setting is kept, and OpenBLAS then starts its thread server
    n, value = _threads_env({"OPENBLAS_NUM_THREADS": "2"})
    assert (n, value) == (2, "2")
