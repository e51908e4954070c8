"""A trace CSV is read through the input layer: a FIFO or a link to /dev/zero is refused at once,
a BOM is stripped, a bad byte named by line, and the request count is checked before anything."""

from __future__ import annotations

import os

import pytest

from planner.errors import SpecError
from runtime_policy.workloads import make_workload

HEAD = "arrival_s,input_tokens,output_tokens\n"


def test_a_trace_with_a_bom_loads_and_n_zero_takes_it_whole(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbf" + (HEAD + "0,100,10\n1,200,20\n").encode())
    assert make_workload(str(p), 0).requests == 2 and make_workload(str(p), 1).requests == 1


@pytest.mark.parametrize("n", [-5, 10_000_001, 2.5, "5"])
def test_a_bad_request_count_is_refused_before_the_trace_is_read(tmp_path, n):
    with pytest.raises(SpecError, match=r"^requests="):
        make_workload(str(tmp_path / "never-read.csv"), n)


def test_a_fifo_a_device_and_a_bad_byte(tmp_path):
    fifo = tmp_path / "f.csv"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match=r"f.csv is a FIFO, not a regular file$"):
        make_workload(str(fifo), 5)
    link = tmp_path / "z.csv"
    os.symlink("/dev/zero", link)
    with pytest.raises(SpecError, match=r"z.csv is a character device, not a regular file$"):
        make_workload(str(link), 5)
    bad = tmp_path / "b.csv"
    bad.write_bytes(HEAD.encode() + b"0,1\xff0,10\n")
    with pytest.raises(SpecError, match=r"not UTF-8 text: byte 0xff at line 2 column 4$"):
        make_workload(str(bad), 5)


@pytest.mark.parametrize("rate", [1e-320, 1e-7, 2e9, float("inf"), float("nan"), 0.0, -1.0])
def test_a_rate_outside_a_workload_range_is_refused(rate):
    # 1e-320 once made every arrival gap 1/rate = inf: a simulation that never ended
    with pytest.raises(SpecError, match=r"^rate=.* must be between 1e-06 and 1e\+09 requests per second$"):
        make_workload("chat", 5, 0, rate)
    assert make_workload("chat", 5, 0, 1e-6).requests == 5
