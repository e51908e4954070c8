"""Where forward-pass records come from: a live ZMQ subscription to SGLang's publishers, or a
recorded stream (JSONL, one record per line, as `floorfirst follow --record` writes it).

The subscription (`FpmSubscriber`) connects a SUB socket to each endpoint SGLang binds
(`{--forward-pass-metrics-ipc-name}.{dp_rank}`, or a tcp:// address), subscribed to every topic
(SGLang's topic is b""), and a receiver thread moves frames into a bounded queue:
- a message that isn't SGLang's three frames is dropped as malformed;
- the 8-byte sequence SGLang numbers each message with (per publisher) shows what the transport
  lost (a PUB socket drops at its high-water mark: `lost_in_transport`) and when a publisher
  restarted (the sequence went back: counted, nothing lost);
- when the queue is full (a flood faster than the follower prices) the message is dropped and
  counted (`queue_full`): the follower keeps serving what it has;
- a socket monitor counts disconnects; ZMQ reconnects by itself, and `silent_s` says how long no
  record came.

Does not: decode or price records (integrations.fpm_schema, integrations.follow). pyzmq (and
msgspec, for the payload) are the `follow` extra, imported when a subscription starts.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections import Counter
from pathlib import Path

from integrations.fpm_schema import RecordError, decode_payload
from planner.errors import SpecError
from planner.inputs import PROFILE_MAX_BYTES, json_value, read_text_file

DEFAULT_QUEUE = 20_000
RECORDED_MAX_BYTES = PROFILE_MAX_BYTES


def zmq_module():
    """pyzmq, or one line saying how to install it."""
    try:
        import msgspec  # noqa: F401  (the payload codec; checked here so the error comes first)
        import zmq
    except ImportError:
        raise SpecError("floorfirst follow needs pyzmq and msgspec: pip install '.[follow]' in a clone") from None
    return zmq


def read_recorded(path: str) -> list:
    """A recorded stream → a list of decoded maps, with a RecordError in place of each bad line."""
    text = read_text_file(path, "recorded stream", RECORDED_MAX_BYTES)
    out: list = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json_value(line))
        except SpecError as exc:
            out.append(RecordError(f"{Path(path).name}:{n}: {exc}"))
    return out


class FpmSubscriber:
    """SUB sockets on SGLang's FPM endpoints, drained by a receiver thread into a bounded queue."""

    def __init__(self, endpoints: list[str], queue_size: int = DEFAULT_QUEUE, record_to: str | None = None):
        zmq = zmq_module()
        if not endpoints:
            raise SpecError("follow needs an --endpoint (or --once FILE)")
        self._zmq = zmq
        self._ctx = zmq.Context()
        self._socks = []
        self._monitors = []
        for ep in endpoints:
            s = self._ctx.socket(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.setsockopt(zmq.RCVHWM, 100_000)
            try:
                s.connect(ep)
            except zmq.ZMQError as exc:
                self.close()
                raise SpecError(f"--endpoint {ep!r}: {exc}") from None
            self._socks.append(s)
            self._monitors.append(s.get_monitor_socket(zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECTED))
        self.queue: queue.Queue = queue.Queue(maxsize=queue_size)
        self.counts: Counter = Counter()  # queue_full, lost_in_transport, malformed, restarts, disconnects, connects
        self.examples: dict[str, str] = {}
        self.last_record_monotonic: float | None = None
        self._last_seq: dict[int, int] = {}
        self._record = open(record_to, "a", encoding="utf-8") if record_to else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="floorfirst-fpm-sub", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        zmq = self._zmq
        poller = zmq.Poller()
        for s in self._socks + self._monitors:
            poller.register(s, zmq.POLLIN)
        from zmq.utils.monitor import recv_monitor_message

        while not self._stop.is_set():
            try:
                ready = dict(poller.poll(100))
            except zmq.ZMQError:
                return
            for i, mon in enumerate(self._monitors):
                if mon in ready:
                    ev = recv_monitor_message(mon)
                    self.counts["disconnects" if ev["event"] == zmq.EVENT_DISCONNECTED else "connects"] += 1
            for i, s in enumerate(self._socks):
                if s not in ready:
                    continue
                while True:
                    try:
                        frames = s.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._one(i, frames)

    def _one(self, sock: int, frames: list[bytes]) -> None:
        self.last_record_monotonic = time.monotonic()
        if len(frames) != 3 or len(frames[1]) != 8:
            self.counts["malformed"] += 1
            self.examples.setdefault("malformed", f"a message of {len(frames)} frames, not SGLang's (topic, seq, payload)")
            return
        seq = int.from_bytes(frames[1], "big")
        last = self._last_seq.get(sock)
        if last is not None:
            if seq > last + 1:
                self.counts["lost_in_transport"] += seq - last - 1
                self.examples.setdefault("lost_in_transport", f"sequence {last} → {seq} on endpoint {sock}")
            elif seq <= last:
                self.counts["restarts"] += 1
        self._last_seq[sock] = seq
        try:
            item = decode_payload(frames[2])
        except RecordError as exc:
            item = exc
        if self._record is not None and not isinstance(item, RecordError):
            self._record.write(json.dumps(item.to_json()) + "\n")
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.counts["queue_full"] += 1
            self.examples.setdefault("queue_full", f"queue of {self.queue.maxsize} records full: records arrive faster "
                                                   "than they are priced")

    def drain(self, max_items: int = 4096, timeout_s: float = 0.1) -> list:
        """Up to `max_items` records (or RecordErrors) waiting, blocking up to `timeout_s` for the first."""
        out = []
        try:
            out.append(self.queue.get(timeout=timeout_s))
        except queue.Empty:
            return out
        while len(out) < max_items:
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                break
        return out

    def silent_s(self) -> float | None:
        t = self.last_record_monotonic
        return None if t is None else time.monotonic() - t

    def close(self) -> None:
        self._stop.set()
        if getattr(self, "_thread", None) is not None:
            self._thread.join(timeout=2.0)
        for s in self._socks + self._monitors:
            s.close(linger=0)
        self._ctx.term()
        if getattr(self, "_record", None) is not None:
            self._record.close()
