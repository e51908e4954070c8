"""Plots for walls and regimes. matplotlib is imported inside each function (Agg backend), so
the CLI starts fast when no plot is asked for."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from planner.errors import SpecError

RESOURCE_COLORS = {"hbm": "#1f77b4", "compute": "#d62728", "network_bytes": "#2ca02c",
                   "network_messages": "#9467bd", "host_link": "#ff7f0e", "kv_capacity": "#000000"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str, **kwargs) -> None:
    """Render the figure in memory, then write it whole through planner.inputs (a temporary file
    renamed onto the name; confined to the MCP root where there is one). NOTE: matplotlib's own
    savefig(path) opens the name itself, following a link and leaving half a file on an error."""
    import io

    from planner.inputs import write_bytes_file

    p = Path(path)
    fmt = p.suffix.lower().lstrip(".")
    if fmt not in ("png", "svg", "pdf"):
        raise SpecError(f"--plot {path}: use a .png, .svg or .pdf file name")
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, **kwargs)
    write_bytes_file(p, buf.getvalue(), "plot")


def _save(fig, path: str) -> None:
    save_figure(fig, path, dpi=130, bbox_inches="tight")


MAX_TICK_LABELS = 12  # regimes: beyond this many cells an axis labels every k-th (labels overprinted)


def plot_walls(results: list[tuple[str, object]], title: str, path: str) -> None:
    """One panel per layout: each resource's time along the axis, floors, and walls as lines.
    NOTE: each wall's label sits inside its panel, along its line (axis-fraction y), so it never
    meets the tick labels and every panel has one; the legend takes an empty panel or sits below."""
    plt = _pyplot()
    n = len(results)
    cols = min(n, 4)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows + 0.6), squeeze=False, sharey=True)
    for ax, (label, w) in zip(axes.ravel(), results):
        for name, t in w.times_s.items():
            if not np.any(t > 0):
                continue  # a resource with no traffic (the host link without a tier)
            ax.plot(w.loads, t * 1e3, color=RESOURCE_COLORS[name], lw=1.4, label=name)
        ax.plot(w.loads, w.floor_sum_s * 1e3, color="0.5", lw=1, ls="--", label="floor sum")
        for name, x in w.walls.items():
            if x is not None and x > w.loads[0]:
                ax.axvline(x, color=RESOURCE_COLORS[name], lw=1, ls=":" if name != "kv_capacity" else "-")
        kv = w.walls.get("kv_capacity")
        if kv is not None:
            ax.axvspan(kv, w.loads[-1], color="0.88", zorder=0)
            ax.text(kv, 0.97, "KV wall ", transform=ax.get_xaxis_transform(), rotation=90, ha="right", va="top",
                    fontsize=7, clip_on=True)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(label, fontsize=9)
        ax.set_xlabel(w.axis + (" (requests)" if w.axis == "batch" else " (tokens)"), fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3, which="both", lw=0.4)
    for r in range(rows):
        axes[r, 0].set_ylabel("time per step (ms)", fontsize=8)

    spare = axes.ravel()[n:]
    for ax in spare:
        ax.axis("off")
    seen: dict[str, object] = {}  # every panel's entries (the host link shows only in tiered panels)
    for ax in axes.ravel()[:n]:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    handles, names = list(seen.values()), list(seen)
    if len(spare):
        spare[0].legend(handles, names, fontsize=8, loc="center")
    else:
        fig.legend(handles, names, fontsize=8, loc="lower center", ncol=len(names), bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(title + "  (grey: KV does not fit)", fontsize=10)
    fig.tight_layout(rect=(0, 0.06 if not len(spare) else 0, 1, 1))
    _save(fig, path)
    plt.close(fig)


def _thinned(n: int) -> np.ndarray:
    step = max(1, int(np.ceil(n / MAX_TICK_LABELS)))
    return np.arange(0, n, step)


def plot_regimes(reg, title: str, path: str) -> None:
    """Heatmap of the best layout per (batch, context) cell; infeasible cells in white, cells where
    layouts tie (within reg.tie_margin) hatched."""
    plt = _pyplot()
    from matplotlib.colors import ListedColormap

    palette = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#9467bd", "#c5b0d5", "#2ca02c", "#98df8a", "#d62728", "#ff9896"]
    k = len(reg.labels)
    cmap = ListedColormap(["#ffffff"] + palette[:k])
    fig, ax = plt.subplots(figsize=(7.5, 5))
    data = reg.best.astype(float) + 1  # 0 = infeasible
    ax.pcolormesh(np.arange(reg.context.size + 1), np.arange(reg.batch.size + 1), data, cmap=cmap,
                  vmin=-0.5, vmax=k + 0.5, edgecolors="0.9", linewidth=0.3)
    from matplotlib.patches import Patch, Rectangle

    ties = reg.tied.sum(axis=0) > 1 if reg.tied is not None else np.zeros(reg.best.shape, bool)
    for i, j in zip(*np.nonzero(ties)):
        ax.add_patch(Rectangle((j, i), 1, 1, fill=False, hatch="///", edgecolor="0.25", linewidth=0))
    xs, ys = _thinned(reg.context.size), _thinned(reg.batch.size)
    ax.set_xticks(xs + 0.5)
    ax.set_xticklabels([f"{c / 1024:.0f}k" if c >= 1024 else f"{c:.0f}" for c in reg.context[xs]], rotation=45, fontsize=7)
    ax.set_yticks(ys + 0.5)
    ax.set_yticklabels([f"{b:.0f}" for b in reg.batch[ys]], fontsize=7)
    ax.set_xlabel("context per request (tokens)")
    ax.set_ylabel("batch (concurrent requests)")
    used = sorted(set(int(x) for x in reg.best.ravel()))
    handles = [Patch(color=palette[i], label=reg.labels[i]) for i in used if i >= 0]
    if -1 in used:
        handles.append(Patch(facecolor="#ffffff", edgecolor="0.5", label="KV does not fit"))
    if ties.any():
        handles.append(Patch(facecolor="#ffffff", edgecolor="0.25", hatch="///",
                             label=f"tie: another layout within {100 * reg.tie_margin:g} %"))
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.set_title(f"{title}\nbest layout by floor_{reg.floor}", fontsize=10)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_thresholds(th, title: str, path: str) -> None:
    """Two panels: a prefill step under TP and CP along its tokens, a decode step under TP and DCP
    along the context; each crossover a vertical line with its flag (integrations.thresholds)."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10.5, 4.0))
    for ax, c, xlabel in ((axes[0], th.prefill, "prefill tokens in the batch"),
                          (axes[1], th.decode, f"decode context, tokens (batch {th.decode.batch})")):
        ax.plot(c.curve.tokens, c.curve.tp_s * 1e3, color="#1f77b4", lw=1.5, label="tp")
        ax.plot(c.curve.tokens, c.curve.other_s * 1e3, color="#d62728", lw=1.5, label=c.other)
        if c.tokens is not None:
            ax.axvline(c.tokens, color="0.3", lw=1, ls="--")
            ax.text(c.tokens, 0.97, f" {c.tokens:.0f}", transform=ax.get_xaxis_transform(), ha="left", va="top",
                    fontsize=8)
            if c.band_tokens is not None and c.band_tokens[1] > c.band_tokens[0]:
                ax.axvspan(*c.band_tokens, color="0.9", zorder=0)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_title(c.flag, fontsize=8)
        ax.set_ylabel(f"step time, ms ({th.ranking})")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(wspace=0.32)
    _save(fig, path)
    plt.close(fig)


def plot_disagg_ratio(rows: list[dict], title: str, path: str) -> None:
    """The P:D sweep: the best split's share of prefill GPUs (left) and output tokens/s per GPU,
    disaggregated and colocated (right), against input length, one line per output length."""
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10.5, 3.8))
    for osl in sorted({r["output_tokens"] for r in rows}):
        pts = sorted((r for r in rows if r["output_tokens"] == osl and r["best_label"] is not None),
                     key=lambda r: r["input_tokens"])
        if not pts:
            continue
        x = [r["input_tokens"] for r in pts]
        share = [r["prefill_gpus"] / (r["prefill_gpus"] + r["decode_gpus"]) for r in pts]
        line = ax1.plot(x, share, marker="o", lw=1.4, label=f"output {osl:,.0f}")[0]
        for r, xi, s in zip(pts, x, share):
            ax1.annotate(f"{r['prefill_gpus']}:{r['decode_gpus']}", (xi, s), textcoords="offset points", xytext=(0, 5),
                         ha="center", fontsize=7)
        ax2.plot(x, [r["output_tokens_per_s_per_gpu"] for r in pts], marker="o", lw=1.4, color=line.get_color(),
                 label=f"disaggregated, output {osl:,.0f}")
        colo = [(xi, r["colocated_output_tokens_per_s_per_gpu"]) for r, xi in zip(pts, x)
                if r["colocated_output_tokens_per_s_per_gpu"] is not None]
        if colo:
            ax2.plot(*zip(*colo), ls="--", lw=1.2, color=line.get_color(), label=f"colocated, output {osl:,.0f}")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("input tokens")
        ax.grid(alpha=0.3)
    ax1.set_ylim(0, 1)
    ax1.set_ylabel("prefill GPUs / all GPUs (labels P:D)")
    ax2.set_ylabel("output tokens/s per GPU")
    ax1.legend(fontsize=8)
    ax2.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    _save(fig, path)
    plt.close(fig)
