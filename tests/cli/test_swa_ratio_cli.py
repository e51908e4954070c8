"""--swa-full-tokens-ratio end to end: SGLang's hybrid SWA split at a given ratio (gpt-oss-120b,
8 × H200, TP: 115 requests of 128K at SGLang's 0.8, 138 at 0.5: floor(18,165,864 / 131,072),
tests/planner/test_sglang_swa_pools.py writes the split out), bad values refused in one line,
and the flag read from an SGLang launch line and written back."""

from __future__ import annotations

import math

import pytest

from cli.commands.launch import equivalent_options
from planner.launch import parse_launch
from tests.agent.contracts import run_cli, validate
from tests.cli.test_planning_cli import run

BASE = ["--model", "gpt-oss-120b", "--hardware", "h200", "--gpus", "8", "--engine", "sglang"]


def _capacity(*extra):
    return run_cli(["capacity", *BASE, "--context", "128k", *extra, "--json"])


def _tp(doc):
    return next(x for x in doc["layouts"] if x["attn"] == "tp" and x["moe"] == "ep")


def test_capacity_at_a_smaller_ratio_holds_more_long_requests():
    default, half = _capacity(), _capacity("--swa-full-tokens-ratio", "0.5")
    validate(half)
    assert default["swa_full_tokens_ratio"] is None and half["swa_full_tokens_ratio"] == 0.5
    assert _tp(default)["max_concurrency"] == 115
    assert _tp(half)["max_concurrency"] == 138 == math.floor(18_165_864 / 131072)
    assert _tp(half)["memory"]["defaults"]["swa_full_tokens_ratio"] == 0.5
    assert _tp(default)["memory"]["defaults"]["swa_full_tokens_ratio"] == 0.8


@pytest.mark.parametrize("command", [["floor", "--attn", "tp", "--batch", "8", "--context", "128k"],
                                     ["compare", "--batch", "8", "--context", "128k"],
                                     ["walls", "--context", "128k"],
                                     ["regimes", "--batch-range", "1:64:3", "--context-range", "8k:128k:3"],
                                     ["triage", "--measured-ms", "40", "--batch", "8", "--context", "128k"]])
def test_every_memory_command_takes_the_flag(command):
    doc = run_cli([*command, *BASE, "--swa-full-tokens-ratio", "0.25", "--json"])
    validate(doc)


def test_the_kv_wall_moves_out_with_the_ratio():
    def wall(*extra):
        doc = run_cli(["walls", *BASE, "--context", "128k", "--layouts", "tp/ep", *extra, "--json"])
        return doc["layouts"][0]["kv_wall_requests"]
    assert wall("--swa-full-tokens-ratio", "0.25") > wall() > wall("--swa-full-tokens-ratio", "1")


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1.5", "x"])
def test_a_bad_ratio_is_one_line_and_exit_2(capsys, value):
    code, out, err = run(capsys, "capacity", *BASE, "--swa-full-tokens-ratio", value)
    assert code == 2, (out, err)
    assert err.startswith("floorfirst: error: ") and err.count("\n") == 1, err
    assert "swa" in err and "Traceback" not in err


def test_vllm_refuses_the_sglang_flag_in_one_line(capsys):
    code, _, err = run(capsys, "capacity", "--model", "gpt-oss-120b", "--engine", "vllm", "--swa-full-tokens-ratio", "0.5")
    assert code == 2 and err.count("\n") == 1
    assert "swa_full_tokens_ratio=0.5 is SGLang's --swa-full-tokens-ratio; engine vllm has no such setting" in err


def test_the_launch_line_round_trips():
    line = "python -m sglang.launch_server --model-path openai/gpt-oss-120b --tp 8 --swa-full-tokens-ratio 0.5"
    r = parse_launch(line)
    assert r.options["swa_full_tokens_ratio"] == 0.5
    opts = equivalent_options(r.options)
    assert opts[opts.index("--swa-full-tokens-ratio") + 1] == "0.5"
    load = ["--hardware", "h200", "--batch", "8", "--context", "128k", "--json"]
    via_line = run_cli(["floor", "--engine-args", line, *load])
    via_opts = run_cli(["floor", *opts, *load])
    assert via_line["memory"] == via_opts["memory"]
    assert via_line["memory"]["defaults"]["swa_full_tokens_ratio"] == 0.5
    assert via_line["memory"]["kv_pool_tokens"] == 18_165_864
    assert _tp(run_cli(["capacity", "--engine-args", line, "--hardware", "h200", "--context", "128k", "--json"]))["max_concurrency"] == 138
    # without the flag the line reads as SGLang's default
    assert "swa_full_tokens_ratio" not in parse_launch(line.rsplit(" --swa", 1)[0]).options
    assert any("--disable-hybrid-swa-memory" in n for n in parse_launch(line + " --disable-hybrid-swa-memory").not_modelled)
