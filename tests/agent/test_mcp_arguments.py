"""`floorfirst mcp` takes what agents send (issue 18): a real MCP client over stdio sends integers
and numeric strings for counts and contexts, lists where the CLI takes comma lists or repeats an
option, a launch command in engine_args, and unknown or misspelt names; every answer is checked —
documents against their contracts, errors as one line naming the argument and the nearest name."""

from __future__ import annotations

import shutil
import sys

import anyio
from mcp import Client, StdioServerParameters

from tests.agent.contracts import PROFILE, ROOT, validate

LAUNCH = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp 8 --dp 8 --enable-dp-attention"


def test_what_agents_send_over_stdio(tmp_path):
    # NOTE: the server's root is tmp_path: paths are relative to it, and the profile is copied in
    shutil.copy(PROFILE, tmp_path / "profile.jsonl")
    (tmp_path / "calibration" / "data").mkdir(parents=True)  # the model its rows name, by a relative path
    shutil.copy(ROOT / "calibration" / "data" / "probe-mla-dense-4l.json", tmp_path / "calibration" / "data")
    cal, profile = "cal.json", "profile.jsonl"
    calls = [
        ("floor", {"context": 8192, "batch": "16", "attn": "dp", "gpus": 8}),
        ("compare", {"context": ["4k", "4k", "64k"], "layouts": ["dp/ep", "tp/ep"]}),
        ("capacity", {"context": 32768, "gpus": "8"}),
        ("walls", {"range": "1:256", "layouts": ["dp/ep", "tp/ep"]}),
        ("triage", {"measured_ms": "30", "attn": "dp", "batch": 32, "context": "8k"}),
        ("triage_profile", {"profile": profile, "set": ["engine=sglang"]}),
        ("calibrate", {"profile": profile, "out": cal}),
        ("validate", {"calibration": cal, "profile": [profile], "folds": "3"}),
        ("floor", {"engine_args": LAUNCH, "batch": 16, "context": "8k"}),
        ("explain_launch", {"command": LAUNCH}),
        ("simulate", {"requests": "40", "workload": "shrinking", "policy": "dp"}),
        ("floor", {"tp_size": 8, "enable_dp_attention": True}),
        ("walls", {"rnage": "1:256"}),
        ("compare", {"context": "32k", "bacth": 8}),
        ("floor", {"gpus": "many"}),
        ("floor", {"engine_args": "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 -pp 2"}),
    ]
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=["-c", f"from cli.main import main; main(['mcp', '--root', {str(tmp_path)!r}])"])

    async def main():
        async with Client(params) as c:
            return [await c.call_tool(name, args) for name, args in calls]

    out = anyio.run(main)
    ok, errors = out[:11], out[11:]
    for (name, _), r in zip(calls, ok):
        assert not r.is_error, f"{name}: {r.content[0].text}"
        validate(r.structured_content, {"triage_profile": "triage_profile"}.get(name, name))
    floor, compare, capacity, walls, triage, _, _, validate_doc, launched, explained, _ = (r.structured_content for r in ok)
    assert (floor["batch"], floor["context_mean_tokens"], floor["attn"]) == (16, 8192.0, "dp")
    assert compare["batch"] == 3 and {(x["attn"], x["moe"]) for x in compare["layouts"]} == {("dp", "ep"), ("tp", "ep")}
    assert capacity["context_tokens"] == 32768 and walls["range_requests"] == [1.0, 256.0]
    assert triage["measured_s"] == 0.03 and validate_doc["folds"] == 3
    assert (launched["attn"], launched["moe"], launched["gpus"]) == ("dp", "tp", 8)
    assert explained["options"]["attn"] == "dp"
    texts = [r.content[0].text for r in errors]
    assert all(r.is_error for r in errors) and all("\n" not in t for t in texts), texts
    assert texts[0].startswith("floor: unknown argument 'tp_size'; an engine launch flag goes in engine_args")
    assert texts[1] == "walls: unknown argument 'rnage'; did you mean 'range'?"
    assert texts[2] == "compare: unknown argument 'bacth'; did you mean 'batch'?"
    assert texts[3].startswith("floor: argument 'gpus'='many': Input should be a valid integer")
    assert "--pipeline-parallel-size 2: pipeline parallelism is not a floorfirst layout" in texts[4]
