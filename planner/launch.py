"""An SGLang, vLLM or TensorRT-LLM launch command read into a floorfirst deployment: `--engine-args "…"`
on the planning commands and `floorfirst explain-launch "…"`; also the lines the engines write
(planner.engines' `launch`: tests read every one back into the deployment it was written for).

Pure: text in, a `LaunchReading` out (the floorfirst options, how each flag was read, what the
engine would do that floorfirst does not model, the flags that don't change the deployment); a
command line floorfirst can't represent, or a flag it doesn't know, is refused in one line.

The flags, their aliases and what they mean, from the engines' argument definitions:
- SGLang, python/sglang/srt/server_args.py `ServerArgs` (sgl-project/sglang): `tp_size`
  (`--tp-size`, alias `--tensor-parallel-size`), `dp_size` (`--dp-size`, `--data-parallel-size`),
  `ep_size` (`--ep-size`, `--expert-parallel-size`, `--ep`), `dcp_size` (`--dcp-size`,
  `--decode-context-parallel-size`), `pp_size`, `nnodes`, `enable_dp_attention`,
  `moe_a2a_backend` (default "none"), `mem_fraction_static`, `kv_cache_dtype`, `page_size`,
  `swa_full_tokens_ratio` (the hybrid SWA split's ratio), `disable_hybrid_swa_memory`,
  `chunked_prefill_size`, `cuda_graph_max_bs`, `context_length`, `speculative_*`, `model_path`
  (alias `--model`). SGLang's parser is argparse with abbreviations allowed, so `--tp 8` and
  `--dp 8` (the launch lines of its docs) are `--tp-size` and `--dp-size`.
  Semantics: without `--enable-dp-attention`, `--dp N` runs N replicas of a `--tp` group (tp·dp
  GPUs); with it, the dp attention ranks live inside the tp group (tp GPUs; attention TP =
  tp/dp), and dp = 1 turns DP attention off (`_handle_data_parallelism`). `ep_size` 1 leaves the
  experts TP-sharded; a MoE all-to-all backend (`--moe-a2a-backend deepep`, …) sets ep_size = tp_size.
- vLLM, vllm/engine/arg_utils.py `EngineArgs` (vllm-project/vllm): `--tensor-parallel-size`/`-tp`,
  `--data-parallel-size`/`-dp`, `--data-parallel-size-local`/`-dpl`, `--pipeline-parallel-size`/`-pp`,
  `--decode-context-parallel-size`/`-dcp`, `--enable-expert-parallel`/`-ep` (a switch: the EP group
  is DP×TP), `--all2all-backend`, `--gpu-memory-utilization`, `--max-num-batched-tokens`,
  `--block-size`, `--kv-cache-dtype`, `--max-model-len`, `--speculative-config`; the model is the
  positional argument of `vllm serve` (or `--model`). vLLM's parser takes no abbreviations but reads
  `_` as `-`. Semantics (docs/serving/data_parallel_deployment.md, expert_parallel_deployment.md):
  the world is tp·dp·pp GPUs; with dp > 1 on a MoE model the expert layers form one DP×TP group
  (TP-sharded, or EP with `--enable-expert-parallel`) while attention runs per DP rank; a dense
  model's DP ranks are independent replicas. DCP splits each request's KV over dcp of the tp ranks.

- TensorRT-LLM, tensorrt_llm/commands/serve.py `serve` (NVIDIA/TensorRT-LLM, click options, spelled with
  underscores): the positional model, `--tp_size`, `--pp_size`, `--ep_size` (moe_expert_parallel_size;
  moe_tp_size = tp_size // ep_size, tensorrt_llm/mapping.py Mapping), `--cluster_size`,
  `--kv_cache_free_gpu_memory_fraction`, `--max_seq_len`, and `--extra_llm_api_options FILE`, a YAML
  "that overwrites the parameters specified by trtllm-serve" (tensorrt_llm/llmapi/llm_args.py keys:
  `enable_attention_dp`, `kv_cache_config.dtype`, `.free_gpu_memory_fraction`, `.tokens_per_block`,
  the parallel sizes; planner.launch_rules.TRTLLM_YAML_KEYS). The file is read from disk, or from a
  `cat > FILE <<'EOF' … EOF` heredoc earlier in the text (as floorfirst prints it). Semantics: with
  enable_attention_dp every one of the tp ranks is its own DP attention rank
  (tensorrt_llm/_torch/modules/attention.py: dp_size = tp_size, tp_size = 1).

floorfirst's layouts run attention over the whole group (tp, cp, dcp with dcp = group, dop) or one
rank per DP rank (dp); a launch line outside those (DP attention with attention TP > 1, dcp < tp,
pipeline parallelism, partial EP) is refused with what it is.
"""

from __future__ import annotations

import difflib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.errors import SpecError

# kind: int | float | str | bool | model | skip (value taken, meaning none for the deployment)
_SGLANG: dict[str, tuple[str, tuple[str, ...]]] = {
    "--model-path": ("model", ("--model",)),
    "--tp-size": ("int", ("--tensor-parallel-size",)),
    "--dp-size": ("int", ("--data-parallel-size",)),
    "--ep-size": ("int", ("--expert-parallel-size", "--ep")),
    "--dcp-size": ("int", ("--decode-context-parallel-size",)),
    "--pp-size": ("int", ("--pipeline-parallel-size",)),
    "--nnodes": ("int", ()),
    "--enable-dp-attention": ("bool", ()),
    "--moe-a2a-backend": ("str", ()),
    "--mem-fraction-static": ("float", ()),
    "--swa-full-tokens-ratio": ("float", ()),
    "--disable-hybrid-swa-memory": ("bool", ()),
    "--kv-cache-dtype": ("str", ()),
    "--page-size": ("int", ()),
    "--chunked-prefill-size": ("int", ()),
    "--cuda-graph-max-bs": ("int", ()),
    "--context-length": ("int", ()),
    "--quantization": ("str", ()),
    "--max-running-requests": ("int", ()),
    "--moe-dense-tp-size": ("int", ()),
    "--deepep-mode": ("str", ()),
    "--attention-backend": ("str", ()),
    "--max-total-tokens": ("int", ()),
    "--disaggregation-mode": ("str", ()),
    "--enable-dp-lm-head": ("bool", ()),
    "--enable-two-batch-overlap": ("bool", ()),
    "--disable-cuda-graph": ("bool", ()),
    "--enable-hierarchical-cache": ("bool", ()),
    "--disable-radix-cache": ("bool", ()),
}
_VLLM: dict[str, tuple[str, tuple[str, ...]]] = {
    "--model": ("model", ()),
    "--tensor-parallel-size": ("int", ("-tp",)),
    "--data-parallel-size": ("int", ("-dp",)),
    "--data-parallel-size-local": ("int", ("-dpl",)),
    "--pipeline-parallel-size": ("int", ("-pp",)),
    "--decode-context-parallel-size": ("int", ("-dcp",)),
    "--enable-expert-parallel": ("bool", ("-ep",)),
    "--all2all-backend": ("str", ()),
    "--gpu-memory-utilization": ("float", ()),
    "--max-num-batched-tokens": ("int", ()),
    "--block-size": ("int", ()),
    "--kv-cache-dtype": ("str", ()),
    "--max-model-len": ("int", ()),
    "--quantization": ("str", ("-q",)),
    "--speculative-config": ("str", ()),
    "--max-num-seqs": ("int", ()),
    "--nnodes": ("int", ()),
    "--kv-cache-memory-bytes": ("str", ()),
    "--enforce-eager": ("bool", ()),
    "--enable-chunked-prefill": ("bool", ()),
    "--attention-backend": ("str", ()),
    "--compilation-config": ("str", ()),
    "--hf-overrides": ("str", ()),
    "--enable-dbo": ("bool", ()),
    "--enable-prefix-caching": ("bool", ()),
    "--async-scheduling": ("bool", ()),
}
# trtllm-serve's click options (exact names: click does not turn `_` into `-`).
_TRTLLM: dict[str, tuple[str, tuple[str, ...]]] = {
    "--tp_size": ("int", ()),
    "--pp_size": ("int", ()),
    "--ep_size": ("int", ()),
    "--cluster_size": ("int", ()),
    "--kv_cache_free_gpu_memory_fraction": ("float", ()),
    "--extra_llm_api_options": ("str", ()),
    "--max_batch_size": ("int", ()),
    "--max_num_tokens": ("int", ()),
    "--max_seq_len": ("int", ()),
    "--max_beam_width": ("int", ()),
    "--backend": ("str", ()),
    "--gpus_per_node": ("int", ()),
    "--enable_chunked_prefill": ("bool", ()),
}
_TABLES = {"sglang": _SGLANG, "vllm": _VLLM, "trtllm": _TRTLLM}
# Flags that don't change the deployment: read and listed as ignored.
_HARMLESS_VALUE = frozenset({
    "--host", "--port", "--served-model-name", "--tokenizer", "--tokenizer-path", "--revision", "--download-dir",
    "--log-level", "--uvicorn-log-level", "--api-key", "--chat-template", "--tool-call-parser", "--reasoning-parser",
    "--dist-init-addr", "--node-rank", "--nccl-port", "--random-seed", "--seed", "--watchdog-timeout", "--dist-timeout",
    "--load-format", "--stream-interval", "--distributed-executor-backend", "--data-parallel-address",
    "--data-parallel-rpc-port", "--data-parallel-start-rank", "--data-parallel-rank", "--master-addr", "--master-port",
    "--dtype", "--max-logprobs", "--generation-config", "--schedule-policy", "--tokenizer-mode", "--config",
    "--max-prefill-tokens", "--dist-backend", "--data-parallel-backend",
    # SGLang's forward-pass metrics publisher (python/sglang/srt/server_args.py forward_pass_metrics_*;
    # `floorfirst follow` subscribes to it) and PR #36191's runtime-switching thresholds (`floorfirst
    # thresholds` computes them): telemetry and per-batch choices, not the deployment
    "--forward-pass-metrics-ipc-name", "--forward-pass-metrics-worker-id",
    "--dynamic-attn-parallel-min-prefill-tokens", "--dynamic-attn-parallel-dcp-min-context",
    # the KV transfer of disaggregated prefill/decode (`floorfirst disagg` prices it and prints these):
    # SGLang's transfer backend, its NICs and bootstrap port (docs/advanced_features/pd_disaggregation.md),
    # vLLM's KV connector (docs/features/nixl_connector_usage.md) — where the KV goes, not the deployment
    "--disaggregation-transfer-backend", "--disaggregation-ib-device", "--disaggregation-bootstrap-port",
    "--kv-transfer-config",
    # trtllm-serve's (tensorrt_llm/commands/serve.py): logging, post-processing, parsers, disaggregation roles
    "--log_level", "--num_postprocess_workers", "--reasoning_parser", "--metadata_server_config_file",
    "--server_role", "--disagg_cluster_uri", "--media_io_kwargs",
})
_HARMLESS_BOOL = frozenset({
    "--trust-remote-code", "--enable-metrics", "--log-requests", "--skip-server-warmup", "--disable-log-requests",
    "--disable-log-stats", "--enable-auto-tool-choice", "--headless", "--enable-cache-report", "--disable-fastapi-docs",
    "--enable-torch-compile", "--no-enable-prefix-caching", "--enable-mixed-chunk", "--data-parallel-hybrid-lb",
    "--enable-forward-pass-metrics", "--trust_remote_code", "--fail_fast_on_attention_window_too_large",
})


@dataclass(frozen=True)
class Reading:
    flag: str  # as written
    value: str
    meaning: str  # what floorfirst made of it


@dataclass(frozen=True)
class LaunchReading:
    engine: str
    options: dict[str, Any]  # floorfirst option name (python name) → value
    readings: tuple[Reading, ...]
    not_modelled: tuple[str, ...]
    ignored: tuple[str, ...]
    max_context_tokens: int | None = None
    model_given: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "model_given": self.model_given, "options": dict(self.options),
                "readings": [{"flag": r.flag, "value": r.value, "meaning": r.meaning} for r in self.readings],
                "not_modelled": list(self.not_modelled), "ignored": list(self.ignored),
                "max_context_tokens": self.max_context_tokens}


def _all_flags() -> set[str]:
    out = set(_HARMLESS_VALUE) | set(_HARMLESS_BOOL)
    for table in _TABLES.values():
        for flag, (_, aliases) in table.items():
            out |= {flag, *aliases}
    return out


def is_engine_flag(name: str) -> bool:
    """Whether `name` (tp_size, enable_dp_attention, --tp-size, tp) names an engine launch flag."""
    n = "--" + name.lstrip("-").replace("_", "-")
    flags = _all_flags()
    return n in flags or ("-" + name.lstrip("-") in flags) or any(f.startswith(n + "-size") for f in flags)


def builtin_card(name: str) -> str | None:
    """The built-in card of the architecture a Hugging Face repo id or folder name names
    ('deepseek-ai/DeepSeek-V3.2' → 'deepseek-v3.2'; 'Qwen/Qwen3-235B-A22B-FP8' → 'qwen3-235b-a22b'),
    or None (planner.models.repo_ids.card_for_name). The checkpoint's weight dtypes are the
    resolver's (`--model` reads the same id the same way)."""
    from planner.models.repo_ids import card_for_name

    return card_for_name(name)


def _model_option(value: str) -> tuple[str, str]:
    """(what --model gets, how it was read): a config folder's config.json, a path, or a repo id
    resolved as `--model` resolves it (planner.models.repo_ids: its card, its cached config, or a
    card with the weights of its quantization suffix). NOTE: paths are probed through
    planner.inputs (confined to the MCP root where there is one, a path outside it reading as
    missing); confined, a repo id is resolved as one before it is probed as a path."""
    from planner.inputs import path_kind
    from planner.models.repo_ids import card_for_name, looks_like_repo_id, resolve_repo_id, split_marker
    from planner.path_policy import active

    p = Path(value)
    if not (active() is not None and looks_like_repo_id(value)):
        try:
            kind = path_kind(p, "model")
            if kind == "folder" and path_kind(p / "config.json", "model") == "file":
                return str(p / "config.json"), f"{p / 'config.json'} (the folder's config)"
            if kind == "file":
                return value, f"{value} (a config.json)"
        except (OSError, ValueError):  # a name too long for a path, a NUL byte: not a path, maybe a repo id
            pass  # NOTE: SpecError is a ValueError: path_kind's refusal of such a name lands here too
    if looks_like_repo_id(value):
        try:
            r = resolve_repo_id(value)
        except SpecError as exc:
            raise SpecError(f"--engine-args: {exc}") from None
        return r.model, r.how
    card = card_for_name(value)
    if card is not None and split_marker(value)[1] is None:
        return card, f"{card} (the built-in card of this name)"
    raise SpecError(f"--engine-args: model {value!r} is neither a built-in card, a Hugging Face repo id, nor a folder "
                    "with a config.json (pass --model PATH/config.json)")


# `cat > NAME <<'TAG'` … `TAG`: a file written before the command (TensorRT-LLM's extra options YAML)
_HEREDOC = re.compile(r"cat[ \t]*>[ \t]*(?P<name>[^\s<>;&|]+)[ \t]*<<-?[ \t]*(?P<q>['\"]?)(?P<tag>\w+)(?P=q)[^\n]*\n"
                      r"(?P<body>.*?)^(?P=tag)[ \t]*$\n?", re.S | re.M)


def split_files(text: str) -> tuple[str, dict[str, str]]:
    """(the text without its heredocs, {file name: contents}) of a launch text that writes files first."""
    files: dict[str, str] = {}

    def take(m: re.Match) -> str:
        files[m.group("name")] = m.group("body")
        return ""

    return _HEREDOC.sub(take, text), files


def _tokens(text: str) -> list[str]:
    text = text.replace("\\\r\n", " ").replace("\\\n", " ")
    try:
        toks = shlex.split(text)
    except ValueError as exc:
        raise SpecError(f"--engine-args: can't split the command line: {exc}") from None
    while toks and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", toks[0]):  # leading VAR=value
        toks.pop(0)
    return toks


def _engine_and_args(toks: list[str]) -> tuple[str, list[str], str | None]:
    """('sglang'|'vllm'|'trtllm', the flags, the positional model of vllm serve or trtllm-serve)."""
    for i, t in enumerate(toks):
        if t in ("sglang.launch_server", "sglang.launch_server.py") or t.endswith("sglang/launch_server.py"):
            return "sglang", toks[i + 1:], None
        if t == "serve" and i > 0 and toks[i - 1].split("/")[-1] == "sglang":
            return "sglang", toks[i + 1:], None
        if t == "serve" and i > 0 and toks[i - 1].split("/")[-1] == "vllm":
            rest = toks[i + 1:]
            if rest and not rest[0].startswith("-"):
                return "vllm", rest[1:], rest[0]
            return "vllm", rest, None
        if t == "vllm.entrypoints.openai.api_server":
            return "vllm", toks[i + 1:], None
        if t.split("/")[-1] == "trtllm-serve":
            rest = toks[i + 1:]
            if rest and rest[0] == "serve":  # the click group's default command, named
                rest = rest[1:]
            if rest and not rest[0].startswith("-"):
                return "trtllm", rest[1:], rest[0]
            return "trtllm", rest, None
    if toks and toks[0].startswith("-"):
        raise SpecError("--engine-args: say which engine: start with `python -m sglang.launch_server`, `vllm serve MODEL` "
                        "or `trtllm-serve MODEL`")
    raise SpecError(f"--engine-args: {' '.join(toks[:3])!r} is not an SGLang (python -m sglang.launch_server), "
                    "vLLM (vllm serve) or TensorRT-LLM (trtllm-serve) launch command")


def _canonical(engine: str, flag: str) -> tuple[str | None, str]:
    """(canonical flag or None, how the spelling was read)."""
    table = _TABLES[engine]
    # NOTE: vLLM's FlexibleArgumentParser reads `_` as `-`; SGLang's argparse and trtllm-serve's click don't
    f = flag if engine != "vllm" else (flag[:2] + flag[2:].replace("_", "-") if flag.startswith("--") else flag)
    if f in table or f in _HARMLESS_VALUE or f in _HARMLESS_BOOL:
        return f, ""
    for canon, (_, aliases) in table.items():
        if f in aliases:
            return canon, "alias"
    if engine == "vllm" and f.startswith("--no-") and "--" + f[5:] in table:
        return f, ""
    if engine == "sglang" and f.startswith("--") and len(f) > 3:
        # NOTE: SGLang parses with argparse's default allow_abbrev: a unique prefix is the flag
        hits = [c for c in (*table, *_HARMLESS_VALUE, *_HARMLESS_BOOL) if c.startswith(f)]
        if len(hits) == 1:
            return hits[0], "argparse abbreviation"
    return None, ""


def _kind(engine: str, canon: str) -> str:
    table = _TABLES[engine]
    if canon in table:
        return table[canon][0]
    if canon.startswith("--no-") and "--" + canon[5:] in table:
        return "bool"
    return "bool" if canon in _HARMLESS_BOOL else "skip"


def _scan(engine: str, args: list[str]) -> tuple[dict[str, Any], list[Reading], list[str], list[str]]:
    """{canonical flag: value}, readings of spellings, ignored flags, speculative flags."""
    values: dict[str, Any] = {}
    spelled: list[Reading] = []
    ignored: list[str] = []
    spec: list[str] = []
    known = [*_TABLES[engine], *_HARMLESS_VALUE, *_HARMLESS_BOOL]
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not tok.startswith("-"):
            raise SpecError(f"--engine-args: {tok!r} is not a flag (an argument with no flag before it)")
        flag, eq, inline = tok.partition("=")
        if flag.startswith("--speculative-") or flag.startswith("--speculative_"):
            spec.append(flag)
            if not eq and i < len(args) and not args[i].startswith("--"):
                i += 1
            continue
        canon, how = _canonical(engine, flag)
        if canon is None:
            near = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise SpecError(f"--engine-args: {engine} flag {flag} is not one floorfirst knows{hint}; it may change "
                            "the deployment, so it is refused: remove it or pass the matching floorfirst option")
        kind = _kind(engine, canon)
        if kind == "bool":
            value = inline if eq else "true"
        else:
            if eq:
                value = inline
            elif i < len(args):
                value = args[i]
                i += 1
            else:
                raise SpecError(f"--engine-args: {flag} needs a value")
        if how:
            spelled.append(Reading(flag, value, f"read as {canon} ({how})"))
        if canon in _HARMLESS_VALUE or canon in _HARMLESS_BOOL:
            ignored.append(flag)
            continue
        values[canon] = _typed(flag, kind, value)
    return values, spelled, ignored, spec


def _typed(flag: str, kind: str, value: str) -> Any:
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
    except ValueError:
        raise SpecError(f"--engine-args: {flag} {value!r} is not a {'whole number' if kind == 'int' else 'number'}") from None
    if kind == "bool":
        v = value.strip().lower()
        if v not in ("true", "false", "1", "0"):
            raise SpecError(f"--engine-args: {flag}={value!r} must be true or false")
        return v in ("true", "1")
    return value


def parse_launch(text: str, model: str | None = None) -> LaunchReading:
    """Read a launch command line; SpecError (one line) for what floorfirst can't represent.
    `model` is floorfirst's --model, used when the line names none (its MLP kind decides what DP
    means to vLLM)."""
    from planner.launch_rules import sglang_deployment, trtllm_deployment, trtllm_extra_options, vllm_deployment

    text, files = split_files(text)
    toks = _tokens(text)
    if not toks:
        raise SpecError("--engine-args is empty")
    engine, args, positional = _engine_and_args(toks)
    values, spelled, ignored, spec = _scan(engine, args)
    if positional is not None:
        values.setdefault("--model", positional)
    if engine == "trtllm" and "--extra_llm_api_options" in values:
        values.update(trtllm_extra_options(values.pop("--extra_llm_api_options"), files))
    given = values.get("--model-path" if engine == "sglang" else "--model")
    card, how = _model_option(str(given)) if given is not None else (model, "")
    moe_model = True
    if card is not None:
        from planner import load_model

        moe_model = load_model(card).mlp.kind == "moe"
    rule = {"sglang": sglang_deployment, "vllm": vllm_deployment, "trtllm": trtllm_deployment}[engine]
    options, readings, notes, ctx = rule(values, moe_model)
    if given is not None:
        options["model"] = card
        readings.insert(0, Reading("--model-path" if engine == "sglang" else "--model", str(given), f"--model {how}"))
    if spec:
        notes.append(f"speculative decoding ({', '.join(sorted(set(spec)))}): a step verifies several tokens per "
                     "request; floorfirst prices one token per request per step")
    options["engine"] = engine
    return LaunchReading(engine, options, tuple(spelled + readings), tuple(notes), tuple(ignored), ctx,
                         None if given is None else str(given))
