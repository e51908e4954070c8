"""Profile loaders: the step and serving schemas, vLLM/SGLang summaries, bad rows with line numbers."""

import json

import pytest

import planner
from calibration.costs import price_profile
from calibration.loaders import load_profile, parse_defaults
from calibration.schema import ServingRow

DEP = dict(model="deepseek-v3", hardware="h200", gpus=8, attn="dp", moe="ep")


def test_csv_bad_rows_are_reported_with_line_numbers(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("model,hardware,gpus,attn,moe,batch,context,step_ms\n"
                 "deepseek-v3,h200,8,tp,ep,32,4096,30.5\n"      # line 2: good
                 "deepseek-v3,h200,8,tp,ep,-1,4096,30.5\n"      # line 3: negative batch
                 "deepseek-v3,h200,8,tp,ep,32,4096,\n"          # line 4: no step_ms
                 "deepseek-v3,h200,8,tp,ep,32,lots,30\n"        # line 5: not a number
                 "\n"
                 "deepseek-v3,h200,8,dp,ep,64.0,8192,41\n")     # line 7: good (64.0 is a whole number)
    prof = load_profile(p)
    assert [r.line for r in prof.rows] == [2, 7]
    assert {i.line for i in prof.issues} == {3, 4, 5}
    msgs = {i.line: i.message for i in prof.issues}
    assert "batch" in msgs[3] and "step_ms" in msgs[4] and "context" in msgs[5]
    assert prof.sources[0]["rows"] == 2 and prof.sources[0]["rows_rejected"] == 3


def test_jsonl_malformed_line_and_extra_columns(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({**DEP, "batch": 8, "context": 1024, "step_ms": 20, "kernel": "triton"}) + "\n{oops\n")
    prof = load_profile(p)
    assert len(prof.rows) == 1 and prof.issues[0].line == 2 and "malformed JSON" in prof.issues[0].message
    assert "kernel" in prof.notes[0]


def test_serving_row_shows_its_steady_state_decode_step():
    s = ServingRow(**DEP, isl=1000, osl=500, concurrency=64, tpot_ms=40.0)
    st = s.to_step()
    # batch = concurrency; context = isl + osl/2; the prefill chunks are priced as steps of their own
    # (tests/calibration/test_serving_rows.py)
    assert (st.batch, st.context, st.prefill_tokens, st.step_ms) == (64, 1250.0, 0.0, 40.0)


def test_vllm_result_with_deployment_from_set(tmp_path):
    doc = {"model_id": "deepseek-ai/DeepSeek-V3", "max_concurrency": 32, "completed": 320,
           "total_input_tokens": 320 * 2000, "total_output_tokens": 320 * 200, "mean_tpot_ms": 31.0,
           "median_tpot_ms": 30.0, "mean_ttft_ms": 900.0, "request_rate": "inf"}
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps(doc))
    prof = load_profile(p, parse_defaults([f"{k}={v}" for k, v in DEP.items()]))
    (lr,) = prof.rows
    assert lr.row.batch == 32 and lr.row.context == 2100.0 and lr.serving.isl == 2000.0 and lr.serving.osl == 200.0
    assert lr.row.step_ms == 30.0 and lr.serving.ttft_ms == 900.0
    assert prof.sources[0]["kind"] == "vllm"


def test_vllm_result_without_deployment_is_a_row_issue(tmp_path):
    p = tmp_path / "vllm.json"
    p.write_text(json.dumps({"max_concurrency": 4, "completed": 8, "total_input_tokens": 80, "total_output_tokens": 80,
                             "mean_tpot_ms": 10.0}))
    prof = load_profile(p)
    assert not prof.rows and "missing fields model, hardware" in prof.issues[0].message


def test_sglang_jsonl_lines(tmp_path):
    lines = [{"backend": "sglang", **DEP, "max_concurrency": c, "completed": 100, "total_input_tokens": 100 * 4096,
              "total_output_tokens": 100 * 1024, "median_tpot_ms": 20.0 + c / 10} for c in (8, 64)]
    p = tmp_path / "sglang.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    prof = load_profile(p)
    assert [r.row.batch for r in prof.rows] == [8, 64]
    assert prof.sources[0]["kind"] == "sglang"


def test_unpriceable_rows_become_issues_not_exceptions(tmp_path):
    p = tmp_path / "p.jsonl"
    p.write_text(json.dumps({**DEP, "model": "no-such-model", "batch": 8, "context": 1024, "step_ms": 20}) + "\n" +
                 json.dumps({**DEP, "batch": 8, "context": 1024, "step_ms": 20}) + "\n")
    costs = price_profile(load_profile(p))
    assert costs.size == 1 and costs.issues[0].line == 1 and "no-such-model" in costs.issues[0].message


@pytest.mark.parametrize("name,text,match", [
    ("x.txt", "a", "unknown profile format"),
    ("x.json", "{", "malformed JSON"),
    ("x.json", json.dumps({"traceEvents": []}), "trace is not a step profile"),
    ("x.json", json.dumps({"kind": "floorfirst.microbench"}), "--microbench"),
])
def test_unreadable_files_raise_one_line(tmp_path, name, text, match):
    (tmp_path / name).write_text(text)
    with pytest.raises(planner.SpecError, match=match):
        load_profile(tmp_path / name)


def test_missing_file():
    with pytest.raises(planner.SpecError, match="not found"):
        load_profile("/nonexistent/profile.csv")


def test_committed_h200_profile_loads_clean():
    prof = load_profile("calibration/data/h200x2_step_profile.jsonl")
    costs = price_profile(prof)
    assert costs.size >= 100 and not prof.issues and not costs.issues
    assert {(r.row.gpus, r.row.attn) for r in prof.rows} == {(1, "tp"), (2, "tp"), (2, "dp")}


def test_reduced_stack_rows_must_name_their_own_config(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text("model,hardware,gpus,attn,moe,batch,context,step_ms,num_layers\n"
                 "deepseek-v3,h200,2,tp,tp,8,4096,3.0,4\n"
                 "calibration/data/probe-mla-dense-4l.json,h200,2,tp,tp,8,4096,3.0,4\n")
    costs = price_profile(load_profile(p))
    assert costs.size == 1 and costs.issues[0].line == 2 and "num_layers=4" in costs.issues[0].message
