"""The guard every `--json` document passes before it is printed (cli.common.emit_json).

Checked, in one walk that also turns numpy values into JSON ones:
- a NaN or an infinity becomes null only where the command's contract (schemas/) lets that
  quantity be undefined (`NULLABLE`, paths with `[]` for list items and `*` for any key); anywhere
  else it is a bug;
- no number is negative, except the signed quantities (`_pct` errors, residual fractions,
  overlap quality): a negative time, byte count, capacity or count is a bug;
- where a dict holds floor_max_s and floor_sum_s, the optimistic floor is not above the pessimistic.

A violation is not the user's error: it is an internal error that names the document, the key and
the value, printed as one line on stderr with exit code 70 (EX_SOFTWARE, sysexits.h), and the
document is not printed. The fuzz suite (tests/fuzz) drives every command so that none occurs.

Does not: check a document's schema (tests/agent does), or change a valid value.
"""

from __future__ import annotations

import math
import sys
from enum import Enum
from fnmatch import fnmatchcase
from typing import Any

EXIT_INTERNAL = 70

# Where a non-finite value means "undefined" and is written as null: the nullable number fields of
# schemas/<command>.schema.json (tests/cli/test_documents.py keeps the two in step).
NULLABLE: dict[str, tuple[str, ...]] = {
    "calibrate": ("param_std.*",),
    "capacity": ("mem_fraction", "swa_full_tokens_ratio"),
    "floor": ("decode_tokens_per_s", "decode_tokens_per_s_at_max", "decode_tokens_per_s_at_sum",
              "resources.kv_capacity.used_fraction"),
    "compare": ("layouts[].decode_tokens_per_s", "layouts[].decode_tokens_per_s_at_max",
                "layouts[].decode_tokens_per_s_at_sum", "layouts[].resources.kv_capacity.used_fraction"),
    "microbench": ("gpus",),
    "explain_launch": ("max_context_tokens",),
    "follow": ("median_abs_pct_error", "refits[].median_abs_pct_error", "transport.silent_s"),
    "disagg": ("*_target_*", "best.prefill.max_in_flight_requests", "best.decode.running_cap_requests",
               "best.decode.step_s", "best.tpot_s", "options[].tpot_s", "best.handoff.nic_rate_*",
               "gain_over_colocated_pct", "colocated.tpot_s", "colocated.decode_step_s", "colocated_options[].tpot_s",
               "colocated_options[].decode_step_s", "ratio_sweep[].gain_over_colocated_pct",
               "ratio_sweep[].*_gpus", "ratio_sweep[].*_per_gpu", "ratio_sweep[].handoff_share_of_ttft_fraction"),
    "thresholds": ("crossovers[].tokens", "crossovers[].batch", "crossovers[].margin_below_fraction",
                   "crossovers[].margin_above_fraction", "decode_by_batch[].tokens"),
    "regimes": ("predicted_s.*", "step_time_s.*", "runner_up_margin_fraction[][]"),
    "simulate": ("requests_per_s", "throughput_tokens_per_s", "tpot_p*_s", "ttft_p*_s", "ttlt_p*_s", "ttlt_mean_s",
                 "offered_*_per_s", "ttft_p50_by_arrival_quarter_s[]", "kv_full_time_fraction"),
    "simulate_disagg": ("requests_per_s", "throughput_tokens_per_s", "tpot_p*_s", "ttft_p*_s", "ttlt_p*_s",
                        "ttlt_mean_s", "offered_*_per_s", "ttft_p50_by_arrival_quarter_s[]", "kv_full_time_fraction",
                        "handoff_*_s"),
    "serve": ("requests_per_s", "throughput_tokens_per_s", "tpot_p*_s", "ttft_p*_s", "ttlt_p*_s", "ttlt_mean_s",
              "measured.step_p*_s", "offered_*_per_s", "ttft_p50_by_arrival_quarter_s[]", "kv_full_time_fraction"),
    "triage": ("overlap_quality", "residual_fraction"),
    "triage_profile": ("rows[].overlap_quality", "rows[].residual_fraction"),
    "validate": ("cv_median_abs_pct_error", "cv_p90_abs_pct_error", "fraction_inside_floors", "median_abs_pct_error",
                 "p90_abs_pct_error", "residuals[].cv_error_pct", "residuals[].cv_predicted_s",
                 "holdout[].median_abs_pct_error", "holdout[].p90_abs_pct_error"),
    "walls": ("layouts[].floor_max_s[]", "layouts[].floor_sum_s[]", "layouts[].kv_wall_requests",
              "layouts[].kv_wall_tokens", "layouts[].predicted_s[]", "layouts[].walls_requests.*",
              "layouts[].walls_tokens.*"),
}
SIGNED_SUFFIXES = ("_pct",)
# NOTE: kv_budget_bytes (planner.engines' MemoryPlan) is what the engine sizes its pool from, and is
# negative when the weights don't fit: the pool itself (kv_pool_bytes) is never negative.
# NOTE: `fraction` (memory.fraction) and capacity's per-layout `mem_fraction` are SGLang's
# mem_fraction_static as its formula gives it, (memory − reserve)/memory: negative where the engine's
# own default reserve exceeds the memory (its DP-attention padding grows with dp: at dp 64 on an H200
# it is −0.18), and the plan is then infeasible with the reason in words, as the table says.
SIGNED_KEYS = frozenset({"residual_fraction", "overlap_quality", "kv_budget_bytes", "median_residual_fraction",
                         "margin_below_fraction", "margin_above_fraction", "fraction", "mem_fraction"})
_FLOOR_TOLERANCE = 1e-9


class DocumentError(SystemExit):
    """A document that breaks the guard: a bug. A SystemExit (code 70) so the CLI ends with its one
    line and no traceback; the in-process runner turns it into a tool error."""

    def __init__(self, message: str):
        super().__init__(EXIT_INTERNAL)
        self.message = message

    def __str__(self) -> str:
        return self.message


def _fail(command: str, path: str, why: str) -> None:
    raise DocumentError(f"internal error: the {command} document has {why} at '{path or '(top)'}'; "
                        "this is a bug in floorfirst, please report it with the command line")


def checked_document(command: str, doc: Any) -> Any:
    """`doc` as plain JSON values (numpy → Python), after every check above; DocumentError if one fails."""
    import numpy as np  # NOTE: here, not at the top: cli.main imports DocumentError, and `floorfirst mcp` needs no numpy

    # NOTE: '[]' is a character class to fnmatch; paths and patterns both spell a list item '#' here
    nullable = tuple(p.replace("[]", "#") for p in NULLABLE.get(command, ()))

    def walk(x: Any, path: str, key: str) -> Any:
        if isinstance(x, dict):
            out = {str(k): walk(v, f"{path}.{k}" if path else str(k), str(k)) for k, v in x.items()}
            _check_floors(command, path, out)
            return out
        if isinstance(x, np.ndarray):
            x = x.tolist()
        if isinstance(x, (list, tuple)):
            return [walk(v, path + "[]", key) for v in x]
        if isinstance(x, (bool, np.bool_)):
            return bool(x)
        if isinstance(x, Enum):
            return x.value
        if isinstance(x, (float, np.floating, int, np.integer)):
            v = float(x) if isinstance(x, (float, np.floating)) else int(x)
            if isinstance(v, float) and not math.isfinite(v):
                if any(fnmatchcase(path.replace("[]", "#"), pat) for pat in nullable):
                    return None
                _fail(command, path, f"{key}={v} (a number that is not finite)")
            if v < 0 and not (key.endswith(SIGNED_SUFFIXES) or key in SIGNED_KEYS):
                _fail(command, path, f"{key}={v:g} (a negative time, size, capacity or count)")
            return v
        return x

    return walk(doc, "", "")


def _check_floors(command: str, path: str, d: dict) -> None:
    lo, hi = d.get("floor_max_s"), d.get("floor_sum_s")
    pairs = zip(lo, hi) if isinstance(lo, list) and isinstance(hi, list) else [(lo, hi)]
    for a, b in pairs:
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a > b * (1 + _FLOOR_TOLERANCE) + 1e-15:
            _fail(command, path, f"floor_max_s={a:g} above floor_sum_s={b:g} (max of the terms above their sum)")


def report(exc: DocumentError) -> None:
    """The CLI's one line for a guard failure."""
    sys.stderr.write(f"floorfirst: {exc.message}\n")
