"""floorfirst.simulate_disagg is `floorfirst simulate --disagg xPyD --json`: the same document key for
key for the same arguments, every key declared, per_request riding along out of the document, and
the CLI's one-line errors raised as SpecError."""

import json

import pytest

import floorfirst
from cli.main import main
from tests.floorfirst.test_agreement import agree

CASES = [
    (["--model", "llama-3.1-70b", "--gpus", "4", "-n", "24", "--rate", "4", "--disagg", "1P3D"],
     dict(model="llama-3.1-70b", gpus=4, requests=24, rate=4, disagg="1P3D")),
    (["--gpus", "8", "-n", "30", "--disagg", "1P1D", "--prefill-layout", "tp", "--decode-layout", "dp", "--seed", "2",
      "--noise", "0.05"],
     dict(gpus=8, requests=30, disagg="1P1D", prefill_layout="tp", decode_layout="dp", seed=2, noise=0.05)),
    (["--model", "llama-3.1-70b", "--gpus", "4", "-n", "20", "--disagg", "2P1D", "--decode-gpus", "8",
      "--engine", "vllm", "--workload", "bursty", "--rate", "3"],
     dict(model="llama-3.1-70b", gpus=4, requests=20, disagg="2P1D", decode_gpus=8, engine="vllm", workload="bursty",
          rate=3.0)),
    (["--gpus", "8", "-n", "20", "--disagg", "1P2D", "--policy", "dp", "--kv-dtype", "fp8"],
     dict(gpus=8, requests=20, disagg="1P2D", policy="dp", kv_dtype="fp8")),
]


def cli_json(capsys, *args):
    with pytest.raises(SystemExit) as exc:
        main(["simulate", *args, "--json"])
    out = capsys.readouterr()
    assert exc.value.code == 0, out.err
    return json.loads(out.out)


@pytest.mark.parametrize("args,kwargs", CASES, ids=range(len(CASES)))
def test_simulate_disagg_is_simulate_disagg(capsys, args, kwargs):
    r = floorfirst.simulate_disagg(**kwargs)
    agree(r, cli_json(capsys, *args))
    assert len(r.per_request["request"]) == r.requests and "per_request" not in r.document()
    assert "timeline" not in r.document() and r.timeline is not None


def test_the_cli_passes_its_engine():
    # --engine vllm ran SGLang's pools and Mooncake before the API's test compared the documents
    r = floorfirst.simulate_disagg(model="llama-3.1-70b", gpus=4, requests=12, disagg="1P1D", engine="vllm")
    assert (r.engine, r.handoff_backend, r.handoff_overlap) == ("vllm", "nixl", "after_prefill")


def test_a_launch_line_sets_both_pools_layout():
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention"
    r = floorfirst.simulate_disagg(launch=launch, requests=12, disagg="1P1D")
    assert r.policy == "dp>dp" and r.gpus == 16
    r = floorfirst.simulate_disagg(launch=launch, requests=12, disagg="1P1D", prefill_layout="tp")
    assert r.policy == "tp>dp"


@pytest.mark.parametrize("kwargs,words", [
    (dict(disagg="1X3D"), "is not xPyD"),
    (dict(disagg="1P1D", replicas=2), "--replicas 2"),
    (dict(disagg="1P1D", decode_gpus=0), "--decode-gpus 0"),
    (dict(disagg="1P1D", decode_layout="zz"), "--decode-layout 'zz'"),
    (dict(disagg="1P1D", requests=0), "requests=0"),
    (dict(disagg=3), "disagg=3"),
])
def test_bad_input_is_one_spec_error_line(kwargs, words):
    with pytest.raises(floorfirst.SpecError) as exc:
        floorfirst.simulate_disagg(model="llama-3.1-70b", gpus=4, **kwargs)
    assert words in str(exc.value) and "\n" not in str(exc.value)
