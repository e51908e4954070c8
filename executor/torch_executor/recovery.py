"""The faults a step's agreement can't see, agreed within seconds on every rank: a collective that
fails while a switch is guarded (in flight or on probation).

Two causes, told apart by whether the control group still answers:
- a rank raised in its device work (a kernel, an allocation — on probation, the new layout's first
  step): its peers are left in one of the step's main-group collectives. They wait at most
  `fault_timeout_s` there (dist.bounded_waits, set for a guarded switch), the failed rank comes to
  the control group at once, and every rank agrees on the first failure's reason (the earliest in
  time: the peers' timeouts come after it). The main group is rebuilt (its collectives were cut
  short), the side group too if a switch was in flight, and the switch is dropped as the
  transitions do it: aborted while copying, rolled back to the old layout on probation (or kept
  with its fallback dropped, `after_commit="forward"`, or when the fallback is incomplete). The
  step is then run again once, in the layout the group agreed on, with the same bounded waits.
- a rank died (its process ended, or it stopped answering): gloo closes its connections, so every
  collective with it raises at once, and the control group's agreement fails too (or waits at most
  its bounded wait for a silent one). Each surviving rank then drops the switch on its own, with no
  collective — abort and rollback move no data and touch no peer — and raises `GroupLost`, one
  line naming the first failure. The old layout and every request's KV are as before on every
  survivor; the group itself cannot run another step.
Bound: a failed rank's peers are agreed and rolled back within fault_timeout_s (1.5 s) plus the
agreement; a dead rank is noticed by the next collective of any survivor (milliseconds on gloo),
a silent one within the control group's bounded wait (side_timeout_s + 2·fault_timeout_s + 1 s:
9 s by default). tests/executor/test_executor_faults.py
checks both at T = 4 on gloo.
What it does not do: bound a fault while no switch is guarded (the group's own timeouts apply),
or bring a dead rank back.
"""

from __future__ import annotations

import time

from .dist import GroupLost, agree_flags, bounded_waits, first_reason, rebuild_main, rebuild_side


class AgreedFailure(RuntimeError):
    """A failure every rank raised together, after agreeing on it (not a fault to recover from)."""


def _line(exc: BaseException, rank: int) -> str:
    text = (str(exc).splitlines() or [""])[0]
    text = text.split("] ", 1)[-1] if text.startswith("[/") else text  # gloo's source location
    return f"rank {rank}: {type(exc).__name__}: {text[:120]}"


def _peer_gone(exc: BaseException) -> bool:
    """Whether the step's own failure already says a peer's connection ended (gloo's words)."""
    text = str(exc)
    return "Connection closed by peer" in text or "Connection reset by peer" in text


def _drop_switch_locally(runner, reason: str, rollback: bool = True) -> str:
    """Put this rank's state back as before the switch, with no collective; what became of it.
    `rollback` False: a switch on probation keeps its committed layout (after_commit="forward")."""
    sw = runner.switch
    if sw is None:
        return "no switch was in flight"
    if sw.in_flight and any(q in runner.seq_lens for q in sw.landed):
        # an incremental move whose landed groups serve in the destination (transitions.py): only
        # the group in flight is dropped, and moved again (no collective: planning is pure)
        sw._retry_group(runner, reason)  # noqa: SLF001
        return f"the move {sw.plan.src_kind} -> {sw.plan.dst_kind} dropped its group in flight (moved again)"
    if sw.in_flight:
        sw.abort(runner, reason)
        return f"the switch {sw.plan.src_kind} -> {sw.plan.dst_kind} was aborted"
    if sw.probation:
        if sw._fallback and rollback:  # noqa: SLF001 - the transition's own state
            sw._rollback(runner, reason)  # noqa: SLF001
            return f"the switch {sw.plan.src_kind} -> {sw.plan.dst_kind} was rolled back"
        sw._forward(runner, reason)  # noqa: SLF001
        return f"the switch {sw.plan.src_kind} -> {sw.plan.dst_kind} kept its committed layout (no fallback left)"
    return "no switch was in flight"


def recover(runner, exc: BaseException) -> None:
    """On every rank whose guarded step raised (see the module docstring): agree and drop the
    switch (the caller runs the step again), or raise GroupLost when a peer is gone."""
    g, sw = runner.g, runner.switch
    local, at = _line(exc, g.rank), time.time()
    try:
        reason = first_reason(local, g, at)
        broken_side = agree_flags([int(sw is not None and (sw.in_flight or sw.side_broken))], g)[0]
    except Exception as lost:  # noqa: BLE001 - the control group is gone too: a peer left
        done = _drop_switch_locally(runner, local)
        bounded_waits(g, False)
        why = local if _peer_gone(exc) else f"{local}; then the control group: {_line(lost, g.rank)}"
        raise GroupLost(f"a rank left the group ({why}); on rank {g.rank} {done}: it holds {runner.layout} and "
                        "every request's KV as before") from None
    rebuild_main(g)
    if broken_side:
        rebuild_side(g)
        if sw is not None:
            sw.side_broken = False
    if g.is_cuda:
        runner.exec = None  # NOTE: its graph captured the old communicator: the retry captures anew
    _drop_switch_locally(runner, reason, rollback=sw is None or sw.after_commit == "rollback")
    bounded_waits(g, True)  # the retry is bounded too: a second failure is agreed the same way
