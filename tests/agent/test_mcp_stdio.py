"""`floorfirst mcp` speaks MCP without the SDK (cli/mcp_stdio.py) and answers as the SDK's server
does (`floorfirst mcp --sdk`, cli/mcp_server.py): the same JSON-RPC messages, line for line, for
the handshake, the tool list (every tool's input and output schema) and calls that answer, refuse
an argument, name an unknown tool or fail in the command; a cancelled call gets no reply and its
worker is stopped; the server imports no `mcp` module and runs where the SDK is not installed."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time

import pytest

from cli.inprocess import Limits, WorkerPool
from cli.mcp_server import COMMAND_MODULES
from cli.mcp_stdio import StdioServer
from cli.mcp_tools import ToolTable
from tests.agent.contracts import ROOT, validate

INIT = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}


def requests() -> list[dict]:
    """A session: before the handshake, the handshake, lists, calls of every kind, unknown methods."""
    def call(i, name, arguments):
        return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": name, "arguments": arguments}}

    return [
        {"jsonrpc": "2.0", "id": "early", "method": "tools/list", "params": {}},
        {"jsonrpc": "2.0", "id": 0, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        call(3, "compare", {}),
        call(4, "floor", {"context": "[\"4k\", \"64k\"]", "batch": "2", "attn": "dp"}),  # a list sent as JSON text
        call(5, "capacity", {"model": "kimi-k2", "context": 32768, "gpus": "8"}),
        call(6, "floor", {"gpus": 0, "batch": "many"}),  # the argument model refuses it
        call(7, "floor", {"tp_size": 8}),  # an engine flag
        call(8, "compare", {"bacth": 8}),  # a misspelt name
        call(9, "nosuch", {}),
        call(10, "floor", {"model": "no-such-model"}),  # the command refuses it
        call(11, "explain_launch", {"command": "vllm serve deepseek-ai/DeepSeek-V3.2 -dp 8 --enable-expert-parallel"}),
        {"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": {}},  # no tool name
        {"jsonrpc": "2.0", "id": 13, "method": "resources/list"},
        {"jsonrpc": "2.0", "id": 14, "method": "resources/templates/list"},
        {"jsonrpc": "2.0", "id": 15, "method": "prompts/list"},
        {"jsonrpc": "2.0", "id": 16, "method": "server/discover", "params": {}},
        {"jsonrpc": "2.0", "id": 17, "method": "logging/setLevel", "params": {"level": "info"}},
        {"jsonrpc": "2.0", "id": 18, "method": "initialize", "params": {**INIT, "protocolVersion": "1999-01-01"}},
    ]


def exchange(extra: list[str], messages: list[dict]) -> list[dict]:
    """Each message sent to a fresh `floorfirst mcp <extra>` over stdio, a request's reply read before
    the next is sent."""
    p = subprocess.Popen([sys.executable, "-c", f"from cli.main import main; main(['mcp', *{extra!r}])"], cwd=ROOT,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    replies = []
    try:
        for m in messages:
            p.stdin.write((json.dumps(m) + "\n").encode())
            p.stdin.flush()
            if "id" in m:
                replies.append(json.loads(p.stdout.readline()))
    finally:
        p.stdin.close()
        p.wait(30)
    return replies


def test_floorfirst_mcp_answers_as_the_sdk_server_does():
    own, sdk = exchange([], requests()), exchange(["--sdk"], requests())
    assert len(own) == len(sdk) == sum("id" in m for m in requests())
    for mine, theirs in zip(own, sdk):
        assert mine == theirs, (json.dumps(mine)[:600], json.dumps(theirs)[:600])
    by_id = {r["id"]: r for r in own}
    assert len(by_id[2]["result"]["tools"]) == 13
    assert by_id["early"]["error"]["code"] == -32602 and by_id[16]["error"]["code"] == -32601
    assert by_id[1]["result"]["protocolVersion"] == "2025-06-18" and by_id[18]["result"]["protocolVersion"] == "2025-11-25"
    validate(by_id[3]["result"]["structuredContent"], "compare")
    assert by_id[4]["result"]["structuredContent"]["batch"] == 2
    assert by_id[10]["result"]["isError"] and by_id[10]["result"]["content"][0]["text"].startswith(
        "Error executing tool floor: unknown model 'no-such-model'")


@pytest.fixture()
def pool():
    p = WorkerPool(COMMAND_MODULES, workers=2, limits=Limits(time_s=60.0))
    yield p
    p.close()


def test_a_cancelled_call_gets_no_reply_and_its_worker_is_stopped(pool):
    rin, win = os.pipe()
    rout, wout = os.pipe()
    with os.fdopen(rin, "rb") as stdin, os.fdopen(wout, "wb") as stdout:
        server = threading.Thread(target=StdioServer(ToolTable(pool), stdin, stdout).serve, daemon=True)
        server.start()

        def send(m):
            os.write(win, (json.dumps(m) + "\n").encode())

        def replies(wait_s):
            out, buf, end = [], b"", time.monotonic() + wait_s
            while time.monotonic() < end:
                if select.select([rout], [], [], 0.1)[0]:
                    buf += os.read(rout, 1 << 20)
            return [json.loads(x) for x in buf.splitlines()]

        try:
            send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
            send({"jsonrpc": "2.0", "id": "long", "method": "tools/call",
                  "params": {"name": "simulate", "arguments": {"workload": "chat", "requests": 5_000_000}}})
            end = time.monotonic() + 60
            while pool.idle == pool._live and time.monotonic() < end:  # until a worker runs it
                time.sleep(0.05)
            send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "long"}})
            send({"jsonrpc": "2.0", "id": 2, "method": "ping"})
            got = replies(3.0)
            assert [r["id"] for r in got] == [1, 2]
            end = time.monotonic() + 10
            while pool._live != pool.idle and time.monotonic() < end:  # the busy worker was stopped
                time.sleep(0.05)
            assert pool._live == pool.idle
        finally:
            os.close(win)  # NOTE: stdin's end: the server returns, and its reader is free to close
            server.join(10)
    os.close(rout)


def test_the_server_imports_no_mcp_module_and_runs_without_the_sdk():
    code = ("import sys\n"
            "sys.modules['mcp'] = None  # as if the extra were not installed\n"
            "from cli.main import main\n"
            "try:\n"
            "    main(['mcp'])\n"
            "finally:\n"
            "    bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types') and sys.modules[m])\n"
            "    assert not bad, bad\n")
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "capacity", "arguments": {}}}]
    text = "".join(json.dumps(m) + "\n" for m in messages)
    # NOTE: stdin closes after the last request: a call still running then is stopped, so wait for its reply
    p = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    p.stdin.write(text.encode())
    p.stdin.flush()
    lines = [json.loads(p.stdout.readline()) for _ in messages]
    p.stdin.close()
    assert p.wait(30) == 0, p.stderr.read().decode()[-2000:]
    assert lines[0]["result"]["serverInfo"]["name"] == "floorfirst"
    validate(lines[1]["result"]["structuredContent"], "capacity")


class _NoCommands:
    """A runner whose commands must not be read: a table loaded from the cache needs none."""

    @property
    def group(self):
        raise AssertionError("the command modules were read")

    commands = group


def test_the_tool_table_kept_in_the_cache_is_the_table_built(tmp_path, monkeypatch):
    from cli.inprocess import CommandRunner

    monkeypatch.setenv("FLOORFIRST_CACHE_DIR", str(tmp_path))
    runner = CommandRunner(COMMAND_MODULES)
    built = ToolTable(runner, cache=True)
    listing = built.listing()
    entries = list((tmp_path / "specs").glob("mcp-tools-*.pickle"))
    assert len(entries) == 1 and listing == ToolTable(runner).listing()
    loaded = ToolTable(_NoCommands(), cache=True)
    assert loaded.listing() == listing
    args = {"gpus": 0, "batch": "many"}
    assert loaded.call("floor", args) == built.call("floor", args)  # the argument model, rebuilt from the cache
    assert loaded.call("floor", args)["content"][0]["text"].startswith("floor: argument 'batch'='many'")
    entries[0].write_bytes(b"not a pickle")  # a corrupt entry is rebuilt
    assert ToolTable(runner, cache=True).listing() == listing
    assert ToolTable(_NoCommands(), cache=True).listing() == listing
    entries[0].unlink()
    with pytest.raises(AssertionError, match="command modules were read"):  # no entry: built from the commands
        ToolTable(_NoCommands(), cache=True).listing()
    monkeypatch.setattr("cli.mcp_tools.CACHE_FORMAT", 2)  # other code: another entry, the old one dropped
    assert ToolTable(runner, cache=True).listing() == listing
    assert [p.name for p in (tmp_path / "specs").glob("mcp-tools-*.pickle")] != [entries[0].name]


def test_a_line_nested_past_the_parsers_depth_or_a_failing_request_leaves_the_session_answering():
    import io

    from cli.inprocess import CommandRunner

    class Broken(ToolTable):
        def listing(self):
            raise RuntimeError("boom")

    lines = ["[" * 200_000, json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT}),
             json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
             json.dumps({"jsonrpc": "2.0", "id": 3, "method": "ping"})]
    out = io.BytesIO()
    StdioServer(Broken(CommandRunner(["specs"])), io.BytesIO("\n".join(lines).encode() + b"\n"), out).serve()
    replies = [json.loads(x) for x in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert replies[1]["error"] == {"code": -32603, "message": "Internal error", "data": ""} and replies[2]["result"] == {}
