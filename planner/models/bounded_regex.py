"""The `re:` patterns of a checkpoint's quantization `ignore` list, matched in bounded time.

The engines match an entry `re:PATTERN` against a module name with `re.match(PATTERN, name)`:
anchored at the name's start, not at its end (vLLM
vllm/model_executor/layers/quantization/compressed_tensors/utils.py `_is_equal_or_regex_match`;
SGLang's copy in python/sglang/srt/layers/quantization/compressed_tensors/utils.py). Python's
backtracking engine takes exponential time on a pattern such as `(a+)+$` or `(.*)*x` against a
name that almost matches, so a config.json could hang every command that loads it. Here the
pattern is parsed by Python's own parser (`re._parser`, so its syntax is exactly the engines') and
run as a Thompson NFA, simulated as a DFA built lazily as names are read: each character costs
at most one pass over the NFA's states, whatever the pattern. The answer is re.match's: a name
matches when some prefix of it is in the pattern's language (Python's backtracking search is
exhaustive, so it finds a match whenever one exists).

Refused in one line (`BoundedRegexError`, a SpecError): what is not a regular expression or
changes the language in ways an NFA doesn't model — backreferences, lookaround, conditionals,
word boundaries (`\\b`, `\\B`), possessive quantifiers and atomic groups, local flag groups — no
checkpoint's ignore list uses them; and a pattern whose NFA passes MAX_STATES (a counted repeat
unrolled: `(a{1000}){1000}`).
Does not: support `$` before a trailing newline (module names hold no newline), or LOCALE.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

try:  # Python ≥ 3.11
    from re import _constants as _c, _parser as _p  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - Python 3.10 and older name them sre_*
    import sre_constants as _c  # type: ignore[no-redef]
    import sre_parse as _p  # type: ignore[no-redef]

from planner.errors import SpecError

MAX_STATES = 20_000  # NFA states of one pattern after counted repeats are unrolled
MAX_DFA_CACHE = 50_000  # memoized (state set, character) steps kept before the cache starts over
_CHAR, _SPLIT, _BEGIN, _END, _ACCEPT = range(5)


class BoundedRegexError(SpecError):
    """A pattern this matcher refuses (module docstring)."""


def _category(cat, ascii_only: bool) -> Callable[[str], bool]:
    word = (lambda x: x.isascii() and (x.isalnum() or x == "_")) if ascii_only else (lambda x: x.isalnum() or x == "_")
    digit = (lambda x: "0" <= x <= "9") if ascii_only else str.isdecimal
    space = (lambda x: x in " \t\n\r\f\v") if ascii_only else str.isspace
    table = {_c.CATEGORY_DIGIT: digit, _c.CATEGORY_WORD: word, _c.CATEGORY_SPACE: space,
             _c.CATEGORY_NOT_DIGIT: lambda x: not digit(x), _c.CATEGORY_NOT_WORD: lambda x: not word(x),
             _c.CATEGORY_NOT_SPACE: lambda x: not space(x)}
    if cat not in table:
        raise BoundedRegexError(f"character category {cat} is not supported")
    return table[cat]


@dataclass
class _Nfa:
    flags: int
    kind: list[int] = field(default_factory=list)
    pred: list = field(default_factory=list)
    out: list[list[int]] = field(default_factory=list)

    def new(self, kind: int, pred=None, out: list[int] | None = None) -> int:
        if len(self.kind) >= MAX_STATES:
            raise BoundedRegexError(f"more than {MAX_STATES:,} states once its counted repeats are unrolled")
        self.kind.append(kind)
        self.pred.append(pred)
        self.out.append(out or [])
        return len(self.kind) - 1

    # ---- Thompson's construction, built back to front: each item is compiled with its continuation
    def seq(self, items, nxt: int) -> int:
        for op, av in reversed(list(items)):
            nxt = self.one(op, av, nxt)
        return nxt

    def _char(self, test: Callable[[str], bool]) -> Callable[[str], bool]:
        if self.flags & re.IGNORECASE:
            return lambda x: test(x) or test(x.lower()) or test(x.upper())
        return test

    def _in(self, items) -> Callable[[str], bool]:
        negate, tests = False, []
        for op, av in items:
            if op is _c.NEGATE:
                negate = True
            elif op is _c.LITERAL:
                tests.append(lambda x, c=chr(av): x == c)
            elif op is _c.RANGE:
                tests.append(lambda x, lo=chr(av[0]), hi=chr(av[1]): lo <= x <= hi)
            elif op is _c.CATEGORY:
                tests.append(_category(av, bool(self.flags & re.ASCII)))
            else:
                raise BoundedRegexError(f"{op} in a character class is not supported")
        return (lambda x: not any(t(x) for t in tests)) if negate else (lambda x: any(t(x) for t in tests))

    def one(self, op, av, nxt: int) -> int:
        if op is _c.LITERAL:
            return self.new(_CHAR, self._char(lambda x, c=chr(av): x == c), [nxt])
        if op is _c.NOT_LITERAL:
            return self.new(_CHAR, self._char(lambda x, c=chr(av): x != c), [nxt])
        if op is _c.ANY:
            dotall = bool(self.flags & re.DOTALL)
            return self.new(_CHAR, (lambda x: True) if dotall else (lambda x: x != "\n"), [nxt])
        if op is _c.IN:
            return self.new(_CHAR, self._char(self._in(av)), [nxt])
        if op is _c.BRANCH:
            return self.new(_SPLIT, None, [self.seq(alt, nxt) for alt in av[1]])
        if op is _c.SUBPATTERN:
            _group, add, dele, body = av
            if add or dele:
                raise BoundedRegexError("a group with its own flags ((?i:…)) is not supported")
            return self.seq(body, nxt)
        if op in (_c.MAX_REPEAT, _c.MIN_REPEAT):  # greedy or lazy: the same language
            lo, hi, body = av
            tail = nxt
            if hi is _c.MAXREPEAT or hi == _c.MAXREPEAT:
                loop = self.new(_SPLIT)
                self.out[loop] = [self.seq(body, loop), nxt]
                tail = loop
            else:
                if hi - lo > MAX_STATES:
                    raise BoundedRegexError(f"a counted repeat of up to {hi:,} is over the {MAX_STATES:,}-state limit")
                for _ in range(hi - lo):
                    tail = self.new(_SPLIT, None, [self.seq(body, tail), nxt])
            if lo > MAX_STATES:
                raise BoundedRegexError(f"a counted repeat of at least {lo:,} is over the {MAX_STATES:,}-state limit")
            for _ in range(lo):
                tail = self.seq(body, tail)
            return tail
        if op is _c.AT:
            if av in (_c.AT_BEGINNING, _c.AT_BEGINNING_STRING):
                return self.new(_BEGIN, None, [nxt])
            if av in (_c.AT_END, _c.AT_END_STRING):
                return self.new(_END, None, [nxt])
            raise BoundedRegexError("word boundaries (\\b, \\B) are not supported")
        names = {_c.GROUPREF: "a backreference", _c.ASSERT: "a lookaround", _c.ASSERT_NOT: "a lookaround",
                 _c.GROUPREF_EXISTS: "a conditional group"}
        for name in ("POSSESSIVE_REPEAT", "ATOMIC_GROUP"):
            if op is getattr(_c, name, None):
                raise BoundedRegexError("possessive quantifiers and atomic groups are not supported")
        raise BoundedRegexError(f"{names.get(op, str(op))} is not supported")


class BoundedRegex:
    """re.match(pattern, name) is not None, in time linear in len(name) × the NFA's size."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        try:
            parsed = _p.parse(pattern)  # NOTE: re.error (what the engines' re.match raises too) passes through
        except RecursionError:
            raise BoundedRegexError("nested too deeply to parse") from None
        flags = parsed.state.flags if hasattr(parsed, "state") else parsed.pattern.flags
        nfa = _Nfa(flags)
        accept = nfa.new(_ACCEPT)
        self._nfa = nfa
        self._accept = accept
        try:
            first = nfa.seq(parsed, accept)
        except RecursionError:
            raise BoundedRegexError("nested too deeply to parse") from None
        self._start = self._closure([first], at_start=True)
        self._cache: dict[tuple[frozenset, str], frozenset] = {}

    def _closure(self, states, at_start: bool) -> frozenset:
        """The states reachable without reading a character (split and, at the start, ^ states),
        keeping the ones that read (characters, the end) or accept."""
        kind, out = self._nfa.kind, self._nfa.out
        seen, stack, keep = set(), list(states), set()
        while stack:
            s = stack.pop()
            if s in seen:
                continue
            seen.add(s)
            k = kind[s]
            if k == _SPLIT or (k == _BEGIN and at_start):
                stack.extend(out[s])
            elif k != _BEGIN:
                keep.add(s)
        return frozenset(keep)

    def _step(self, current: frozenset, ch: str) -> frozenset:
        key = (current, ch)
        nxt = self._cache.get(key)
        if nxt is None:
            kind, pred, out = self._nfa.kind, self._nfa.pred, self._nfa.out
            nxt = self._closure([out[s][0] for s in current if kind[s] == _CHAR and pred[s](ch)], at_start=False)
            if len(self._cache) >= MAX_DFA_CACHE:
                self._cache.clear()
            self._cache[key] = nxt
        return nxt

    def match(self, name: str) -> bool:
        current = self._start
        for ch in name:
            if self._accept in current:
                return True
            current = self._step(current, ch)
            if not current:
                return False
        if self._accept in current:
            return True
        kind, out = self._nfa.kind, self._nfa.out
        at_end = self._closure([out[s][0] for s in current if kind[s] == _END], at_start=not name)
        # NOTE: `$` then more `$`/`\Z` (or an empty tail) still accept at the end: follow end states again
        while True:
            if self._accept in at_end:
                return True
            more = frozenset(self._closure([out[s][0] for s in at_end if kind[s] == _END], at_start=not name))
            if not more or more <= at_end:
                return False
            at_end = at_end | more
