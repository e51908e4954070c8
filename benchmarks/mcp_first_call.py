"""How soon `floorfirst mcp` answers (issue 32: its first call within 1 s of start on a quiet machine).

Each trial starts the server as an MCP client does (a fresh `python -c "from cli.main import main;
main(['mcp'])"` over stdio, from the checkout's root) and times, from the moment the process is
launched: the `initialize` handshake done, the tool list, and the first tool call's answer (`compare`
on the defaults, then `capacity`). With `--base ROOT` the same trials run from another checkout,
alternating, so both see the same load; `--with-sdk` adds this checkout's `floorfirst mcp --sdk`. Medians go to `<out>/mcp_first_call.json`.

    python benchmarks/mcp_first_call.py [--out DIR] [--repeat 5] [--base /tmp/base] [--with-sdk]

Needs the `mcp` extra. Prints one JSON document as its last line. Does not: check the answers (the MCP
tests do), or time calls after the second.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[1]


def trial(root: Path, extra: tuple[str, ...] = ()) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    params = StdioServerParameters(command=sys.executable, args=["-c", f"from cli.main import main; main(['mcp', *{list(extra)!r}])"],
                                   cwd=str(root), env=env)
    marks: dict[str, float] = {}

    async def main() -> None:
        t0 = time.perf_counter()
        async with Client(params) as client:  # initialize is done when the context is entered
            marks["initialize_s"] = time.perf_counter() - t0
            await client.list_tools()
            marks["list_tools_s"] = time.perf_counter() - t0
            r = await client.call_tool("compare", {})
            assert not r.is_error, r
            marks["first_call_compare_s"] = time.perf_counter() - t0
            r = await client.call_tool("capacity", {"context": "32k"})
            assert not r.is_error, r
            marks["second_call_capacity_s"] = time.perf_counter() - t0

    anyio.run(main)
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="folder for mcp_first_call.json (default: a new temporary folder)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--base", default=None, help="another checkout, run alternating with this one")
    ap.add_argument("--with-sdk", action="store_true",
                    help="also time this checkout's `floorfirst mcp --sdk` (the same tools served through the MCP SDK)")
    args = ap.parse_args()
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mcp_first_call_"))
    out.mkdir(parents=True, exist_ok=True)
    roots = {"this": ROOT} | ({"base": Path(args.base).resolve()} if args.base else {})
    arms = {r: (root, ()) for r, root in roots.items()} | ({"this_sdk": (ROOT, ("--sdk",))} if args.with_sdk else {})
    for root, extra in arms.values():  # warm-up: .pyc files, the spec cache, the tool table
        trial(root, extra)
    runs: dict[str, list[dict[str, float]]] = {r: [] for r in arms}
    for _ in range(args.repeat):
        for r, (root, extra) in arms.items():
            runs[r].append(trial(root, extra))
    doc: dict = {"benchmark": "mcp_first_call", "repeat": args.repeat, "python": platform.python_version(),
                 "cpus": os.cpu_count(), "load_average_at_end": list(os.getloadavg()),
                 "roots": {r: str(p) for r, p in roots.items()}, "median_s": {}, "min_s": {}}
    for r in arms:
        doc["median_s"][r] = {k: round(statistics.median(x[k] for x in runs[r]), 3) for k in runs[r][0]}
        doc["min_s"][r] = {k: round(min(x[k] for x in runs[r]), 3) for k in runs[r][0]}
    if "base" in roots:
        doc["ratio_this_over_base"] = {k: round(doc["median_s"]["this"][k] / doc["median_s"]["base"][k], 3)
                                       for k in doc["median_s"]["this"]}
    (out / "mcp_first_call.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out / 'mcp_first_call.json'}", file=sys.stderr)
    print(json.dumps(doc))


if __name__ == "__main__":
    main()
