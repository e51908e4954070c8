"""Random option values on every command (hypothesis): each run ends in a clean document or one
line with exit 2 — the harness's classification, no traceback, hang, NaN or negative number.

Default run: a few dozen examples; `-m fuzz`: thousands. Values are garbage strings, numbers at
and past every limit, and the corpus's adversarial files and special files (FIFO, /dev/zero).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.harness import PROFILE, Tally, Workspace, invoke

NUMBERS = ["", "0", "-1", "-0", "nan", "inf", "-inf", "1e400", "1e-320", "x", "3", "7", "1.5", "32k", "1M",
           "4k,64k", "4k*3", "4k*0", "1:2", "10:5", "1k:8k:3", "1:8:500", "*", ",", "99999999999999999999", "0.999",
           "9" * 400, "-" + "9" * 400, "1E3", "139.3", "1e15"]  # issue 31: past int64, a reserve of the whole memory
NAMES = ["deepseek-v3.2", "llama-3.1-70b", "gpt-oss-120b", "kimi-k2", "glm-5", "qwen3-235b-a22b", "nope", "/x/config.json", ""]
GPUS = ["h200", "b200", "h20", "mi300x", "h200-calibrated", "nope", "/x.yaml"]


@st.composite
def invocations(draw, ws: Workspace):
    def corpus(kind):
        return st.sampled_from([str(p) for p in ws.files(kind)])

    num = st.sampled_from(NUMBERS)
    deployment = {"--model": st.one_of(st.sampled_from(NAMES), corpus("configs")),
                  "--hardware": st.one_of(st.sampled_from(GPUS), corpus("hardware")),
                  "--gpus": num, "--replicas": num, "--kv-dtype": st.sampled_from(["bf16", "fp8", "fp8_dsa", "q"]),
                  "--weight-dtype": st.sampled_from(["bf16", "fp8", "fp4", "int2"]), "--mem-fraction": num}
    point = {"--batch": num, "--context": num, "--attn": st.sampled_from(["tp", "cp", "dp", "dop", "x"]),
             "--moe": st.sampled_from(["ep", "tp", "y"]), "--prefill-tokens": num, "--prefill-context": num,
             "--page-tokens": num, "--reserve-gib": num, "--pricing": st.sampled_from(["datasheet", "achieved", "z"])}
    cal = {"--calibration": st.one_of(corpus("calibrations"), st.sampled_from(["/nope.json"]))}
    out = st.sampled_from([f"{ws.out}/o.json", f"{ws.out}/o.png", f"{ws.out}/o.xyz", "/nonexistent/o.png",
                           str(ws.out), ws.path("calibrations/fifo.json"), f"{ws.out}/{'q' * 300}.png",
                           "/proc/o.png", str(ws.root / "link_notes.png"), f"{ws.out}/dangling.png"])
    commands = {
        "models": {"--model": deployment["--model"]},
        "hardware": {"--hardware": deployment["--hardware"]},
        "floor": {**deployment, **point, **cal},
        "compare": {**deployment, **{k: v for k, v in point.items() if k not in ("--attn", "--moe")}, **cal},
        "capacity": {**deployment, "--context": num, "--page-tokens": num, "--reserve-gib": num},
        "walls": {**deployment, "--along": st.sampled_from(["batch", "context", "w"]), "--batch": num, "--context": num,
                  "--range": num, "--layouts": st.sampled_from(["tp/ep", "dp/ep,dop/ep", "zz", ""]), **cal, "--plot": out},
        "regimes": {**deployment, "--batch-range": num, "--context-range": num, "--floor": st.sampled_from(["max", "sum", "m"]),
                    **cal, "--plot": out},
        "triage": {**deployment, **point, "--threshold": num,
                   "--profile": st.one_of(corpus("profiles"), st.sampled_from([str(PROFILE)]))},
        "simulate": {"--model": deployment["--model"], "--hardware": deployment["--hardware"], "--gpus": num,
                     "--workload": st.one_of(st.sampled_from(["chat", "shrinking", "bursty", "longprompt", "rollout", "reasoning", "agentic", "x"]), corpus("traces")),
                     "--requests": st.sampled_from(["-5", "0", "1", "5", "x", "20"]), "--seed": num,
                     "--policy": st.sampled_from(["tp", "dp", "dynamic", "q"]), "--order": st.sampled_from(["fcfs", "boost", "srpt-oracle", "w"]),
                     "--rate": num, "--noise": num, "--boost": num, "--max-batch": num, **cal, "--plot": out},
        "calibrate": {"--profile": st.one_of(corpus("profiles"), st.sampled_from([str(PROFILE)])), "--out": out,
                      "--microbench": corpus("microbench"), "--loss": st.sampled_from(["soft_l1", "linear", "l7"]),
                      "--set": st.sampled_from(["model=llama-3.1-70b", "gpus=0", "x", "hardware=/dev/zero"])},
        "validate": {"--calibration": cal["--calibration"], "--profile": st.one_of(corpus("profiles"), st.sampled_from([str(PROFILE)])),
                     "--folds": num, "--seed": num},
        "microbench": {"--from": corpus("microbench"), "--yaml-out": out, "--hardware": deployment["--hardware"]},
    }
    cmd = draw(st.sampled_from(sorted(commands)))
    opts = draw(st.lists(st.sampled_from(sorted(commands[cmd])), max_size=4, unique=True))
    args = [cmd]
    if cmd == "triage" and "--profile" not in opts:
        args += ["--measured-ms", draw(num)]
    if cmd == "validate":
        opts = list(dict.fromkeys(["--calibration", "--profile", *opts]))
    if cmd == "microbench":
        opts = list(dict.fromkeys(["--from", *opts]))  # without --from it would need a GPU
    if cmd == "calibrate":
        opts = list(dict.fromkeys(["--out", *opts]))  # the default, ./calibration.json, is in the checkout
    if cmd == "simulate" and "--requests" not in opts:
        args += ["--requests", "5"]
    for o in opts:
        args += [o, draw(commands[cmd][o])]
    return args + ["--json"]


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace(tmp_path_factory.mktemp("fuzz-options"))


def _fuzz(ws, examples: int, timeout_s: float) -> Tally:
    tally = Tally()

    @settings(max_examples=examples, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(invocations(ws))
    def run(argv):
        o = tally.add(invoke(argv, timeout_s))
        assert o.kind in ("ok", "user_error"), str(o)

    run()
    return tally


def test_random_options_on_every_command(ws):
    _fuzz(ws, examples=40, timeout_s=20)


@pytest.mark.fuzz
def test_long_run_random_options_on_every_command(ws):
    tally = _fuzz(ws, examples=3000, timeout_s=30)
    print("\noption long run:", tally.summary())
