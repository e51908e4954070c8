"""`floorfirst mcp`: a real MCP client session lists the tools and calls each one on a built-in
model; every answer is the command's `--json` document and meets its schema. One session runs
over real stdio in a subprocess; the rest are in-process (the SDK's in-memory transport)."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
import pytest

import planner
from mcp import Client, StdioServerParameters

from cli.inprocess import CommandRunner
from cli.mcp_server import COMMAND_MODULES, build_server
from tests.agent.contracts import PROFILE, ROOT, run_cli, validate

ALL_TOOLS = {"models", "hardware", "floor", "compare", "capacity", "walls", "regimes", "triage", "triage_profile",
             "calibrate", "validate", "simulate"}


def calls(tmp: str) -> list[tuple[str, dict, str]]:
    """(tool, arguments, contract) in an order where calibrate's artifact exists before validate."""
    cal = f"{tmp}/cal.json"
    return [
        ("models", {}, "models"),
        ("hardware", {"hardware": "h200"}, "hardware"),
        ("floor", {"model": "deepseek-v3.2", "attn": "dp", "batch": 16, "context": "8k"}, "floor"),
        ("compare", {"model": "deepseek-v3.2", "batch": 64, "context": "32k"}, "compare"),
        ("capacity", {"model": "kimi-k2", "context": "32k"}, "capacity"),
        ("walls", {"model": "deepseek-v3.2", "layouts": "dp/ep,dop/ep", "load_range": "1:512"}, "walls"),
        ("regimes", {"model": "deepseek-v3.2", "batch_range": "1:256:3", "context_range": "4k:64k:3"}, "regimes"),
        ("triage", {"measured_ms": 30, "attn": "dp", "batch": 32, "context": "8k"}, "triage"),
        ("triage_profile", {"profile": str(PROFILE)}, "triage_profile"),
        ("calibrate", {"profile": [str(PROFILE)], "out": cal}, "calibrate"),
        ("validate", {"calibration": cal, "profile": [str(PROFILE)], "folds": 3}, "validate"),
        ("simulate", {"model": "deepseek-v3.2", "requests": 40, "workload": "shrinking"}, "simulate"),
    ]


def session(server, body):
    async def main():
        async with Client(server) as client:
            return await body(client)

    return anyio.run(main)


def test_lists_every_tool_with_typed_inputs():
    async def body(c):
        return (await c.list_tools()).tools

    tools = {t.name: t for t in session(build_server(), body)}
    assert set(tools) == ALL_TOOLS
    floor = tools["floor"].input_schema["properties"]
    assert floor["attn"]["enum"] == list(planner.ATTN_LAYOUTS) and floor["gpus"]["type"] == "integer"
    assert tools["triage"].input_schema["required"] == ["measured_ms"]
    assert tools["validate"].input_schema["required"] == ["calibration", "profile"]
    assert all(t.description for t in tools.values())


def test_every_tool_answers_with_its_contract(tmp_path):
    plan = calls(str(tmp_path))

    async def body(c):
        out = []
        for name, args, _ in plan:
            out.append(await c.call_tool(name, args))
        return out

    results = session(build_server(), body)
    assert {name for name, _, _ in plan} == ALL_TOOLS
    for (name, args, contract), r in zip(plan, results):
        assert not r.is_error, f"{name}: {r.content[0].text}"
        doc = r.structured_content
        validate(doc, contract)
        assert json.loads(r.content[0].text) == doc
    by = {name: r.structured_content for (name, _, _), r in zip(plan, results)}
    assert by["triage"]["verdict"] == "above_sum" and by["triage"]["profile_resource"] == "hbm"
    assert by["walls"]["range"] == [1.0, 512.0]  # load_range reached the CLI's --range
    assert by["validate"]["folds"] == 3 and (tmp_path / "cal.json").exists()


def test_a_tool_answers_what_the_cli_prints():
    async def body(c):
        return await c.call_tool("compare", {"model": "glm-5", "hardware": "b200", "batch": 32, "context": "64k"})

    r = session(build_server(), body)
    assert r.structured_content == run_cli(["compare", "--model", "glm-5", "--hardware", "b200", "--batch", "32",
                                                    "--context", "64k", "--json"])


def test_user_errors_are_tool_errors_with_the_cli_message():
    async def body(c):
        return [await c.call_tool("floor", {"model": "no-such-model"}),
                await c.call_tool("triage", {"measured_ms": 30, "context": "4k,8k", "batch": 5}),
                await c.call_tool("floor", {"attn": "sideways"})]

    unknown, mismatch, bad_enum = session(build_server(), body)
    assert unknown.is_error and "unknown model 'no-such-model'" in unknown.content[0].text
    assert mismatch.is_error and "--batch 5 disagrees with the 2 requests" in mismatch.content[0].text
    assert bad_enum.is_error and "attn" in bad_enum.content[0].text


def test_tools_of_absent_commands_are_absent():
    async def body(c):
        return {t.name for t in (await c.list_tools()).tools}

    assert session(build_server(CommandRunner(["floor", "not_written_yet"])), body) == {"floor", "compare", "capacity"}
    assert set(COMMAND_MODULES) >= {"floor", "walls", "triage", "calibration", "simulate"}


def test_floorfirst_mcp_serves_over_stdio():
    params = StdioServerParameters(command=sys.executable, args=["-c", "from cli.main import main; main(['mcp'])"],
                                   cwd=str(ROOT))

    async def body(c):
        names = {t.name for t in (await c.list_tools()).tools}
        return names, await c.call_tool("capacity", {"context": "32k"})

    names, r = session(params, body)
    assert names == ALL_TOOLS
    assert not r.is_error
    validate(r.structured_content, "capacity")


def test_plain_cli_start_up_does_not_import_the_sdk():
    code = ("import sys; from cli.main import _register_all; _register_all(); "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'jsonschema')); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_floorfirst_mcp_without_the_sdk_is_one_line_and_exit_2(monkeypatch, capsys):
    from cli.main import main

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "cli.mcp_server", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["mcp"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err == "floorfirst: error: floorfirst mcp needs the MCP SDK: pip install 'floorfirst[mcp]'\n"
