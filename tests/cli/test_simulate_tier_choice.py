"""`simulate --host-tier --tier-choice`: the dynamic policy over each layout and its '+host' twin
(runtime_policy/host_tier_tables.py); without --host-tier or with a fixed policy, one line and exit 2."""

from __future__ import annotations

import json

import pytest

from cli.main import main

ARGS = ("simulate", "-m", "deepseek-v3.2", "-hw", "h200", "-g", "8", "-w", "longprompt", "-n", "16", "--rate", "2")


def run(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    out = capsys.readouterr()
    return exc.value.code, out.out, out.err


def test_tier_choice_reports_time_in_the_twins(capsys):
    code, out, _ = run(capsys, *ARGS, "--host-tier", "--tier-choice", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["completed"] == 16
    assert {"tp", "tp+host", "dop+host"} <= set(doc["layout_time_s"])


@pytest.mark.parametrize("extra", [(), ("--host-tier", "--policy", "dp")])
def test_tier_choice_needs_the_tier_and_the_dynamic_policy(capsys, extra):
    code, out, err = run(capsys, *ARGS, "--tier-choice", *extra)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "--tier-choice needs --host-tier and --policy dynamic" in err
