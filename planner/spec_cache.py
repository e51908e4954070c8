"""Validated built-in specs kept between calls: a built-in GPU's YAML, a built-in model card and a
shipped calibration prior are parsed and validated once, and the frozen result is pickled under the
user's cache folder; the next call (another process) loads the pickle instead.

The key of an entry is the file's content (CRC-32 and length) and the code that reads it: the
stat (mtime, size) of every .py file under the folders the caller names, with the Python, pydantic
and numpy versions. A file or a module that changed makes the entry stale: it is rebuilt from the
file, and written over the stale one. A missing, unreadable or corrupt entry, or a cache folder that
can't be written, is rebuilt the same way, silently: the cache never changes an answer or an error
(only a valid spec is stored; a bad file raises its SpecError each time).

NOTE: why. A CLI call used to validate these documents with pydantic on every start: building the
validators (and pydantic's own machinery, its plugin scan of every installed package's metadata)
plus the YAML parser was ~60 ms of a ~400 ms call (benchmarks/results/cli_startup_*.md). The models
are `defer_build`, so a call that reads only cached specs never builds a validator.

The folder: $FLOORFIRST_CACHE_DIR, else $XDG_CACHE_HOME/floorfirst, else ~/.cache/floorfirst (read
when a spec is loaded, never at import). Only built-in files are cached: a user's file is read and
validated as before.

Does not: cache anything computed from specs (a priced step), or files a user names, or anything
while a call is confined to a root (planner.path_policy: the MCP server's workers).
"""

from __future__ import annotations

import os
import pickle
import sys
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
FORMAT = 1  # bump when what an entry holds changes shape
PLANNER_DIR = Path(__file__).parent


def cache_dir() -> Path:
    """Where entries are kept (the environment is read now, not at import)."""
    if os.environ.get("FLOORFIRST_CACHE_DIR"):
        return Path(os.environ["FLOORFIRST_CACHE_DIR"]) / "specs"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "floorfirst" / "specs"


def tree_fingerprint(roots: tuple[str, ...], versions: tuple = ()) -> int:
    """CRC-32 of the (path, mtime, size) of every .py file under `roots` (folders or files, __pycache__
    left out) and of `versions` (what else an entry depends on). Imports nothing: the MCP server keys
    its tool table by it before numpy is loaded (cli/mcp_tools.py)."""
    stats: list[tuple[str, int, int]] = []

    def walk(path: str) -> None:
        if os.path.isfile(path):
            st = os.stat(path)
            stats.append((path, st.st_mtime_ns, st.st_size))
            return
        for e in os.scandir(path):
            if e.is_dir(follow_symlinks=False):
                if e.name != "__pycache__":
                    walk(e.path)
            elif e.name.endswith(".py"):
                st = e.stat()
                stats.append((e.path, st.st_mtime_ns, st.st_size))

    for r in roots:
        walk(r)
    return zlib.crc32(repr((versions, sorted(stats))).encode())


@lru_cache(maxsize=16)
def code_fingerprint(roots: tuple[str, ...]) -> int:
    """`tree_fingerprint` of `roots` with the versions whose pickles an entry holds. ~1 ms for the
    planner's ~80 files; once per process."""
    import numpy
    import pydantic

    return tree_fingerprint(roots, (FORMAT, sys.version, pydantic.VERSION, numpy.__version__))


def cached_spec(kind: str, path: Path, build: Callable[[], T], code: Iterable[Path] = ()) -> T:
    """`build()` (which reads and validates the file at `path`), or the result an earlier call stored
    for this content of `path` and this code (the planner package and the folders or files in `code`).
    `kind` names the entry ('hardware', 'model', 'prior')."""
    from planner.path_policy import active

    if active() is not None:
        # NOTE: a call confined to a root (the MCP server's workers, docs/mcp-security.md) reads and writes
        # no file outside it, the cache folder included; a worker lives on, and keeps its specs in memory
        return build()
    try:
        data = path.read_bytes()
    except OSError:
        return build()  # the loader's own read says why
    roots = (str(PLANNER_DIR), *(str(c) for c in code))
    key = f"{zlib.crc32(data):08x}{len(data):x}_{code_fingerprint(roots):08x}"
    folder = cache_dir()
    stem = f"{kind}-{path.stem}-"
    entry = folder / f"{stem}{key}.pickle"
    try:
        with open(entry, "rb") as f:
            return pickle.load(f)
    except Exception:  # noqa: BLE001 - missing, stale class, corrupt: all mean "rebuild"
        pass
    value = build()
    store_entry(folder, stem, entry, value)
    return value


def store_entry(folder: Path, stem: str, entry: Path, value: object) -> None:
    """Write `entry` (`folder`/`stem` + a key without '-') atomically, a temporary file renamed over
    it, and drop the entries of other keys with this stem; a disk that can't be written is ignored."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, entry)
        for old in folder.glob(f"{stem}*.pickle"):
            # NOTE: a key holds no '-'; another file whose name starts with this one's does
            if old != entry and "-" not in old.name[len(stem):]:
                old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - a read-only or full disk: the call goes on uncached
        pass
