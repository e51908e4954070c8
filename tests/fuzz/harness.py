"""Drive the CLI as a hostile user would and classify every outcome.

`invoke(argv)` runs `floorfirst <argv>` in-process (cli.main.main, SystemExit caught), under a
SIGALRM deadline so a hang is counted instead of waited on, and classifies the run:
- ok: exit 0 and, with --json, one document that parses without NaN/Infinity, carries no negative
  number outside the signed fields, no floor_max_s above floor_sum_s, and meets its JSON schema
  (tests/agent/contracts: null only where the contract allows it);
- user_error: exit 2 and exactly one stderr line starting "floorfirst: error: " (with --json, the
  same line as one floorfirst.error/1 document on stdout);
- traceback, hang, bad_output, internal (exit 70: the document guard caught a bug): failures.

`Workspace` copies the corpus into a temporary folder (so a broken overwrite rule can't harm the
committed files) and makes what can't be committed: a FIFO and a link to /dev/zero of every kind,
a folder named like a file, a CSV field past the csv module's limit.

Does not: decide which outcomes a test expects (test_fuzz_corpus.py does).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import time
import traceback
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cli.documents import SIGNED_KEYS, SIGNED_SUFFIXES
from cli.main import main

CORPUS = Path(__file__).resolve().parent / "corpus"
ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "calibration" / "data" / "h200x2_step_profile.jsonl"
FAILURES = ("traceback", "hang", "bad_output", "internal")


class _Hang(BaseException):
    pass


@dataclass(frozen=True)
class Outcome:
    argv: tuple[str, ...]
    kind: str
    code: int | None
    seconds: float
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} (exit {self.code}, {self.seconds:.1f} s): floorfirst {' '.join(self.argv)}\n  {self.detail}"


def _alarm(signum, frame):
    raise _Hang()


def _doc_problem(doc) -> str:
    """Why a parsed document is wrong ('' if it isn't): a negative unsigned number, max > sum."""
    stack = [(doc, "")]
    while stack:
        x, key = stack.pop()
        if isinstance(x, dict):
            lo, hi = x.get("floor_max_s"), x.get("floor_sum_s")
            if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and lo > hi * (1 + 1e-9) + 1e-15:
                return f"floor_max_s={lo} > floor_sum_s={hi}"
            stack.extend((v, str(k)) for k, v in x.items())
        elif isinstance(x, list):
            stack.extend((v, key) for v in x)
        elif isinstance(x, (int, float)) and not isinstance(x, bool) and x < 0:
            if not (key.endswith(SIGNED_SUFFIXES) or key in SIGNED_KEYS):
                return f"{key}={x} is negative"
    return ""


def _reject_constant(name):
    raise ValueError(f"{name} in the document")


def _error_doc(out: str) -> str | None:
    """The `error` line of the one floorfirst.error/1 document `out` holds, else None."""
    try:
        doc = json.loads(out)
    except ValueError:
        return None
    ok = isinstance(doc, dict) and doc.get("schema") == "floorfirst.error/1" and doc.get("exit_code") == 2
    return doc["error"] if ok else None


def classify(argv, code, out: str, err: str, seconds: float) -> Outcome:
    argv = tuple(argv)
    if code == 0:
        if "--json" not in argv:
            return Outcome(argv, "ok", 0, seconds)
        try:
            doc = json.loads(out, parse_constant=_reject_constant)
        except ValueError as exc:
            return Outcome(argv, "bad_output", 0, seconds, f"not one JSON document: {exc}")
        problem = _doc_problem(doc)
        if not problem:
            from tests.agent.contracts import schema_name, validate

            try:
                validate(doc, schema_name(doc))
            except Exception as exc:  # jsonschema's ValidationError, or a schema that is missing
                problem = f"breaks its contract: {str(exc).splitlines()[0]}"
        return Outcome(argv, "bad_output" if problem else "ok", 0, seconds, problem)
    if code == 2:
        one_line = err.startswith("floorfirst: error: ") and err.count("\n") == 1 and "Traceback" not in err
        if one_line and "--json" in argv and _error_doc(out) != err.removeprefix("floorfirst: error: ").rstrip("\n"):
            return Outcome(argv, "bad_output", 2, seconds, f"--json: no error document on stdout: {out[:200]!r}")
        return Outcome(argv, "user_error" if one_line else "bad_output", 2, seconds, err.strip()[:300])
    if code == 70:
        return Outcome(argv, "internal", 70, seconds, err.strip()[:300])
    return Outcome(argv, "traceback", code, seconds, err.strip()[-300:])


def invoke(argv, timeout_s: float = 30.0) -> Outcome:
    """`floorfirst <argv>` in this process, stopped (and counted as a hang) after timeout_s."""
    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    t0 = time.monotonic()
    code: int | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _Hang:
        return Outcome(tuple(argv), "hang", None, time.monotonic() - t0, f"no answer within {timeout_s:g} s")
    except Exception:
        return Outcome(tuple(argv), "traceback", None, time.monotonic() - t0, traceback.format_exc(limit=-3)[-600:])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return classify(argv, code, out.getvalue(), err.getvalue(), time.monotonic() - t0)


@dataclass
class Tally:
    """Outcomes of a run, counted by kind; `failures` are the ones to print."""

    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> Outcome:
        self.outcomes.append(o)
        return o

    @property
    def counts(self) -> Counter:
        return Counter(o.kind for o in self.outcomes)

    @property
    def failures(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.kind in FAILURES]

    def summary(self) -> str:
        c = self.counts
        return (f"{len(self.outcomes)} invocations: " + ", ".join(f"{k} {c.get(k, 0)}" for k in
                ("ok", "user_error", *FAILURES)) + f"; slowest {max((o.seconds for o in self.outcomes), default=0):.1f} s")


class Workspace:
    """The corpus copied under `root`, plus the files that can't be committed (see the module doc)."""

    KINDS = ("configs", "hardware", "calibrations", "profiles", "traces", "microbench")
    SUFFIX = {"configs": ".json", "hardware": ".yaml", "calibrations": ".json", "profiles": ".csv",
              "traces": ".csv", "microbench": ".json"}

    def __init__(self, root: Path):
        self.root = Path(root)
        shutil.copytree(CORPUS, self.root / "corpus")
        self.out = self.root / "out"
        self.out.mkdir()
        for kind in self.KINDS:
            d = self.root / "corpus" / kind
            os.mkfifo(d / f"fifo{self.SUFFIX[kind]}")
            os.symlink("/dev/zero", d / f"dev_zero{self.SUFFIX[kind]}")
            (d / f"folder{self.SUFFIX[kind]}").mkdir()
        head = "model,hardware,gpus,attn,moe,batch,context,step_ms\n"
        (self.root / "corpus" / "profiles" / "huge_field.csv").write_text(
            head + "deepseek-v3," + "h" * 140_000 + ",8,dp,ep,32,8192,40.0\n")
        # issue 31: a 10^5-row trace whose tail is broken (-n 5 must never read it) and zip bombs
        with open(self.root / "corpus" / "traces" / "long_broken_tail.csv", "w") as f:
            f.write("arrival_s,input_tokens,output_tokens\n")
            f.writelines(f"{i * 0.01:.2f},{100 + i % 900},{10 + i % 50}\n" for i in range(100_000))
            f.write("broken,\x00,\n" * 10)
        self.wheels = self.root / "corpus" / "wheels"
        self.wheels.mkdir()
        member = "aiconfigurator_core/systems/data/h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet"
        for name, size in (("bomb.whl", (64 << 20) + 1), ("ratio.whl", 16 << 20)):
            with zipfile.ZipFile(self.wheels / name, "w", compression=zipfile.ZIP_DEFLATED) as z:
                z.writestr(member, b"\0" * size)  # ~65 KiB on disk, 64 MiB inflated
        (self.wheels / "not_zip.whl").write_bytes(b"PK\x03\x04" + b"\xff" * 100)
        # the MCP server's root is `root`; `outside` is a sibling it must never read or write
        self.outside = self.root.parent / (self.root.name + "-outside")
        self.outside.mkdir(exist_ok=True)
        (self.outside / "secret.json").write_text('{"hidden_size": "planted-secret-31"}')
        (self.outside / "notes.txt").write_text("keep me\n")
        shutil.copy(CORPUS / "configs" / "bom.json", self.outside / "config.json")
        os.symlink(self.outside / "config.json", self.root / "link_out.json")
        os.symlink(self.outside, self.root / "outdir")
        os.symlink(self.outside / "notes.txt", self.root / "link_notes.png")
        # what the MCP runs name by paths inside the root: the profile, and the model its rows name
        (self.root / "calibration" / "data").mkdir(parents=True)
        shutil.copy(PROFILE, self.root / "profile.jsonl")
        shutil.copy(ROOT / "calibration" / "data" / "probe-mla-dense-4l.json", self.root / "calibration" / "data")

    def files(self, kind: str) -> list[Path]:
        return sorted((self.root / "corpus" / kind).iterdir())

    def path(self, rel: str) -> str:
        return str(self.root / "corpus" / rel)
