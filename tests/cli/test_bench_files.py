"""Benchmark files and traces as their tools write them (tests/fixtures/bench, tests/fixtures/traces,
each with its format's source): simulate reads the Azure LLM inference trace CSV and Mooncake JSONL
directly; triage reads a `vllm bench serve --save-result` JSON and SGLang bench_serving JSONL with
`--set` for what they don't say, maps the repo id to its card, and a file with no usable row is one
line naming the missing fields."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.errors import SpecError
from runtime_policy.workloads import make_workload
from tests.agent.contracts import run_cli, validate

FIX = Path(__file__).parents[1] / "fixtures"
AZURE = FIX / "traces" / "azure_llm_inference_conv_excerpt.csv"
MOONCAKE = FIX / "traces" / "mooncake_trace_excerpt.jsonl"
VLLM = FIX / "bench" / "vllm_bench_serve_result.json"
SGLANG = FIX / "bench" / "sglang_bench_serving.jsonl"
DEPLOYMENT = ["--set", "hardware=h200", "--set", "gpus=8", "--set", "attn=dp", "--set", "moe=ep"]


def test_the_azure_trace_reads_as_published():
    w = make_workload(str(AZURE), 0)
    lines = AZURE.read_text().splitlines()[1:]
    assert w.requests == len(lines) == 24
    first, second = lines[0].split(","), lines[1].split(",")
    # 18:15:46.2168128 → 18:15:46.6749078: 0.4580950 s apart, the first at 0
    assert w.arrival_s[0] == 0.0 and w.arrival_s[1] == pytest.approx(0.4580950, abs=1e-6)
    assert (w.input_tokens[0], w.output_tokens[0]) == (int(first[1]), int(first[2]))
    assert (w.input_tokens[1], w.output_tokens[1]) == (int(second[1]), int(second[2]))
    assert np.all(np.diff(w.arrival_s) >= 0) and w.params["format"] == "azure_llm_inference"


def test_the_mooncake_trace_reads_milliseconds():
    w = make_workload(str(MOONCAKE), 5)
    assert w.requests == 5 and w.params["format"] == "mooncake"
    # timestamps 689 and 841 ms → 0 and 0.152 s
    assert w.arrival_s[:2] == pytest.approx([0.0, 0.152])
    assert list(w.input_tokens[:2]) == [880, 25411] and list(w.output_tokens[:2]) == [1, 52]


def test_prefill_only_requests_are_left_out_and_counted(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,100,0\n2023-11-16 18:15:47.1,200,5\n")
    w = make_workload(str(f), 0)
    assert w.requests == 1 and w.params["left_out_no_output"] == 1 and w.arrival_s[0] == 0.0


@pytest.mark.parametrize("text,error", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,100,5\n", "line 2: TIMESTAMP='yesterday' is not a date-time"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-3,5\n", "line 2: ContextTokens='-3' must be a whole number"),
    ("timestamp,in,out\n1,2,3\n", "or an Azure LLM inference trace's TIMESTAMP,ContextTokens,GeneratedTokens"),
])
def test_a_bad_azure_row_is_one_line(tmp_path, text, error):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(SpecError, match=error):
        make_workload(str(f), 0)


def test_a_mooncake_line_without_its_fields_names_them(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 10, "output_length": 3}\n{"timestamp": 5, "input": 10}\n')
    with pytest.raises(SpecError, match=r"line 2: missing input_length, output_length \(a Mooncake trace line has"):
        make_workload(str(f), 0)


def test_simulate_serves_both_traces():
    for trace, n in ((AZURE, 24), (MOONCAKE, 20)):
        doc = run_cli(["simulate", "--workload", str(trace), "--requests", "0", "--policy", "dp", "--json"])
        validate(doc, "simulate")
        assert doc["completed"] == n


def test_a_vllm_result_without_a_deployment_is_one_line_naming_the_fields(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["triage", "--profile", str(VLLM)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1
    assert "missing fields hardware, gpus, attn, moe (the file doesn't say: give them with --set hardware=…" in err


def test_the_vllm_result_with_set_is_triaged_on_its_card():
    doc = run_cli(["triage", "--profile", str(VLLM), *DEPLOYMENT, "--json"])
    validate(doc, "triage_profile")
    (row,) = doc["rows"]
    assert row["deployment"].startswith("deepseek-v3.2 ")  # model_id deepseek-ai/DeepSeek-V3.2, not deepseek-v3
    assert row["batch"] == 32 and row["measured_s"] == pytest.approx(78.8e-3)  # median_tpot_ms at concurrency 32


def test_the_sglang_jsonl_gives_one_row_per_run():
    doc = run_cli(["triage", "--profile", str(SGLANG), "--set", "model=deepseek-v3.2", *DEPLOYMENT, "--json"])
    assert [r["batch"] for r in doc["rows"]] == [16, 32, 64]


def test_a_bench_result_that_lists_its_requests_is_a_workload():
    w = make_workload(str(VLLM), 0)
    assert w.requests == 64 and set(w.arrival_s) == {0.0}  # request_rate inf: all sent at once
    assert w.params["max_concurrency_not_replayed"] == 32
    s = make_workload(str(FIX / "bench" / "sglang_bench_serving_details.jsonl"), 0, seed=3)
    assert list(s.output_tokens) == [512, 512, 480, 512, 300, 512]
    gaps = np.diff(np.concatenate([[0.0], make_workload(str(FIX / "bench" / "sglang_bench_serving_details.jsonl"), 0,
                                                                     seed=3).arrival_s]))
    assert s.params["request_rate_per_s"] == 4.0 and np.all(gaps >= 0)


def test_a_bench_summary_without_requests_says_which_flag_writes_them():
    with pytest.raises(SpecError, match="no per-request lengths .* SGLang bench_serving needs --output-details"):
        make_workload(str(SGLANG), 0)
