"""Sparse files for the 64-bit tests: byte positions, offsets and ids past 2**31 and 2**32 without the bytes.

A file truncated to a size costs no disk until written (the filesystem keeps holes), and a memory map of it
costs no memory until a page is touched: a kernel handed a 32 GiB map of int64 ``indices`` and asked about a
few rows at its end reads (and the test writes) a handful of pages. So each test builds the shape of a
papers100M-scale input -- a CSR past 2**32 entries, a feature file past 4 GiB, node ids past 2**31 -- and
checks a kernel against a NumPy reference or against the same call at small offsets, in milliseconds.

Only kernels that read what they are told to read can be tested so: one that validates every entry of an
array (``sk_check_csr`` over all of ``indices``) would read the whole hole, so those are left to the review.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

#: Positions that 32-bit arithmetic gets wrong: past the int32 limit, past the uint32 limit, and the row and
#: byte counts built from them.
PAST_INT32 = (1 << 31) + 24_576
PAST_UINT32 = (1 << 32) + 40_960

SparseMaker = Callable[..., np.memmap]


def sparse_maker(tmp_path: Path) -> Iterator[SparseMaker]:
    """Body of a test module's ``sparse`` fixture: yields ``make(name, dtype, shape)``, a zero-filled writable
    memmap over a sparse file of that shape under ``tmp_path`` (its pages are only those written), and removes
    the files after the test."""
    made: list[Path] = []

    def make(name: str, dtype, shape) -> np.memmap:
        path = tmp_path / name
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        with open(path, "wb") as f:
            f.truncate(nbytes)  # a hole: no block is allocated
        made.append(path)
        return np.memmap(path, dtype=dtype, mode="r+", shape=shape)

    yield make
    for path in made:
        path.unlink(missing_ok=True)


def allocated_bytes(path: Path) -> int:
    """Disk actually allocated to ``path`` (512-byte units of ``st_blocks``): proof a test stayed sparse."""
    return path.stat().st_blocks * 512
