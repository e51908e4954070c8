"""`floorfirst follow` live on loopback: a test publisher binds a PUB socket as SGLang's
`_FpmPublisherThread` does and sends records in SGLang's wire format; the follower refits from them,
survives a disconnect and a publisher restart, and a flood of 10,000 records/s, serving the last
good calibration throughout and saying what it dropped."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from calibration.artifact import load_calibration
from integrations.follow import Follower
from integrations.follow_run import run_live
from integrations.fpm_publisher import LoopbackPublisher, synthetic_records
from integrations.fpm_schema import encode_record
from tests.integrations.conftest import CAL, LINE

zmq = pytest.importorskip("zmq")
pytest.importorskip("msgspec")

from integrations.fpm_stream import FpmSubscriber  # noqa: E402


def _connected(pub: LoopbackPublisher, sub: FpmSubscriber, timeout_s: float = 5.0) -> None:
    """PUB drops what it sends before a subscriber joins: wait until a probe heartbeat arrives."""
    from integrations.fpm_publisher import record_map

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pub.send(record_map("probe", 0, 0, 0.0, 0, 0))
        if sub.drain(16, timeout_s=0.05):
            return
    raise AssertionError("the subscriber never connected")


def test_live_records_refit_and_the_transport_is_accounted(launched, tmp_path):
    pub = LoopbackPublisher("tcp://127.0.0.1:*")
    rec_file = tmp_path / "rec.jsonl"
    sub = FpmSubscriber([pub.endpoint], record_to=str(rec_file))
    try:
        _connected(pub, sub)
        recs = synthetic_records(launched, 200, seed=11)
        for r in recs:
            pub.send(r)
        pub.sock.send_multipart([b"", b"only two frames"])  # not SGLang's (topic, seq, payload)
        f = Follower(launched, window=200, refit_every=100, tables=False)
        rep = run_live(f, sub, max_records=200, duration_s=20)
    finally:
        sub.close()
        pub.close()
    assert rep["records"]["accepted"] == 200 and rep["served"]["source"] == "refit"
    assert rep["refits"][-1]["median_abs_pct_error"] < 3.0
    time.sleep(0.1)
    assert len(rec_file.read_text().splitlines()) >= 200  # the stream recorded for --once


def test_disconnect_and_restart_keep_the_last_good_calibration(launched):
    cal = load_calibration(CAL)
    pub = LoopbackPublisher("tcp://127.0.0.1:*")
    endpoint = pub.endpoint
    sub = FpmSubscriber([endpoint])
    f = Follower(launched, window=128, refit_every=64, tables=False)
    said: list[str] = []
    try:
        _connected(pub, sub)
        for r in synthetic_records(launched, 64, seed=12):
            pub.send(r)
        deadline = time.monotonic() + 20
        while f.intake.accepted < 64 and time.monotonic() < deadline:
            run_live(f, sub, duration_s=0.2)
        served = f.served
        assert served.source == "refit"
        pub.close()  # the engine goes away
        rep = run_live(f, sub, duration_s=1.0, silence_s=0.3, say=said.append)
        assert f.served is served and any("no record for" in s for s in said)
        pub = LoopbackPublisher(endpoint)  # and comes back: its sequence starts again at 0
        deadline = time.monotonic() + 10
        n0 = f.intake.received
        while f.intake.received == n0 and time.monotonic() < deadline:
            for r in synthetic_records(launched, 8, seed=13):
                pub.send(r)
            run_live(f, sub, duration_s=0.3)
        rep = run_live(f, sub, duration_s=0.2)
    finally:
        sub.close()
        pub.close()
    assert f.intake.received > n0
    assert rep["transport"]["restart_count"] >= 1 and rep["transport"]["disconnect_count"] >= 1
    assert f.served.source == "refit" and cal is not None


def test_a_flood_of_10k_records_per_second_is_served_or_counted(launched):
    cal = load_calibration(CAL)
    pub = LoopbackPublisher("tcp://127.0.0.1:*")
    sub = FpmSubscriber([pub.endpoint], queue_size=2000)
    f = Follower(launched, cal, str(CAL), window=256, refit_every=10**9, tables=False)  # no refit: serve the loaded one
    try:
        _connected(pub, sub)
        payloads = [encode_record(r) for r in synthetic_records(launched, 500, seed=14)]
        out: dict = {}
        th = threading.Thread(target=lambda: out.update(rep=run_live(f, sub, duration_s=3.5)))
        th.start()  # the follower prices while the flood arrives
        sent = 0
        start = time.monotonic()
        while sent < 10_000 and time.monotonic() - start < 3.0:  # 10,000 records at up to 10,000/s, bursts of 100
            for p in payloads[(sent % 500):(sent % 500) + 100]:
                pub.send_raw(p)
            sent += 100
            time.sleep(max(0.0, start + sent / 10_000 - time.monotonic()))
        rate = sent / (time.monotonic() - start)
        time.sleep(0.3)
        pub.send_raw(payloads[0])  # a last record after the flood: a gap before it is seen as lost
        sent += 1
        th.join()
        rep = out["rep"]
    finally:
        sub.close()
        pub.close()
    i = rep["records"]
    assert sent == 10_001 and rate > 5_000, rate
    assert i["accepted"] + i["dropped_total"] == sent, i  # every record is served or counted
    assert set(i["dropped"]) <= {"queue_full", "lost_in_transport"}
    print("flood:", sent, "sent at", round(rate), "records/s;", i["accepted"], "accepted;", i["dropped"])
    assert rep["served"]["source"] == "loaded" and np.allclose(f.served.x, cal.params.vector())


def test_a_stalled_follower_drops_the_overflow_and_says_so(launched):
    """Records arriving while the follower doesn't drain (a long refit, say) fill the bounded queue;
    the rest are dropped and counted as queue_full, never silently."""
    pub = LoopbackPublisher("tcp://127.0.0.1:*")
    sub = FpmSubscriber([pub.endpoint], queue_size=50)
    f = Follower(launched, window=64, refit_every=10**9, tables=False)
    try:
        _connected(pub, sub)
        payloads = [encode_record(r) for r in synthetic_records(launched, 300, seed=15)]
        for p in payloads:
            pub.send_raw(p)
        time.sleep(0.5)  # nobody drains meanwhile
        rep = run_live(f, sub, duration_s=0.5)
    finally:
        sub.close()
        pub.close()
    i = rep["records"]
    assert i["accepted"] == 50 and i["dropped"] == {"queue_full": 250}
    assert "records arrive faster than they are priced" in i["drop_examples"]["queue_full"][0]
