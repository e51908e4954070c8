"""The typed results of floorfirst.plan/compare/capacity/simulate are the documents the CLI's
`--json` prints for the same arguments (`document()` equal to the CLI's, key for key), every key
declared in the models (none left in `model_extra`), and undefined numbers None."""

import json

import pytest
from pydantic import BaseModel

import floorfirst
from cli.main import main

SGLANG_DP = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention"
VLLM_QWEN = "vllm serve Qwen/Qwen3-235B-A22B-FP8 -tp 8 --enable-expert-parallel"


def cli_json(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main([*args, "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    return json.loads(out.out)


def undeclared(m, path="") -> list[str]:
    """Keys a model holds that it doesn't declare, anywhere below it."""
    out = [f"{path}{k}" for k in (m.model_extra or {})]
    for name in type(m).model_fields:
        v = getattr(m, name)
        for i, x in enumerate(v if isinstance(v, list) else [v]):
            if isinstance(x, BaseModel):
                out += undeclared(x, f"{path}{name}[{i}]." if isinstance(v, list) else f"{path}{name}.")
    return out


def agree(result, doc):
    assert undeclared(result) == []
    assert result.document() == doc


PLAN_CASES = [
    (["--batch", "16", "--context", "8k"], dict(batch=16, context="8k")),
    (["--attn", "dp", "--context", "4k,4k,64k"], dict(attn="dp", context=[4096, 4096, 65536])),
    (["--attn", "tp", "--engine", "vllm", "--kv-dtype", "fp8", "--batch", "8", "--prefill-tokens", "4096",
      "--prefill-context", "16k", "--pricing", "achieved"],
     dict(attn="tp", engine="vllm", kv_dtype="fp8", batch=8, prefill_tokens=4096, prefill_context="16k",
          pricing="achieved")),
    (["--attn", "tp", "--batch", "4096", "--context", "128k"], dict(attn="tp", batch=4096, context=131072)),  # infeasible
    (["--engine-args", SGLANG_DP, "--batch", "64"], dict(launch=SGLANG_DP, batch=64)),
]


@pytest.mark.parametrize("args,kwargs", PLAN_CASES, ids=range(len(PLAN_CASES)))
def test_plan_is_floor(capsys, args, kwargs):
    agree(floorfirst.plan(**kwargs), cli_json(capsys, "floor", *args))


def test_an_infeasible_point_has_no_tokens_per_s():
    r = floorfirst.plan(attn="tp", batch=4096, context="128k")
    assert not r.feasible and r.decode_tokens_per_s is None and "exceeds its pool" in r.infeasible_reason


COMPARE_CASES = [
    (["--batch", "64"], dict(batch=64)),
    (["--model", "llama-3.1-70b", "--batch", "8", "--context", "8k"], dict(model="llama-3.1-70b", batch=8, context=8192)),
    (["--moe", "ep", "--layouts", "tp/ep,dp/ep", "--context", "4k*60,64k*4"],
     dict(moe="ep", layouts=["tp/ep", "dp/ep"], context={4096: 60, 65536: 4})),
    (["--host-tier", "--batch", "32", "--context", "64k"], dict(host_tier=True, batch=32, context="64k")),
    (["--engine-args", VLLM_QWEN, "--batch", "32", "--context", "16k"], dict(launch=VLLM_QWEN, batch=32, context="16k")),
]


@pytest.mark.parametrize("args,kwargs", COMPARE_CASES, ids=range(len(COMPARE_CASES)))
def test_compare_is_compare(capsys, args, kwargs):
    agree(floorfirst.compare(**kwargs), cli_json(capsys, "compare", *args))


CAPACITY_CASES = [
    ([], {}),
    (["--context", "4k*60,64k*4"], dict(context={4096: 60, 65536: 4})),
    (["--engine", "vllm", "--mem-fraction", "0.85", "--kv-dtype", "fp8", "--gpus", "4"],
     dict(engine="vllm", mem_fraction=0.85, kv_dtype="fp8", gpus=4)),
    (["--host-tier", "--hbm-budget-tokens", "2048", "--context", "128k"],
     dict(host_tier=True, hbm_budget_tokens=2048, context="128k")),
    (["--engine-args", SGLANG_DP], dict(launch=SGLANG_DP)),
]


@pytest.mark.parametrize("args,kwargs", CAPACITY_CASES, ids=range(len(CAPACITY_CASES)))
def test_capacity_is_capacity(capsys, args, kwargs):
    agree(floorfirst.capacity(**kwargs), cli_json(capsys, "capacity", *args))


SIMULATE_CASES = [
    (["--requests", "60"], dict(requests=60)),
    (["--requests", "80", "--workload", "shrinking", "--policy", "tp", "--order", "boost"],
     dict(requests=80, workload="shrinking", policy="tp", order="boost")),
    (["--requests", "40", "--workload", "bursty", "--rate", "5", "--seed", "3", "--noise", "0.05"],
     dict(requests=40, workload="bursty", rate=5.0, seed=3, noise=0.05)),
    (["--engine-args", SGLANG_DP, "--requests", "40"], dict(launch=SGLANG_DP, requests=40)),  # the launch's dp, fixed
]


@pytest.mark.parametrize("args,kwargs", SIMULATE_CASES, ids=range(len(SIMULATE_CASES)))
def test_simulate_is_simulate(capsys, args, kwargs):
    r = floorfirst.simulate(**kwargs)
    agree(r, cli_json(capsys, "simulate", *args))
    assert len(r.per_request["request"]) == r.requests and "per_request" not in r.document()


def test_the_launch_line_fills_the_knobs():
    r = floorfirst.simulate(launch=SGLANG_DP, requests=20)
    assert r.policy == "dp" and r.moe == "tp"
    p = floorfirst.plan(launch=VLLM_QWEN, batch=8)
    assert (p.engine, p.attn, p.moe, p.weight_dtype) == ("vllm", "tp", "ep", "fp8")  # the repo id's -FP8


def test_a_spec_travels_whole():
    spec = floorfirst.DeploymentSpec(model="deepseek-v3.2", hardware="h200", gpus=8, attn="dop", kv_dtype="fp8")
    assert floorfirst.plan(spec=spec, batch=8).kv_dtype == floorfirst.plan(attn="dop", kv_dtype="fp8", batch=8).kv_dtype
    assert floorfirst.plan(spec=spec, batch=8).document() == floorfirst.plan(batch=8, **spec.model_dump()).document()
    with pytest.raises(Exception):
        spec.gpus = 4  # frozen
