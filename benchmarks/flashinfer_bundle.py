"""FlashInfer for a machine with nvcc but no package registry: a trimmed bundle, and its install.

    python benchmarks/flashinfer_bundle.py build --wheel flashinfer_python-0.7.2-py3-none-any.whl \\
        --out .scratch/fi/flashinfer-0.7.2-bundle.tar.gz          # here, from the downloaded wheel
    python3 benchmarks/flashinfer_bundle.py install --bundle <tar.gz> --wheels <dir> --target /tmp/site
        # there: unpack, pip-install the dependency wheels beside it (no index), check the import

The 62 MB wheel is mostly sources and headers for kernels the executor never builds. The bundle
keeps what importing `flashinfer.mla` and the JIT build of `batch_mla_sm90` (the FA3 MLA decode)
read: the Python package (its .py, .json, .typed files), `data/include`, `data/cutlass`,
`data/cccl`, `data/spdlog`, and from `data/csrc` the top-level headers and templates plus
`batch_mla_*.cu` (no subfolders); about 21.5 MB as a tar.gz, within what travels to a lent GPU.
The dependency wheels: apache-tvm-ffi for the interpreter there (cp312 manylinux x86_64 on the
H200 image: `pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
--platform manylinux_2_28_x86_64 apache-tvm-ffi==0.1.15.post2`); the image already has torch,
ninja, numpy, einops, requests, tabulate, tqdm, nvidia-ml-py, packaging and cuda-bindings.
Set FLASHINFER_WORKSPACE_BASE to a writable folder there: the JIT cache goes under it (~20 s for
the first build of batch_mla_sm90 on an H200). The bundle stays out of git (.scratch/ is ignored).
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import zipfile

KEEP_DATA = ("flashinfer/data/include/", "flashinfer/data/cutlass/", "flashinfer/data/cccl/", "flashinfer/data/spdlog/")
CSRC = "flashinfer/data/csrc/"
PY_SUFFIXES = (".py", ".json", ".typed")
TEMPLATE_SUFFIXES = (".h", ".cuh", ".jinja", ".inc")


def keep(name: str) -> bool:
    """Whether a wheel member goes into the bundle."""
    if name.startswith("flashinfer_python-") and ".dist-info/" in name:
        return True  # importlib.metadata reads the version
    if not name.startswith("flashinfer/") or name.endswith("/"):
        return False
    if name.startswith(KEEP_DATA):
        return True
    if name.startswith(CSRC):
        rest = name[len(CSRC):]
        return "/" not in rest and (rest.endswith(TEMPLATE_SUFFIXES) or (rest.startswith("batch_mla_")
                                                                         and rest.endswith(".cu")))
    if name.startswith("flashinfer/data/"):
        return False
    return name.endswith(PY_SUFFIXES)


def build(wheel: str, out: str) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    n = size = 0
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:gz") as tar:
        for info in z.infolist():
            if keep(info.filename):
                data = z.read(info)
                ti = tarfile.TarInfo(info.filename)
                ti.size, ti.mode = len(data), 0o644
                tar.addfile(ti, io.BytesIO(data))
                n, size = n + 1, size + len(data)
    print(f"{out}: {n} files, {size / 2**20:.1f} MiB unpacked, {os.path.getsize(out) / 2**20:.1f} MiB packed")


def install(bundle: str, wheels: str, target: str) -> None:
    os.makedirs(target, exist_ok=True)
    with tarfile.open(bundle) as tar:
        tar.extractall(target, filter="data")
    whl = sorted(os.path.join(wheels, f) for f in os.listdir(wheels) if f.endswith(".whl"))
    if whl:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--upgrade", "--target", target, *whl], check=True)
    check = f"import sys; sys.path.insert(0, {target!r}); import flashinfer.mla as m; print(m.__name__, 'ok')"
    subprocess.run([sys.executable, "-c", check], check=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build")
    b.add_argument("--wheel", required=True)
    b.add_argument("--out", required=True)
    i = sub.add_parser("install")
    i.add_argument("--bundle", required=True)
    i.add_argument("--wheels", required=True, help="folder of dependency wheels to install beside it")
    i.add_argument("--target", required=True)
    a = ap.parse_args()
    if a.cmd == "build":
        build(a.wheel, a.out)
    else:
        install(a.bundle, a.wheels, a.target)


if __name__ == "__main__":
    main()
