"""cli/fast_coercion.py converts an option's value as typer's own pydantic adapter does (issue 32: one
CLI call without ~25 validators built): for every option of every command, on the values users type
and on its default, the fast path returns the same value of the same type, or hands the value to
typer's adapter, which returns or refuses it with typer's message."""

import subprocess
import sys
from enum import Enum
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ["0", "7", "-3", "64", "064", " 64", "64 ", "+5", "1_000", "1.0", "1.", "5.5", "-0.5", "0.25", "5e1",
           "1e-3", "abc", "", "nan", "inf", "-inf", "99999999999999999999", "123456789012345678",
           "1234567890.123456789", "true", "False", "dp", "DP", "ep", "vllm", "sglang", "tp+ep", "8k", "None"]


def _params():
    import typer.main

    import cli.main as m
    from cli.fast_coercion import _plain, install

    assert install()
    m._register_all()
    group = typer.main.get_command(m.app)
    out = []
    for name, cmd in sorted(group.commands.items()):
        for p in cmd.params:
            d = getattr(p, "type_descriptor", None)
            if d is not None and _plain(d):
                out.append((name, cmd, p))
    return out


def _run(rp, value, param, ctx):
    from typer._click.exceptions import BadParameter

    try:
        out = rp._coerce_value(value, param=param, ctx=ctx)
        return "ok", type(out), repr(out)  # repr: nan equals nan
    except BadParameter as exc:
        return "refused", exc.format_message()


def _mismatches():
    """(command, option, value, fast, typer's) for every value where the two differ; and counts."""
    import typer.core
    from typer._click import Context

    from cli.fast_coercion import _MISS, _fast_value

    params = _params()
    original = typer.core.build_runtime_param.original
    kinds = {p.type_descriptor.annotation for _, _, p in params}
    assert {str, int, float, bool} <= kinds and any(isinstance(k, type) and issubclass(k, Enum) for k in kinds), kinds
    bad, checked, fast_hits = [], 0, 0
    for name, cmd, p in params:
        ctx = Context(cmd, info_name=name)
        fast = typer.core.build_runtime_param(p.type_descriptor)
        slow = original(p.type_descriptor)
        assert type(fast).__name__ == "FastRuntimeParam"
        ann = p.type_descriptor.annotation
        values = list(SAMPLES) + [p.default, 3, 2.5, True, False]
        if isinstance(ann, type) and issubclass(ann, Enum):
            values += list(ann) + [m.value for m in ann] + [str(m.value).upper() for m in ann]
        for v in values:
            if v is None:
                continue
            fast_hits += _fast_value(ann, v, p.type_descriptor.parameter_info, ctx) is not _MISS
            got, want = _run(fast, v, p, ctx), _run(slow, v, p, ctx)
            if got != want:
                bad.append((name, p.name, v, got, want))
            checked += 1
    return bad, checked, fast_hits


def test_fast_values_equal_typer_adapters():
    bad, checked, fast_hits = _mismatches()
    assert not bad, bad[:10]
    assert checked > 1000 and fast_hits > 300, (checked, fast_hits)


@pytest.mark.parametrize("wrong", ["octal", "int_stays_int"])
def test_the_check_above_can_fail(wrong, monkeypatch):
    """A fast path that converted some value otherwise than typer (leading zeros read as octal; an
    int given to a float option kept an int) is caught by the comparison."""
    import cli.fast_coercion as fc

    right = fc._fast_value

    def broken(ann, value, info, ctx):
        if wrong == "octal" and ann is int and isinstance(value, str) and value[:1] == "0" and value.isdigit():
            return int(value, 8)
        if wrong == "int_stays_int" and ann is float and type(value) is int:
            return value
        return right(ann, value, info, ctx)

    monkeypatch.setattr(fc, "_fast_value", broken)
    bad, _, _ = _mismatches()
    assert bad


def test_a_planning_call_builds_no_option_validator():
    """`floor --json` converts all its options without a pydantic validator: typer's adapter module and
    pydantic's plugin loader (imported with the first validator) stay out of the call."""
    for _ in range(2):  # the first call fills the spec cache (validating the built-in specs builds validators)
        run = subprocess.run([sys.executable, "-X", "importtime", "-m", "cli.main", "floor", "--json"], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "numpy" in names and "typer" in names
    assert not {"typer._adapters", "pydantic.plugin._loader"} & names


@pytest.mark.parametrize("argv,rc,line", [
    (["floor", "--batch", "abc"], 2, "Invalid value for '--batch'"),
    (["floor", "--attn", "DP", "--json"], 2, None),
])
def test_refused_values_keep_typers_message(argv, rc, line, capsys):
    import cli.main as m

    with pytest.raises(SystemExit) as exc:
        m.main(argv)
    assert exc.value.code == rc
    if line:
        assert line in capsys.readouterr().err
