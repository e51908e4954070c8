"""floorfirst's calibration: measured steps and microbenchmarks fitted into a predictive model.

What it does: loads step profiles (CSV/JSONL in the profile schema, vLLM and SGLang serving
results, the executor benchmark's rows, PyTorch profiler traces), runs GPU microbenchmarks, fits
achieved efficiencies, per-message latency, an overlap coefficient and a fixed per-step overhead
by robust least squares, validates the fit by k-fold cross-validation and triages whole profiles
against the floors.

What it does not do: change a hardware spec or a floor (the fitted model is a separate frozen
artifact), or import torch, scipy or pandas at import time (`calibration.artifact` is what the CLI
and the runtime policy import, and it needs numpy and pydantic alone).
"""
