"""Issue 31 item 1: the MCP server's root. Every path a tool reads or writes resolves inside it
(symlinks first); a path outside reads as missing, in the same words; writes go only to new files
unless the call says overwrite; errors quote no file content; tool annotations tell the truth;
model names resolve to the built-ins first; an abandoned call is stopped. Calls go through a real
MCP client session and the worker pool (cli.inprocess.WorkerPool with root=…), as `floorfirst mcp
--root DIR` serves them."""

from __future__ import annotations

import json
import os
import shutil
import time

import anyio
import pytest
from mcp import Client

from cli.inprocess import WorkerPool
from cli.mcp_server import COMMAND_MODULES, build_server
from planner.hardware.spec import DATA_DIR
from planner.models.loader import CARDS_DIR
from tests.agent.contracts import PROFILE, ROOT, validate

SECRET = "Zq7-planted-secret-9Xk"
SECRET_NUMBER = 7771337


@pytest.fixture(scope="module")
def space(tmp_path_factory):
    """root/ (the server's root) and outside/ (a sibling it must never reach), with real files."""
    base = tmp_path_factory.mktemp("mcp-root")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    for d in (root, outside):
        shutil.copy(CARDS_DIR / "deepseek-v3.json", d / "config.json")
        shutil.copy(DATA_DIR / "h200.yaml", d / "gpu.yaml")
        shutil.copy(PROFILE, d / "profile.jsonl")
        (d / "calibration" / "data").mkdir(parents=True)
        shutil.copy(ROOT / "calibration" / "data" / "probe-mla-dense-4l.json", d / "calibration" / "data")
    (outside / "secret.json").write_text(json.dumps({"hidden_size": SECRET, "token": SECRET}))
    (outside / "notes.txt").write_text("keep me\n")
    os.symlink(outside / "config.json", root / "link_out.json")  # a link inside that points out
    os.symlink(outside, root / "outdir")  # a folder link that points out
    os.symlink(outside / "notes.txt", root / "link_notes.png")
    return root, outside


@pytest.fixture(scope="module")
def server(space):
    pool = WorkerPool(COMMAND_MODULES, workers=2, root=str(space[0]))
    yield build_server(pool)
    pool.close()


def calls(server, plan):
    async def main():
        async with Client(server) as c:
            return [await c.call_tool(name, args) for name, args in plan]

    return anyio.run(main)


def text(r) -> str:
    return r.content[0].text


def test_reads_outside_the_root_read_as_missing_in_the_same_words(server, space):
    root, outside = space
    probes = [str(outside / "config.json"), str(outside / "nothing.json"), "../outside/config.json",
              "../outside/nothing.json", str(root / "link_out.json"), "outdir/config.json", "outdir/nothing.json",
              "/etc/passwd", "/proc/self/root/etc/hostname"]
    inside_missing = [str(root / "nothing.json"), "nothing.json", str(root / "x.json"), "in/x.json", "in/x.json",
                      "in/nothing.json", "/in/x/y", "/in/x/y/z/w"]
    rs = calls(server, [("floor", {"model": p}) for p in probes + inside_missing])
    for p, r in zip(probes, rs):
        assert r.is_error and f"model config not found: {p}" in text(r), (p, text(r))
    # what an outside path's error says is what a missing path of the same shape inside says
    by_shape = {(p.count("/"), p.endswith(".json")): text(r).replace(p, "<P>")
                for p, r in zip(inside_missing, rs[len(probes):])}
    for p, r in zip(probes, rs):
        shape = (p.count("/"), p.endswith(".json"))
        if shape in by_shape:
            assert text(r).replace(p, "<P>") == by_shape[shape], (p, text(r))
    # the same for every kind of file a tool reads
    rs = calls(server, [("floor", {"hardware": str(outside / "gpu.yaml")}), ("floor", {"hardware": "../outside/none.yaml"}),
                        ("triage_profile", {"profile": str(outside / "profile.jsonl")}),
                        ("triage_profile", {"profile": str(outside / "none.jsonl")}),
                        ("floor", {"calibration": str(outside / "secret.json")}),
                        ("simulate", {"workload": "outdir/notes.txt", "requests": 5})])
    assert text(rs[0]) == text(rs[1]).replace("../outside/none.yaml", str(outside / "gpu.yaml"))
    assert text(rs[2]) == text(rs[3]).replace("none.jsonl", "profile.jsonl")
    assert "calibration file not found" in text(rs[4]) and "is not one of chat" in text(rs[5])  # as if missing
    assert all(SECRET not in text(r) for r in rs)


def test_files_inside_the_root_are_read(server, space):
    rs = calls(server, [("floor", {"model": "config.json", "hardware": "gpu.yaml"}),
                        ("triage_profile", {"profile": "profile.jsonl"})])
    assert not any(r.is_error for r in rs), [text(r) for r in rs]
    validate(rs[0].structured_content, "floor")


def test_writes_stay_inside_the_root_and_replace_only_when_asked(server, space):
    root, outside = space
    (root / "taken.png").write_text("not a plot\n")
    before = (outside / "notes.txt").read_text()
    rs = calls(server, [
        ("walls", {"range": "1:8", "plot": str(outside / "w.png")}),
        ("walls", {"range": "1:8", "plot": "../outside/w.png"}),
        ("walls", {"range": "1:8", "plot": "outdir/w.png"}),
        ("walls", {"range": "1:8", "plot": "link_notes.png"}),
        ("walls", {"range": "1:8", "plot": "link_notes.png", "overwrite": True}),
        ("walls", {"range": "1:8", "plot": "taken.png"}),
        ("calibrate", {"profile": "profile.jsonl", "out": "config.json"}),
        ("calibrate", {"profile": "profile.jsonl", "out": str(outside / "cal.json")}),
        ("walls", {"range": "1:8", "plot": "new.png"}),
        ("walls", {"range": "1:8", "plot": "taken.png", "overwrite": True}),
    ])
    for r in rs[:8]:
        assert r.is_error and "\n" not in text(r), text(r)
    for r in rs[:3]:
        assert "not inside the server's root folder" in text(r)
    assert "not inside the server's root folder" in text(rs[3]) and "not inside" in text(rs[4])  # the link points out
    assert "a file of that name exists; this call writes only new files" in text(rs[5])
    assert "a file of that name exists" in text(rs[6])  # calibrate's force is the tool's overwrite now
    assert not rs[8].is_error and not rs[9].is_error, (text(rs[8]), text(rs[9]))
    assert sorted(p.name for p in outside.iterdir()) == ["calibration", "config.json", "gpu.yaml", "notes.txt",
                                                         "profile.jsonl", "secret.json"]
    assert (outside / "notes.txt").read_text() == before
    assert json.loads((root / "config.json").read_text())["hidden_size"] == 7168
    assert (root / "new.png").read_bytes()[:4] == b"\x89PNG" and (root / "taken.png").read_bytes()[:4] == b"\x89PNG"


def test_errors_never_quote_what_a_file_holds(server, space):
    """A value planted in every field kind of every file a tool reads never comes back in an error."""
    root, _ = space
    cfg = json.loads((CARDS_DIR / "deepseek-v3.json").read_text())
    planted = {
        "s_hidden.json": {**cfg, "hidden_size": SECRET}, "s_layers.json": {**cfg, "num_hidden_layers": SECRET_NUMBER},
        "s_type.json": {**cfg, "layer_types": [SECRET]}, "s_arch.json": {**cfg, "model_type": SECRET, "architectures": [SECRET]},
        "s_quant.json": {**cfg, "quantization_config": {"quant_method": SECRET}},
        "s_freq.json": {**cfg, "moe_layer_freq": SECRET}, "s_key.json": {**cfg, SECRET + "_layers": 3},
        "s_pattern.json": {**cfg, "hybrid_override_pattern": SECRET},
    }
    for name, doc in planted.items():
        (root / name).write_text(json.dumps(doc))
    hw = (DATA_DIR / "h200.yaml").read_text()
    (root / "s_gpu.yaml").write_text(hw.replace("hbm_bandwidth_bytes_per_s: 4.8e12", f"hbm_bandwidth_bytes_per_s: {SECRET}"))
    (root / "s_ctx.yaml").write_text(hw.replace("context_bytes: 552402944", f"context_bytes: {SECRET_NUMBER}e9"))
    (root / "s_cal.json").write_text(json.dumps({"kind": SECRET, "schema_version": SECRET_NUMBER}))
    (root / "s_rows.csv").write_text(f"model,hardware,gpus,attn,moe,batch,context,step_ms\n{SECRET},h200,8,dp,ep,32,8192,{SECRET}\n")
    (root / "s_trace.csv").write_text(f"arrival_s,input_tokens,output_tokens\n0,{SECRET},10\n")
    plan = [("floor", {"model": n}) for n in planted] + [
        ("floor", {"hardware": "s_gpu.yaml"}), ("capacity", {"hardware": "s_ctx.yaml"}),
        ("floor", {"calibration": "s_cal.json"}), ("triage_profile", {"profile": "s_rows.csv"}),
        ("simulate", {"workload": "s_trace.csv", "requests": 5})]
    rs = calls(server, plan)
    assert sum(r.is_error for r in rs) == len(plan) - 2  # s_arch, s_quant: names the planner does not read
    for (tool, args), r in zip(plan, rs):
        assert SECRET not in text(r) and str(SECRET_NUMBER) not in text(r), (tool, args, text(r))


def test_annotations_tell_the_truth(server):
    async def main():
        async with Client(server) as c:
            return {t.name: t for t in (await c.list_tools()).tools}

    tools = anyio.run(main)
    writers = {"walls", "regimes", "calibrate", "simulate"}
    for name, t in tools.items():
        a = t.annotations
        assert a.read_only_hint is (name not in writers) and a.destructive_hint is (name in writers), name
        assert a.open_world_hint is False
        assert ("overwrite" in t.input_schema["properties"]) is (name in writers)
    assert "force" not in tools["calibrate"].input_schema["properties"]


def test_model_names_resolve_to_the_built_ins_first(server, space):
    root, _ = space
    shadow = root / "deepseek-ai" / "DeepSeek-V3.2"
    shadow.mkdir(parents=True)
    (shadow / "config.json").write_text(json.dumps({**json.loads((CARDS_DIR / "deepseek-v3.json").read_text()),
                                                    "num_hidden_layers": 3}))
    (root / "h200").write_text("not a GPU\n")
    rs = calls(server, [("floor", {"model": "deepseek-ai/DeepSeek-V3.2", "hardware": "h200"}),
                        ("floor", {"model": "deepseek-v3.2"}),
                        ("floor", {"engine_args": "vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8"})])
    assert not any(r.is_error for r in rs), [text(r) for r in rs]
    assert rs[0].structured_content == rs[1].structured_content  # the card, not the 3-layer folder
    assert rs[2].structured_content["model"] == "deepseek-v3.2"


def test_an_abandoned_call_is_stopped(space):
    """A client that cancels a long call (or goes away) leaves no worker running it: the pool stops
    the worker within its poll interval, not at the 300 s limit."""
    pool = WorkerPool(COMMAND_MODULES, workers=1, spare=0, root=str(space[0]))
    try:
        async def main():
            async with Client(build_server(pool)) as c:
                with anyio.move_on_after(3.0):
                    await c.call_tool("simulate", {"workload": "chat", "requests": 5_000_000})
                t0 = time.monotonic()
                while pool._live and time.monotonic() - t0 < 5.0:  # noqa: SLF001 - the pool's own count
                    await anyio.sleep(0.05)
                return pool._live, time.monotonic() - t0  # noqa: SLF001

        live, waited = anyio.run(main)
        assert live == 0 and waited < 2.0
    finally:
        pool.close()
