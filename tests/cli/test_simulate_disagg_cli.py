"""`floorfirst simulate --disagg xPyD`: the JSON document (colocated metrics + the hand-off), the
GPUs the split uses, one-line errors with exit 2, and a pool that can't hold one request."""

import json

import pytest

from cli.main import main

BASE = ("simulate", "--model", "llama-3.1-70b", "--gpus", "4", "-n", "24", "--rate", "4")


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_disagg_json_has_the_colocated_metrics_and_the_hand_off(capsys):
    code, out, err = run(capsys, *BASE, "--disagg", "1P3D", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["schema"] == "floorfirst.simulate_disagg/1" and d["disagg"] == "1P3D"
    assert d["gpus"] == 16 and d["prefill_pool"]["gpus"] == 4 and d["decode_pool"]["gpus"] == 12
    for key in ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s",
                "handoff_queue_p50_s", "handoff_queue_p99_s", "handoff_transfer_p50_s", "ttft_parts_mean_s"):
        assert key in d
    assert d["completed"] == 24 and sum(d["decode_instance_requests"]) == 24
    assert len(d["prefill_instance_requests"]) == 1 and len(d["decode_instance_requests"]) == 3


def test_disagg_table_prints_the_hand_off_queue(capsys):
    code, out, err = run(capsys, *BASE, "--disagg", "2P1D", "--prefill-gpus", "8")
    assert code == 0, err
    assert "hand-off (mooncake, per_chunk): queue for decode KV" in out
    assert "prefill pool: 2 × 8 GPUs (16)" in out and "decode pool: 1 × 4 GPUs (4)" in out


@pytest.mark.parametrize("args,words", [
    (("--disagg", "1X3D"), "is not xPyD"),
    (("--disagg", "0P1D"), "is not xPyD"),
    (("--disagg", "1P1D", "--decode-layout", "zz"), "--decode-layout 'zz'"),
    (("--prefill-layout", "tp"), "need --disagg"),
    (("--disagg", "1P1D", "--replicas", "2"), "--replicas"),
    (("--disagg", "1P1D", "--decode-gpus", "0"), "--decode-gpus 0"),
])
def test_bad_disagg_input_is_one_line_exit_2(capsys, args, words):
    code, out, err = run(capsys, *BASE, *args)
    assert code == 2 and words in err and err.startswith("floorfirst: error:") and err.count("\n") == 1


def test_a_pool_that_cannot_hold_one_request_says_so(capsys, tmp_path):
    w = tmp_path / "w.csv"
    w.write_text("arrival_s,input_tokens,output_tokens\n0,100000,100000\n")
    code, out, err = run(capsys, "simulate", "--model", "llama-3.1-70b", "--gpus", "4", "--mem-fraction", "0.28",
                         "--workload", str(w), "-n", "1", "--disagg", "1P1D")
    assert code == 2 and "can't hold one request" in err and err.count("\n") == 1
    assert "tokens/s" not in out
