"""`simulate` serves on the engine its launch line names (issue 32 item 3): `--engine-args "vllm
serve …"` prices vLLM's steps (its shipped prior, its scheduler and memory), the same as `--engine
vllm`; an `--engine` that disagrees with the launch line is one line, exit 2."""

import json

import pytest

from cli.main import main

VLLM = "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8"


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def _doc(capsys, *args):
    code, out, err = run(capsys, "simulate", "--requests", "24", "--json", *args)
    assert code == 0, err
    return json.loads(out)


def test_launch_line_engine_prices_the_run(capsys):
    default = _doc(capsys, "--policy", "tp")
    vllm = _doc(capsys, "--engine-args", VLLM)
    flag = _doc(capsys, "--engine", "vllm", "--moe", "tp", "--policy", "tp")  # the line read as flags (explain-launch)
    assert "sglang" in default["step_time_model"] and "vllm" not in default["step_time_model"]
    assert "vllm" in vllm["step_time_model"]
    assert vllm == flag  # the launch line and the same knobs as flags: one deployment, one run


def test_engine_mismatch_is_one_line(capsys):
    code, out, err = run(capsys, "simulate", "--requests", "24", "--engine", "trtllm", "--engine-args", VLLM)
    assert code == 2
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("engine-args:")]
    assert len(lines) == 1 and "--engine trtllm" in lines[0] and "vllm" in lines[0], err
