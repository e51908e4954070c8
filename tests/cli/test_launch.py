"""--engine-args and explain-launch: a dozen real-shaped SGLang and vLLM launch lines
(tests/fixtures/launch/launch_lines.json, each with the source of its shape) read into the
deployments they describe; what floorfirst can't represent is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli.commands.launch import equivalent_options
from planner.errors import SpecError
from planner.launch import builtin_card, parse_launch
from tests.agent.contracts import run_cli, validate

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "launch" / "launch_lines.json").read_text())
LINES = FIXTURE["lines"]


@pytest.mark.parametrize("case", LINES, ids=[c["line"].split()[0] + str(i) for i, c in enumerate(LINES)])
def test_a_launch_line_reads_as_its_deployment(case):
    r = parse_launch(case["line"])
    assert r.options == case["options"]
    if "not_modelled_contains" in case:
        assert any(case["not_modelled_contains"] in n for n in r.not_modelled), r.not_modelled
    assert r.max_context_tokens == case.get("max_context_tokens")


def test_there_are_a_dozen_lines_of_both_engines():
    engines = [parse_launch(c["line"]).engine for c in LINES]
    assert len(LINES) >= 12 and engines.count("sglang") >= 6 and engines.count("vllm") >= 6


@pytest.mark.parametrize("case", FIXTURE["refused"], ids=lambda c: c["error"][:40])
def test_what_floorfirst_cannot_represent_is_refused_in_one_line(case):
    with pytest.raises(SpecError) as exc:
        parse_launch(case["line"])
    assert case["error"] in str(exc.value) and "\n" not in str(exc.value)


def test_each_spelling_says_how_it_was_read():
    r = parse_launch(LINES[0]["line"])
    by = {x.flag: x.meaning for x in r.readings}
    assert by["--tp"] == "read as --tp-size (argparse abbreviation)"
    assert by["--model-path"] == "--model deepseek-v3.2 (the built-in card of this repo id)"
    assert by["--enable-dp-attention"].startswith("--attn dp")
    r = parse_launch(LINES[8]["line"])
    assert {x.flag: x.meaning for x in r.readings}["-dp"] == "read as --data-parallel-size (alias)"
    assert parse_launch(LINES[1]["line"]).ignored == ("--trust-remote-code", "--host", "--port")


def test_repo_ids_map_to_the_longest_matching_card():
    assert builtin_card("deepseek-ai/DeepSeek-V3.2") == "deepseek-v3.2"  # never deepseek-v3
    assert builtin_card("deepseek-ai/DeepSeek-V3.2-Exp") == "deepseek-v3.2"
    assert builtin_card("deepseek-ai/DeepSeek-V3-0324") == "deepseek-v3"
    assert builtin_card("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8") == "qwen3-235b-a22b"
    assert builtin_card("mistralai/Mistral-Large") is None
    assert builtin_card("deepseek-ai/DeepSeek-V3.1") is None  # another release: its own config, never V3's card


def test_floor_with_engine_args_prices_the_launch_deployment(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["floor", "--engine-args", LINES[0]["line"], "--batch", "64", "--context", "8k", "--json"])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert exc.value.code == 0
    # fp8_e4m3 on a DSA model is SGLang's fp8 DSA record (planner.engines.kv_dtype)
    assert (doc["attn"], doc["moe"], doc["gpus"], doc["engine"], doc["kv_dtype"]) == ("dp", "tp", 8, "sglang", "fp8_dsa")
    assert doc["memory"]["fraction"] == pytest.approx(0.85)
    assert "engine-args: --tp 8: read as --tp-size (argparse abbreviation)\n" in out.err


def test_an_option_that_disagrees_with_the_launch_line_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        from cli.main import main

        main(["floor", "--gpus", "16", "--engine-args", LINES[7]["line"]])
    assert exc.value.code == 2
    assert capsys.readouterr().err.endswith("--gpus 16 disagrees with --engine-args, which reads as --gpus 8; give one of them\n")


def test_explain_launch_document_and_equivalent_options():
    doc = run_cli(["explain-launch", "--json", LINES[9]["line"]])
    validate(doc, "explain_launch")
    assert doc["floorfirst_options"] == equivalent_options(parse_launch(LINES[9]["line"]).options)
    assert doc["floorfirst_options"][:4] == ["--model", "deepseek-v3", "--gpus", "16"]
    assert doc["ignored"] == ["--data-parallel-address", "--data-parallel-rpc-port"]
