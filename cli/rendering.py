"""Tables and sentences for capacity, feasibility and memory, shared by the planning commands.

Nothing here computes a cost: it words what the planner's results say (a pool the engine
sized, why a deployment can't run) and lays out the compare and capacity tables.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import planner
from cli.common import fmt_ms, fmt_tokens, title
from planner.units import GiB

if TYPE_CHECKING:
    from rich.table import Table

# NOTE: rich is imported where a table or a sentence is made, not here: a --json call prints none,
# and rich's import is ~15 ms of its start (python -X importtime).


def deployment_title(dep: planner.Deployment) -> str:
    span = f" ({dep.nodes} nodes of {dep.gpus_per_node})" if dep.nodes > 1 else ""
    return f"{dep.model.name} on {dep.gpus} × {dep.hardware.name}{span}"


def memory_line(dep: planner.Deployment) -> str:
    """One line: how the engine sized the pool of this deployment."""
    p = dep.memory
    frac = f"{dep.engine_model.fraction_name} {p.fraction:.3f} ({p.fraction_source})"
    pool = f"KV pool {p.kv_pool_bytes / GiB:.1f} GiB/GPU" if p.feasible else "no KV pool"
    return (f"{dep.engine}: {frac} of {p.total_bytes / GiB:.1f} GiB ({p.usable_hbm_bytes / GiB:.1f} GiB usable, "
            f"{p.datasheet_hbm_bytes / 1e9:.0f} GB datasheet) − weights {p.weights_bytes / GiB:.1f} GiB → {pool}, "
            f"{p.page_tokens}-token pages")


# Short names of the binding resource in the narrow table (the JSON keeps the full names).
SHORT = {"hbm": "hbm", "compute": "compute", "network_bytes": "net bytes", "network_messages": "net msgs",
         "host_link": "pcie", "kv_capacity": "KV wall"}


def compare_table(out: dict[str, Any], dep0: planner.Deployment, pricing_label: str, calibrated: bool,
                  best_max: dict | None, wide: bool = False, launch_layout: str | None = None) -> Table:
    """One row per layout. NOTE: the narrow form (the default) fits 100 columns: times in ms with two
    decimals under a unit in the header; `wide` adds the decode kernel and three decimals. A host
    tier adds its link time and the requests held without and with it."""
    from rich import box
    from rich.table import Table

    t = Table(title=title(f"{deployment_title(dep0)}, B={out['batch']:.0f}, mean context "
                          f"{fmt_tokens(out['context_mean_tokens'])} ({pricing_label} floors, busiest rank, "
                          f"{dep0.engine} memory)"), box=box.HEAVY_HEAD if wide else box.SIMPLE_HEAD,
              padding=(0, 1) if wide else (0, 1, 0, 0), pad_edge=wide)
    ms = (lambda s: fmt_ms(s)) if wide else (lambda s: f"{s * 1e3:.2f}" if s == s and abs(s) != float("inf") else "—")
    cols = (["attn/moe", "floor max", "floor sum", "binding", "tokens/s", "KV used", "HBM", "compute", "net bytes",
             "net msgs"] if wide else
            ["attn/moe", "max ms", "sum ms", "binds", "tok/s", "KV used", "hbm ms", "flop ms", "net ms", "msg ms"])
    tiered = any("host_tier" in d for d in out["layouts"])
    if tiered:
        cols += ["host link", "held HBM-only → tiered"] if wide else ["pcie ms", "held → tiered"]
    if calibrated:
        cols.insert(3, "model ms" if not wide else "model")
    if wide:
        cols.append("decode kernel")
    for c in cols:
        t.add_column(c, justify="left" if c in ("attn/moe", "binds", "decode kernel") else "right")
    for d in out["layouts"]:
        r = d["resources"]
        kv = r["kv_capacity"]
        star = ((" ★" if best_max and d is best_max else "") + ("" if d.get("launchable", True) else " †")
                + (" ◀" if launch_layout == f"{d['attn']}/{d['moe']}" else ""))
        used = (f"{kv['used_fraction']:.0%}" if kv["used_fraction"] is not None else "no pool") + ("" if kv["fits"] else " ✗")
        speed = f"{d['decode_tokens_per_s']:.0f}" if d["feasible"] and d.get("decode_tokens_per_s") else "—"
        row = [f"{d['attn']}/{d['moe']}{star}", ms(d["floor_max_s"]), ms(d["floor_sum_s"]),
               d["binding"] if wide else SHORT.get(d["binding"], d["binding"]), speed, used,
               ms(r["hbm"]["time_s"]), ms(r["compute"]["time_s"]), ms(r["network_bytes"]["time_s"]),
               ms(r["network_messages"]["time_s"])]
        if tiered:
            h = d["host_tier"]
            row += [ms(r["host_link"]["time_s"]),
                    f"{h['requests_held_hbm_only']:.0f} → {h['requests_held_tiered']:.0f} ({h['tier_wall']})"]
        if calibrated:
            row.insert(3, ms(d["predicted_s"]))
        if wide:
            row.append(d["decode_kernel"])
        t.add_row(*row)
    return t


def launch_sentence(out: dict[str, Any], launch_layout: str, star: dict | None) -> str:
    """What the launch line runs, against the ★ (compare's recommendation, ranked by `out['ranked_by']`)."""
    d = next((x for x in out["layouts"] if f"{x['attn']}/{x['moe']}" == launch_layout), None)
    if d is None:
        return f"◀ the launch runs {launch_layout}, which this model can't run here"
    head = f"◀ the launch runs {launch_layout}: floor max {fmt_ms(d['floor_max_s'])}, floor sum {fmt_ms(d['floor_sum_s'])}"
    if not d["feasible"]:
        return f"{head}; it can't hold this load ({d['infeasible_reason']})"
    if star is None or star is d:
        return f"{head}; the recommended layout"
    key = out["ranked_by"]["key"]
    by = "the step model" if key == "predicted_s" else "floor_max"
    return f"{head}; the recommended {star['attn']}/{star['moe']} is {d[key] / star[key]:.2f}× faster by {by}"


def launch_words(d: dict[str, Any], engine: str) -> str:
    """The launch line that runs one priced layout (a document row), with what it leaves to the
    operator, or why no flag of `engine` runs it; escaped for rich."""
    from rich.markup import escape

    if not d["launchable"]:
        return escape(f"{engine} can't launch {d['attn']}/{d['moe']}: {d['launch_reason']}")
    *files, command = d["launch_line"].split("\n")
    text = "\n".join([f"launch ({engine}):", *files, shell_wrap(command)])
    for n in d["launch_notes"]:
        text += f"\n# {n}"
    return escape(text)


def shell_wrap(command: str, width: int = 100) -> str:
    """`command` broken into lines of at most `width` columns with shell continuations (` \\`), a flag
    kept with its value, so that it pastes as it is (planner.launch reads the continuations too)."""
    words, groups = command.split(" "), []
    for w in words:
        if groups and not w.startswith("-") and groups[-1].startswith("-") and " " not in groups[-1]:
            groups[-1] += " " + w
        else:
            groups.append(w)
    lines, cur = [], ""
    for g in groups:
        if cur and len(cur) + 1 + len(g) + 2 > width:
            lines.append(cur + " \\")
            cur = "  " + g
        else:
            cur = f"{cur} {g}" if cur else g
    return "\n".join([*lines, cur])


def unlaunchable_lines(docs: list[dict[str, Any]], engine: str) -> list[str]:
    """'† a, b: why' lines, one per reason, for the rows no flag of `engine` runs."""
    from rich.markup import escape

    by_reason: dict[str, list[str]] = {}
    for d in docs:
        if not d["launchable"]:
            by_reason.setdefault(d["launch_reason"], []).append(f"{d['attn']}/{d['moe']}")
    return [escape(f"† {', '.join(names)}: {engine} can't launch it: {why}") for why, names in by_reason.items()]


def capacity_table(out: dict[str, Any], dep0: planner.Deployment) -> Table:
    from rich import box
    from rich.table import Table

    p0 = dep0.memory
    mix = [f"{fmt_tokens(x['context_tokens'])}×{x['requests']}" for x in out.get("context_mix", ())]
    at = f"the mix {', '.join(mix)}" if mix else f"{fmt_tokens(out['context_tokens'])} tokens/request"
    t = Table(title=title(f"{deployment_title(dep0)}: KV capacity at {at} [{dep0.kv_dtype} KV, {dep0.weight_dtype} "
                          f"weights] ({dep0.engine}, {p0.usable_hbm_bytes / GiB:.1f} GiB usable per GPU, {out['page_tokens']}-token pages)"))
    tiered = any("host_tier" in d for d in out["layouts"])
    cols = ["attn/moe", "weights GiB/GPU", "mem fraction", "KV pool GiB/GPU", "KV copies", "distinct tokens",
            "max concurrency"]
    if tiered:
        cols += ["HBM-only", "HBM-budget wall", "host wall", "binds"]
    for col in cols:
        t.add_column(col, justify="left" if col == "attn/moe" else "right")
    for d in out["layouts"]:
        pool = f"{d['kv_pool_gib_per_gpu']:.1f}" if d["feasible"] else "weights don't fit"
        row = [f"{d['attn']}/{d['moe']}", f"{d['weights_gib_per_gpu']:.1f}", f"{d['mem_fraction']:.3f}", pool,
               f"{d['kv_replication']:.0f}", fmt_tokens(d["distinct_tokens"]), f"{d['max_concurrency']:.0f}"]
        if tiered:
            h = d["host_tier"]
            row += [f"{h['requests_held_hbm_only']:.0f}", f"{h['hbm_wall_requests']:.0f}", f"{h['host_wall_requests']:.0f}",
                    h["binding_wall"]]
        t.add_row(*row)
    return t
