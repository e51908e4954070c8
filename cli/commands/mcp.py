"""`floorfirst mcp`: serve floorfirst's commands as Model Context Protocol tools over stdio.

Thin: the tools live in cli/mcp_tools.py and the server in cli/mcp_stdio.py, which speaks the
protocol without the MCP SDK (its import alone took ~0.55 s of a first answer); `--sdk` serves the
same tools through the SDK (cli/mcp_server.py, needs the `mcp` extra).
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from planner.errors import SpecError


def mcp(
    workers: Annotated[int, typer.Option("--workers", min=1, max=64, help="Calls that may run at once, each in its own worker process.")] = 4,
    time_limit_s: Annotated[float, typer.Option("--time-limit-s", min=1, max=86400, help="Wall-clock limit of one call; a call past it is stopped.")] = 300.0,
    memory_gib: Annotated[float, typer.Option("--memory-gib", min=0, max=4096, help="Address-space limit of one worker, GiB (0: none).")] = 8.0,
    root: Annotated[Optional[str], typer.Option("--root", help="The folder every tool's reads and writes stay inside (symlinks resolved first; default: the working directory). docs/mcp-security.md.")] = None,
    sdk: Annotated[bool, typer.Option("--sdk", help="Serve through the MCP SDK (the `mcp` extra) instead of floorfirst's own stdio server; the same tools and answers, a slower start.")] = False,
) -> None:
    """Serve floor, compare, capacity, walls, regimes, triage, validate, simulate… as MCP tools over stdio."""
    import os

    from cli.inprocess import MCP_COMMAND_MODULES, GiB, Limits, WorkerPool

    folder = os.path.realpath(root or os.getcwd())
    if not os.path.isdir(folder):
        raise SpecError(f"--root {root}: not a folder")
    # NOTE: the pool's spare worker starts first, and boots while this process imports the MCP SDK and
    # reads the tools' options: the first call then finds it ready (benchmarks/mcp_first_call.py)
    pool = WorkerPool(MCP_COMMAND_MODULES, workers=workers, root=folder,
                      limits=Limits(time_s=time_limit_s, memory_bytes=int(memory_gib * GiB) or None))
    pool.warm()
    if not sdk:
        from cli.mcp_stdio import serve as serve_stdio

        serve_stdio(pool)
        return
    try:
        from cli.mcp_server import serve
    except ModuleNotFoundError as exc:
        pool.close()
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise SpecError("floorfirst mcp --sdk needs the MCP SDK: pip install '.[mcp]' in a clone of floorfirst") from None
    serve(pool=pool)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
