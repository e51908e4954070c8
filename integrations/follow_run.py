"""The two ways `floorfirst follow` runs a `Follower`: over a recorded stream (`run_once`), or live
on SGLang's ZMQ streams (`run_live`) until a duration, a record count or an interrupt. Both return
the follower's report with what the transport dropped folded into its intake.

Does not: print (each refit and drift event goes to the `say` callback the CLI passes).
"""

from __future__ import annotations

import time
from typing import Callable

from integrations.follow import Follower

BATCH = 512  # records priced per planner call
DRIFT_LINES = 10  # drift events announced one by one; the rest are counted in the report


def _announce(follower: Follower, events: list[dict], refits_before: int, say: Callable[[str], None], told: list[int]) -> None:
    for e in follower.refits[refits_before:]:
        what = "taken" if e["taken"] else e["reason"]
        err = "—" if e["median_abs_pct_error"] is None else f"{e['median_abs_pct_error']:.2f} %"
        say(f"refit at step {e['at_steps']} on {e['window_steps']} steps: median error {e['served_median_abs_pct_error']:.2f} % "
            f"(served) → {err}: {what}")
    for e in events:
        told[0] += 1
        if told[0] <= DRIFT_LINES:
            say(f"drift: dp_rank {e['dp_rank']} pass {e['counter_id']} (B={e['batch']}, prefill {e['prefill_tokens']:.0f}): "
                f"{e['explanation']}")
        elif told[0] == DRIFT_LINES + 1:
            say("drift: further drift steps are counted in the report")


def run_once(follower: Follower, items: list, say: Callable[[str], None] = lambda s: None) -> dict:
    """Feed a recorded stream (decoded maps and RecordErrors) through the follower in batches."""
    told = [0]
    for i in range(0, len(items), BATCH):
        n = len(follower.refits)
        _announce(follower, follower.ingest(items[i:i + BATCH]), n, say, told)
    follower.wait_tables()
    return follower.report()


def run_live(follower: Follower, sub, duration_s: float | None = None, max_records: int | None = None,
             silence_s: float = 5.0, say: Callable[[str], None] = lambda s: None) -> dict:
    """Drain `sub` (integrations.fpm_stream.FpmSubscriber) into the follower until `duration_s`
    passes, `max_records` arrived, or KeyboardInterrupt; report silences longer than `silence_s`."""
    told = [0]
    start = time.monotonic()
    silent_told = False
    interrupted = False
    try:
        while True:
            if duration_s is not None and time.monotonic() - start >= duration_s:
                break
            if max_records is not None and follower.intake.received >= max_records:
                break
            items = sub.drain(BATCH, timeout_s=0.1)
            if items:
                silent_told = False
                n = len(follower.refits)
                _announce(follower, follower.ingest(items), n, say, told)
            else:
                quiet = sub.silent_s()
                quiet = time.monotonic() - start if quiet is None else quiet
                if quiet > silence_s and not silent_told:
                    silent_told = True
                    say(f"no record for {quiet:.0f} s (publisher gone or idle?): serving {follower.served.label}")
    except KeyboardInterrupt:
        interrupted = True
    follower.wait_tables()
    rep = follower.report()
    c = sub.counts
    intake = rep["records"]
    for reason in ("queue_full", "lost_in_transport", "malformed"):
        if c.get(reason):
            intake["dropped"][reason] = intake["dropped"].get(reason, 0) + int(c[reason])
            if reason in sub.examples:
                intake["drop_examples"].setdefault(reason, []).append(sub.examples[reason])
    intake["dropped"] = dict(sorted(intake["dropped"].items()))
    intake["drop_examples"] = dict(sorted(intake["drop_examples"].items()))
    intake["dropped_total"] = int(sum(intake["dropped"].values()))
    quiet = sub.silent_s()
    rep["transport"] = {"restart_count": int(c.get("restarts", 0)), "disconnect_count": int(c.get("disconnects", 0)),
                        "connect_count": int(c.get("connects", 0)), "silent_s": quiet,
                        "ran_s": time.monotonic() - start, "interrupted": interrupted}
    return rep
