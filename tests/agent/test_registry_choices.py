"""One module, for real (issue 14 item 6): a layout or attention variant registered from a fixture
shows up in the CLI's `--attn`/`--policy` choices, in the MCP tool schemas and in the generated JSON
schemas, with no CLI, MCP or schema edit; the committed schemas are what the generator writes."""

from __future__ import annotations

import importlib.util
import json

import anyio
import pytest

import planner
from cli.inprocess import CommandRunner
from planner.layouts.base import _ATTN, register_attention_layout
from planner.models.attention.base import _REGISTRY as _VARIANTS
from tests.agent.contracts import SCHEMAS
from tests.fixtures.registry.toy_modules import ToyLayout, ToyVariant


def _generator():
    spec = importlib.util.spec_from_file_location("generate", SCHEMAS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def toy(monkeypatch):
    register_attention_layout(ToyLayout)
    _VARIANTS.register(ToyVariant)
    # NOTE: make_deployment still checks planner.deployment's typed tuple of names (issue 14's)
    monkeypatch.setattr("planner.deployment.ATTN_LAYOUTS", planner.ATTN_LAYOUTS + ("toy",))
    yield
    _ATTN.unregister("toy")
    _VARIANTS.unregister("toy_attention")


def _choices(runner: CommandRunner, command: str, option: str) -> list[str]:
    p = next(p for p in runner.group.commands[command].params if option in p.opts)
    return [getattr(c, "value", c) for c in p.type_descriptor.choices]


def test_a_toy_layout_is_in_the_cli_choices_and_runs(toy):
    r = CommandRunner(["floor", "triage", "simulate"])
    builtin = [n for n in planner.ATTN_LAYOUTS if n != "toy"]  # the registry's order, the toy last
    assert _choices(r, "floor", "--attn") == builtin + ["toy"]
    assert _choices(r, "triage", "--attn")[-1] == "toy"
    assert _choices(r, "simulate", "--policy") == builtin + ["toy", "dynamic"]
    doc = r.run("floor", ["--attn", "toy", "--batch", "8", "--context", "8k"])
    assert doc["attn"] == "toy" and doc["floor_max_s"] > 0
    assert {x["attn"] for x in r.run("compare", [])["layouts"]} >= {"toy"}


def test_a_toy_layout_is_in_the_mcp_tool_schemas(toy):
    from mcp import Client

    from cli.mcp_server import build_server

    async def body():
        async with Client(build_server(CommandRunner(["floor", "simulate"]))) as c:
            tools = {t.name: t.input_schema for t in (await c.list_tools()).tools}
            return tools, await c.call_tool("floor", {"attn": "toy", "batch": 8, "context": 8192})

    tools, answer = anyio.run(body)
    attn = tools["floor"]["properties"]["attn"]["anyOf"][0]
    assert attn["enum"] == [n for n in planner.ATTN_LAYOUTS if n != "toy"] + ["toy"]
    assert "toy" in tools["simulate"]["properties"]["policy"]["enum"]
    assert not answer.is_error and answer.structured_content["attn"] == "toy"


def test_a_toy_layout_and_variant_are_in_the_generated_json_schemas(toy):
    out = {k: json.loads(v) for k, v in _generator().generate().items()}
    assert out["floor.schema.json"]["properties"]["attn"]["enum"][-1] == "toy"
    assert out["compare.schema.json"]["$defs"]["point"]["properties"]["attn"]["enum"][-1] == "toy"
    lt = out["simulate.schema.json"]["properties"]["layout_time_s"]
    assert lt["required"][-1] == "toy" and lt["properties"]["toy"]["description"] == "Seconds spent in toy."
    assert out["simulate.schema.json"]["properties"]["policy"]["enum"][-2:] == ["toy", "dynamic"]
    attention = out["models.schema.json"]["properties"]["models"]["items"]["properties"]["attention"]
    assert "toy_attention" in attention["enum"] and attention["enum"] == sorted(attention["enum"])


def test_the_committed_schemas_are_what_the_generator_writes():
    for name, text in _generator().generate().items():
        assert (SCHEMAS / name).read_text() == text, f"schemas/{name} is stale: run python schemas/generate.py"
    floor = json.loads((SCHEMAS / "floor.schema.json").read_text())
    assert floor["properties"]["attn"]["enum"] == list(planner.ATTN_LAYOUTS)  # no toy left behind
