"""`floorfirst mcp` answers its first call soon after it starts (issue 32: within 1 s on a quiet
machine of this project's kind; benchmarks/mcp_first_call.py measures it). The bound here is
generous, for a test box shared with other jobs: what it catches is a start-up that waits on
something it shouldn't (every command module imported before the first answer, a warm-up call)."""

import sys
import time

import anyio
from mcp import Client, StdioServerParameters

from tests.agent.contracts import ROOT, validate

BOUND_S = 20.0


def test_the_first_call_is_answered_soon_after_start():
    params = StdioServerParameters(command=sys.executable, args=["-c", "from cli.main import main; main(['mcp'])"],
                                   cwd=str(ROOT))

    async def main():
        t0 = time.perf_counter()
        async with Client(params) as c:
            r = await c.call_tool("compare", {})
            return time.perf_counter() - t0, r

    took, r = anyio.run(main)
    assert not r.is_error, r.content[0].text
    validate(r.structured_content, "compare")
    assert took < BOUND_S, f"first call answered {took:.1f} s after start"
