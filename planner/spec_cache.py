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

One folder serves every checkout and install of floorfirst (each has its own code key: the paths
are in it). What a write removes (`store_entry`, so only a call that missed pays for it):
- this code's entry for the file's earlier content (the file changed here);
- any entry, of any code, not used for MAX_AGE_DAYS (30 days: its mtime, which a hit refreshes once a
  day, REFRESH_S);
- the least recently used entries, when the folder holds more than MAX_BYTES (32 MiB; a checkout's
  entries are ~0.2 MB), until it holds at most 80 % of it; never the entry just written.
Entries of other code are otherwise kept, so two checkouts used in turn each find their own (before,
each write dropped every other key of the file: they rebuilt in turn, ~55 ms of CPU a call,
benchmarks/results/mcp_cli_startup_2026-12-07_cli3.md). NOTE: the policy follows ccache's local
cache (ccache/ccache doc/manual.adoc: `--cleanup` removes "not recently used cached files until the
... cache size limits are not exceeded", `--evict-older-than AGE` those "used less recently than
AGE", `--trim-method mtime` LRU by modification time) and Bazel's disk cache, which bounds both
(`--experimental_disk_cache_gc_max_age` beside `--experimental_disk_cache_gc_max_size`).

Does not: cache anything computed from specs (a priced step), or files a user names, or anything
while a call is confined to a root (planner.path_policy: the MCP server's workers).
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, TypeVar

T = TypeVar("T")
FORMAT = 1  # bump when what an entry holds changes shape
PLANNER_DIR = Path(__file__).parent
MAX_AGE_DAYS = 30  # an entry unused this long is removed by the next write (any code's)
MAX_BYTES = 32 << 20  # above this the next write removes the least recently used entries ...
TRIM_TO = 0.8  # ... until the folder holds at most this fraction of MAX_BYTES (so the next writes don't trim again)
REFRESH_S = 86400  # a hit sets its entry's mtime to now when it is older than this (the LRU clock)


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
    code_key = f"_{code_fingerprint(roots):08x}"  # the key's part that names the code (the checkout)
    key = f"{zlib.crc32(data):08x}{len(data):x}{code_key}"
    folder = cache_dir()
    stem = f"{kind}-{path.stem}-"
    entry = folder / f"{stem}{key}.pickle"
    try:
        with open(entry, "rb") as f:
            value = pickle.load(f)
            refresh(f.fileno(), entry)
            return value
    except Exception:  # noqa: BLE001 - missing, stale class, corrupt: all mean "rebuild"
        pass
    value = build()
    store_entry(folder, stem, entry, value, replaces=code_key)
    return value


def refresh(fd: int, entry: Path) -> None:
    """Mark an entry used now (its mtime), at most once per REFRESH_S: the clock of MAX_AGE_DAYS and of
    the least-recently-used trim. A folder that can't be written is ignored."""
    try:
        now = time.time()
        if now - os.fstat(fd).st_mtime > REFRESH_S:
            os.utime(entry, (now, now))
    except OSError:
        pass


def store_entry(folder: Path, stem: str, entry: Path, value: object, replaces: str = "") -> None:
    """Write `entry` (`folder`/`stem` + a key without '-') atomically, a temporary file renamed over
    it; drop the entries of this stem whose key ends with `replaces` (all of the stem's other keys when
    empty: the MCP tool table's stem names its checkout) and trim the folder (`prune`). A disk that
    can't be written is ignored."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = entry.with_name(f"{entry.name}.{os.getpid()}.tmp")
        tmp.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, entry)
        for old in folder.glob(f"{stem}*.pickle"):
            key = old.name[len(stem):-len(".pickle")]
            # NOTE: a key holds no '-'; another file whose name starts with this one's does
            if old != entry and "-" not in key and key.endswith(replaces):
                old.unlink(missing_ok=True)
        prune(folder, keep=entry)
    except Exception:  # noqa: BLE001 - a read-only or full disk: the call goes on uncached
        pass


def prune(folder: Path, keep: Path | None = None, now: float | None = None) -> list[Path]:
    """Remove the folder's entries unused for MAX_AGE_DAYS, then, while it holds more than MAX_BYTES,
    the least recently used ones until it holds TRIM_TO of it (never `keep`); a writer's temporary
    file left by a killed process counts as an entry. Returns what it removed."""
    now = time.time() if now is None else now
    live, removed = [], []
    for e in os.scandir(folder):
        if not (e.name.endswith(".pickle") or e.name.endswith(".tmp")) or not e.is_file(follow_symlinks=False):
            continue
        st = e.stat(follow_symlinks=False)
        if e.path != str(keep) and now - st.st_mtime > MAX_AGE_DAYS * 86400:
            removed.append(Path(e.path))
        else:
            live.append((st.st_mtime, st.st_size, e.path))
    total = sum(size for _, size, _ in live)
    if total > MAX_BYTES:
        for _, size, path in sorted(live):  # oldest first
            if total <= TRIM_TO * MAX_BYTES:
                break
            if path != str(keep):
                removed.append(Path(path))
                total -= size
    for path in removed:
        path.unlink(missing_ok=True)
    return removed
