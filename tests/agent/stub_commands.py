"""Commands that misbehave on purpose, for the MCP runner's tests: one that never returns, one
that crashes, one that takes more memory than a worker may. Registered by dotted module path
(`WorkerPool(["specs", "tests.agent.stub_commands"])`); never part of the real CLI."""

from __future__ import annotations

import time

import typer

from cli.common import JsonOpt, emit_json


def block(json_out: JsonOpt = False) -> None:
    """Wait forever, as a read of a FIFO with no writer once did."""
    while True:
        time.sleep(3600)


def crash(json_out: JsonOpt = False) -> None:
    """A bug: an exception the CLI does not expect."""
    raise RuntimeError("boom\nsecond line")


def hog(json_out: JsonOpt = False) -> None:
    """Allocate far more than the worker's memory limit."""
    blocks = [bytearray(1 << 30) for _ in range(64)]
    emit_json("hog", {"blocks": len(blocks)})


def register(app: typer.Typer) -> None:
    app.command("block")(block)
    app.command("crash")(crash)
    app.command("hog")(hog)
