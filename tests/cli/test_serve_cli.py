"""`floorfirst serve`: the serving loop on the torch executor (gloo, 2 ranks) from the command
line, its JSON document, and one-line errors."""

import json

import pytest

from cli.main import main

TRACE = "arrival_s,input_tokens,output_tokens\n0,30,20\n0,50,24\n0,20,30\n0.01,40,12\n0.02,25,18\n"


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_serve_on_the_torch_executor_prints_the_simulate_metrics_and_what_it_measured(capsys, tmp_path):
    pytest.importorskip("torch")
    from tests.agent.contracts import validate

    trace = tmp_path / "w.csv"
    trace.write_text(TRACE)
    code, out, err = run(capsys, "serve", "--executor", "torch", "--gpus", "2", "-w", str(trace), "--device", "cpu",
                         "--json")
    assert code == 0, err
    d = json.loads(out)
    validate(d, "serve")
    assert d["executor"] == "torch" and d["completed"] == 5 and d["stack"]["device"] == "cpu"
    assert d["measured"]["steps"] >= 30 and d["measured"]["step_p50_s"] > 0
    assert len(d["measured"]["switch_stalls_s"]) == len(d["switches"])


@pytest.mark.parametrize("args", [
    ("--gpus", "3"),  # 8 heads don't split over 3 ranks
    ("--gpus", "16"),
    ("--dims", "model", "--model", "llama-3.1-70b"),  # not MLA
    ("--kv-pages", "1"),
    ("--device", "tpu"),
    ("--layers", "0"),
    ("--rate", "0"),
])
def test_bad_input_is_one_line_exit_2(capsys, args):
    code, out, err = run(capsys, "serve", "--executor", "sim", "-n", "5", *args)
    assert code == 2, err
    assert err.startswith("floorfirst: error:") and err.count("\n") == 1
