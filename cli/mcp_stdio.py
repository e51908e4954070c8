"""`floorfirst mcp`'s server: the Model Context Protocol's handshake era (JSON-RPC 2.0, one message
a line on stdin and stdout) spoken without the MCP SDK, answering what the SDK's `MCPServer` answers
for floorfirst's tools (cli.mcp_tools.ToolTable).

NOTE: why not the SDK here. `import mcp` (2.x) costs ~0.55 s of CPU before a line is read — its
protocol types are ~300 pydantic models built at import (`mcp_types`, ~0.35 s), and the package
imports its client, starlette, uvicorn and httpx — and the SDK's low-level `Server` imports the same
(mcp/server/lowlevel/server.py imports starlette and the streamable-HTTP manager; any `mcp.*` runs
mcp/__init__.py, which imports the client). What floorfirst serves is five methods of the protocol;
`floorfirst mcp --sdk` still serves through the SDK (cli/mcp_server.py), and
tests/agent/test_mcp_stdio.py holds both servers' answers equal, message by message.

What it answers, as the SDK's server (mcp 2.3, src/mcp/server/runner.py `_on_request`): `initialize`
(the client's protocol version when it is one of the handshake versions, else the latest), `ping`,
`tools/list`, `tools/call`, empty `resources/list`, `resources/templates/list` and `prompts/list`;
any other method is -32601 "Method not found"; a served method other than `ping` before
`initialize`, or a call without a tool name, is -32602 "Invalid request parameters". A line that
is not a JSON-RPC 2.0 request or notification is dropped, as the SDK drops it. Tool calls run side by
side (one thread each, answered by the worker pool); `notifications/cancelled` stops the call's
worker and its reply is not sent; when stdin closes every call still running is stopped.

Does not: speak the 2026 "modern" era (`server/discover` is -32601, as the SDK's stdio server
answers it, and the client falls back to `initialize`), send notifications, or page `tools/list`.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any, BinaryIO

from cli.mcp_tools import INSTRUCTIONS, ToolTable

# NOTE: mcp_types/version.py HANDSHAKE_PROTOCOL_VERSIONS and LATEST_HANDSHAKE_VERSION (mcp 2.3);
# runner.py `_negotiate_initialize` answers a version it doesn't know with the latest
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
LATEST_HANDSHAKE_VERSION = "2025-11-25"
# what MCPServer declares (its tools, and the resources and prompts it has none of)
CAPABILITIES = {"prompts": {"listChanged": False}, "resources": {"listChanged": False, "subscribe": False},
                "tools": {"listChanged": False}}
SERVER_INFO = {"name": "floorfirst", "version": ""}
METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32601, -32602, -32603
EMPTY_LISTS = {"resources/list": "resources", "resources/templates/list": "resourceTemplates", "prompts/list": "prompts"}


class StdioServer:
    """One client's session over a pair of byte streams."""

    def __init__(self, table: ToolTable, stdin: BinaryIO, stdout: BinaryIO):
        self.table = table
        self._in, self._out = stdin, stdout
        self._write_lock = threading.Lock()
        self._calls: dict[Any, threading.Event] = {}  # request id -> its cancel flag, while it runs
        self._calls_lock = threading.Lock()
        self._initialized = False

    def serve(self) -> None:
        """Until stdin closes; then every call still running is stopped."""
        # NOTE: the tools (the command modules' options, the argument models) are built meanwhile: the
        # client is still starting, and `initialize` needs none of it
        threading.Thread(target=self.table.names, daemon=True, name="floorfirst-mcp-tools").start()
        try:
            for raw in self._in:
                self._receive(raw)
        finally:
            with self._calls_lock:
                running = list(self._calls.values())
            for cancel in running:
                cancel.set()

    def _receive(self, raw: bytes) -> None:
        try:
            msg = json.loads(raw.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            return
        method, params = msg["method"], msg.get("params")
        if params is not None and not isinstance(params, dict):
            return
        if "id" not in msg:
            self._notification(method, params or {})
            return
        rid = msg["id"]
        if isinstance(rid, bool) or not isinstance(rid, (str, int)):
            return
        try:
            self._request(rid, method, params or {})
        except Exception:  # noqa: BLE001 - a bug answering one request must not end the session
            self._error(rid, INTERNAL_ERROR, "Internal error")

    def _notification(self, method: str, params: dict[str, Any]) -> None:
        if method == "notifications/cancelled":
            with self._calls_lock:
                cancel = self._calls.get(params.get("requestId"))
            if cancel is not None:
                cancel.set()

    def _request(self, rid: Any, method: str, params: dict[str, Any]) -> None:
        if method == "initialize":
            if not _valid_initialize(params):
                self._error(rid, INVALID_PARAMS, "Invalid request parameters")
                return
            asked = params["protocolVersion"]
            self._reply(rid, {"capabilities": CAPABILITIES, "instructions": INSTRUCTIONS,
                              "protocolVersion": asked if asked in HANDSHAKE_VERSIONS else LATEST_HANDSHAKE_VERSION,
                              "serverInfo": SERVER_INFO})
            self._initialized = True
        elif method == "ping":
            self._reply(rid, {})
        elif method not in ("tools/list", "tools/call", *EMPTY_LISTS):
            self._error(rid, METHOD_NOT_FOUND, "Method not found", method)
        elif not self._initialized:
            self._error(rid, INVALID_PARAMS, "Invalid request parameters")
        elif method == "tools/list":
            self._reply(rid, self.table.listing())
        elif method in EMPTY_LISTS:
            self._reply(rid, {EMPTY_LISTS[method]: []})
        else:
            name, arguments = params.get("name"), params.get("arguments")
            if not isinstance(name, str) or not isinstance(arguments, (dict, type(None))):
                self._error(rid, INVALID_PARAMS, "Invalid request parameters")
                return
            cancel = threading.Event()
            with self._calls_lock:
                self._calls[rid] = cancel
            threading.Thread(target=self._call, args=(rid, name, arguments or {}, cancel), daemon=True,
                             name=f"floorfirst-mcp-call-{rid}").start()

    def _call(self, rid: Any, name: str, arguments: dict[str, Any], cancel: threading.Event) -> None:
        try:
            result = self.table.call(name, arguments, cancel)
        finally:
            with self._calls_lock:
                self._calls.pop(rid, None)
        if not cancel.is_set():  # a cancelled request gets no reply (the protocol's rule; the SDK sends none)
            self._reply(rid, result)
        cancel.set()  # NOTE: a no-op after an answer; the worker of a call given up on is stopped

    def _reply(self, rid: Any, result: dict[str, Any]) -> None:
        self._write({"jsonrpc": "2.0", "id": rid, "result": result})

    def _error(self, rid: Any, code: int, message: str, data: Any = "") -> None:
        self._write({"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message, "data": data}})

    def _write(self, msg: dict[str, Any]) -> None:
        line = (json.dumps(msg, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
        with self._write_lock:
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError):  # the client went away
                pass


def _valid_initialize(params: dict[str, Any]) -> bool:
    info = params.get("clientInfo")
    return (isinstance(params.get("protocolVersion"), str) and isinstance(params.get("capabilities"), dict)
            and isinstance(info, dict) and isinstance(info.get("name"), str) and isinstance(info.get("version"), str))


def serve(pool) -> None:
    """Serve `pool`'s commands over this process's stdin and stdout until the client closes stdin;
    the pool is closed here."""
    try:
        StdioServer(ToolTable(pool, cache=True), sys.stdin.buffer, sys.stdout.buffer).serve()
    finally:
        pool.close()
