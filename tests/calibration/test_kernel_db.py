"""The aiconfigurator-core kernel-table reader: the rate arithmetic on small synthetic tables (no
parquet needed), the member filter that never opens the wheel's end-to-end rows, version choice,
and — where pyarrow and the wheel are at hand — the real H200 tables."""

import glob
import io
import json
import os
import zipfile

import numpy as np
import pytest

from calibration.kernel_db import (KernelDbSource, custom_allreduce_rates, gemm_rates, kernel_db_summary, mla_rates,
                                   moe_rates, nccl_rates, newest_tables)
from planner.errors import SpecError

WHEELS = glob.glob("/tmp/acw/aiconfigurator_core-*.whl")
SILICON = "aiconfigurator_core/systems/silicon_sample.csv"


def test_gemm_rates():
    t = {"gemm_dtype": ["bfloat16", "fp8", "bfloat16", "bfloat16"], "m": [4096, 4096, 8, 1],
         "n": [4096, 4096, 8192, 2048], "k": [4096, 4096, 4096, 4096], "latency": [0.2, 0.1, 0.02, 0.001]}
    r, used = gemm_rates(t)
    # 2·4096³ FLOP in 0.2 ms and in 0.1 ms
    assert r["bf16_flops_per_s"] == pytest.approx(2 * 4096**3 / 0.2e-3)
    assert r["fp8_flops_per_s"] == pytest.approx(2 * 4096**3 / 0.1e-3)
    # m = 8: 8192·4096 bf16 weights streamed in 20 µs (the m = 1 row is below 2^24 weights: left out)
    assert r["gemm_weight_stream_bytes_per_s"] == pytest.approx(8192 * 4096 * 2 / 0.02e-3) and used == 3


def test_mla_rates():
    t = {"batch_size": [64, 1], "isl": [1, 1], "step": [16383, 1023], "num_heads": [128, 128],
         "kv_cache_dtype": ["bfloat16", "bfloat16"], "latency": [1.0, 0.01]}
    r, used = mla_rates(t)
    # 64 × 16384 cached tokens × 576 × 2 B in 1 ms; 2176 FLOPs per (head, token); the 1K row is too small
    assert r["mla_attention_kv_bytes_per_s"] == pytest.approx(64 * 16384 * 576 * 2 / 1e-3)
    assert r["mla_attention_flops_per_s"] == pytest.approx(64 * 16384 * 128 * 2176 / 1e-3) and used == 1


def test_moe_rates():
    t = {"num_tokens": [1, 64], "hidden_size": [7168, 7168], "inter_size": [2048, 2048], "topk": [8, 8],
         "num_experts": [256, 256], "moe_tp_size": [1, 1], "moe_ep_size": [1, 1],
         "distribution": ["balanced", "balanced"], "moe_dtype": ["fp8_block", "fp8_block"], "latency": [0.05, 1.0]}
    r, used = moe_rates(t)
    # one token touches 256·(1 − (1 − 8/256)^1) = 8 experts of 3 · 7168 · 2048 fp8 bytes
    assert r["moe_weight_stream_bytes_per_s"] == pytest.approx(8 * 3 * 7168 * 2048 / 0.05e-3) and used == 1


def test_nccl_and_custom_allreduce_rates():
    t = {"op_name": ["all_reduce", "all_gather", "all_reduce"], "num_gpus": [8, 8, 8],
         "message_size": [64 << 20, 64 << 20, 1024], "nccl_dtype": ["half", "half", "half"],
         "latency": [0.5, 0.4, 0.008]}
    r, used = nccl_rates(t)
    s = (64 << 20) * 2  # elements × 2 B
    assert r["all_reduce_bus_bytes_per_s"] == pytest.approx(2 * 7 / 8 * s / 0.5e-3)
    assert r["all_gather_bus_bytes_per_s"] == pytest.approx(7 / 8 * s / 0.4e-3)
    assert r["link_bytes_per_s"] == r["all_gather_bus_bytes_per_s"]  # NVLS all-reduce reduces in the switch
    assert r["all_reduce_small_latency_s"] == pytest.approx(8e-6) and used == 3
    c, _ = custom_allreduce_rates({"kernel_source": ["X_graph", "X_eager"], "allreduce_dtype": ["bfloat16"] * 2,
                                   "message_size": [512, 512], "latency": [0.003, 0.03]})
    assert c["all_reduce_small_cuda_graph_latency_s"] == pytest.approx(3e-6)


def test_summary_composes_weight_streaming_from_its_families_and_names_missing_tables():
    # issue 26: the weight rate is the GEMM and MoE families' (here the GEMM's alone), never the
    # fastest memory-bound kernel's
    s, notes = kernel_db_summary({("gemm", "gemm"): {"gemm_dtype": ["bfloat16"], "m": [8], "n": [8192], "k": [4096],
                                                      "latency": [0.02]}})
    assert s["hbm_stream_bytes_per_s"] == s["weight_stream_bytes_per_s"]
    assert any("generation_mla" in n for n in notes) and any("nccl" in n for n in notes)


def _fake_wheel(tmp_path):
    p = tmp_path / "aiconfigurator_core-0.0.0-py3-none-any.whl"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr(SILICON, "held,back\n")
        z.writestr("aiconfigurator_core/systems/data/h200_sxm/gemm/sglang/0.5.9/gemm_perf.parquet", b"old")
        z.writestr("aiconfigurator_core/systems/data/h200_sxm/gemm/sglang/0.5.14/gemm_perf.parquet", b"new")
        z.writestr("aiconfigurator_core/systems/data/h200_sxm/comm/nccl/2.29.2/nccl_perf.parquet", b"n")
        z.writestr("aiconfigurator_core/systems/data/h200_sxm/gemm/sglang/0.5.14/collection_meta.yaml", "x: 1\n")
    return p


def test_only_per_kernel_tables_are_listed_or_read(tmp_path):
    src = KernelDbSource(str(_fake_wheel(tmp_path)))
    assert SILICON not in src.names() and all(n.endswith("_perf.parquet") for n in src.names())
    with pytest.raises(SpecError, match="only per-kernel"):
        src.read(SILICON)
    # the newest version of each table, NCCL's own tables alongside the backend's
    found = newest_tables(src.names(), "h200_sxm", "sglang")
    assert found[("gemm", "gemm")][1] == "0.5.14" and found[("comm", "nccl/nccl")][1] == "2.29.2"


def test_the_reader_never_touches_the_end_to_end_rows(tmp_path, monkeypatch):
    import calibration.kernel_db as kdb

    wheel = str(_fake_wheel(tmp_path))  # written before the reads are watched
    opened = []
    real = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, name, *a, **k: opened.append(getattr(name, "filename", name))
                        or real(self, name, *a, **k))
    nccl = {"op_name": ["all_gather"], "num_gpus": [8], "message_size": [64 << 20], "nccl_dtype": ["half"],
            "latency": [0.4]}
    gemm = {"gemm_dtype": ["bfloat16"], "m": [8], "n": [8192], "k": [4096], "latency": [0.02]}
    monkeypatch.setattr(kdb, "read_parquet", lambda data, *a: nccl if data == b"n" else gemm)
    doc = kdb.read_kernel_db("h200_sxm", "sglang", wheel)
    assert SILICON not in opened and all(n.endswith("_perf.parquet") for n in opened)
    assert {t["version"] for t in doc["tables"] if t["op"] == "gemm"} == {"0.5.14"}


def test_bad_input_is_one_line(tmp_path):
    from calibration.kernel_db import read_kernel_db

    with pytest.raises(SpecError, match="backend"):
        read_kernel_db("h200_sxm", "tgi", str(_fake_wheel(tmp_path)))
    with pytest.raises(SpecError, match="system='x100'"):
        read_kernel_db("x100", "sglang", str(_fake_wheel(tmp_path)))
    with pytest.raises(SpecError, match="wheel not found"):
        read_kernel_db("h200_sxm", "sglang", str(tmp_path / "none.whl"))


@pytest.mark.skipif(not WHEELS, reason="the aiconfigurator-core wheel is not at /tmp/acw (pip download --no-deps aiconfigurator-core)")
def test_real_h200_tables_give_rates_under_the_datasheet(tmp_path):
    pytest.importorskip("pyarrow", reason="parquet tables need pyarrow")
    import planner
    from calibration.kernel_db import read_kernel_db, write_outputs

    doc = read_kernel_db("h200_sxm", "sglang", WHEELS[0])
    s, p = doc["summary"], planner.load_hardware("h200").peak
    assert 0.5 * p.bf16_flops_per_s < s["bf16_flops_per_s"] <= p.bf16_flops_per_s
    assert 0.5 * p.hbm_bandwidth_bytes_per_s < s["hbm_stream_bytes_per_s"] <= p.hbm_bandwidth_bytes_per_s
    assert s["link_bytes_per_s"] <= p.scaleup_bandwidth_bytes_per_s_per_direction
    write_outputs(doc, str(tmp_path / "r.json"), str(tmp_path / "h.yaml"))
    hw = planner.load_hardware(str(tmp_path / "h.yaml"))
    assert hw.peak == p and 0.5 < hw.efficiency.hbm <= 1.0
    assert json.loads((tmp_path / "r.json").read_text())["tables"][0]["version"]


def test_calibrate_from_kernel_db_cli(tmp_path, monkeypatch, capsys):
    import calibration.kernel_db as kdb
    from cli.main import main
    from tests.agent.contracts import validate

    gemm = {"gemm_dtype": ["bfloat16", "bfloat16"], "m": [8, 4096], "n": [8192, 4096], "k": [4096, 4096],
            "latency": [0.02, 0.2]}
    monkeypatch.setattr(kdb, "read_parquet", lambda data, *a: gemm if data != b"n" else {
        "op_name": ["all_gather"], "num_gpus": [8], "message_size": [64 << 20], "nccl_dtype": ["half"], "latency": [0.4]})
    out, yml = tmp_path / "rates.json", tmp_path / "hw.yaml"
    with pytest.raises(SystemExit) as ok:
        main(["calibrate", "--from-kernel-db", "h200_sxm", "--backend", "sglang", "--wheel", str(_fake_wheel(tmp_path)),
              "--out", str(out), "--yaml-out", str(yml), "--json"])
    assert ok.value.code == 0
    doc = json.loads(capsys.readouterr().out)
    validate(doc)
    assert doc["tables"][0]["version"] == "0.5.14" and "h200-calibrated" in yml.read_text()
    with pytest.raises(SystemExit) as bad:
        main(["calibrate", "--from-kernel-db", "h200_sxm", "--wheel", str(_fake_wheel(tmp_path))])
    assert bad.value.code == 2 and "--backend" in capsys.readouterr().err


# ---- issue 31 item 2: every archive read with size limits -------------------------------------------
GEMM_MEMBER = "aiconfigurator_core/systems/data/h200_sxm/gemm/sglang/0.6.0/gemm_perf.parquet"


def _bomb_wheel(tmp_path, size: int):
    """The fake wheel plus a gemm table of `size` zero bytes: a few hundred KiB on disk."""
    p = _fake_wheel(tmp_path)
    with zipfile.ZipFile(p, "a", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr(GEMM_MEMBER, b"\0" * size)
    return p


def test_a_zip_bomb_member_is_refused_before_it_inflates(tmp_path, monkeypatch):
    import calibration.kernel_db as kdb

    p = _bomb_wheel(tmp_path, kdb.MEMBER_MAX_BYTES + 1)
    assert p.stat().st_size < (1 << 20)  # ~65 KiB that would inflate to 64 MiB
    inflated = []
    real = zipfile.ZipExtFile.read
    monkeypatch.setattr(zipfile.ZipExtFile, "read", lambda self, n=-1: inflated.append(n) or real(self, n))
    with pytest.raises(SpecError, match=r"declares 67,108,865 bytes, over the 64 MiB a kernel table may inflate to"):
        kdb.read_kernel_db("h200_sxm", "sglang", str(p))
    assert not inflated


def test_a_member_that_inflates_too_far_or_lies_about_its_size_is_refused(tmp_path, monkeypatch):
    import calibration.kernel_db as kdb

    p = _bomb_wheel(tmp_path, 8 << 20)  # 8 MiB of zeros: ~1000-fold
    with pytest.raises(SpecError, match=r"inflates \d[\d,]*-fold, over the 100-fold"):
        kdb.KernelDbSource(str(p)).read(GEMM_MEMBER)
    monkeypatch.setattr(kdb, "MEMBER_MAX_RATIO", 10**6)
    monkeypatch.setattr(kdb, "MEMBER_MAX_BYTES", 4 << 20)
    src = kdb.KernelDbSource(str(p))
    src.zip.getinfo(GEMM_MEMBER).file_size = 1 << 20  # a central directory that understates the size
    with pytest.raises(SpecError, match="inflates past its declared size|unreadable member"):
        src.read(GEMM_MEMBER)


def test_a_wheel_that_is_no_zip_or_no_file_is_one_line(tmp_path):
    from calibration.kernel_db import KernelDbSource

    bad = tmp_path / "x.whl"
    bad.write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(SpecError, match="not a wheel"):
        KernelDbSource(str(bad))
    fifo = tmp_path / "f.whl"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="is a FIFO, not a regular file"):
        KernelDbSource(str(fifo))


def test_a_bad_parquet_table_is_one_line(monkeypatch):
    """pyarrow's own errors on a bad member (ArrowInvalid, OSError…) become one line naming it; a
    table whose footer declares too many rows is refused before it is decoded."""
    import sys
    import types

    import calibration.kernel_db as kdb

    class Meta:
        num_rows, num_columns = 10**9, 4

    class ParquetFile:
        def __init__(self, f):
            if f.read(4) != b"PAR1":
                raise OSError("Parquet magic bytes not found in footer. Either the file is corrupted\nor this is not a parquet file.")
            self.metadata = Meta()

        def read(self):
            raise AssertionError("decoded a table over the limits")

    pq = types.ModuleType("pyarrow.parquet")
    pq.ParquetFile = ParquetFile
    monkeypatch.setitem(sys.modules, "pyarrow", types.ModuleType("pyarrow"))
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", pq)
    with pytest.raises(SpecError) as exc:
        kdb.read_parquet(b"garbage", GEMM_MEMBER)
    assert str(exc.value) == f"{GEMM_MEMBER}: not a readable parquet table (OSError: Parquet magic bytes not found in footer. Either the file is corrupted)"
    with pytest.raises(SpecError, match=r"1,000,000,000 rows × 4 columns, over the 5,000,000 × 256"):
        kdb.read_parquet(b"PAR1....", GEMM_MEMBER)


def _moe_table(half=240.0, inter=2048, tps=(1, 2, 4, 8), tokens=(1, 4, 16)):
    """A synthetic moe_perf table whose rate follows rate(w) = r∞·w/(w + half) at per-rank width w."""
    cols = {k: [] for k in ("moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
                            "moe_ep_size", "distribution", "latency")}
    for tp in tps:
        for n in tokens:
            w = inter / tp
            touched = 256 * (1 - (1 - 8 / 256) ** n)
            rate = 4e12 * w / (w + half)
            for k, v in (("moe_dtype", "fp8"), ("num_tokens", n), ("hidden_size", 7168), ("inter_size", inter), ("topk", 8),
                         ("num_experts", 256), ("moe_tp_size", tp), ("moe_ep_size", 1), ("distribution", "balanced"),
                         ("latency", touched * 3 * 7168 * w * 1.0 / rate * 1e3)):
                cols[k].append(v)
    return cols


def test_moe_half_width_is_fitted_and_the_moe_rate_taken_to_infinite_width():
    from calibration.kernel_db import moe_half_width

    half, pairs = moe_half_width(_moe_table(half=240.0))
    assert half == pytest.approx(240.0, abs=5.0) and pairs == 9
    r, _ = moe_rates(_moe_table(half=240.0))
    assert r["moe_weight_stream_bytes_per_s"] == pytest.approx(4e12, rel=0.01) and r["moe_half_width_columns"] == half


def test_a_prior_clamps_a_rate_above_the_datasheet_with_a_note_and_keeps_the_engine():
    import planner
    from calibration.kernel_db import PRIOR_ALPHA, prior_calibration
    from planner.engines.kernels import DEFAULT_STEP_OVERHEAD_S

    hw = planner.load_hardware("h100")
    doc = {"hardware": "h100", "backend": "trtllm", "wheel": "w.whl", "created_utc": "", "notes": [],
           "tables": [{"path": "aiconfigurator_core/systems/data/h100_sxm/moe/trtllm/1/moe_perf.parquet", "op": "moe",
                       "table": "moe", "version": "1", "rows_used": 3, "sha256": "x"}],
           "summary": {"weight_stream_bytes_per_s": 1.2 * hw.peak.hbm_bandwidth_bytes_per_s,
                       "mla_attention_kv_bytes_per_s": 0.9 * hw.peak.hbm_bandwidth_bytes_per_s}}
    cal = prior_calibration(doc)
    assert cal.params.hbm_weight_efficiency == 1.0 and any("clamped to 1.0" in n for n in cal.notes)
    assert cal.params.hbm_kv_efficiency == pytest.approx(0.9)
    assert cal.engine == "trtllm" and cal.origin == "prior" and cal.fit.rows == 0
    assert cal.params.overlap_alpha == PRIOR_ALPHA and cal.params.overhead_s == DEFAULT_STEP_OVERHEAD_S


def test_the_kernel_db_yaml_keeps_the_gpu_s_generation_and_clamps_with_a_note():
    import yaml

    import planner
    from calibration.microbench.results import calibrated_hardware_yaml

    base = planner.load_hardware("b200")
    text = calibrated_hardware_yaml({"hbm_stream_bytes_per_s": 1.1 * base.peak.hbm_bandwidth_bytes_per_s}, base, "t",
                                    clamp=True)
    d = yaml.safe_load(text)
    assert d["arch"] == base.arch == "blackwell" and tuple(d["compute_capability"]) == base.compute_capability
    assert d["efficiency"]["hbm"] == 1.0 and "clamped_hbm" in d["sources"]
    with pytest.raises(ValueError):  # a microbenchmark above the peak is still refused
        calibrated_hardware_yaml({"hbm_copy_bytes_per_s": 1.1 * base.peak.hbm_bandwidth_bytes_per_s}, base, "t")
