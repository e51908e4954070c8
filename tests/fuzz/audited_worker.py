"""A WorkerPool worker (`python -m tests.fuzz.audited_worker`) that records every file it opens,
renames, replaces, removes or creates (sys.addaudithook, PEP 578) before serving calls as
cli.inprocess's worker does, so the fuzz run can count the reads and writes outside the MCP root.

Each event is one JSON line {"op": "read" | "write", "path": the resolved path} appended to the
file FLOORFIRST_FUZZ_AUDIT names (the test sets it in the pool's environment; the log itself is
left out). `outside(...)` reads the log back: what fell outside the root and outside what a
Python process reads to run at all (its interpreter and packages, floorfirst's own code and data,
/proc, /sys, /dev/null and the like).

Does not: see file access by C libraries that bypass Python's open (none of floorfirst's readers
do), or judge anything (tests/fuzz/test_fuzz_corpus.py does).
"""

from __future__ import annotations

import json
import os
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _hook_for(log_path: str):
    busy = [False]
    log_real = os.path.realpath(log_path)

    def record(op: str, path) -> None:
        if busy[0] or isinstance(path, int) or path is None:
            return
        busy[0] = True
        try:
            real = os.path.realpath(os.fsdecode(path))
            if real != log_real:
                with open(log_path, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"op": op, "path": real}) + "\n")
        except Exception:  # noqa: BLE001 - an audit hook must never break the call it watches
            pass
        finally:
            busy[0] = False

    def hook(event: str, args) -> None:
        if event == "open":
            path, mode, flags = (list(args) + [None, None, None])[:3]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & _WRITE_FLAGS)
            record("write" if writes else "read", path)
        elif event in ("os.rename", "os.replace", "os.link", "os.symlink"):
            record("write", args[1])
        elif event in ("os.remove", "os.unlink", "os.rmdir", "os.mkdir", "os.truncate", "os.chmod", "os.utime"):
            record("write", args[0])

    return hook


def _installed_packages(repo: str) -> tuple[str, ...]:
    """The top-level packages pyproject.toml's `[tool.setuptools.packages.find] include` names."""
    import tomllib

    with open(os.path.join(repo, "pyproject.toml"), "rb") as f:
        include = tomllib.load(f)["tool"]["setuptools"]["packages"]["find"]["include"]
    return tuple(p.rstrip("*") for p in include)


def outside(log_path: str, root: str) -> list[dict]:
    """The logged events outside `root` and outside what any Python process reads to run."""
    import site
    import sysconfig

    root = os.path.realpath(root)
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.realpath(os.path.join(here, "..", ".."))
    runtime = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(),
                                             sysconfig.get_paths()["stdlib"])}
    # the packages pyproject installs (read there, not listed again: a new package is code too), and
    # the package's own metadata (entry points)
    code = {os.path.join(repo, d) for d in (*_installed_packages(repo), "floorfirst.egg-info")}
    system = ("/proc/", "/sys/", "/dev/null", "/dev/urandom", "/dev/random", "/usr/", "/lib", "/etc/localtime",
              "/etc/ld.so", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/resolv.conf", "/etc/hosts",
              "/etc/gai.conf", "/etc/mime.types")

    def under(p: str, d: str) -> bool:
        return p == d or p.startswith(d.rstrip(os.sep) + os.sep)

    bad = []
    if not os.path.exists(log_path):
        return bad
    with open(log_path, encoding="utf-8") as f:
        for line in f:
            e = json.loads(line)
            p = e["path"]
            if under(p, root):
                continue
            if e["op"] == "read" and (any(under(p, d) for d in runtime | code) or p.startswith(system)):
                continue
            if p == "/dev/null":  # the worker points its stdout and stderr there (cli.inprocess)
                continue
            if e["op"] == "read" and os.path.basename(p).startswith("__editable__."):  # pip's editable-install finder
                continue
            bad.append(e)
    return bad


if __name__ == "__main__":
    sys.addaudithook(_hook_for(os.environ["FLOORFIRST_FUZZ_AUDIT"]))
    from cli.inprocess import _worker_main

    cfg = json.loads(sys.argv[1])
    _worker_main(tuple(cfg["modules"]), cfg["memory_bytes"])
