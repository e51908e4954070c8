"""Benchmark files and traces as their tools write them (tests/fixtures/bench, tests/fixtures/traces,
each with its format's source): simulate reads the Azure LLM inference trace CSV and Mooncake JSONL
directly; triage reads a `vllm bench serve --save-result` JSON and SGLang bench_serving JSONL with
`--set` for what they don't say, maps the repo id to its card, and a file with no usable row is one
line naming the missing fields."""

from __future__ import annotations

import json
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


# ---- issue 31 item 4: the files as the engines write them, one per version (fixtures/bench/README.md) ----
SGLANG_05 = FIX / "bench" / "sglang_bench_serving_0_5_details.jsonl"
VLLM_08 = FIX / "bench" / "vllm_benchmark_serving_0_8_result.json"
SGLANG_SET = ["--set", "model=deepseek-v3.2", *DEPLOYMENT]


def test_sglang_writes_its_default_rate_as_infinity_and_every_reader_takes_it():
    assert all('"request_rate": Infinity' in line for line in SGLANG.read_text().splitlines())  # what SGLang writes
    assert '"request_rate": Infinity' in SGLANG_05.read_text()
    # triage and calibrate read every run (before issue 31 every row was refused: "Infinity is not a number")
    doc = run_cli(["triage", "--profile", str(SGLANG_05), *SGLANG_SET, "--json"])
    validate(doc, "triage_profile")
    assert [r["batch"] for r in doc["rows"]] == [64] and doc["rows"][0]["measured_s"] == pytest.approx(61.0e-3)
    # simulate replays its requests all at t = 0 (it blamed a missing --output-details before)
    w = make_workload(str(SGLANG_05), 0)
    assert w.requests == 7 and set(w.arrival_s) == {0.0}  # the one-token request has no decode step: left out
    assert w.params["request_rate_per_s"] is None and w.params["left_out_no_output"] == 1
    doc = run_cli(["simulate", "--workload", str(SGLANG_05), "--requests", "0", "--policy", "dp", "--json"])
    validate(doc, "simulate")
    assert doc["completed"] == 7


@pytest.mark.parametrize("path,rate,n,batch", [(VLLM, None, 64, 32), (VLLM_08, 4.0, 64, 32),
                                               (FIX / "bench" / "sglang_bench_serving_details.jsonl", 4.0, 6, 16),
                                               (SGLANG_05, None, 7, 64)])
def test_every_engine_version_reads_as_a_profile_and_as_a_workload(path, rate, n, batch):
    doc = run_cli(["triage", "--profile", str(path), *SGLANG_SET, "--json"])
    assert [r["batch"] for r in doc["rows"]] == [batch] and not doc.get("rejected")
    w = make_workload(str(path), 0, seed=1)
    assert w.requests == n and w.params["request_rate_per_s"] == rate
    assert (set(w.arrival_s) == {0.0}) == (rate is None)


def test_a_statistic_of_no_samples_is_not_measured(tmp_path):
    """NaN (json.dumps of a mean over no samples) reads as absent: the summary's mean stands in for
    a NaN median; a row whose every TPOT is NaN is one row issue naming the missing field."""
    line = json.loads(SGLANG.read_text().splitlines()[0])
    line.update(median_tpot_ms=float("nan"), mean_ttft_ms=float("nan"))
    f = tmp_path / "nan.jsonl"
    f.write_text(json.dumps(line) + "\n")
    assert "NaN" in f.read_text()
    doc = run_cli(["triage", "--profile", str(f), *SGLANG_SET, "--json"])
    assert doc["rows"][0]["measured_s"] == pytest.approx(line["mean_tpot_ms"] / 1e3)
    line.update(mean_tpot_ms=float("nan"))
    f.write_text(json.dumps(line) + "\n")
    from calibration.loaders import load_profile

    prof = load_profile(f, {"model": "deepseek-v3.2", "hardware": "h200", "gpus": "8", "attn": "dp", "moe": "ep"})
    assert not prof.rows and len(prof.issues) == 1 and "NaN" not in prof.issues[0].message


def test_a_schema_row_with_nan_is_still_refused_where_it_is(tmp_path):
    from calibration.loaders import load_profile

    f = tmp_path / "rows.jsonl"
    f.write_text('{"model": "deepseek-v3.2", "step_ms": NaN}\n')
    (issue,) = load_profile(f).issues
    assert "NaN at line 1 column 39 is not a number (JSON has no NaN or Infinity)" in issue.message
