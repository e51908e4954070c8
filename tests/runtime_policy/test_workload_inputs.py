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


# ---- issue 31 item 2: traces streamed and stopped at -n ----------------------------------------------
@pytest.mark.parametrize("head,row,bad", [
    (HEAD, "{i},100,10\n", "x,y,z\n"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "2023-11-16 18:15:{i:02d}.5,100,10\n", "yesterday,1,1\n"),
    ("", '{{"timestamp": {i}, "input_length": 100, "output_length": 10}}\n', "{not json\n"),
])
def test_a_trace_is_read_only_as_far_as_the_run_needs(tmp_path, head, row, bad):
    """With -n 5 the rows past the fifth request are never read: a broken tail (or a 10^6-row trace:
    benchmarks/results/ issue 31) costs nothing; the whole trace (-n 0) meets the broken row."""
    f = tmp_path / ("t.jsonl" if not head else "t.csv")
    f.write_text(head + "".join(row.format(i=i) for i in range(5)) + bad + "\0" * 1000 + "\xff garbage\n")
    w = make_workload(str(f), 5)
    assert w.requests == 5 and list(w.input_tokens) == [100] * 5
    with pytest.raises(SpecError, match="line 7" if head else "line 6"):  # the header is line 1
        make_workload(str(f), 0)


def test_only_the_first_line_decides_whether_a_file_is_a_bench_result(tmp_path, monkeypatch):
    import planner.inputs as inputs
    from runtime_policy.traces import is_bench_result

    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 100, "output_length": 10}\n' * 200_000)
    monkeypatch.setattr(inputs, "read_bytes_file", lambda *a: pytest.fail("read the whole file"))
    assert not is_bench_result(f)
