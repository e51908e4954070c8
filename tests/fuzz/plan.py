"""Which invocations the fuzz runs make: every corpus file with the command that reads it (the
default run), every file with every command that reads its kind (the long run), and the output
paths, counts and deployments issue 19 named.

An expectation per invocation: "ok" (exit 0 with a clean document), "error" (one line, exit 2), or
"either" (a profile's bad rows are reported as rejected rows, so a command may still answer).
"""

from __future__ import annotations

from tests.fuzz.harness import PROFILE, Workspace
from tests.fuzz.make_corpus import VALID

CHEAP_GRID = ["--batch-range", "1:64:2", "--context-range", "1k:8k:2"]

# kind -> the command lines that read a file of that kind, {f} standing for it; the first is the
# default run's.
READERS: dict[str, list[list[str]]] = {
    "configs": [["floor", "--model", "{f}"], ["compare", "--model", "{f}"], ["capacity", "--model", "{f}"],
                ["models", "--model", "{f}"], ["walls", "--model", "{f}", "--range", "1:64"],
                ["regimes", "--model", "{f}", *CHEAP_GRID], ["triage", "--measured-ms", "30", "--model", "{f}"],
                ["simulate", "--model", "{f}", "-n", "5", "-w", "shrinking"]],
    "hardware": [["floor", "--hardware", "{f}"], ["hardware", "--hardware", "{f}"],
                 ["compare", "--hardware", "{f}", "--pricing", "achieved"], ["capacity", "--hardware", "{f}"],
                 ["triage", "--measured-ms", "30", "--hardware", "{f}"],
                 ["simulate", "--hardware", "{f}", "-n", "5", "-w", "shrinking"]],
    "calibrations": [["floor", "--calibration", "{f}"], ["compare", "--calibration", "{f}"],
                     ["walls", "--calibration", "{f}", "--range", "1:64"],
                     ["regimes", "--calibration", "{f}", *CHEAP_GRID],
                     ["simulate", "--calibration", "{f}", "-n", "5", "-w", "shrinking"],
                     ["validate", "--calibration", "{f}", "--profile", str(PROFILE), "--folds", "2"]],
    "profiles": [["triage", "--profile", "{f}"], ["calibrate", "--profile", "{f}", "--out", "{out}/c.json", "--force"],
                 ["validate", "--calibration", "{valid_cal}", "--profile", "{f}", "--folds", "2"],
                 ["calibrate", "--profile", "{f}", "--set", "model=llama-3.1-70b", "--out", "{out}/c.json", "--force"]],
    "traces": [["simulate", "-w", "{f}", "-n", "5"], ["simulate", "-w", "{f}", "-n", "-5"],
               ["simulate", "-w", "{f}", "--policy", "dp", "-n", "0"]],
    "microbench": [["microbench", "--from", "{f}", "--yaml-out", "{out}/h.yaml"], ["microbench", "--from", "{f}"],
                   ["calibrate", "--profile", str(PROFILE), "--microbench", "{f}", "--out", "{out}/c.json", "--force"]],
}


# Files refused by their kind's first reader only: a microbench summary above the datasheet (or far
# below it) can't make a hardware YAML but is still a result to show and a prior the fit clips;
# a three-row profile triages but is too short to fit or cross-validate.
FIRST_READER_ONLY = {"microbench/summary_above_peak.json", "microbench/summary_tiny.json", "profiles/bom.csv",
                     "traces/long_broken_tail.csv"}  # -n 5 never reads its broken tail; -n 0 meets it


def _expect(ws: Workspace, kind: str, name: str) -> str:
    if f"{kind}/{name}" in VALID:
        return "ok"
    if kind == "profiles" and name.split(".")[0] not in ("fifo", "dev_zero", "folder", "empty", "deep",
                                                          "huge_field", "non_utf8"):
        return "either"
    return "error"


def _fill(argv: list[str], ws: Workspace, f: str) -> list[str]:
    subs = {"{f}": f, "{out}": str(ws.out), "{valid_cal}": ws.path("calibrations/valid.json")}
    out = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace(k, v)
        out.append(a)
    return out + ["--json"]


def corpus_runs(ws: Workspace, every_reader: bool) -> list[tuple[list[str], str]]:
    """(argv, expectation) for every corpus file: its kind's first reader, or all of them."""
    runs = []
    for kind, readers in READERS.items():
        for f in ws.files(kind):
            for i, argv in enumerate(readers if every_reader else readers[:1]):
                expect = "error" if "-5" in argv else _expect(ws, kind, f.name)
                if i and f"{kind}/{f.name}" in FIRST_READER_ONLY:
                    expect = "either"
                runs.append((_fill(argv, ws, str(f)), expect))
    return runs


def edge_runs(ws: Workspace) -> list[tuple[list[str], str]]:
    """Issue 19's named cases: output paths checked before work, counts, a model nothing can serve."""
    long_name = "p" * 300
    o = str(ws.out)
    cfg = ws.path("configs/top_k_512.json")
    runs = [
        (["calibrate", "--profile", str(PROFILE), "--out", "/nonexistent/c.json"], "error"),
        (["calibrate", "--profile", str(PROFILE), "--out", ws.path("calibrations/folder.json")], "error"),
        (["calibrate", "--profile", str(PROFILE), "--out", ws.path("calibrations/fifo.json")], "error"),
        (["calibrate", "--profile", str(PROFILE), "--out", ws.path("configs/bom.json")], "error"),
        (["calibrate", "--profile", str(PROFILE), "--out", f"{o}/{long_name}.json"], "error"),
        (["calibrate", "--profile", str(PROFILE), "--out", f"{o}/c.txt"], "error"),
        (["walls", "--plot", f"{o}/x.xyz", "--range", "1:8"], "error"),
        (["walls", "--plot", ws.path("hardware/folder.yaml"), "--range", "1:8"], "error"),
        (["walls", "--plot", f"{o}/{long_name}.png", "--range", "1:8"], "error"),
        (["regimes", "--plot", "/nonexistent/r.png", *CHEAP_GRID], "error"),
        (["simulate", "-n", "5", "--plot", f"{o}/s.xyz"], "error"),
        (["microbench", "--from", ws.path("microbench/valid.json"), "--yaml-out", f"{o}/h.txt"], "error"),
        (["microbench", "--from", ws.path("microbench/valid.json"), "--yaml-out", "/nonexistent/h.yaml"], "error"),
        (["microbench", "--from", ws.path("microbench/valid.json"), "--yaml-out", f"{o}/next.yaml"], "ok"),
        (["floor", "--hardware", f"{o}/next.yaml"], "ok"),  # the YAML microbench wrote loads
        (["simulate", "--model", "kimi-k2", "--gpus", "4", "-n", "5"], "error"),  # weights leave no KV pool anywhere
        (["capacity", "--model", "kimi-k2", "--gpus", "4"], "ok"),  # ... which capacity and compare show as a pool of 0
        (["compare", "--model", "kimi-k2", "--gpus", "4"], "ok"),
        (["simulate", "-n", "5", "--calibration", ws.path("calibrations/efficiency_subnormal.json")], "error"),
        (["compare", "--model", cfg], "error"),
        (["capacity", "--model", ws.path("configs/first_k_dense_1000.json")], "error"),
        (["floor", "--model", ws.path("configs/moe_layer_freq_list.json")], "ok"),
        (["floor", "--model", "x" * 5000], "error"),
        (["floor", "--calibration", "x" * 5000 + ".json"], "error"),
        (["simulate", "-w", "x/" * 3000 + "w.csv", "-n", "5"], "error"),
        *issue_31_runs(ws),
    ]
    return [(argv + ["--json"], expect) for argv, expect in runs]


SET_DEPLOYMENT = ["--set", "model=deepseek-v3.2", "--set", "hardware=h200", "--set", "gpus=8", "--set", "attn=dp",
                  "--set", "moe=ep"]


def issue_31_runs(ws: Workspace) -> list[tuple[list[str], str]]:
    """Issue 31's inputs that ended in exit 70, a traceback or a hang, and its real files."""
    import os

    o = str(ws.out)
    dangling = ws.out / "dangling.png"
    if not os.path.lexists(dangling):
        os.symlink(ws.out / "nowhere" / "y.png", dangling)
    return [
        (["capacity", "--reserve-gib", "1E3"], "error"),
        (["capacity", "--hardware", ws.path("hardware/context_over_hbm.yaml")], "error"),
        (["floor", "--batch", "9" * 400], "error"),
        (["floor", "--gpus", "-" + "9" * 400], "error"),
        (["walls", "--range", "1:8", "--plot", "/proc/x.png"], "error"),
        (["walls", "--range", "1:8", "--plot", str(dangling)], "error"),
        (["compare", "--model", "deepseek-v3.2", "--hardware", "h200", "--gpus", "64"], "ok"),
        (["simulate", "--hardware", "h20", "-n", "50"], "error"),
        (["triage", "--profile", ws.path("profiles/sglang_bench_serving.jsonl"), *SET_DEPLOYMENT], "ok"),
        (["calibrate", "--profile", ws.path("profiles/sglang_bench_serving_0_5_details.jsonl"), *SET_DEPLOYMENT,
          "--out", f"{o}/sglang_cal.json", "--force"], "either"),  # one run: too few rows to fit, not a refusal of its rate
        (["simulate", "-w", ws.path("traces/sglang_bench_serving_0_5_details.jsonl"), "-n", "0", "--policy", "dp"], "ok"),
        (["simulate", "-w", ws.path("traces/long_broken_tail.csv"), "-n", "50"], "ok"),
        *[(["calibrate", "--from-kernel-db", "h200_sxm", "--backend", "sglang", "--wheel", str(ws.wheels / w),
            "--out", f"{o}/kdb.json"], "error") for w in ("bomb.whl", "ratio.whl", "not_zip.whl")],
    ]


def mcp_escape_runs(ws: Workspace) -> list[tuple[str, dict, str]]:
    """(tool, arguments, expectation) of MCP calls that try to read or write outside the root
    (ws.root): paths outside, `..`, links inside that point out, launch lines naming outside
    folders, writes over existing files; and the same calls kept inside, which must work."""
    out, outside = ws.outside, str(ws.outside)
    (ws.out / "foreign.json").write_text('{"not": "a calibration"}')
    reads = [str(out / "config.json"), str(out / "nothing.json"), "../" + ws.outside.name + "/config.json",
             "link_out.json", "outdir/config.json", "/etc/passwd", "/proc/self/root/etc/hostname", str(out / "secret.json")]
    runs = [("floor", {"model": p}, "error") for p in reads]
    runs += [
        ("floor", {"hardware": "outdir/notes.txt"}, "error"),
        ("floor", {"calibration": str(out / "secret.json")}, "error"),
        ("triage_profile", {"profile": "outdir/config.json"}, "error"),
        ("simulate", {"workload": "outdir/notes.txt", "requests": 5}, "error"),
        ("floor", {"engine_args": f"vllm serve {outside} -tp 8"}, "error"),
        ("explain_launch", {"command": f"python -m sglang.launch_server --model-path {outside}/config.json --tp 8"},
         "error"),
        # the rows name their own hardware (the --set default is not used): what matters is the audit
        ("triage_profile", {"profile": "profile.jsonl", "set": [f"hardware={outside}/gpu.yaml"]}, "either"),
        ("triage_profile", {"profile": "corpus/profiles/strings.csv", "set": [f"hardware={outside}/config.json"]},
         "error"),
        ("walls", {"range": "1:8", "plot": f"{outside}/w.png"}, "error"),
        ("walls", {"range": "1:8", "plot": "../" + ws.outside.name + "/w.png"}, "error"),
        ("walls", {"range": "1:8", "plot": "outdir/w.png"}, "error"),
        ("walls", {"range": "1:8", "plot": "link_notes.png"}, "error"),
        ("walls", {"range": "1:8", "plot": "link_notes.png", "overwrite": True}, "error"),
        ("regimes", {"batch_range": "1:64:2", "context_range": "1k:8k:2", "plot": f"{outside}/r.png"}, "error"),
        ("simulate", {"requests": 5, "plot": "outdir/s.png"}, "error"),
        ("calibrate", {"profile": "profile.jsonl", "out": "out/foreign.json"}, "error"),
        ("calibrate", {"profile": "profile.jsonl", "out": f"{outside}/cal.json"}, "error"),
        ("calibrate", {"profile": "profile.jsonl", "out": "outdir/cal.json", "overwrite": True}, "error"),
        # inside the root: read, and written once; again without overwrite refused, with it replaced
        ("floor", {"model": "corpus/configs/bom.json"}, "ok"),
        ("triage_profile", {"profile": "profile.jsonl"}, "ok"),
        ("walls", {"range": "1:8", "plot": "out/mcp_walls.png"}, "ok"),
        ("walls", {"range": "1:8", "plot": "out/mcp_walls.png"}, "error"),
        ("walls", {"range": "1:8", "plot": "out/mcp_walls.png", "overwrite": True}, "ok"),
        ("calibrate", {"profile": "profile.jsonl", "out": "out/foreign.json", "overwrite": True}, "ok"),
        ("floor", {"model": "deepseek-ai/DeepSeek-V3.2"}, "ok"),
    ]
    return runs
