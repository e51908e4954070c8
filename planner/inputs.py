"""The input layer: every file a user names, and every number read from one, passes here once.

A file is read only if it is a regular file (not a FIFO, a device, a socket or a folder, nor a
link to one), no larger than its kind's limit, checked before a byte is read and again while
reading; it is opened non-blocking, so a FIFO can never stall the caller. Text is UTF-8 (a BOM
is accepted and stripped); an undecodable byte is reported by line and column. JSON and YAML are
parsed with a nesting limit and without NaN/Infinity; a non-finite or out-of-range number
anywhere in a document is refused naming its key. Output paths are checked before any long work
starts. Every refusal is one `SpecError` line naming the file (or field), the value and the limit.

Pure stdlib + numpy (PyYAML is imported only to read YAML): `import planner` stays light.

Does not: know any file's schema (the loaders validate fields; `check_number` is their helper).
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from planner.errors import SpecError
from planner.path_policy import active as _active_root
from planner.path_policy import quote_values

KiB, MiB = 1 << 10, 1 << 20
_log = logging.getLogger("floorfirst.inputs")  # DEBUG: each file read (`floorfirst --verbose`)

# NOTE: per-kind size limits, a few hundred times the largest real file of each kind (a Hugging Face
# config.json is < 20 KiB, a hardware YAML < 4 KiB, a calibration < 64 KiB, a microbench result
# < 1 MiB); profiles and traces may be long (a 64 MiB trace is ~3 M requests), still far from what
# memory allows.
MODEL_CONFIG_MAX_BYTES = 4 * MiB
HARDWARE_MAX_BYTES = 1 * MiB
CALIBRATION_MAX_BYTES = 16 * MiB
MICROBENCH_MAX_BYTES = 64 * MiB
PROFILE_MAX_BYTES = 64 * MiB
TRACE_MAX_BYTES = 64 * MiB

JSON_MAX_DEPTH = 64  # configs nest 4 deep; Python's own parser fails near 1,000
YAML_MAX_DEPTH = 32
INT_MAX_ABS = 2**63  # an integer past int64 is no count, size or id any input of ours holds
NAME_MAX_BYTES = 255  # one path component (Linux NAME_MAX, and most other file systems)
PATH_MAX_BYTES = 4095
UTF8_BOM = b"\xef\xbb\xbf"

_KIND = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def shown_path(path, limit: int = 160) -> str:
    """A path as an error line shows it: whole, or its two ends around an ellipsis if very long."""
    p = os.fspath(path)
    return p if len(p) <= limit else p[: limit // 2] + "…" + p[-(limit // 2):]


def _size(n: int) -> str:
    return f"{n // MiB} MiB" if n and n % MiB == 0 else f"{n // KiB} KiB" if n and n % KiB == 0 else f"{n:,} bytes"


def _not_regular(mode: int) -> str | None:
    for test, kind in _KIND:
        if test(mode):
            return kind
    return None if stat.S_ISREG(mode) else "not a regular file"


def _confined(path) -> str | None:
    """Where a read of `path` goes: the path itself (unconfined), its resolved form inside the
    active root, or None when it is outside (planner.path_policy: then it reads as missing)."""
    root = _active_root()
    if root is None:
        return os.fspath(path)
    if "\0" in os.fspath(path):
        return os.fspath(path)  # refused by the caller as a NUL, before any resolution
    return root.readable_path(path)


def is_file(path) -> bool:
    """Path.is_file, but False for a name no file system holds (a NUL, a component over 255 bytes)
    and, while confined to a root, for a path outside it."""
    try:
        p = _confined(path)
        return p is not None and Path(p).is_file()
    except (OSError, ValueError):
        return False


def file_stamp(path: str) -> tuple[int, int]:
    """(mtime ns, size) of a file, the key a loader's cache is read under, so an edited file is read
    again in a long-lived process; (0, 0) when it can't be stat'ed (the read that follows says why)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return (0, 0)
    return (st.st_mtime_ns, st.st_size)


def path_kind(path, what: str) -> str:
    """'missing', 'file', 'folder' or 'other' (a FIFO, a device…) for a name given as a file; a name
    no file system can hold (a NUL, a component over 255 bytes) is one SpecError line."""
    p = os.fspath(path)
    if "\0" in p:
        raise SpecError(f"{what} {shown_path(p)!r}: a path cannot hold a NUL character")
    p = _confined(p)
    if p is None:
        return "missing"
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise SpecError(f"{what} {shown_path(p)}: {exc.strerror}") from None
    return "file" if stat.S_ISREG(st.st_mode) else "folder" if stat.S_ISDIR(st.st_mode) else "other"


def _open_checked(path, what: str, max_bytes: int):
    """(a binary file object, the path as errors show it) for a regular file of at most `max_bytes`
    (inside the root while confined); anything else is one SpecError line."""
    p = os.fspath(path)
    shown = shown_path(p)
    if "\0" in p:
        raise SpecError(f"{what} {shown!r}: a path cannot hold a NUL character")
    p = _confined(p)
    if p is None:  # NOTE: outside the root reads as missing: the same line, whether it exists or not
        raise SpecError(f"{what} not found: {shown}")
    try:
        st = os.stat(p)
    except (FileNotFoundError, NotADirectoryError):
        raise SpecError(f"{what} not found: {shown}") from None
    except OSError as exc:
        raise SpecError(f"cannot read {what} {shown}: {exc.strerror}") from None
    kind = _not_regular(st.st_mode)
    if kind:
        raise SpecError(f"{what} {shown} is {kind}, not a regular file")
    if st.st_size > max_bytes:
        raise SpecError(f"{what} {shown} is {_size(st.st_size)}, over the {_size(max_bytes)} limit for a {what}")
    try:
        # NOTE: O_NONBLOCK: if the path became a FIFO since the stat, opening it must not wait for a writer.
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError(f"cannot read {what} {shown}: {exc.strerror}") from None
    fh = os.fdopen(fd, "rb")  # buffered: read(n) loops until n bytes or the end
    kind = _not_regular(os.fstat(fd).st_mode)
    if kind:
        fh.close()
        raise SpecError(f"{what} {shown} is {kind}, not a regular file")
    return fh, shown


def open_binary_file(path, what: str, max_bytes: int):
    """A regular file of at most `max_bytes`, opened for reading (read_bytes_file's checks) for a
    reader that takes it in parts (a wheel's members); the caller closes it."""
    return _open_checked(path, what, max_bytes)[0]


def read_bytes_file(path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; anything else is one SpecError line.

    `what` names the file's kind as the user knows it ("calibration file", "workload file")."""
    fh, shown = _open_checked(path, what, max_bytes)
    with fh:
        try:
            data = fh.read(max_bytes + 1)
        except OSError as exc:
            raise SpecError(f"cannot read {what} {shown}: {exc.strerror}") from None
    if len(data) > max_bytes:
        raise SpecError(f"{what} {shown} grew past the {_size(max_bytes)} limit for a {what} while being read")
    _log.debug(f"read {what} {shown} ({len(data):,} bytes)")
    return data


def text_lines(path, what: str, max_bytes: int) -> Iterator[str]:
    """The lines of a regular UTF-8 text file (a BOM stripped, line ends kept as the csv module wants
    them), read as they are asked for: a caller that stops early (a trace read up to `-n` requests)
    reads no further. The file's checks are read_bytes_file's; a bad byte is named by line and column.
    NOTE: a generator: the file is opened at the first line asked for and closed when the caller
    stops or the generator is dropped."""
    fh, shown = _open_checked(path, what, max_bytes)
    read = 0
    with fh:
        for line_no in itertools.count(1):
            try:
                raw = fh.readline(max_bytes + 1)
            except OSError as exc:
                raise SpecError(f"cannot read {what} {shown}: {exc.strerror}") from None
            if not raw:
                return
            read += len(raw)
            if read > max_bytes:
                raise SpecError(f"{what} {shown} grew past the {_size(max_bytes)} limit for a {what} while being read")
            if line_no == 1 and raw.startswith(UTF8_BOM):
                raw = raw[len(UTF8_BOM):]
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                col = line_column(raw, exc.start)[1]
                raise SpecError(f"{what} {shown}: not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line_no} "
                                f"column {col}") from None


def line_column(data: bytes, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of byte `offset`."""
    start = data.rfind(b"\n", 0, offset) + 1
    return data.count(b"\n", 0, offset) + 1, len(data[start:offset].decode("utf-8", errors="replace")) + 1


def decode_text(data: bytes, what: str, path) -> str:
    """UTF-8 text (a leading BOM stripped); a bad byte is named by line and column."""
    if data.startswith(UTF8_BOM):
        data = data[len(UTF8_BOM):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, col = line_column(data, exc.start)
        raise SpecError(f"{what} {shown_path(path)}: not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line} "
                        f"column {col}") from None


def read_text_file(path, what: str, max_bytes: int) -> str:
    """A regular file's UTF-8 text (see read_bytes_file and decode_text)."""
    return decode_text(read_bytes_file(path, what, max_bytes), what, path)


# A JSON string (escapes kept inside): masked with same-length filler so offsets stay put. Used only
# to place an error in text json.loads has already read (it is linear on well-formed JSON).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_JSON_NONFINITE = re.compile(r"-?\b(?:NaN|Infinity)\b")


def _at(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1} column {pos - text.rfind(chr(10), 0, pos)}"


def _mask_strings(text: str) -> str:
    return _JSON_STRING.sub(lambda m: '"' + "_" * (len(m.group()) - 2) + '"', text)


def _too_deep_at(text: str, max_depth: int) -> str:
    """Where the bracket depth of `text` first passes max_depth ("" if nowhere)."""
    b = np.frombuffer(text.encode("ascii", errors="replace"), dtype=np.uint8)  # one byte per character
    pos = np.flatnonzero((b == 0x5B) | (b == 0x7B) | (b == 0x5D) | (b == 0x7D))
    step = np.where((b[pos] == 0x5B) | (b[pos] == 0x7B), 1, -1).astype(np.int32)
    over = np.flatnonzero(np.cumsum(step) > max_depth)
    return f" at {_at(text, int(pos[over[0]]))}" if over.size else ""


class _NonFinite(Exception):
    pass


def _reject_constant(name: str):
    raise _NonFinite(name)


def parse_json_text(text: str, what: str, path, max_depth: int = JSON_MAX_DEPTH, finite: bool = True) -> Any:
    """JSON text → Python objects: nesting ≤ max_depth, ints in int64, and (if `finite`) no NaN,
    Infinity or overflowing number anywhere. `finite=False` is for documents written by others that
    use Infinity in fields we never read (Hugging Face configs do); the reader then checks its fields.
    Errors are one SpecError line starting "<what> <path>: "."""
    try:
        return json_value(text, max_depth, finite)
    except SpecError as exc:
        raise SpecError(f"{what} {shown_path(path)}: {exc}") from None


def json_value(text: str, max_depth: int = JSON_MAX_DEPTH, finite: bool = True) -> Any:
    """parse_json_text without the file's name in the message (a JSONL row names its own line)."""
    try:
        doc = json.loads(text, parse_constant=_reject_constant if finite else float)
    except json.JSONDecodeError as exc:
        raise SpecError(f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except _NonFinite as exc:
        m = _JSON_NONFINITE.search(_mask_strings(text[:MiB]))  # NOTE: bounded: the text past it may be malformed
        at = f" at {_at(text, m.start())}" if m else ""
        raise SpecError(f"{exc.args[0]}{at} is not a number (JSON has no NaN or Infinity)") from None
    except RecursionError:
        # NOTE: too deep for the parser itself; the text may be malformed too, so brackets inside
        # strings are not masked here (the place named is where the nesting passes the limit).
        raise SpecError(f"nested deeper than {max_depth} levels{_too_deep_at(text, max_depth)}") from None
    except ValueError:  # Python refuses to convert an integer of more than 4,300 digits
        raise SpecError("an integer of more than 4,300 digits (over the 2^63 limit)") from None
    if check_tree(doc, "", max_depth, finite) > max_depth:
        raise SpecError(f"nested deeper than {max_depth} levels{_too_deep_at(_mask_strings(text), max_depth)}")
    return doc


# NOTE: engines' benchmark tools write their results with Python's json.dumps, which writes a float
# that is not finite as Infinity or NaN. SGLang (python/sglang/bench_serving.py, benchmark(): the
# result's "request_rate": request_rate) writes its default rate float("inf") as Infinity, meaning
# every request is sent at once (get_request yields without waiting when the rate is inf); vLLM
# (vllm/benchmarks/serve.py, main()) writes the string "inf" there. A statistic over no samples is
# NaN. So a rate keeps its infinity, and any other value that is not finite reads as not measured.
INFINITE_RATE_KEYS = frozenset({"request_rate"})


def benchmark_json_value(text: str, max_depth: int = JSON_MAX_DEPTH) -> Any:
    """An engine benchmark's JSON document (or JSONL line) read as the engine means it: +Infinity
    under a rate key (INFINITE_RATE_KEYS) stays float('inf') (all requests at once); any other
    NaN or infinity, anywhere, becomes None (not measured). Ints are still bounded to int64."""
    doc = json_value(text, max_depth, finite=False)
    stack: list[Any] = [doc]
    while stack:
        x = stack.pop()
        items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
        for k, v in items:
            if isinstance(v, float) and not math.isfinite(v):
                x[k] = v if (k in INFINITE_RATE_KEYS and v > 0) else None
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return doc


def load_json_file(path, what: str, max_bytes: int, max_depth: int = JSON_MAX_DEPTH, finite: bool = True) -> Any:
    """A JSON file through every check above."""
    return parse_json_text(read_text_file(path, what, max_bytes), what, path, max_depth, finite)


def parse_yaml_text(text: str, what: str, path, max_depth: int = YAML_MAX_DEPTH) -> Any:
    """YAML text → Python objects (safe loader): nesting ≤ max_depth, no anchors/aliases, numbers finite."""
    import yaml

    where = f"{what} {shown_path(path)}"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    try:
        depth = 0
        # NOTE: scanned as events first: nesting is bounded before the recursive composer runs, and
        # aliases (which let a few bytes expand into an exponentially large tree) are refused.
        for ev in yaml.parse(text, Loader=loader):
            if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > max_depth:
                    raise SpecError(f"{where}: nested deeper than {max_depth} levels at {_mark(ev.start_mark)}")
            elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(ev, yaml.AliasEvent):
                raise SpecError(f"{where}: YAML aliases (*{ev.anchor}) are not accepted, at {_mark(ev.start_mark)}")
        doc = yaml.load(text, Loader=loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise SpecError(f"{where}: malformed YAML at {_mark(mark)}: {exc.problem or exc.context}") from None
    except SpecError:
        raise
    except (yaml.YAMLError, RecursionError, ValueError) as exc:
        raise SpecError(f"{where}: unreadable YAML ({str(exc).splitlines()[0][:120]})") from None
    check_tree(doc, where + ": ")
    return doc


def _mark(mark) -> str:
    return "an unknown place" if mark is None else f"line {mark.line + 1} column {mark.column + 1}"


def load_yaml_file(path, what: str, max_bytes: int, max_depth: int = YAML_MAX_DEPTH) -> Any:
    return parse_yaml_text(read_text_file(path, what, max_bytes), what, path, max_depth)


def shown(value: Any, limit: int = 60) -> str:
    """repr(value), cut to `limit` characters: an error line quotes a value, never a whole document.
    While confined to a root (planner.path_policy) a value is described, not quoted: error lines
    then never carry what a file holds."""
    if not quote_values():
        n = len(value) if isinstance(value, (str, list, dict, tuple)) else None
        return f"(a {type(value).__name__}{'' if n is None else f' of length {n}'})"
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 1] + "…"


def shown_number(value: float, spec: str = "g") -> str:
    """A number read from a file, as an error line shows it: formatted, or described while confined."""
    return format(value, spec) if quote_values() else "(a number)"


def shown_key(key: Any) -> str:
    """A key read from a file (a field name the schema doesn't have), quoted, or described while confined."""
    return str(key) if quote_values() else "(a field name)"


def field_error(exc) -> str:
    """A pydantic ValidationError's first error as "field 'a.b'=value: message" (no value for a
    missing field: pydantic's input there is the whole enclosing object)."""
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err["loc"][:-1] + (shown_key(err["loc"][-1]),)) \
        if err["type"] == "extra_forbidden" and err["loc"] else ".".join(str(x) for x in err["loc"])
    value = "" if err["type"] == "missing" else "=" + shown(err.get("input"))
    return f"field '{loc}'{value}: {err['msg']}"


def _key_path(parts) -> str:
    if not quote_values():  # NOTE: a document's keys are its content too (planner.path_policy)
        parts = tuple(p if isinstance(p, int) else shown_key(p) for p in parts)
    return "".join(f"[{p}]" if isinstance(p, int) else (f".{p}" if i else str(p)) for i, p in enumerate(parts)) or "(top)"


def check_tree(doc: Any, where: str = "", max_depth: int | None = None, finite: bool = True) -> int:
    """Every float finite (if `finite`) and every int within int64, anywhere in a parsed document;
    returns its nesting depth (the walk stops descending past max_depth, so a deep tree costs no more).
    `where` prefixes the message ("calibration file c.json: ")."""
    deepest = 0
    stack: list[tuple[Any, tuple]] = [(doc, ())]
    while stack:
        x, parts = stack.pop()
        if isinstance(x, (dict, list, tuple)):
            deepest = max(deepest, len(parts) + 1)
            if max_depth is not None and len(parts) >= max_depth:
                continue
            if isinstance(x, dict):
                stack.extend((v, parts + (str(k),)) for k, v in x.items())
            else:
                stack.extend((v, parts + (i,)) for i, v in enumerate(x))
        elif finite and isinstance(x, float) and not math.isfinite(x):
            raise SpecError(f"{where}field '{_key_path(parts)}'={x} is not a finite number")
        elif isinstance(x, int) and not isinstance(x, bool) and abs(x) >= INT_MAX_ABS:
            raise SpecError(f"{where}field '{_key_path(parts)}' is an integer of {len(str(abs(x)))} digits, "
                            f"over the 2^63 limit")
    return deepest


def check_number(value: Any, what: str, *, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
                 integer: bool = False) -> float | int:
    """A finite number (an int if `integer`) in [lo, hi] (or (lo, hi] with lo_open), else one SpecError
    line naming `what`, the value and the limit. Strings, lists and bools are refused, not coerced."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise SpecError(f"{what}={shown(value)} must be a {'whole number' if integer else 'number'}, "
                        f"not {type(value).__name__}")
    v = float(value) if not isinstance(value, (int, np.integer)) else int(value)
    if isinstance(v, float) and not math.isfinite(v):
        raise SpecError(f"{what}={shown(value)} must be a finite number")
    if integer:
        if isinstance(v, float) and v != int(v):
            raise SpecError(f"{what}={shown(value)} must be a whole number")
        v = int(v)
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise SpecError(f"{what}={shown(value)} must be {'>' if lo_open else '≥'} {lo:g}")
    if hi is not None and v > hi:
        raise SpecError(f"{what}={shown(value)} must be ≤ {hi:g}")
    return v


def check_output_path(path, what: str, *, suffixes: tuple[str, ...] | None = None) -> Path:
    """An output path that can be written, checked before any long work: the name is a file name
    of ≤ 255 bytes with one of `suffixes` (if given), its folder exists and is writable, a file can
    be created there (not so in /proc), and it is not a folder, a FIFO, a device or a symbolic
    link. While confined to a root (planner.path_policy) it must resolve inside it, and name no
    existing file unless the call allows overwriting. Whether an existing file may be replaced
    otherwise is the caller's rule."""
    text = os.fspath(path)
    shown = shown_path(text)
    if not text.strip():
        raise SpecError(f"{what}: the path is empty")
    if "\0" in text:
        raise SpecError(f"{what} {shown!r}: a path cannot hold a NUL character")
    p = Path(text)
    if text.endswith(("/", os.sep)) or p.name in ("", ".", ".."):
        raise SpecError(f"{what} {shown}: names a folder, not a file")
    n = len(os.fsencode(p.name))
    if n > NAME_MAX_BYTES:
        raise SpecError(f"{what}: the file name is {n} bytes long, over the {NAME_MAX_BYTES}-byte limit of a file name")
    if len(os.fsencode(os.path.abspath(text))) > PATH_MAX_BYTES:
        raise SpecError(f"{what}: the path is longer than {PATH_MAX_BYTES} bytes")
    if suffixes is not None and p.suffix.lower() not in suffixes:
        raise SpecError(f"{what} {shown}: use a {', '.join(suffixes[:-1])} or {suffixes[-1]} file name"
                        if len(suffixes) > 1 else f"{what} {shown}: use a {suffixes[0]} file name")
    root = _active_root()
    if root is not None:
        root.writable_path(text, what)
    parent = p.parent
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise SpecError(f"{what} {shown}: folder {shown_path(parent)} does not exist") from None
    except OSError as exc:
        raise SpecError(f"{what} {shown}: folder {shown_path(parent)}: {exc.strerror}") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise SpecError(f"{what} {shown}: {shown_path(parent)} is not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"{what} {shown}: folder {shown_path(parent)} is not writable")
    try:
        lst = os.lstat(p)
    except FileNotFoundError:
        _probe_create(p, what, shown)
        return p
    except OSError as exc:
        raise SpecError(f"{what} {shown}: {exc.strerror}") from None
    if stat.S_ISLNK(lst.st_mode):
        # NOTE: a write replaces the name (write_bytes_file renames onto it), never a link's target:
        # a link here would be silently replaced by a file, so it is refused, dangling or not
        raise SpecError(f"{what} {shown} is a symbolic link; give the path of a file, not of a link")
    kind = _not_regular(lst.st_mode)
    if kind:
        raise SpecError(f"{what} {shown} is {kind}, not a file that can be written")
    if not os.access(p, os.W_OK):
        raise SpecError(f"{what} {shown} exists and is not writable")
    return p


def _probe_create(p: Path, what: str, shown: str) -> None:
    """Create and remove the file: a folder that lists as writable may still refuse a new file
    (/proc, a read-only mount, a full disk's quota), which must be said before the work, not after."""
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise SpecError(f"{what} {shown}: cannot create a file there: {exc.strerror}") from None
    os.close(fd)
    try:
        os.unlink(p)
    except OSError:
        pass


def write_bytes_file(path, data: bytes, what: str) -> None:
    """Write bytes whole or not at all: a temporary file next to it, then renamed over the name
    (a link at the name is replaced, its target never written). While confined to a root the
    path is checked against it again (planner.path_policy)."""
    p = Path(path)
    root = _active_root()
    if root is not None:
        root.writable_path(p, what)
    tmp = p.with_name(f".{p.name[:200]}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_CLOEXEC", 0), 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, p)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise SpecError(f"cannot write {what} {shown_path(p)}: {exc.strerror}") from None


def write_text_file(path, text: str, what: str) -> None:
    """Write UTF-8 text whole or not at all (write_bytes_file)."""
    write_bytes_file(path, text.encode("utf-8"), what)
