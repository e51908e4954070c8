"""Write the adversarial corpus (tests/fuzz/corpus/): `python tests/fuzz/make_corpus.py`.

Every file is a small mutation of a real input (a built-in model card, a hardware YAML, the
committed calibration, profile and microbench result, a three-request trace): strings, lists and
bools in integer fields, zero, negative, tiny and huge numbers, NaN/Infinity, nulls, 1,000-deep
nesting, a UTF-8 BOM, a non-UTF-8 byte, truncation, and the cross-field cases of issue 19
(`first_k_dense_replace: 1000`, `num_experts_per_tok: 512`), and issue 31's: quantization ignore
patterns that make a backtracking matcher take exponential time, stacks of 10^6 layers, experts
and heads, and engine benchmark files as they are written (SGLang's `"request_rate": Infinity`).
The corpus is committed (about 140 files, < 1 MiB); FIFOs, links to /dev/zero, a CSV field past
the csv module's limit, a 10^5-row trace with a broken tail and zip bombs can't be or shouldn't
be, so tests/fuzz/harness.py makes those in a temporary folder.

Each file's name says what it breaks; `VALID` names the ones that must be accepted.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
BOM = b"\xef\xbb\xbf"
DEEP = "[" * 1000 + "]" * 1000
VALID = {"configs/bom.json", "configs/moe_layer_freq_list.json", "configs/infinity_unread_field.json",
         "configs/architectures_string.json", "configs/text_config_string.json",
         *(f"configs/redos_{i}.json" for i in range(5)),
         *(f"traces/{n}" for n in ("sglang_bench_serving_details.jsonl", "sglang_bench_serving_0_5_details.jsonl",
                                   "vllm_bench_serve_result.json", "vllm_benchmark_serving_0_8_result.json")),
         "traces/long_broken_tail.csv",  # made by tests/fuzz/harness.py: its first 5 requests read, never its tail
         "hardware/bom.yaml", "calibrations/valid.json", "calibrations/bom.json", "profiles/bom.csv",
         "traces/bom.csv", "traces/valid.csv", "microbench/valid.json"}


def _config_mutations(base: dict) -> dict[str, object]:
    def m(**kw):
        d = copy.deepcopy(base)
        for k, v in kw.items():
            if v is ...:
                d.pop(k, None)
            else:
                d[k] = v
        return d

    return {
        "first_k_dense_1000.json": m(first_k_dense_replace=1000),
        "top_k_512.json": m(num_experts_per_tok=512),
        "top_k_0.json": m(num_experts_per_tok=0),
        "layers_string.json": m(num_hidden_layers="61"),
        "dense_string.json": m(first_k_dense_replace="x"),
        "shared_list.json": m(n_shared_experts=[1]),
        "heads_bool.json": m(num_attention_heads=True),
        "layers_fraction.json": m(num_hidden_layers=60.5),
        "layers_negative.json": m(num_hidden_layers=-61),
        "layers_zero.json": m(num_hidden_layers=0),
        "vocab_null.json": m(vocab_size=None),
        "hidden_missing.json": m(hidden_size=...),
        "hidden_huge.json": m(hidden_size=2**40),
        "experts_huge_int.json": m(n_routed_experts=10**30),
        "kv_lora_float.json": m(kv_lora_rank=512.25),
        "kv_heads_over_heads.json": m(num_key_value_heads=4096),
        "moe_layer_freq_short.json": m(moe_layer_freq=[0, 1, 1]),
        "moe_layer_freq_list.json": m(moe_layer_freq=[0, 0, 0] + [1] * 58, first_k_dense_replace=3),
        "moe_layer_freq_string.json": m(moe_layer_freq="1"),
        "mlp_only_out_of_range.json": m(mlp_only_layers=[99]),
        "architectures_string.json": m(architectures="DeepseekV3ForCausalLM"),
        "quantization_list.json": m(quantization_config=["fp8"]),
        "text_config_string.json": m(text_config="x"),
        "layer_types_ints.json": m(layer_types=[1, 2]),
        "infinity_unread_field.json": m(time_step_limit=[0.0, float("inf")]),
        # issue 31: no input that hangs — catastrophic `re:` ignore patterns (matched in bounded time,
        # as the engines' re.match means them), a pattern no NFA holds, and structures past the limits
        **{f"redos_{i}.json": m(quantization_config={"quant_method": "compressed-tensors", "ignore": [pat],
                                                     "config_groups": {"g": {"weights": {"num_bits": 4}}}})
           for i, pat in enumerate([r"re:(\w+\.?)+!", r"re:(a|aa)+$", r"re:(.*)*x$", r"re:(.*\.)*?(.*\.)*?(.*\.)*?z$",
                                    r"re:.*self_attn.*"])},
        "redos_backref.json": m(quantization_config={"quant_method": "compressed-tensors", "ignore": [r"re:(a)\1"],
                                                     "config_groups": {"g": {"weights": {"num_bits": 4}}}}),
        "redos_states.json": m(quantization_config={"quant_method": "compressed-tensors", "ignore": ["re:(a{999}){999}"],
                                                    "config_groups": {"g": {"weights": {"num_bits": 4}}}}),
        "layers_1e6.json": m(num_hidden_layers=10**6),
        "layers_5000.json": m(num_hidden_layers=5000),
        "experts_1e6.json": m(n_routed_experts=10**6),
        "heads_1e6.json": m(num_attention_heads=10**6, num_key_value_heads=10**6),
        "layer_types_5000.json": m(num_hidden_layers=..., layer_types=["full_attention"] * 5000),
    }


def _write(rel: str, data: bytes | str) -> None:
    p = CORPUS / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data if isinstance(data, bytes) else data.encode())


def configs() -> None:
    base = json.loads((ROOT / "planner/models/cards/deepseek-v3.json").read_text())
    for name, cfg in _config_mutations(base).items():
        _write(f"configs/{name}", json.dumps(cfg, indent=1))  # json writes inf as Infinity
    text = json.dumps(base, indent=1)
    _write("configs/bom.json", BOM + text.encode())
    _write("configs/non_utf8.json", text.replace('"deepseek_v3"', '"deepseek\\u00e9"').encode()[:-20] + b"\xff\xfe" + text.encode()[-20:])
    _write("configs/deep.json", DEEP)
    _write("configs/nan_literal.json", text.replace('"hidden_size": 7168', '"hidden_size": NaN'))
    _write("configs/overflow.json", text.replace('"hidden_size": 7168', '"hidden_size": 1e400'))
    _write("configs/digits_5000.json", text.replace('"hidden_size": 7168', '"hidden_size": 1' + "0" * 5000))
    _write("configs/truncated.json", text[: len(text) // 2])
    _write("configs/empty.json", "")
    _write("configs/null.json", "null")
    _write("configs/list_top.json", "[1, 2]")
    _write("configs/utf16.json", text.encode("utf-16"))


def hardware() -> None:
    text = (ROOT / "planner/hardware/data/h200.yaml").read_text()
    sub = {
        "bandwidth_tiny.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: 1.0e-300"),
        "bandwidth_negative.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: -4.8e12"),
        "bandwidth_string.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: fast"),
        "bandwidth_nan.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: .nan"),
        "bandwidth_inf.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: .inf"),
        "bandwidth_list.yaml": ("hbm_bandwidth_bytes_per_s: 4.8e12", "hbm_bandwidth_bytes_per_s: [4.8e12]"),
        "efficiency_subnormal.yaml": ("hbm: 0.879", "hbm: 1.0e-320"),
        "efficiency_zero.yaml": ("hbm: 0.879", "hbm: 0"),
        "domain_huge.yaml": ("scaleup_domain_gpus: 8", "scaleup_domain_gpus: 100000000000000000000000"),
        "latency_huge.yaml": ("collective_latency_s: 12e-6", "collective_latency_s: 1.0e+200"),
        "name_null.yaml": ("name: h200", "name: null"),
        "context_over_hbm.yaml": ("context_bytes: 552402944", "context_bytes: 2.0e+11"),  # issue 31: was exit 70
    }
    for name, (a, b) in sub.items():
        assert a in text, a
        _write(f"hardware/{name}", text.replace(a, b))
    _write("hardware/bom.yaml", BOM + text.replace("name: h200", "name: h200-bom").encode())
    _write("hardware/non_utf8.yaml", text.encode().replace(b"NVIDIA", b"NVID\xffA", 1))
    _write("hardware/deep.yaml", DEEP)
    _write("hardware/aliases.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
                                    "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\npeak: [*c, *c, *c, *c, *c, *c, *c, *c]\n")
    _write("hardware/truncated.yaml", text[:200] + "\n  : [")
    _write("hardware/list_top.yaml", "- 1\n- 2\n")
    _write("hardware/empty.yaml", "")


def calibrations() -> None:
    base = json.loads((ROOT / "calibration/data/h200-probe-calibration.json").read_text())

    def m(path: str, value):
        d = copy.deepcopy(base)
        *head, last = path.split(".")
        node = d
        for k in head:
            node = node[k]
        if value is ...:
            node.pop(last)
        else:
            node[last] = value
        return json.dumps(d, indent=1)

    cases = {
        "efficiency_subnormal.json": ("params.hbm_kv_efficiency", 1e-320),
        "efficiency_zero.json": ("params.network_efficiency", 0.0),
        "efficiency_over_one.json": ("params.network_efficiency", 1.5),
        "latency_overflow.json": ("params.message_latency_s", float("inf")),
        "latency_string.json": ("params.message_latency_s", "fast"),
        "overhead_negative.json": ("params.overhead_s", -1.0),
        "alpha_two.json": ("params.overlap_alpha", 2.0),
        "flops_zero.json": ("rates.flops_per_s.bf16", 0.0),
        "flops_no_bf16.json": ("rates.flops_per_s.bf16", ...),
        "hbm_rate_subnormal.json": ("rates.hbm_bytes_per_s", 1e-310),
        "kind_wrong.json": ("kind", "floorfirst.microbench"),
        "schema_version_2.json": ("schema_version", 2),
        "params_missing.json": ("params", ...),
        "params_null.json": ("params", None),
    }
    for name, (path, value) in cases.items():
        _write(f"calibrations/{name}", m(path, value))
    text = json.dumps(base, indent=1)
    _write("calibrations/valid.json", text)
    _write("calibrations/bom.json", BOM + text.encode())
    _write("calibrations/non_utf8.json", text.encode().replace(b"h200", b"h\xff00", 1))
    _write("calibrations/deep.json", DEEP)
    _write("calibrations/nan_literal.json", text.replace('"overlap_alpha": ', '"overlap_alpha": NaN, "x": ', 1))
    _write("calibrations/empty.json", "")


def profiles() -> None:
    head = "model,hardware,gpus,attn,moe,batch,context,step_ms\n"
    row = "deepseek-v3,h200,8,dp,ep,32,8192,40.0\n"
    _write("profiles/bom.csv", BOM + (head + row * 3).encode())
    _write("profiles/non_utf8.csv", (head + row).encode() + b"deepseek-v3,h2\xff0,8,dp,ep,32,8192,40.0\n")
    _write("profiles/nul_byte.csv", head + row + "deepseek-v3,h200,8,dp,ep,3\x002,8192,40.0\n")
    _write("profiles/strings.csv", head + "deepseek-v3,h200,eight,dp,ep,[32],8192,fast\n")
    _write("profiles/negative.csv", head + "deepseek-v3,h200,-8,dp,ep,-32,-8192,-40.0\n")
    _write("profiles/nan_inf.csv", head + "deepseek-v3,h200,8,dp,ep,32,nan,inf\ndeepseek-v3,h200,8,dp,ep,32,1e400,40\n")
    _write("profiles/header_only.csv", head)
    _write("profiles/empty.csv", "")
    _write("profiles/top_k_512_model.csv", head + "tests/fuzz/corpus/configs/top_k_512.json,h200,8,dp,ep,32,8192,40.0\n")
    rows = [json.loads(line) for line in (ROOT / "calibration/data/h200x2_step_profile.jsonl").read_text().splitlines()[:4]]
    lines = [json.dumps(r) for r in rows]
    _write("profiles/deep_line.jsonl", "\n".join(lines[:2] + [DEEP] + lines[2:]) + "\n")
    _write("profiles/nan_line.jsonl", "\n".join(lines[:1] + [lines[1].replace('"step_ms": ', '"step_ms": NaN, "x": ')]) + "\n")
    _write("profiles/junk_rows.json", json.dumps([1, "x", None, [], {"batch": {"a": 1}}, {"rows": 3}]))
    _write("profiles/deep.json", DEEP)
    for name in ("sglang_bench_serving.jsonl", "sglang_bench_serving_0_5_details.jsonl"):  # Infinity rates
        _write(f"profiles/{name}", (ROOT / "tests/fixtures/bench" / name).read_bytes())
    _write("profiles/bad_byte.jsonl", ("\n".join(lines[:2]) + "\n").encode() + b"{\"model\": \"\xff\"}\n")


def traces() -> None:
    head = "arrival_s,input_tokens,output_tokens\n"
    _write("traces/valid.csv", head + "0,100,10\n0.5,200,20\n1.0,4000,64\n")
    _write("traces/bom.csv", BOM + (head + "0,100,10\n").encode())
    _write("traces/non_utf8.csv", head.encode() + b"0,1\xff0,10\n")
    _write("traces/negative_arrival.csv", head + "-1,100,10\n")
    _write("traces/fraction_tokens.csv", head + "0,100.5,10\n")
    _write("traces/huge_tokens.csv", head + "0,100000000000,10\n")
    _write("traces/zero_output.csv", head + "0,100,0\n")
    _write("traces/nan.csv", head + "nan,100,10\n0,inf,10\n")
    _write("traces/two_columns.csv", head + "0,100\n")
    _write("traces/header_wrong.csv", "t,in,out\n0,1,1\n")
    _write("traces/header_only.csv", head)
    _write("traces/empty.csv", "")
    _write("traces/nul_byte.csv", head + "0,1\x000,10\n")
    # issue 31: engine benchmark results as written (SGLang's default rate: Infinity), one per version
    for name in ("sglang_bench_serving_details.jsonl", "sglang_bench_serving_0_5_details.jsonl",
                 "vllm_bench_serve_result.json", "vllm_benchmark_serving_0_8_result.json"):
        _write(f"traces/{name}", (ROOT / "tests/fixtures/bench" / name).read_bytes())


def microbench() -> None:
    base = json.loads((ROOT / "calibration/data/h200_microbench.json").read_text())
    base["rows"] = base["rows"][:2]  # the summary is what is read; two rows keep the shape
    _write("microbench/valid.json", json.dumps(base))
    for name, (k, v) in {"summary_string.json": ("hbm_copy_bytes_per_s", "fast"),
                         "summary_negative.json": ("bf16_flops_per_s", -1.0),
                         "summary_zero.json": ("link_bytes_per_s", 0.0),
                         "summary_tiny.json": ("hbm_copy_bytes_per_s", 1e-3),
                         "summary_above_peak.json": ("hbm_copy_bytes_per_s", 9e12)}.items():
        d = copy.deepcopy(base)
        d["summary"][k] = v
        _write(f"microbench/{name}", json.dumps(d))
    d = copy.deepcopy(base)
    d["summary"] = [1, 2]
    _write("microbench/summary_list.json", json.dumps(d))
    d = copy.deepcopy(base)
    d["rows"] = "x"
    _write("microbench/rows_string.json", json.dumps(d))
    _write("microbench/deep.json", DEEP)
    _write("microbench/non_utf8.json", json.dumps(base).encode().replace(b"NVIDIA", b"NV\xffDIA", 1))


def main() -> None:
    if CORPUS.exists():
        shutil.rmtree(CORPUS)
    for make in (configs, hardware, calibrations, profiles, traces, microbench):
        make()


if __name__ == "__main__":
    main()
