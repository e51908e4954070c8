"""Shared CLI plumbing: option types, JSON and table output; context parsing, spec loading and the
deployment from the options are floorfirst.points' (re-exported here), which the Python API reads
the same way.

Nothing here computes a cost; it turns strings into specs and loads, and results into text.
"""

from __future__ import annotations

import json
import math
import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from cli.registry_options import ENGINES, LAYOUTS, MOE_SPLITS
from floorfirst.points import (DEFAULTS, build_load, deployment, load_calibration, load_specs, parse_tokens,  # noqa: F401
                               pricing_for, scalar, select_layouts)
# the contracts' versions (floorfirst/contracts.py says when one bumps)
from floorfirst.contracts import SCHEMA_VERSION, SCHEMA_VERSIONS  # noqa: F401
from planner.engines import KV_DTYPE_MAPPING
from planner.errors import SpecError  # noqa: F401
from planner.units import GiB


class PricingChoice(str, Enum):
    datasheet = "datasheet"
    achieved = "achieved"


ModelOpt = Annotated[str, typer.Option("--model", "-m", help="Built-in model name, a path to a Hugging Face config.json (or its folder), or a Hugging Face repo id (Qwen/Qwen3-235B-A22B-FP8: its cached config, or the card with the weights of its quantization suffix).")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-hw", help="Built-in GPU name or path to a hardware YAML file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", "-g", help="GPUs in the deployment (all replicas).")]
ReplicasOpt = Annotated[int, typer.Option("--replicas", help="Replicas of the whole group; the group is gpus/replicas GPUs.")]
# NOTE: layouts, MoE splits and engines are choices read from the planner's registries when a
# command is registered (cli.registry_options.live), never typed here.
AttnOpt = Annotated[str, typer.Option("--attn", help="Attention layout."), LAYOUTS]
MoeOpt = Annotated[Optional[str], typer.Option("--moe", help="MoE split (default: ep for MoE models, tp for dense)."), MOE_SPLITS]
BatchOpt = Annotated[Optional[int], typer.Option("--batch", "-b", help="Concurrent decode requests in the step (whole deployment); default 32 with a single --context length.")]
ContextOpt = Annotated[str, typer.Option(
    "--context", "-c",
    help="Context per request: one length (32768 or 32k), a comma list of per-request lengths (4k,4k,64k), "
         "or a histogram of LEN*COUNT items (4k*60,64k*4).")]
PrefillOpt = Annotated[float, typer.Option("--prefill-tokens", help="Prefill chunk (one request's tokens) each group runs in the same step.")]
PrefillContextOpt = Annotated[str, typer.Option("--prefill-context", help="Tokens the prefilling request already has cached (its prefix), e.g. 32k.")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help=f"KV cache dtype as engines spell it: {KV_DTYPE_MAPPING}. Default: auto.")]
WeightDtypeOpt = Annotated[Optional[str], typer.Option("--weight-dtype", help="bf16, fp8 or fp4. Default: the checkpoint's.")]
MemFractionOpt = Annotated[Optional[float], typer.Option("--mem-fraction", help="The engine's memory fraction (SGLang mem_fraction_static of the free memory, vLLM gpu_memory_utilization of total). Default: the engine's own default for this GPU and layout.")]
PageOpt = Annotated[Optional[int], typer.Option("--page-tokens", help="KV page size in tokens. Default: the engine's (SGLang page_size, vLLM block_size).")]
ReserveOpt = Annotated[Optional[float], typer.Option("--reserve-gib", help="GiB per GPU the engine keeps out of weights + KV (SGLang: the reserved memory its mem_fraction_static formula subtracts; vLLM: peak activations + non-torch memory). Default: the engine's estimate.")]
AttnGroupsOpt = Annotated[Optional[int], typer.Option("--attn-groups", help="Owner groups of a layout that takes a count (dptp: SGLang's --dp with --enable-dp-attention and --dp below --tp, vLLM's --data-parallel-size with --tensor-parallel-size above 1): requests spread over this many groups, attention TP inside each. Default: one group per node the group spans, 2 on one node. Other layouts refuse it.")]
SwaRatioOpt = Annotated[Optional[float], typer.Option("--swa-full-tokens-ratio", help="SGLang --swa-full-tokens-ratio for hybrid sliding-window models (gpt-oss, MiMo-V2-Flash, Llama 4, Step-3.5, Gemma 4): tokens the sliding-layer pool holds per full-layer pool token, in (0, 1]; a smaller ratio gives the full-attention layers (what long requests need) more tokens. Default: SGLang's 0.8 (server_args.py). vLLM has no such setting.")]
EngineOpt = Annotated[str, typer.Option("--engine", help="Whose memory model sizes the KV pool and sets the defaults (page size, KV dtype), whose kernels the step model prices and whose shipped prior prices tokens/s."), ENGINES]
NodesOpt = Annotated[Optional[int], typer.Option("--nodes", help="Scale-up domains (nodes) the deployment spans; a group larger than a node prices its cross-node traffic on the NIC. Default: as few as hold --gpus.")]
PricingOpt = Annotated[PricingChoice, typer.Option("--pricing", help="Price floors at datasheet peaks or at the hardware file's achieved efficiencies.")]
CalibrationOpt = Annotated[Optional[str], typer.Option("--calibration", help="A calibration artifact (floorfirst calibrate); adds predicted_s.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (units in keys).")]
WideOpt = Annotated[bool, typer.Option("--wide", help="Every column (tables otherwise fit 100 columns or COLUMNS).")]
LayoutsOpt = Annotated[Optional[str], typer.Option("--layouts", help="Comma list of attn/moe to include (default: all the model can run), e.g. tp/ep,dp/ep.")]


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def _plot_path(value: str | None) -> str | None:
    """--plot is checked as the options are parsed, before any work (planner.inputs.check_output_path)."""
    if value is not None:
        from planner.inputs import check_output_path

        check_output_path(value, "--plot", suffixes=PLOT_SUFFIXES)
    return value


PlotOpt = Annotated[Optional[str], typer.Option("--plot", help="Write a plot to this path (.png, .svg or .pdf).",
                                                callback=_plot_path)]

def emit_json(command: str, doc: dict[str, Any]) -> None:
    """Print one document after the guard (cli.documents): a NaN, an infinity where no undefined
    value is allowed, or a negative time/size/capacity ends the command as an internal error."""
    from cli.documents import DocumentError, checked_document, report

    out = {"schema": f"floorfirst.{command}/{SCHEMA_VERSIONS.get(command, SCHEMA_VERSION)}", **doc}
    try:
        text = json.dumps(checked_document(command, out), indent=1, allow_nan=False)
    except DocumentError as exc:
        report(exc)
        raise
    sys.stdout.write(text + "\n")


def emit_result(result) -> None:
    """Print a typed document (a floorfirst Document) as emit_json prints its keys."""
    doc = result.document()
    doc.pop("schema")
    emit_json(result.command, doc)


NARROW_COLUMNS = 100  # what the default tables fit (a screenshot-sized terminal)
WIDE_COLUMNS = 200


def console(wide: bool = False):
    """A rich console as wide as `COLUMNS` says, else the terminal; piped output is 100 columns
    (200 with `wide`), so `> file` reads like a terminal of that width."""
    import os

    from rich.console import Console

    cols = os.environ.get("COLUMNS", "").strip()
    if cols.isdigit() and int(cols) >= 40:
        return Console(width=max(int(cols), WIDE_COLUMNS) if wide else int(cols))
    c = Console()
    if c.is_terminal:
        return Console(width=max(c.width, WIDE_COLUMNS)) if wide else c
    return Console(width=WIDE_COLUMNS if wide else NARROW_COLUMNS)


def title(text: str) -> str:
    """A table title with rich markup escaped ('[fp8 weights, bf16 KV]' stays as written)."""
    from rich.markup import escape

    return escape(text)


def fmt_bytes(b: float) -> str:
    for unit, div in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(b) >= div:
            return f"{b / div:.2f} {unit}"
    return f"{b:.0f} B"


def fmt_gib(b: float) -> str:
    """Memory held (weights, KV, pools): GiB everywhere, as `capacity` and the engines report it."""
    return f"{b / GiB:.2f} GiB"


def fmt_flops(f: float) -> str:
    for unit, div in (("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if abs(f) >= div:
            return f"{f / div:.2f} {unit}"
    return f"{f:.0f} FLOP"


def fmt_ms(s: float) -> str:
    return f"{s * 1e3:.3f} ms" if math.isfinite(s) else "—"


def fmt_tokens(n: float) -> str:
    if n >= 1024 and n < 1e6 and float(n) % 1024 == 0:
        return f"{n / 1024:.0f}k"
    if n >= 1e6:
        return f"{n / 1e6:.2f} M"
    if n >= 1e3:
        return f"{n / 1e3:.1f} K"
    return f"{n:.0f}"
