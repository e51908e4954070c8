"""Launch lines (issue 32 item 2): every (engine, layout, MoE split) of the registries is launchable
with a line or says why not; every line an engine writes reads back (planner.launch.parse_launch) as
the deployment it was written for; no engine launches a placement without a flag (DOP, SPLASH's CP)."""

from __future__ import annotations

import itertools

import pytest

from planner import load_hardware, load_model
from planner.deployment import make_deployment
from planner.engines import engines
from planner.engines.base import SWITCHING_RUNTIME, parallel_form
from planner.errors import SpecError
from planner.launch import parse_launch, split_files
from planner.layouts import attention_layouts, moe_splits

# a MoE MLA model, a MoE DSA model (top-k indexer), a MoE GQA model, a dense GQA model
MODELS = ("deepseek-v3", "deepseek-v3.2", "qwen3-235b-a22b", "llama-3.1-70b")
# (gpus, replicas, nodes, settings): one node; a group over two nodes; two replicas on one node each;
# explicit memory settings (fp8 KV, a fraction, a page size)
SHAPES = ((8, 1, None, {}), (16, 1, 2, {}), (16, 2, 2, {}), (4, 2, 1, {}),
          (8, 1, None, {"kv_dtype": "fp8", "mem_fraction": 0.8, "page_tokens": 128}))


def _deployments(model_names=MODELS, shapes=SHAPES):
    hw = load_hardware("h200")
    for name, engine, attn, moe, (gpus, replicas, nodes, extra) in itertools.product(
            model_names, sorted(engines()), sorted(attention_layouts()), sorted(moe_splits()), shapes):
        try:
            yield make_deployment(load_model(name), hw, attn=attn, moe=moe, gpus=gpus, replicas=replicas, nodes=nodes,
                                  engine=engine, **extra)
        except SpecError:
            continue  # the model can't run this layout here (not a launch question)


def _placement(dep):
    d = dep.placement.describe()
    d.pop("layout")
    return d


def test_every_layout_is_launchable_or_says_why():
    seen = set()
    for dep in _deployments(shapes=SHAPES[:1]):
        line = dep.engine_model.launch(dep)
        assert line.engine == dep.engine and line.source
        if line.launchable:
            assert line.command and not line.reason and line.text()
        else:
            assert line.command is None and line.reason and line.text() == ""
            if parallel_form(dep)[0] is None:  # no engine flag runs the placement
                assert SWITCHING_RUNTIME in line.reason
        seen.add((dep.engine, dep.attn, line.launchable))
    # every engine launches TP and refuses SPLASH's CP and DOP
    for e in engines():
        assert (e, "tp", True) in seen and (e, "cp", False) in seen and (e, "dop", False) in seen
        assert (e, "cp", True) not in seen and (e, "dop", True) not in seen


def test_launch_lines_read_back_as_their_deployment():
    hw = load_hardware("h200")
    checked = set()
    for dep in _deployments():
        line = dep.engine_model.launch(dep)
        if not line.launchable:
            continue
        r = parse_launch(line.text())
        o = dict(r.options)
        assert r.engine == dep.engine and o.pop("engine") == dep.engine
        assert o.pop("model") == dep.model.name
        c = line.copies
        back = make_deployment(load_model(dep.model.name), hw, engine=dep.engine, **{
            **o, "gpus": o["gpus"] * c, "replicas": o["replicas"] * c,
            "nodes": o["nodes"] * c if "nodes" in o else None})  # servers of one node may share one
        assert _placement(back) == _placement(dep), line.text()
        for field in ("moe", "gpus", "replicas", "nodes", "kv_dtype", "page_tokens", "mem_fraction",
                      "swa_full_tokens_ratio", "weight_dtype"):
            assert getattr(back, field) == getattr(dep, field), (field, line.text())
        checked.add((dep.engine, dep.attn))
    # every engine's every launchable form was read back at least once
    assert {a for e, a in checked if e == "sglang"} == {"tp", "dp", "dptp", "dcp"}
    assert {a for e, a in checked if e == "vllm"} == {"tp", "dp", "dptp", "dcp"}
    assert {a for e, a in checked if e == "trtllm"} >= {"tp", "dp"}


def test_engine_constraints_named():
    hw = load_hardware("h200")
    llama, dsa, mla = (load_model(n) for n in ("llama-3.1-70b", "deepseek-v3.2", "deepseek-v3"))
    line = lambda m, attn, engine, moe="tp": (lambda d: d.engine_model.launch(d))(
        make_deployment(m, hw, attn=attn, moe=moe, gpus=8, engine=engine))
    # vLLM caps -dcp at tp / KV heads; Llama has 8
    assert "KV heads" in line(llama, "dcp", "vllm").reason and line(mla, "dcp", "vllm").launchable
    # a dense model's -dp is replicas, not DP attention
    assert "independent replicas" in line(llama, "dp", "vllm").reason
    # TensorRT-LLM's attention DP is all ranks or none
    assert not line(mla, "dptp", "trtllm", "ep").launchable and line(mla, "dp", "trtllm", "ep").launchable
    assert "enable_attention_dp: true" in line(mla, "dp", "trtllm", "ep").text()
    # SGLang's DCP keeps the indexer whole: not the dcp priced for a DSA model
    assert "indexer" in line(dsa, "dcp", "sglang", "ep").reason and line(mla, "dcp", "sglang", "ep").launchable


def test_trtllm_options_file_is_read_from_disk_and_refuses_unknown_keys(tmp_path):
    f = tmp_path / "extra.yaml"
    f.write_text("enable_attention_dp: true\nkv_cache_config:\n  dtype: fp8\n  tokens_per_block: 64\n")
    r = parse_launch(f"trtllm-serve deepseek-ai/DeepSeek-V3 --tp_size 8 --ep_size 8 --extra_llm_api_options {f}")
    assert {k: r.options[k] for k in ("attn", "moe", "gpus", "kv_dtype", "page_tokens")} == {
        "attn": "dp", "moe": "ep", "gpus": 8, "kv_dtype": "fp8", "page_tokens": 64}
    # the YAML overwrites trtllm-serve's options (tensorrt_llm/commands/serve.py)
    f.write_text("tensor_parallel_size: 4\n")
    assert parse_launch(f"trtllm-serve deepseek-ai/DeepSeek-V3 --tp_size 8 --extra_llm_api_options {f}").options["gpus"] == 4
    f.write_text("some_new_knob: 3\n")
    with pytest.raises(SpecError, match="some_new_knob"):
        parse_launch(f"trtllm-serve deepseek-ai/DeepSeek-V3 --tp_size 8 --extra_llm_api_options {f}")
    with pytest.raises(SpecError, match="--ep_size 2"):
        parse_launch("trtllm-serve deepseek-ai/DeepSeek-V3 --tp_size 8 --ep_size 2")


def test_heredoc_files_are_split_from_the_command():
    text, files = split_files("cat > a.yaml <<'EOF'\nx: 1\ny: 2\nEOF\ntrtllm-serve m --tp_size 2")
    assert files == {"a.yaml": "x: 1\ny: 2\n"} and text.strip() == "trtllm-serve m --tp_size 2"
