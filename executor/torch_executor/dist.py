"""Process groups and launch helpers for one process per device.

What it does: `RankGroups` names the three groups a rank uses — the main group (the step's
collectives; NCCL on GPUs, gloo on CPU; a group of its own, not the default one, so it can be
rebuilt), a side group of the same backend for background page and weight movement (its own
communicator, so transfers never queue behind step collectives), and a gloo control group for
small host-side agreements (abort flags, checks); `spawn_ranks` runs a function on T local
processes and returns each rank's result.
NOTE: timeouts, every one configurable. The side group has a short timeout of its own
(`SIDE_TIMEOUT_S`, 5 s, not the process group's 30 minutes): a switch's chunk moves at most
`bytes_per_step` per rank, so a transfer that has not completed by then is a peer that will never
send, and the ranks waiting on it fail the switch (transfer.py) instead of blocking the group;
`rebuild_side` replaces the side group after such a failure (its pairs may hold half-finished
messages). While a switch is in flight or on probation (`bounded_waits`), the main group's
collectives wait at most `fault_timeout_s` (1.5 s) for a peer and the control group's
side_timeout_s + 2·fault_timeout_s + 1 s (a rank that failed comes to the control group at once,
its peers after their own bounded wait on the main or the side group): a peer that raised in its device work, or stopped, is noticed within
seconds by every rank (recovery.py), and `rebuild_main` replaces the main group after it. A peer
whose process died is noticed at once on gloo: its connections close and every collective with it
raises. On gloo a timeout raises in the waiting rank and closes its pairs; on NCCL the watchdog
enforces it (whether it then tears down the process is TORCH_NCCL_ASYNC_ERROR_HANDLING's choice),
and the communicator is aborted, not drained.
What it does not do: multi-node rendezvous, or pick devices beyond local rank = CUDA device.
"""

from __future__ import annotations

import os
import pickle
import socket
import sys
import tempfile
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

SIDE_TIMEOUT_S = 5.0  # a side-group transfer not done by then fails the switch (module docstring)
FAULT_TIMEOUT_S = 1.5  # while a switch is guarded: how long a main-group collective waits for a peer
DEFAULT_TIMEOUT = timedelta(minutes=30)  # torch.distributed's default for gloo and NCCL groups


class GroupLost(RuntimeError):
    """A peer left the group (its process ended, or it stopped answering the control group): the
    group can't run another step. Raised on every surviving rank, after it has put its own state
    back as it was before the switch (recovery.py): the old layout and every request's KV."""


@dataclass
class RankGroups:
    """One rank's view of the process groups."""

    rank: int
    world_size: int
    device: torch.device
    main: Any
    side: Any
    ctrl: Any
    side_timeout_s: float = SIDE_TIMEOUT_S
    fault_timeout_s: float = FAULT_TIMEOUT_S
    bounded: bool = False  # the short waits of a guarded switch are set (bounded_waits)

    @property
    def ctrl_timeout_s(self) -> float:
        """The control group's wait while bounded: a failed rank's peers come after their own bounded
        wait on the main group, or on the side group (a transfer a failed rank never posted)."""
        return self.side_timeout_s + 2.0 * self.fault_timeout_s + 1.0

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def init_rank(rank: int, world_size: int, init_method: str, use_cuda: bool,
              side_timeout_s: float = SIDE_TIMEOUT_S, fault_timeout_s: float = FAULT_TIMEOUT_S) -> RankGroups:
    """Join the default group and create the main, side and control groups."""
    backend = "nccl" if use_cuda else "gloo"
    device = torch.device("cuda", rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    kwargs = {"device_id": device} if use_cuda else {}
    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world_size, **kwargs)
    main = dist.new_group(list(range(world_size)), backend=backend)
    side = dist.new_group(list(range(world_size)), backend=backend, timeout=timedelta(seconds=side_timeout_s))
    ctrl = dist.new_group(list(range(world_size)), backend="gloo")
    return RankGroups(rank, world_size, device, main, side, ctrl, side_timeout_s, fault_timeout_s)


def _set_timeout(group: Any, device: torch.device, timeout: timedelta) -> None:
    """A group's wait for its peers, changed in place (gloo; an NCCL backend without the setter keeps its own)."""
    try:
        backend = group._get_backend(device)  # noqa: SLF001 - the only way to reach the backend's timeout
    except Exception:  # noqa: BLE001 - a group without a backend for this device: nothing to bound
        return
    setter = getattr(backend, "set_timeout", None)
    if setter is not None:
        setter(timeout)


def bounded_waits(groups: RankGroups, on: bool) -> None:
    """The short waits of a guarded switch on the main and control groups (`on`), or the defaults."""
    groups.bounded = on
    main = timedelta(seconds=groups.fault_timeout_s) if on else DEFAULT_TIMEOUT
    ctrl = timedelta(seconds=groups.ctrl_timeout_s) if on else DEFAULT_TIMEOUT
    _set_timeout(groups.main, groups.device, main)
    _set_timeout(groups.ctrl, torch.device("cpu"), ctrl)


def rebuild_main(groups: RankGroups) -> None:
    """Replace the main group after a collective on it was cut short (a peer's timeout, a rank that
    raised between two of the step's collectives): every rank calls this at the same point, after
    the control group agreed. The old one is aborted on NCCL and destroyed on gloo."""
    old = groups.main
    backend = "nccl" if groups.is_cuda else "gloo"
    try:
        if groups.is_cuda:
            from torch.distributed.distributed_c10d import _abort_process_group

            _abort_process_group(old)
        else:
            dist.destroy_process_group(old)
    except Exception:  # noqa: BLE001 - best effort: the new group does not depend on the old one
        pass
    groups.main = dist.new_group(list(range(groups.world_size)), backend=backend)
    if groups.bounded:
        _set_timeout(groups.main, groups.device, timedelta(seconds=groups.fault_timeout_s))


def rebuild_side(groups: RankGroups) -> None:
    """Replace the side group (every rank calls this at the same point: after an agreed abort that
    followed a transfer error). The old one is aborted on NCCL (its stuck transfers would block a
    drain) and destroyed on gloo."""
    old = groups.side
    backend = "nccl" if groups.is_cuda else "gloo"
    try:
        if groups.is_cuda:
            from torch.distributed.distributed_c10d import _abort_process_group

            _abort_process_group(old)
        else:
            dist.destroy_process_group(old)
    except Exception:  # noqa: BLE001 - best effort: the new group does not depend on the old one
        pass
    groups.side = dist.new_group(list(range(groups.world_size)), backend=backend,
                                 timeout=timedelta(seconds=groups.side_timeout_s))


def _entry(rank: int, world_size: int, init_method: str, use_cuda: bool, out_dir: str,
           fn: Callable[..., Any], args: tuple, side_timeout_s: float, fault_timeout_s: float = FAULT_TIMEOUT_S,
           may_die: bool = False) -> None:
    if not use_cuda:
        torch.set_num_threads(1)
    groups = init_rank(rank, world_size, init_method, use_cuda, side_timeout_s, fault_timeout_s)
    ok = False
    try:
        result = fn(groups, *args)
        with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:
            pickle.dump(result, f)
        ok = True
    except BaseException:
        traceback.print_exc()
        raise
    finally:
        if may_die:  # NOTE: a rank of the group ended on purpose (a fault test): no barrier left to meet
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0 if ok else 1)
        bounded_waits(groups, False)  # NOTE: ranks may finish far apart: the default wait, not a switch's
        dist.barrier(group=groups.ctrl)
        if use_cuda:
            # NOTE: NCCL teardown after CUDA graphs with captured collectives hung for minutes
            # once every part had finished (2 x H200, torch 2.11, NCCL 2.28); the result is on
            # disk, so the process leaves without it (exit code says whether fn succeeded).
            _drain_device()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0 if ok else 1)
        dist.destroy_process_group()


def _drain_device() -> None:
    """Wait for the device before leaving, unless a stream is still capturing a graph (a failure
    inside a capture: out of memory on an 80 GB card, say): synchronizing then raises and hides the
    failure that matters, so the process leaves without waiting."""
    try:
        if not torch.cuda.is_current_stream_capturing():
            torch.cuda.synchronize()
    except RuntimeError:  # noqa: PERF203 - a capture left open on another stream; leave anyway
        traceback.print_exc()


def spawn_ranks(fn: Callable[..., Any], world_size: int, *args: Any, use_cuda: bool = False,
                side_timeout_s: float = SIDE_TIMEOUT_S, fault_timeout_s: float = FAULT_TIMEOUT_S,
                may_die: bool = False) -> list[Any]:
    """Run fn(groups, *args) on world_size fresh processes; return results by rank.

    fn must be importable (a module-level function). An exception on any rank is raised here.
    `may_die`: a rank may end its process on purpose (a dead-rank fault test): the others' results
    are returned and a rank that left none gives None.
    """
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out_dir:
        init_method = f"tcp://127.0.0.1:{free_port()}"
        entry_args = (world_size, init_method, use_cuda, out_dir, fn, args, side_timeout_s, fault_timeout_s, may_die)
        if may_die:
            ctx = mp.get_context("spawn")
            procs = [ctx.Process(target=_entry, args=(r, *entry_args)) for r in range(world_size)]
            for p in procs:
                p.start()
            for p in procs:
                p.join(600)
                if p.is_alive():
                    p.kill()
        else:
            mp.spawn(_entry, args=entry_args, nprocs=world_size, join=True)
        results = []
        for rank in range(world_size):
            path = os.path.join(out_dir, f"rank{rank}.pkl")
            if may_die and not os.path.exists(path):
                results.append(None)
                continue
            with open(path, "rb") as f:
                results.append(pickle.load(f))
        return results


def agree_any(flag: bool, groups: RankGroups) -> bool:
    """True on every rank when any rank passes True (host-side, control group)."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups.ctrl)
    return bool(t.item())


def agree_flags(flags: list[int], groups: RankGroups) -> list[int]:
    """Element-wise max of every rank's small integer flags (host-side, control group)."""
    t = torch.tensor(flags, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups.ctrl)
    return t.tolist()


def first_reason(reason: str | None, groups: RankGroups, at_s: float = 0.0) -> str:
    """The failure reason of the rank that failed first (`at_s`: when, by time.time(); ties: the
    lowest rank), the same line on every rank: a gather of strings on the control group, only
    after an agreed failure, never on the step path. NOTE: first in time, because a fault on one
    rank makes its peers fail too (a transfer they waited on timed out): the first is the cause."""
    got: list = [None] * groups.world_size
    dist.all_gather_object(got, (at_s, reason) if reason else None, group=groups.ctrl)
    firsts = sorted((x[0], k, x[1]) for k, x in enumerate(got) if x)
    return firsts[0][2] if firsts else "failed on another rank"


def all_gather_cat(out: torch.Tensor, inp: torch.Tensor, group: Any) -> None:
    """out [T*n, ...] = concatenation of every rank's inp [n, ...] along dim 0."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    fn(out, inp, group=group)
