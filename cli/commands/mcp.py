"""`floorfirst mcp`: serve floorfirst's commands as Model Context Protocol tools over stdio.

Thin: the server and its tools live in cli/mcp_server.py; the MCP SDK is imported only when this
command runs, so the rest of the CLI starts without it.
"""

from __future__ import annotations

import typer

from planner.errors import SpecError


def mcp() -> None:
    """Serve floor, compare, capacity, walls, regimes, triage, validate, simulate… as MCP tools over stdio."""
    try:
        from cli.mcp_server import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise SpecError("floorfirst mcp needs the MCP SDK: pip install 'floorfirst[mcp]'") from None
    serve()


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
