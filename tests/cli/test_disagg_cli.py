"""`floorfirst disagg`: the table, one-line errors, the sweep's plot (the document's contract is
tests/agent/test_json_contracts.py's)."""

from __future__ import annotations

import pytest

from tests.agent.contracts import run_cli


def _run(capsys, *argv):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_table_names_the_best_split_the_hand_off_and_the_launch_lines(capsys):
    code, out, _ = _run(capsys, "disagg", "--gpus", "24", "--input", "1k", "--tpot-ms", "50")
    assert code == 0
    assert "★ 1P(" in out and "8:16" in out  # one prefill node, two decode nodes
    assert "hand-off (mooncake, per_chunk)" in out and "colocated best" in out
    assert "--disaggregation-mode prefill" in out and "NixlConnector" in out


@pytest.mark.parametrize("argv,words", [
    (["--gpus", "1"], "gpus=1"),
    (["--gpus", "16", "--budget-nodes", "2"], "not both"),
    (["--engine", "trtllm"], "no KV transfer backend"),
    (["--input", "0"], "must be positive"),
    (["--tpot-ms", "-5"], "--tpot-ms=-5"),
])
def test_user_errors_are_one_line(capsys, argv, words):
    code, out, err = _run(capsys, "disagg", *argv)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1


def test_sweep_and_plot(tmp_path):
    path = tmp_path / "ratio.png"
    doc = run_cli(["disagg", "--model", "llama-3.1-70b", "--weight-dtype", "fp8", "--gpus", "16", "--tpot-ms", "50",
                   "--sweep-input", "1k,64k", "--plot", str(path), "--json"])
    assert path.stat().st_size > 10_000 and doc["plot"] == str(path)
    short, long = doc["ratio_sweep"]
    # a GQA model's P:D moves toward prefill as prompts grow
    assert short["prefill_gpus"] / 16 < long["prefill_gpus"] / 16
