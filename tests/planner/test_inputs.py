"""The input layer (planner/inputs.py): regular files only, size limits, encodings, nesting,
finite numbers, output paths — each refusal one SpecError line naming the file, value and limit."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from planner.errors import SpecError
from planner.inputs import (INT_MAX_ABS, check_number, check_output_path, decode_text, line_column, load_json_file,
                            parse_json_text, parse_yaml_text, read_bytes_file, read_text_file, write_text_file)


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "c.json"
    os.mkfifo(fifo)
    result = {}

    def read():
        try:
            read_bytes_file(fifo, "calibration file", 100)
        except SpecError as exc:
            result["error"] = str(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive(), "reading a FIFO blocked"
    assert result["error"] == f"calibration file {fifo} is a FIFO, not a regular file"


def test_a_link_to_dev_zero_a_folder_and_a_missing_file(tmp_path):
    link = tmp_path / "z.csv"
    os.symlink("/dev/zero", link)
    with pytest.raises(SpecError, match=r"z.csv is a character device, not a regular file$"):
        read_bytes_file(link, "workload file", 1 << 20)
    with pytest.raises(SpecError, match=r"is a folder, not a regular file$"):
        read_bytes_file(tmp_path, "profile file", 100)
    with pytest.raises(SpecError, match=r"^model config not found: /nonexistent/c.json$"):
        read_bytes_file("/nonexistent/c.json", "model config", 100)
    with pytest.raises(SpecError, match="cannot hold a NUL"):
        read_bytes_file("a\0b", "model config", 100)


def test_the_size_limit_is_checked_before_reading(tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b"x" * 1024)
    assert read_bytes_file(p, "hardware file", 1024) == b"x" * 1024  # exactly at the limit: read
    with pytest.raises(SpecError, match=r"x.json is 1,025 bytes, over the 1 KiB limit for a hardware file$"):
        p.write_bytes(b"x" * 1025)
        read_bytes_file(p, "hardware file", 1024)


def test_bom_is_stripped_and_a_bad_byte_is_named_by_line_and_column():
    assert decode_text(b"\xef\xbb\xbfmodel,gpus\n", "profile file", "p.csv") == "model,gpus\n"
    # line 2 is "dé" + 0xff: 'é' is two bytes but one column, so the bad byte is column 3
    data = "ab\ndé".encode() + b"\xff" + b"x\n"
    assert line_column(data, data.index(b"\xff")) == (2, 3)
    with pytest.raises(SpecError, match=r"^profile file p.csv: not UTF-8 text: byte 0xff at line 2 column 3$"):
        decode_text(data, "profile file", "p.csv")


def test_json_nesting_limit_at_and_past_it():
    assert parse_json_text("[" * 64 + "]" * 64, "x", "f.json") is not None  # 64 levels: the limit
    with pytest.raises(SpecError, match=r"^x f.json: nested deeper than 64 levels at line 1 column 65$"):
        parse_json_text("[" * 65 + "]" * 65, "x", "f.json")
    with pytest.raises(SpecError, match=r"nested deeper than 64 levels at line 1 column 65$"):
        parse_json_text("[" * 1000 + "]" * 1000, "x", "f.json")  # past what Python's parser can recurse into
    # brackets inside strings don't count
    assert parse_json_text('{"a": "' + "[" * 100 + '"}', "x", "f.json") == {"a": "[" * 100}


def test_json_numbers_are_finite_and_in_int64():
    with pytest.raises(SpecError, match=r"^x f.json: NaN at line 2 column 7 is not a number"):
        parse_json_text('{"s": "NaN",\n "a": NaN}', "x", "f.json")
    with pytest.raises(SpecError, match=r"field 'a.b\[1\]'=inf is not a finite number$"):
        parse_json_text('{"a": {"b": [1, 1e400]}}', "x", "f.json")
    assert parse_json_text(f'{{"n": {INT_MAX_ABS - 1}}}', "x", "f.json") == {"n": 2**63 - 1}
    with pytest.raises(SpecError, match=r"field 'n' is an integer of 19 digits, over the 2\^63 limit$"):
        parse_json_text(f'{{"n": {INT_MAX_ABS}}}', "x", "f.json")
    with pytest.raises(SpecError, match="more than 4,300 digits"):
        parse_json_text('{"n": 1' + "0" * 5000 + "}", "x", "f.json")
    # finite=False (configs written by others): Infinity is read, the reader checks its own fields
    assert parse_json_text('{"limit": [0.0, Infinity]}', "x", "f.json", finite=False)["limit"][1] == float("inf")


def test_malformed_json_and_yaml_give_line_and_column():
    with pytest.raises(SpecError, match=r"^x f.json: malformed JSON at line 2 column 7: Expecting value$"):
        parse_json_text('{"a": 1,\n "b": }', "x", "f.json")
    with pytest.raises(SpecError, match=r"^h h.yaml: malformed YAML at line 2 column 2: did not find expected ',' or ']'$"):
        parse_yaml_text("a: [1,2\nb: 3\n", "h", "h.yaml")


def test_yaml_nesting_aliases_and_non_finite_numbers():
    assert parse_yaml_text("a: " + "[" * 31 + "]" * 31, "h", "h.yaml")  # the mapping and 31 lists: 32 levels
    with pytest.raises(SpecError, match=r"nested deeper than 32 levels at line 1 column 35$"):
        parse_yaml_text("a: " + "[" * 32 + "]" * 32, "h", "h.yaml")
    with pytest.raises(SpecError, match=r"YAML aliases \(\*x\) are not accepted, at line 2 column 4$"):
        parse_yaml_text("a: &x [1, 2]\nb: *x\n", "h", "h.yaml")
    with pytest.raises(SpecError, match=r"field 'peak.hbm_bytes'=nan is not a finite number$"):
        parse_yaml_text("peak:\n  hbm_bytes: .nan\n", "h", "h.yaml")


@pytest.mark.parametrize("value, kw, message", [
    ("3", dict(integer=True), "f='3' must be a whole number, not str"),
    ([3], dict(integer=True), "f=[3] must be a whole number, not list"),
    (True, dict(integer=True), "f=True must be a whole number, not bool"),
    (3.5, dict(integer=True), "f=3.5 must be a whole number"),
    (float("nan"), {}, "f=nan must be a finite number"),
    (-1, dict(lo=0), "f=-1 must be ≥ 0"),
    (0, dict(lo=0, lo_open=True), "f=0 must be > 0"),
    (11, dict(hi=10), "f=11 must be ≤ 10"),
])
def test_check_number_refuses_with_the_field_value_and_limit(value, kw, message):
    with pytest.raises(SpecError, match="^" + message.replace("[", r"\[").replace("]", r"\]") + "$"):
        check_number(value, "f", **kw)


def test_check_number_accepts_the_limits():
    assert check_number(0, "f", lo=0, integer=True) == 0
    assert check_number(10.0, "f", hi=10, integer=True) == 10
    assert check_number(1e-3, "f", lo=0, lo_open=True) == 1e-3


def test_output_paths_are_checked_before_work(tmp_path):
    png = (".png", ".svg", ".pdf")
    assert check_output_path(tmp_path / "w.png", "--plot", suffixes=png) == tmp_path / "w.png"
    assert check_output_path(tmp_path / ("n" * 251 + ".png"), "--plot", suffixes=png)  # 255 bytes: the limit
    cases = [
        (tmp_path / "x.xyz", "use a .png, .svg or .pdf file name"),
        (tmp_path / ("é" * 126 + ".png"), "the file name is 256 bytes long, over the 255-byte limit of a file name"),
        ("/nonexistent/c.png", "folder /nonexistent does not exist"),
        (str(tmp_path) + "/", "names a folder, not a file"),
        ("", "the path is empty"),
    ]
    for path, message in cases:
        with pytest.raises(SpecError, match=message):
            check_output_path(path, "--plot", suffixes=png)
    (tmp_path / "d.png").mkdir()
    with pytest.raises(SpecError, match="d.png is a folder, not a file that can be written"):
        check_output_path(tmp_path / "d.png", "--plot", suffixes=png)
    os.mkfifo(tmp_path / "f.json")
    with pytest.raises(SpecError, match="f.json is a FIFO, not a file that can be written"):
        check_output_path(tmp_path / "f.json", "--out")


def test_write_text_file_replaces_whole_or_not_at_all(tmp_path):
    p = tmp_path / "c.json"
    p.write_text("old")
    write_text_file(p, "new", "calibration file")
    assert p.read_text() == "new" and sorted(os.listdir(tmp_path)) == ["c.json"]
    with pytest.raises(SpecError, match="^cannot write calibration file /nonexistent/c.json: No such file or directory$"):
        write_text_file("/nonexistent/c.json", "x", "calibration file")


def test_load_json_file_reads_a_bom_and_read_text_file_refuses_utf16(tmp_path):
    p = tmp_path / "c.json"
    p.write_bytes(b"\xef\xbb\xbf" + b'{"a": 1}')
    assert load_json_file(p, "model config", 100) == {"a": 1}
    p.write_bytes('{"a": 1}'.encode("utf-16"))
    with pytest.raises(SpecError, match="not UTF-8 text: byte 0xff at line 1 column 1"):
        read_text_file(p, "model config", 100)


def test_import_planner_pulls_no_yaml_parse_or_heavy_module():
    code = ("import sys, planner.inputs; bad = [m for m in ('torch', 'scipy', 'pandas', 'matplotlib') if m in sys.modules];"
            " assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
