"""GPU microbenchmarks: achieved HBM, GEMM, weight-streaming, attention, host-link and collective
rates on the machine it runs on, as one JSON document (`kind: floorfirst.microbench`).

What it does: `runner.run_microbench` times each kernel family with CUDA events (median of
repeats after warm-up, random data, buffers several times the L2), spawns one process per GPU for
NCCL collectives, and `results.summarize` reduces the raw rows to the figures calibration uses;
`results.calibrated_hardware_yaml` writes a hardware YAML whose peaks are the datasheet's and
whose efficiencies are the measured ones.
What it does not do: import torch at import time (only inside the functions that time), change a
GPU's clocks or settings, or run without a GPU unless asked (`allow_cpu=True`, for tests).
"""
