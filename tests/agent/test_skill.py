"""The floor-first skill can't rot: its front matter is valid Agent Skills metadata, every command
in its ```bash examples runs and meets its JSON contract, and the claims its worked examples make
still hold."""

from __future__ import annotations

import contextlib
import re
import shlex

import pytest
import yaml

from tests.agent.contracts import ROOT, run_cli, validate

SKILL = ROOT / "skills" / "floor-first" / "SKILL.md"


def front_matter() -> dict:
    text = SKILL.read_text()
    m = re.match(r"^---\n(.*?)\n---\n", text, re.S)
    assert m, "SKILL.md must open with YAML front matter"
    return yaml.safe_load(m.group(1))


def example_commands() -> list[str]:
    """Every line of every ```bash block (backslash continuations joined)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", SKILL.read_text(), re.S | re.M)
    lines = []
    for block in blocks:
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                lines.append(line.strip())
    return lines


def argv_of(line: str) -> list[str]:
    words = shlex.split(line)
    assert words[0] == "floorfirst", f"not a floorfirst command: {line}"
    assert "--json" in words, f"an example must ask for --json: {line}"
    return words[1:]


def test_front_matter_is_agent_skills_metadata():
    meta = front_matter()
    assert meta["name"] == "floor-first" == SKILL.parent.name
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", meta["name"]) and len(meta["name"]) <= 64
    assert 0 < len(meta["description"]) <= 1024 and "Use when" in meta["description"]


def test_runbook_is_numbered_and_ends_in_a_report():
    text = SKILL.read_text()
    steps = [int(n) for n in re.findall(r"^(\d+)\. \*\*", text, re.M)]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= 6
    for field in ("floors:", "measurement:", "residual:", "verdict:", "next action:"):
        assert text.count(field) >= 3, f"the report field {field!r} is missing from the template or the examples"


def test_examples_cover_the_worked_questions():
    commands = {argv_of(line)[0] for line in example_commands()}
    assert {"compare", "triage", "capacity", "walls"} <= commands


@pytest.fixture(scope="module")
def example_doc():
    """The JSON of an example command (run once per module; examples name repository files by
    relative path, so they run from the repository root)."""
    done: dict[str, dict] = {}

    def doc(line: str) -> dict:
        if line not in done:
            with contextlib.chdir(ROOT):
                done[line] = run_cli(argv_of(line))
        return done[line]

    return doc


@pytest.mark.parametrize("line", example_commands())
def test_example_runs_and_meets_its_contract(example_doc, line):
    validate(example_doc(line))


def _by_layout(doc):
    return {f"{x['attn']}/{x['moe']}": x for x in doc["layouts"]}


def _example(example_doc, prefix: str) -> dict:
    """The JSON of the one example command that starts with `prefix`."""
    matches = [line for line in example_commands() if line.startswith(prefix)]
    assert len(matches) == 1, f"no single example starts with {prefix!r}"
    return example_doc(matches[0])


def test_claims_of_example_1_tp_or_dp(example_doc):
    base = "floorfirst compare --model deepseek-v3.2 --hardware h200 --gpus 8"
    small = _by_layout(_example(example_doc, f"{base} --batch 8 "))
    assert small["tp/ep"]["resources"]["kv_capacity"]["fits"] and small["dp/ep"]["resources"]["kv_capacity"]["fits"]
    assert small["tp/ep"]["floor_max_s"] < small["dp/ep"]["floor_max_s"] and small["dp/ep"]["binding"] == "hbm"
    big = _example(example_doc, f"{base} --batch 64 ")
    assert not _by_layout(big)["tp/ep"]["resources"]["kv_capacity"]["fits"]
    assert _by_layout(big)["tp/ep"]["resources"]["kv_capacity"]["used_fraction"] > 1
    assert big["best_by_max"]["attn"] == "dop"
    walls = _by_layout(_example(example_doc, "floorfirst walls --model deepseek-v3.2 --hardware h200 --gpus 8 --context 32k --layouts"))
    assert walls["tp/ep"]["kv_wall_requests"] == 18 and walls["dp/ep"]["kv_wall_requests"] == 41


def test_claims_of_example_2_what_to_profile(example_doc):
    head = "floorfirst triage --model deepseek-v3.2 --hardware h200 --gpus 8 --attn dp --batch 32 --context 8k"
    slow = _example(example_doc, f"{head} --measured-ms 30 ")
    assert (slow["verdict"], slow["profile"], slow["profile_resource"]) == ("above_sum", True, "hbm")
    assert round(slow["residual_fraction"], 2) == 0.73
    fine = _example(example_doc, f"{head} --measured-ms 18 ")
    assert (fine["verdict"], fine["profile"]) == ("above_sum", False) and round(fine["residual_fraction"], 2) == 0.04
    step = _example(example_doc, "floorfirst floor --model deepseek-v3.2 --hardware h200 --gpus 8 --attn dp")
    top = sorted(step["components"]["hbm_bytes"].items(), key=lambda kv: -kv[1])
    assert [k for k, _ in top[:2]] == ["experts_weights", "attention_weights"]


def test_claims_of_example_3_capacity(example_doc):
    cap = _by_layout(_example(example_doc, "floorfirst capacity --model deepseek-v3.2"))
    assert cap["tp/ep"]["kv_replication"] == 8 and cap["dp/ep"]["kv_replication"] == 1
    assert cap["tp/ep"]["max_concurrency"] < cap["dp/ep"]["max_concurrency"]
