"""The host tier's copy kernel (host_fetch.copy_units) under Triton's CPU interpreter (run by
test_triton_interpret.py with TRITON_INTERPRET=1; needs Triton).

Checks, for rows of 132, 584, 656 and 1152 bytes and units of 1 and 4 rows (rows aligned to 1 and
to the unit, the tier's page starts): every listed unit lands exactly where its list says, entries outside [bounds[lo], bounds[hi]) and entries with a
negative row copy nothing (the destination keeps its sentinel), with a persistent grid smaller
and larger than the unit count. Prints one line per case; exits 1 on the first mismatch.
"""

from __future__ import annotations

import sys

import torch

from executor.torch_executor.host_fetch import copy_units, tile_shape, words


def check(row_bytes: int, unit_rows: int, grid: int, row_align: int) -> None:
    gen = torch.Generator().manual_seed(row_bytes * 7 + unit_rows + grid)
    row_words = row_bytes // 4
    n_src_units, n_dst_units, n = 40, 30, 17
    src = torch.randint(-2**31, 2**31 - 1, (n_src_units * unit_rows, row_words), generator=gen, dtype=torch.int32)
    dst = torch.full((n_dst_units * unit_rows, row_words), -7, dtype=torch.int32)
    src_unit = torch.randperm(n_src_units, generator=gen)[:n]
    dst_unit = torch.randperm(n_dst_units, generator=gen)[:n]
    src_row, dst_row = src_unit * unit_rows, dst_unit * unit_rows
    src_row[3] = -1  # a skipped entry
    bounds = torch.tensor([0, 2, n - 1, n], dtype=torch.int64)  # copy entries [2, n-1)
    copy_units(words(src), words(dst), src_row, dst_row, bounds, 1, 2, unit_rows * row_words, row_words,
               max_units=n, row_align=row_align, grid=grid, backend="triton")
    want = torch.full_like(dst, -7)
    for i in range(2, n - 1):
        if src_row[i] >= 0:
            want[dst_row[i]:dst_row[i] + unit_rows] = src[src_row[i]:src_row[i] + unit_rows]
    ok = torch.equal(dst, want)
    print(f"row {row_bytes} B x {unit_rows} rows, grid {grid}, align {row_align}, tile {tile_shape(unit_rows * row_words)}: "
          f"{'ok' if ok else 'MISMATCH'}")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    for row_bytes in (132, 584, 656, 1152):
        for unit_rows in (1, 4):
            for grid in (1, 3, 64):
                check(row_bytes, unit_rows, grid, 1)
            check(row_bytes, unit_rows, 3, unit_rows)  # the tier's page starts: rows are multiples of a unit
