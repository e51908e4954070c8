"""The --context forms the README advertises: capacity takes a list or histogram (the mix's
concurrency from each length's own, with the arithmetic written out); walls says in one line that
it takes one length; a context above the model's window is warned about."""

from __future__ import annotations

import pytest

from cli.commands.floor import mix_concurrency
from tests.agent.contracts import run_cli


def test_a_mix_fits_by_each_lengths_share_of_the_pool():
    # 140 requests of 4k fit alone, 8 of 64k; 3 : 1 of them: 1 / (0.75/140 + 0.25/8) = 27.3 → 27
    assert mix_concurrency([140, 8], [3, 1]) == 27
    assert mix_concurrency([140], [1]) == 140 and mix_concurrency([140, 0], [1, 1]) == 0


def test_capacity_of_a_histogram():
    one = {(x["attn"], x["moe"]): x["max_concurrency"] for x in run_cli(["capacity", "--context", "4k", "--json"])["layouts"]}
    big = {(x["attn"], x["moe"]): x["max_concurrency"] for x in run_cli(["capacity", "--context", "64k", "--json"])["layouts"]}
    doc = run_cli(["capacity", "--context", "4k*3,64k", "--json"])
    assert doc["context_mix"] == [{"context_tokens": 4096.0, "requests": 3}, {"context_tokens": 65536.0, "requests": 1}]
    assert doc["context_tokens"] == (3 * 4096 + 65536) / 4
    for x in doc["layouts"]:
        k = (x["attn"], x["moe"])
        assert x["max_concurrency"] == mix_concurrency([one[k], big[k]], [3, 1]), k


def test_walls_takes_one_length(capsys):
    from cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(["walls", "--context", "4k,8k"])
    assert exc.value.code == 2 and "give one length" in capsys.readouterr().err


def test_a_context_past_the_window_is_warned_about(capsys):
    from cli.main import main

    with pytest.raises(SystemExit):
        main(["floor", "--context", "1M", "--batch", "1", "--attn", "dp", "--json"])
    err = capsys.readouterr().err
    assert "warning: context 1.05 M tokens exceeds deepseek-v3.2's window (max_position_embeddings) (160k tokens)" in err
