"""Random option values on the planning commands: every run ends in exit 0 or in one line on
stderr with exit 2 — never a traceback, never a silently wrong number (NaN/inf in the JSON)."""

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli.main import main

GARBAGE = st.sampled_from(["", "0", "-1", "nan", "inf", "1e400", "x", "3", "7", "1.5", "32k", "4k,64k", "4k*3",
                           "1:2", "10:5", "1k:8k:3", "tp", "zz", "/nonexistent.json", "*", ",", "1M", "-0"])
OPTIONS = {
    "--model": st.sampled_from(["deepseek-v3.2", "llama-3.1-70b", "gpt-oss-120b", "kimi-k2", "nope", "/x/config.json"]),
    "--hardware": st.sampled_from(["h200", "b200", "h20", "mi300x", "nope", "/x.yaml"]),
    "--gpus": GARBAGE, "--batch": GARBAGE, "--context": GARBAGE, "--attn": st.sampled_from(["tp", "cp", "dp", "dop", "x"]),
    "--moe": st.sampled_from(["ep", "tp", "y"]), "--replicas": GARBAGE, "--kv-dtype": st.sampled_from(["bf16", "fp8", "fp8_dsa", "q"]),
    "--weight-dtype": st.sampled_from(["bf16", "fp8", "fp4", "int2"]), "--mem-fraction": GARBAGE,
    "--prefill-tokens": GARBAGE, "--prefill-context": GARBAGE, "--page-tokens": GARBAGE, "--reserve-gib": GARBAGE,
}
COMMAND_OPTIONS = {
    "floor": list(OPTIONS), "compare": [o for o in OPTIONS if o not in ("--attn", "--moe")],
    "capacity": ["--model", "--hardware", "--gpus", "--context", "--replicas", "--kv-dtype", "--mem-fraction"],
    "triage": list(OPTIONS),
}


def _finite(x) -> bool:
    if isinstance(x, float):
        return math.isfinite(x)
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return True


@st.composite
def invocations(draw):
    cmd = draw(st.sampled_from(sorted(COMMAND_OPTIONS)))
    opts = draw(st.lists(st.sampled_from(COMMAND_OPTIONS[cmd]), max_size=4, unique=True))
    args = [cmd] + (["--measured-ms", draw(GARBAGE)] if cmd == "triage" else [])
    for o in opts:
        args += [o, draw(OPTIONS[o])]
    return args + ["--json"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(invocations())
def test_cli_never_tracebacks(capsys, args):
    with pytest.raises(SystemExit) as exc:
        main(args)
    out = capsys.readouterr()
    assert exc.value.code in (0, 2), (args, out.err)
    if exc.value.code == 2:
        assert out.err.startswith("floorfirst: error: ") and out.err.count("\n") == 1, (args, out.err)
        return
    doc = json.loads(out.out)
    # null is how an undefined quantity is written (e.g. no KV pool); a NaN/inf never leaks out
    assert _finite(doc), args
