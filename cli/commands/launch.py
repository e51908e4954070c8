"""`floorfirst explain-launch "…"`: how an SGLang, vLLM or TensorRT-LLM launch command reads as a floorfirst
deployment (planner.launch): each flag and what it became, what the engine would do that floorfirst
does not model, the flags with no effect on the deployment, and the equivalent floorfirst options."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from cli.common import JsonOpt, console, emit_json

_FLAG = {"model": "--model", "gpus": "--gpus", "replicas": "--replicas", "attn": "--attn", "moe": "--moe",
         "nodes": "--nodes", "mem_fraction": "--mem-fraction", "kv_dtype": "--kv-dtype", "page_tokens": "--page-tokens",
         "swa_full_tokens_ratio": "--swa-full-tokens-ratio", "weight_dtype": "--weight-dtype", "engine": "--engine"}


def equivalent_options(options: dict) -> list[str]:
    """The floorfirst options a launch line stands for, in a fixed order."""
    out = []
    for key, flag in _FLAG.items():
        if key in options and options[key] is not None:
            out += [flag, str(options[key])]
    return out


def explain_launch(
    command: Annotated[str, typer.Argument(help="The launch command, quoted (python -m sglang.launch_server …, vllm serve … or trtllm-serve …, "
                                                         "its extra options YAML as a heredoc before it or a file).")],
    json_out: JsonOpt = False,
) -> None:
    """Read an SGLang, vLLM or TensorRT-LLM launch command as a deployment and say how each flag was read."""
    from planner.launch import parse_launch

    r = parse_launch(command)
    opts = equivalent_options(r.options)
    doc = {**r.to_json(), "floorfirst_options": opts}
    if json_out:
        emit_json("explain_launch", doc)
        return
    con = console()
    t = Table(title=escape(f"{r.engine} launch command read as a deployment"))
    t.add_column("flag")
    t.add_column("value", justify="right")
    t.add_column("read as")
    for x in r.readings:
        t.add_row(escape(x.flag), escape(x.value), escape(x.meaning))
    con.print(t)
    con.print("floorfirst options: " + escape(" ".join(shlex.quote(o) for o in opts)))
    for n in r.not_modelled:
        con.print("not modelled: " + escape(n))
    if r.ignored:
        con.print("no effect on the deployment: " + escape(", ".join(r.ignored)))


def register(app: typer.Typer) -> None:
    app.command("explain-launch")(explain_launch)
