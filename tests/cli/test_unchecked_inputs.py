"""Issue 31 item 5 and issue 32 item 4: every input that used to reach exit 70 (or a traceback)
is refused in one line with exit 2; `simulate` says so when it serves nothing; under `--json` an
error is one floorfirst.error/1 document on stdout (and the same line on stderr); `--quiet` and
`--verbose` set what the log shows."""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from cli.main import main
from tests.agent.contracts import validate

H200_FOR_ENGINE_GIB = "139.29"  # usable 150,109,880,320 B less the 552,402,944 B context, in GiB


def run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def refused(argv: list[str], words: str) -> dict:
    """Exit 2, one stderr line holding `words`, and (with --json) the same line as a document."""
    code, out, err = run([*argv, "--json"])
    assert code == 2, (code, err[-500:])
    assert err.startswith("floorfirst: error: ") and err.count("\n") == 1 and words in err, err
    doc = json.loads(out)
    validate(doc, "error")
    assert doc == {"schema": "floorfirst.error/1", "error": err.removeprefix("floorfirst: error: ").rstrip("\n"),
                   "exit_code": 2}
    return doc


def test_a_reserve_of_the_whole_memory_is_refused():
    refused(["capacity", "--reserve-gib", "1E3"], f"reserve=1000 GiB per GPU is not below the {H200_FOR_ENGINE_GIB} GiB")
    refused(["compare", "--reserve-gib", "139.3"], "is not below")


def test_a_hardware_file_whose_context_exceeds_its_memory_is_refused(tmp_path):
    import yaml

    from planner.hardware.spec import DATA_DIR

    raw = yaml.safe_load((DATA_DIR / "h200.yaml").read_text())
    raw["memory"]["context_bytes"] = 2e11  # more than the 150 GB it has
    f = tmp_path / "ctx.yaml"
    f.write_text(yaml.safe_dump(raw))
    refused(["capacity", "--hardware", str(f)], "memory.context_bytes=2e+11 is not below the usable memory")


@pytest.mark.parametrize("flag", ["--batch", "--gpus", "--page-tokens"])
def test_integers_past_int64_are_refused_before_any_work(flag):
    refused(["floor", flag, "9" * 400], f"{flag}: an integer of 400 digits is out of range (over 2^63)")


def test_plot_paths_that_cannot_be_created_are_refused_before_any_work(tmp_path):
    refused(["walls", "--range", "1:8", "--plot", "/proc/x.png"], "/proc/x.png: cannot create a file there")
    link = tmp_path / "dangling.png"
    os.symlink(tmp_path / "nowhere" / "y.png", link)
    refused(["walls", "--range", "1:8", "--plot", str(link)], "is a symbolic link")
    assert not (tmp_path / "nowhere").exists()
    code, _, err = run(["walls", "--range", "1:8", "--plot", str(tmp_path / "w.png")])
    assert code == 0 and (tmp_path / "w.png").read_bytes()[:4] == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temporary file left


def test_compare_at_dp_64_states_the_negative_fraction_as_an_answer():
    """SGLang's default reserve at dp 64 exceeds an H200 (its DP-attention padding grows with dp): the
    fraction its formula gives is negative and the layout infeasible, in words, not an exit 70."""
    code, out, err = run(["compare", "--model", "deepseek-v3.2", "--hardware", "h200", "--gpus", "64", "--json"])
    assert code == 0, err
    doc = json.loads(out)
    validate(doc, "compare")
    dp = [x for x in doc["layouts"] if x["attn"] == "dp"]
    assert dp and all(x["memory"]["fraction"] < 0 and not x["memory"]["feasible"] for x in dp)
    assert all(x["memory"]["infeasible_reason"] for x in dp)


def test_simulate_that_serves_nothing_says_so():
    refused(["simulate", "--hardware", "h20", "-n", "50"], "served nothing: all 50 of 50 requests were aborted")


def test_usage_errors_are_error_documents_too():
    refused(["floor", "--attn", "sideways"], "sideways")
    refused(["floor", "--model", "no-such-model"], "unknown model 'no-such-model'")


def test_quiet_drops_the_notes_and_verbose_adds_the_timing():
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8"
    code, _, err = run(["floor", "--engine-args", launch, "--json"])
    assert code == 0 and "engine-args: --tp 8: read as --tp-size" in err
    code, out, err = run(["--quiet", "floor", "--engine-args", launch, "--json"])
    assert code == 0 and err == "" and json.loads(out)["schema"] == "floorfirst.floor/1"
    code, _, err = run(["--verbose", "floor", "--json"])
    assert code == 0 and "floorfirst floor: " in err and err.rstrip().endswith(" s")
    code, _, err = run(["--quiet", "floor", "--model", "nope"])  # a refusal is no log record: always printed
    assert code == 2 and err.startswith("floorfirst: error: unknown model")
