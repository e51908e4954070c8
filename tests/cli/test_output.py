"""Output a person reads: tables fit 100 columns when piped (COLUMNS when set, --wide for every
column), titles keep their brackets, memory is in GiB in every command, --version answers, and a
bare `floorfirst` prints its help once."""

from __future__ import annotations

import pytest

from cli.main import main


def run(capsys, *argv) -> str:
    with pytest.raises(SystemExit) as exc:
        main(list(argv))
    assert exc.value.code == 0
    return capsys.readouterr().out


def width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("argv", [["compare"], ["capacity"], ["walls"], ["floor"], ["regimes"], ["hardware"],
                                  ["triage", "--measured-ms", "30", "--attn", "dp"]])
def test_tables_fit_100_columns_when_piped(capsys, monkeypatch, argv):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert width(run(capsys, *argv)) <= 100


def test_columns_is_honoured_and_wide_shows_every_column(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    narrow = run(capsys, "compare")
    assert width(narrow) <= 120 and "decode kernel" not in narrow
    wide = run(capsys, "compare", "--wide")
    assert "decode kernel" in wide and "tokens/s" in wide


def test_titles_keep_their_brackets(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    text = " ".join(run(capsys, "floor", "--attn", "dp").split())  # the title wraps at the table's width
    assert "[fp8 weights, bf16 KV, datasheet]" in text


def test_memory_is_in_gib_in_every_command(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    floor = run(capsys, "floor", "--attn", "tp", "--batch", "64")
    kv_row = next(line for line in floor.splitlines() if "kv_capacity" in line)
    assert "GiB of" in kv_row and " GB" not in kv_row
    assert "GiB on the busiest rank exceeds its pool" in run(capsys, "compare", "--batch", "64")
    assert "KV pool" in run(capsys, "capacity") and "GiB/GPU" in run(capsys, "capacity")


def test_version_and_help_once(capsys):
    assert run(capsys, "--version").startswith("floorfirst ")
    assert run(capsys).count("Usage:") == 1
