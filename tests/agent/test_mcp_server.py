"""`floorfirst mcp`: a real MCP client session lists the tools and calls each one on a built-in
model; every answer is the command's `--json` document and meets its schema. One session runs
over real stdio in a subprocess; the rest talk to the server in-process (the SDK's in-memory
transport), whose calls run in worker processes (cli.inprocess.WorkerPool): a blocking call and a
long call run while `models` answers, and every error is one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import anyio
import pytest

import planner
from mcp import Client, StdioServerParameters

from cli.inprocess import CommandError, CommandRunner, Limits, WorkerPool
from cli.mcp_server import COMMAND_MODULES, build_server
from tests.agent.contracts import PROFILE, ROOT, run_cli, validate

STUBS = "tests.agent.stub_commands"


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(COMMAND_MODULES, workers=2)
    yield p
    p.close()


def wait_idle(p: WorkerPool, n: int, timeout_s: float = 60.0) -> None:
    """Until n workers are started and idle (an interpreter start takes seconds on a loaded CI box)."""
    p.warm()
    end = time.monotonic() + timeout_s
    while p.idle < n:
        assert time.monotonic() < end, f"{p.idle} of {n} workers ready after {timeout_s} s"
        time.sleep(0.05)

ALL_TOOLS = {"models", "hardware", "floor", "compare", "capacity", "walls", "regimes", "triage", "triage_profile",
             "calibrate", "validate", "simulate", "explain_launch"}


def calls(tmp: str) -> list[tuple[str, dict, str]]:
    """(tool, arguments, contract) in an order where calibrate's artifact exists before validate."""
    cal = f"{tmp}/cal.json"
    return [
        ("models", {}, "models"),
        ("hardware", {"hardware": "h200"}, "hardware"),
        ("floor", {"model": "deepseek-v3.2", "attn": "dp", "batch": 16, "context": "8k"}, "floor"),
        ("compare", {"model": "deepseek-v3.2", "batch": 64, "context": "32k"}, "compare"),
        ("capacity", {"model": "kimi-k2", "context": "32k"}, "capacity"),
        ("walls", {"model": "deepseek-v3.2", "layouts": "dp/ep,dop/ep", "range": "1:512"}, "walls"),
        ("regimes", {"model": "deepseek-v3.2", "batch_range": "1:256:3", "context_range": "4k:64k:3"}, "regimes"),
        ("triage", {"measured_ms": 30, "attn": "dp", "batch": 32, "context": "8k"}, "triage"),
        ("triage_profile", {"profile": str(PROFILE)}, "triage_profile"),
        ("calibrate", {"profile": [str(PROFILE)], "out": cal}, "calibrate"),
        ("validate", {"calibration": cal, "profile": [str(PROFILE)], "folds": 3}, "validate"),
        ("simulate", {"model": "deepseek-v3.2", "requests": 40, "workload": "shrinking"}, "simulate"),
        ("explain_launch", {"command": "vllm serve deepseek-ai/DeepSeek-V3.2 -dp 8 --enable-expert-parallel"},
         "explain_launch"),
    ]


def session(server, body):
    async def main():
        async with Client(server) as client:
            return await body(client)

    return anyio.run(main)


def test_lists_every_tool_with_typed_inputs(pool):
    async def body(c):
        return (await c.list_tools()).tools

    tools = {t.name: t for t in session(build_server(pool), body)}
    assert set(tools) == ALL_TOOLS
    floor = tools["floor"].input_schema["properties"]
    assert floor["attn"]["anyOf"][0]["enum"] == list(planner.ATTN_LAYOUTS) and floor["gpus"]["type"] == "integer"
    assert tools["triage"].input_schema["required"] == ["measured_ms"]
    assert tools["validate"].input_schema["required"] == ["calibration", "profile"]
    assert all(t.description for t in tools.values())


def test_every_tool_answers_with_its_contract(tmp_path, pool):
    plan = calls(str(tmp_path))

    async def body(c):
        out = []
        for name, args, _ in plan:
            out.append(await c.call_tool(name, args))
        return out

    results = session(build_server(pool), body)
    assert {name for name, _, _ in plan} == ALL_TOOLS
    for (name, args, contract), r in zip(plan, results):
        assert not r.is_error, f"{name}: {r.content[0].text}"
        doc = r.structured_content
        validate(doc, contract)
        assert json.loads(r.content[0].text) == doc
    by = {name: r.structured_content for (name, _, _), r in zip(plan, results)}
    assert by["triage"]["verdict"] == "above_sum" and by["triage"]["profile_resource"] == "hbm"
    assert by["walls"]["range_requests"] == [1.0, 512.0]  # range reached the CLI's --range
    assert by["validate"]["folds"] == 3 and (tmp_path / "cal.json").exists()


def test_a_tool_answers_what_the_cli_prints(pool):
    async def body(c):
        return await c.call_tool("compare", {"model": "glm-5", "hardware": "b200", "batch": 32, "context": "64k"})

    r = session(build_server(pool), body)
    assert r.structured_content == run_cli(["compare", "--model", "glm-5", "--hardware", "b200", "--batch", "32",
                                                    "--context", "64k", "--json"])


def test_user_errors_are_one_line_tool_errors_with_the_cli_message(pool, tmp_path):
    fifo = tmp_path / "w.csv"
    os.mkfifo(fifo)
    config = tmp_path / "config.json"
    config.write_text("{}")

    async def body(c):
        return [await c.call_tool("floor", {"model": "no-such-model"}),
                await c.call_tool("triage", {"measured_ms": 30, "context": "4k,8k", "batch": 5}),
                await c.call_tool("floor", {"attn": "sideways"}),
                await c.call_tool("floor", {"gpus": 0, "batch": "many"}),
                await c.call_tool("simulate", {"workload": str(fifo), "requests": 5}),
                await c.call_tool("calibrate", {"profile": [str(PROFILE)], "out": str(config)})]

    unknown, mismatch, bad_enum, bad_args, blocked, overwrite = session(build_server(pool), body)
    assert unknown.is_error and "unknown model 'no-such-model'" in unknown.content[0].text
    assert mismatch.is_error and "--batch 5 disagrees with the 2 requests" in mismatch.content[0].text
    assert bad_enum.is_error and bad_enum.content[0].text.startswith("floor: argument 'attn'='sideways': Input should be")
    # NOTE: the tool's types are the CLI options' (cli.tool_options); ranges are the CLI's own checks
    assert bad_args.content[0].text == ("floor: argument 'batch'='many': Input should be a valid integer, "
                                        "unable to parse string as an integer")
    assert blocked.is_error and "is a FIFO, not a regular file" in blocked.content[0].text
    assert overwrite.is_error and "is not a floorfirst calibration; pass --force" in overwrite.content[0].text
    assert config.read_text() == "{}"
    for r in (unknown, mismatch, bad_enum, bad_args, blocked, overwrite):
        assert "\n" not in r.content[0].text


def test_a_blocking_call_and_a_long_call_leave_models_answering_within_a_second():
    p = WorkerPool([*COMMAND_MODULES, STUBS], workers=4, limits=Limits(time_s=8.0), spare=3)
    server = build_server(p)
    try:
        wait_idle(p, 3)
        blocked: dict = {}

        def block():  # no tool runs the stub: the pool's own API, from a thread, as a tool would
            t0 = time.monotonic()
            with pytest.raises(CommandError) as exc:
                p.run("block", [])
            blocked.update(s=time.monotonic() - t0, message=str(exc.value))

        async def body(c):
            out: dict = {}

            async def call(key, name, args):
                t0 = time.monotonic()
                r = await c.call_tool(name, args)
                out[key] = (time.monotonic() - t0, r)

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, block)
                tg.start_soon(call, "long", "simulate", {"workload": "chat", "requests": 5_000_000})
                await anyio.sleep(0.5)  # both are running now
                await call("models", "models", {})
            await call("after", "models", {})  # the pool replaced the workers it stopped
            return out

        out = session(server, body)
        models_s, models = out["models"]
        assert not models.is_error and models_s < 1.0, models_s
        long_s, long = out["long"]
        assert long.is_error and "simulate ran past the 8 s limit per call and was stopped" in long.content[0].text
        assert 7.5 < long_s < 20 and 7.5 < blocked["s"] < 20
        assert blocked["message"] == "block ran past the 8 s limit per call and was stopped"
        assert not out["after"][1].is_error
    finally:
        p.close()


def test_limits_and_crashes_are_one_line_errors_and_the_worker_is_replaced():
    p = WorkerPool(["specs", STUBS], workers=1, limits=Limits(time_s=60.0, args_bytes=4096, output_bytes=3000,  # one GPU (~2.6 KB) fits, every card (~3.2 KB) does not
                                                               memory_bytes=2 << 30))
    try:
        with pytest.raises(CommandError, match=r"^internal error in crash: RuntimeError: boom$"):
            p.run("crash", [])
        with pytest.raises(CommandError, match=r"^hog: needed more memory than the 2 GiB limit per call$"):
            p.run("hog", [])
        with pytest.raises(CommandError, match=r"^models: the answer is .* MiB, over the 0 MiB limit per call"):
            p.run("models", [])
        with pytest.raises(CommandError, match=r"^hardware: the arguments are 10 KiB, over the 4 KiB limit per call$"):
            p.run("hardware", ["--hardware", "x" * 10_000])
        assert p.run("hardware", ["--hardware", "h200"])["hardware"][0]["name"] == "h200"  # a fresh worker answers
    finally:
        p.close()


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


def test_floorfirst_mcp_sdk_without_the_sdk_is_one_line_and_exit_2(monkeypatch, capsys):
    from cli.main import main

    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "mcp", None)
    monkeypatch.delitem(sys.modules, "cli.mcp_server", raising=False)
    with pytest.raises(SystemExit) as exc:
        main(["mcp", "--sdk"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err == "floorfirst: error: floorfirst mcp --sdk needs the MCP SDK: pip install '.[mcp]' in a clone of floorfirst\n"
