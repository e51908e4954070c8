"""The MCP tools call the command functions with parameter values (CommandRunner.call_text: no
command line built or parsed); each answer and each error line is the one the same options give on
the command line (run_text). A worker registers a command's module only when it is first called."""

import pytest

from cli.inprocess import CommandError, CommandRunner
from cli.mcp_server import COMMAND_MODULES, TOOLS
from cli.tool_options import command_line, parameter_values, tool_options

CASES = [
    ("floor", {"model": "deepseek-v3.2", "attn": "dp", "batch": 16, "context": "8k"}),
    ("compare", {"model": "glm-5", "hardware": "b200", "batch": 32, "context": "64k", "layouts": ["dp/ep", "tp/ep"]}),
    ("capacity", {"model": "kimi-k2", "context": [4096, 4096, 65536]}),
    ("triage", {"measured_ms": 30, "attn": "dp", "batch": 32, "context": "8k"}),
    ("walls", {"model": "deepseek-v3.2", "layouts": "dp/ep,dop/ep", "range": "1:512"}),
    ("explain_launch", {"command": "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 --enable-expert-parallel"}),
    ("hardware", {"hardware": "h200"}),
    ("floor", {"engine_args": "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 "
                              "--enable-dp-attention", "batch": 64}),
]
ERRORS = [
    ("floor", {"model": "no-such-model"}),
    ("floor", {"batch": 0}),
    ("triage", {"measured_ms": 30, "context": "4k,8k", "batch": 5}),
    ("capacity", {"context": "-4k"}),
]


@pytest.fixture(scope="module")
def runner():
    return CommandRunner(COMMAND_MODULES, lazy=True)


def _both(runner, tool, args):
    spec = next(t for t in TOOLS if t.name == tool)
    runner.prepare(spec.command)
    options = tool_options(runner.group.commands[spec.command], spec.drop, spec.only, spec.required)
    return (lambda: runner.call(spec.command, parameter_values(options, args)),
            lambda: runner.run(spec.command, command_line(options, args)))


@pytest.mark.parametrize("tool,args", CASES, ids=[c[0] for c in CASES])
def test_a_call_answers_what_the_command_line_does(runner, tool, args):
    call, run = _both(runner, tool, args)
    assert call() == run()


@pytest.mark.parametrize("tool,args", ERRORS, ids=range(len(ERRORS)))
def test_a_call_errs_as_the_command_line_does(runner, tool, args):
    call, run = _both(runner, tool, args)
    with pytest.raises(CommandError) as a:
        call()
    with pytest.raises(CommandError) as b:
        run()
    assert str(a.value) == str(b.value) and str(a.value)


def test_a_lazy_runner_imports_a_module_on_its_first_call():
    r = CommandRunner(["specs", "floor", "simulate"], lazy=True)
    assert {"models", "floor", "simulate"} <= r.commands and r.group is None
    r.call("models", {})
    assert sorted(r.group.commands) == ["hardware", "models"]
    r.call("capacity", {"context": "8k"})
    assert sorted(r.group.commands) == ["capacity", "compare", "floor", "hardware", "models"]
