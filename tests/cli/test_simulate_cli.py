"""`floorfirst simulate` end to end: JSON keys with units, exit code 2 on bad input."""

import json

import pytest

from cli.main import main


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_simulate_json_keys(capsys, tmp_path):
    png = tmp_path / "t.png"
    code, out, err = run(capsys, "simulate", "--workload", "shrinking", "-n", "60", "--policy", "dynamic",
                         "--order", "boost", "--json", "--plot", str(png))
    assert code == 0, err
    d = json.loads(out)
    for key in ("throughput_tokens_per_s", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p99_s", "ttlt_p50_s",
                "ttlt_p99_s", "switches", "step_time_model", "makespan_s", "completed"):
        assert key in d
    assert d["completed"] == 60
    for s in d["switches"]:
        assert {"from", "to", "at_s", "cost_s", "reason"} <= set(s)
    assert png.stat().st_size > 1000


@pytest.mark.parametrize("args", [
    ("--workload", "nope"),
    ("--workload", "missing.csv"),
    ("--requests", "0"),
    ("--policy", "zz"),
    ("--order", "sjf"),
    ("--gpus", "3"),
    ("--calibration", "missing.json"),
    ("--noise", "-1"),
    ("--rate", "0"),
    ("--model", "llama-3.1-70b", "--moe", "ep"),
])
def test_bad_input_is_one_line_exit_2(capsys, args):
    code, out, err = run(capsys, "simulate", "-n", "5", *args)
    assert code == 2
    assert err.startswith("floorfirst: error:") and err.count("\n") == 1


def test_bad_csv_row_names_line(capsys, tmp_path):
    p = tmp_path / "w.csv"
    p.write_text("arrival_s,input_tokens,output_tokens\n0,10,5\n1,abc,5\n")
    code, _, err = run(capsys, "simulate", "--workload", str(p), "-n", "5")
    assert code == 2 and "line 3" in err


@pytest.mark.parametrize("args", [["--seed", "-1"], ["--rate", "0"], ["--rate", "nan"]])
def test_bad_seed_or_rate_is_one_line_and_exit_2(capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--requests", "5", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith("floorfirst: error: ") and err.count("\n") == 1, err
