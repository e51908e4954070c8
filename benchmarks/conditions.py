"""Conditions every benchmark records next to its figures: the CPU, and the commit measured.
Imported by the scripts in this folder (run as `python benchmarks/<name>.py`)."""

from __future__ import annotations

import platform
import subprocess


def cpu_name() -> str:
    """The CPU's model name (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """Short hash of HEAD, or '' outside a checkout."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
