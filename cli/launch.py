"""`--engine-args "…"` on the planning commands: an SGLang, vLLM or TensorRT-LLM launch line (planner.launch)
turned into the command's own options, and how each flag was read printed on stderr. Also the
warning when a context exceeds the model's window.

A launch flag and an explicit option that disagree is an error naming both; an option left at its
default takes the launch line's value.
"""

from __future__ import annotations

import functools
import inspect
from typing import Annotated, Any, Callable, Optional

import typer

from cli.logs import logger
from planner.errors import SpecError

EngineArgsOpt = Annotated[Optional[str], typer.Option(
    "--engine-args", help="An SGLang (python -m sglang.launch_server …), vLLM (vllm serve …) or TensorRT-LLM (trtllm-serve …) "
                          "launch command, quoted: "
                          "its model, GPUs, layout, MoE split, memory fraction, KV dtype and page size are read from it "
                          "(floorfirst explain-launch shows how).")]

# floorfirst option → the command parameter it sets, where a command names it differently
_PARAM = {"simulate": {"attn": "policy"}, "serve": {"attn": "policy"}}
# Options a command takes but a launch line must not narrow (compare lists every layout).
_KEEP = {"compare": {"moe"}}


def print_reading(reading) -> None:
    """How the launch line was read, one log line per flag (INFO: `--quiet` leaves them out)."""
    log = logger("launch")
    for r in reading.readings:
        log.info(f"engine-args: {r.flag} {r.value}: {r.meaning}")
    for n in reading.not_modelled:
        log.info(f"engine-args: not modelled: {n}")
    if reading.ignored:
        log.info(f"engine-args: no effect on the deployment: {', '.join(reading.ignored)}")


def merge(command: str, reading, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """`given` with the launch line's options filled in where the command takes them."""
    out = dict(given)
    if "launch_layout" in out:  # compare shows every layout and marks the launch's
        out["launch_layout"] = f"{reading.options['attn']}/{reading.options['moe']}"
    rename = _PARAM.get(command, {})
    for opt, value in reading.options.items():
        param = rename.get(opt, opt)
        if param not in out or param in _KEEP.get(command, ()):
            continue
        cur = out[param]
        if cur is None or cur == defaults.get(param) or cur == value:
            out[param] = value
        else:
            raise SpecError(f"--{param.replace('_', '-')} {cur} disagrees with --engine-args, which reads as "
                            f"--{param.replace('_', '-')} {value}; give one of them")
    return out


def planning(command: str, func: Callable) -> Callable:
    """`func` with an --engine-args option whose launch line fills the command's options, and a
    warning when its context exceeds the model's window."""
    sig = inspect.signature(func, eval_str=True)
    defaults = {p.name: p.default for p in sig.parameters.values()}
    extra = inspect.Parameter("engine_args", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=EngineArgsOpt)
    params = list(sig.parameters.values())
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params] + [extra]

    @functools.wraps(func)
    def run(**kwargs):
        text = kwargs.pop("engine_args", None)
        if text:
            from planner.launch import parse_launch

            reading = parse_launch(text, kwargs.get("model"))
            kwargs = merge(command, reading, kwargs, defaults)
            print_reading(reading)
        warnings = []
        if text and reading.max_context_tokens and "context" in kwargs:
            warnings.append(warn_context(kwargs["context"], reading.max_context_tokens, "the launch line's context window"))
        model = kwargs.get("model")
        if "context" in kwargs and isinstance(model, str):
            window = model_window_tokens(model)
            if window:
                warnings.append(warn_context(kwargs["context"], window, f"{model}'s window (max_position_embeddings)"))
        # NOTE: printed after the command succeeds: a refused input gets its one error line alone
        result = func(**kwargs)
        for w in warnings:
            if w:
                logger("launch").warning(w.rstrip("\n"))
        return result

    run.__signature__ = sig.replace(parameters=params)
    run.__annotations__ = {**getattr(func, "__annotations__", {}), "engine_args": EngineArgsOpt}
    return run


def model_window_tokens(model: str) -> int | None:
    """The context window (max_position_embeddings) of the card or config.json `model` names, or None.
    NOTE: read from the file here because ModelSpec does not keep it (a field for issue 14's loader)."""
    from pathlib import Path

    from planner.inputs import MODEL_CONFIG_MAX_BYTES, load_json_file
    from planner.models.loader import CARDS_DIR
    from planner.models.repo_ids import looks_like_repo_id, resolve_repo_id

    try:  # NOTE: a name too long for a path (ENAMETOOLONG) is the loader's error to report, not ours
        card = CARDS_DIR / f"{model.lower()}.json"
        path = card if "/" not in model and card.is_file() else Path(model)
        if path.is_dir():
            path = path / "config.json"
        elif not path.exists() and looks_like_repo_id(model):  # a repo id: the config it resolves to
            path = resolve_repo_id(model).config
        cfg = load_json_file(str(path), "model config", MODEL_CONFIG_MAX_BYTES)
    except (SpecError, OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    v = cfg.get("max_position_embeddings") if isinstance(cfg, dict) else None
    return int(v) if isinstance(v, (int, float)) and v > 0 else None


def warn_context(context_tokens: Any, window: int, whose: str) -> str:
    """The warning line (for stderr) when the longest context exceeds `window`, else ''."""
    from cli.common import fmt_tokens, parse_tokens

    longest = 0.0
    for part in str(context_tokens).split(","):
        if part.strip():
            try:
                longest = max(longest, parse_tokens(part.split("*")[0]))
            except SpecError:
                return ""
    if longest > window:
        return (f"floorfirst: warning: context {fmt_tokens(longest)} tokens exceeds {whose} "
                f"({fmt_tokens(window)} tokens); the engine would refuse such requests\n")
    return ""
