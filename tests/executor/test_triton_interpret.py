"""The executor's Triton kernels on CPU through Triton's interpreter, one check script each (skipped
where Triton is not installed, as in CI — `pip install triton` to run them — or where its interpreter
can't run):
- triton_interpret_check.py: the attention kernels against the torch reference;
- host_fetch_interpret_check.py: the host tier's copy kernel moves exactly the listed units."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def interpreter_works() -> bool:
    """Triton 3.6's interpreter fails on numpy >= 2.4 (`int()` of a 1-element array); skip then."""
    probe = textwrap.dedent("""
        import torch, triton, triton.language as tl
        @triton.jit
        def k(x, lens):
            n = tl.load(lens)
            for i in range(0, n):
                tl.store(x + i, i)
        x = torch.zeros(4, dtype=torch.int32)
        k[(1,)](x, torch.tensor([3], dtype=torch.int32))
        assert x.tolist() == [0, 1, 2, 0], x
    """)
    r = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "TRITON_INTERPRET": "1"},
                       capture_output=True, text=True, timeout=120)
    return r.returncode == 0


@pytest.mark.parametrize("script, timeout_s", [("triton_interpret_check.py", 1200), ("host_fetch_interpret_check.py", 900)])
def test_kernel_check_passes_under_the_interpreter(interpreter_works, script, timeout_s):
    if not interpreter_works:
        pytest.skip("this Triton's CPU interpreter does not run here (numpy >= 2.4 with Triton 3.6)")
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    r = subprocess.run([sys.executable, str(Path(__file__).with_name(script))], env=env,
                       capture_output=True, text=True, timeout=timeout_s, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
