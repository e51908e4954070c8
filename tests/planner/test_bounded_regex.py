"""planner.models.bounded_regex: a checkpoint's `re:` ignore patterns mean what re.match means (the
engines' _is_equal_or_regex_match), and patterns that make Python's backtracking engine take
exponential time are answered in milliseconds; what is not a regular expression is one line."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.models.bounded_regex import MAX_STATES, BoundedRegex, BoundedRegexError

NAMES = ["model.layers.0.self_attn.q_proj", "model.layers.12.mlp.experts.0.gate_proj", "lm_head", "",
         "model.layers.3.self_attn.kv_a_proj_with_mqa", "backbone.layers.7.mixer.in_proj", "aab", "ababc", "x\ny"]
REAL = [r".*self_attn.*", r"model\.layers\.\d+\.mlp\..*", r".*\.(q|kv)_a_proj.*$", r"lm_head", r"(?i)MODEL.*",
        r"model[.]layers[.](0|1|2)[.].*", r"^backbone\..*mixer\.(in|out)_proj$",
        r"a{2,3}b?", r"(?:a|ab)*c", r"[^.]+\.layers\.\d{1,2}\.", r"\w+\.layers\.\d+\.self_attn\.(?!o_)"]


@pytest.mark.parametrize("pattern", [p for p in REAL if "(?!" not in p])
def test_real_shaped_patterns_mean_what_re_match_means(pattern):
    b = BoundedRegex(pattern)
    for name in NAMES:
        assert b.match(name) == (re.match(pattern, name) is not None), (pattern, name)


ATOMS = ["a", "b", ".", r"\d", "[ab]", "[^a]", "(a|b)", "(ab|a)", "(a*)", "(a|)", "x", r"\.", "^", "$"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ATOMS), st.sampled_from(["", "*", "+", "?", "{2}", "{1,3}", "*?"])),
                min_size=1, max_size=6),
       st.text(alphabet="ab.1x", max_size=12))
def test_any_small_pattern_agrees_with_re_match(parts, name):
    pattern = "".join(a + q for a, q in parts)
    try:
        re.compile(pattern)
    except re.error:
        return
    assert BoundedRegex(pattern).match(name) == (re.match(pattern, name) is not None), (pattern, name)


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(a|aa)+$", r"(.*)*x$", r"(a*)*b", r"(\w+\.?)+!", ".*" * 40 + "!"])
def test_catastrophic_patterns_answer_at_once(pattern):
    name = "a" * 5000 + "."
    t0 = time.perf_counter()
    assert BoundedRegex(pattern).match(name) is False
    assert time.perf_counter() - t0 < 2.0  # Python's re: (a+)+$ on 30 a's already takes seconds


@pytest.mark.parametrize("pattern,words", [(r"(a)\1", "backreference"), (r"a(?=b)", "lookaround"),
                                           (r"\bmlp\b", "word boundaries"), (r"a++", "possessive"),
                                           (r"(a{1000}){1000}", f"more than {MAX_STATES:,} states"),
                                           ("(" * 3000 + "a" + ")" * 3000, "nested too deeply")])
def test_what_is_not_a_bounded_regular_expression_is_one_line(pattern, words):
    with pytest.raises(BoundedRegexError, match=re.escape(words)) as exc:
        BoundedRegex(pattern)
    assert "\n" not in str(exc.value)
