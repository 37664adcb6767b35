"""prefetch_rows: the pages of a CSR's rows asked for ahead (madvise WILLNEED), counted against a NumPy
reference of the pages those rows span, in memory, on a file map, and past 2**32 entries of a sparse map."""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import random_graph
from tests.storage_kernels.wide import PAST_UINT32, allocated_bytes, sparse_maker

PAGE = mmap.PAGESIZE


def pages_ref(indptr: np.ndarray, indices: np.ndarray, rows) -> int:
    """Distinct pages of ``indptr`` holding ``indptr[r]``, ``indptr[r + 1]``, plus distinct pages of ``indices``
    holding rows ``r``'s entries, for every ``r`` in ``rows``."""
    rows = np.asarray(rows, dtype=np.int64)
    ip, ix, item = indptr.ctypes.data, indices.ctypes.data, indices.itemsize
    offsets = {(ip + int(r) * 8) // PAGE for r in rows} | {(ip + (int(r) + 1) * 8) // PAGE for r in rows}
    entries: set[int] = set()
    for r in rows.tolist():
        a, b = int(indptr[r]), int(indptr[r + 1])
        if b > a:
            entries.update(range((ix + a * item) // PAGE, (ix + b * item - 1) // PAGE + 1))
    return len(offsets) + len(entries)


@pytest.fixture
def sparse(tmp_path):
    yield from sparse_maker(tmp_path)


@pytest.mark.parametrize("deg", [0, 3, 700])  # no entries; a few a row; rows spanning pages
def test_counts_the_pages_of_the_rows(deg):
    indptr, indices = random_graph(3000, deg, seed=deg)
    rng = np.random.default_rng(1)
    for rows in (np.arange(3000), rng.integers(0, 3000, 50), rng.integers(0, 3000, 50)[::-1], [7, 7, 7], []):
        assert kernels.prefetch_rows(indptr, indices, rows) == pages_ref(indptr, indices, rows)


def test_a_file_map_is_advised_and_left_unchanged(tmp_path):
    indptr, indices = random_graph(5000, 40, seed=3)
    np.save(tmp_path / "indptr.npy", indptr)
    np.save(tmp_path / "indices.npy", indices)
    ptr_map = np.load(tmp_path / "indptr.npy", mmap_mode="r")
    idx_map = np.load(tmp_path / "indices.npy", mmap_mode="r")
    rows = np.random.default_rng(2).integers(0, 5000, 300)
    assert kernels.prefetch_rows(ptr_map, idx_map, rows) == pages_ref(np.asarray(ptr_map), np.asarray(idx_map), rows)
    np.testing.assert_array_equal(idx_map, indices)


def test_rows_past_4_gib_of_entries_read_only_their_pages(sparse):
    small_ptr, small_idx = random_graph(64, 6, seed=11)
    big = sparse("indices.bin", np.int64, PAST_UINT32 + len(small_idx))
    big[PAST_UINT32:] = small_idx
    big.flush()
    before = allocated_bytes(Path(big.filename))
    indptr = small_ptr + PAST_UINT32
    rows = [0, 5, 63, 17]
    got = kernels.prefetch_rows(indptr, big, rows)
    assert got == pages_ref(indptr, big, rows)
    assert allocated_bytes(Path(big.filename)) == before  # the hole was not read into blocks


def test_bad_rows_and_offsets_are_named():
    indptr, indices = np.array([0, 2, 4, 7, 8]), np.array([1, 2, 0, 2, 0, 1, 3, 2])
    with pytest.raises(IndexError, match=r"'rows' expected row ids in \[0, 4\) \(got rows\[1\]=4\)"):
        kernels.prefetch_rows(indptr, indices, [0, 4])
    with pytest.raises(IndexError, match=r"got rows\[0\]=-1"):
        kernels.prefetch_rows(indptr, indices, [-1])
    with pytest.raises(ValueError, match=r"'indptr' expected ascending offsets within len\(indices\)=8 "
                                         r"\(got row 1: \[4, 2\)\)"):
        kernels.prefetch_rows(np.array([0, 4, 2, 7, 8]), indices, [0, 1])
    with pytest.raises(ValueError, match=r"got row 3: \[7, 9\)"):
        kernels.prefetch_rows(np.array([0, 2, 4, 7, 9]), indices, [3])
    with pytest.raises(ValueError, match="'indptr' expected a 1-D int64 array"):
        kernels.prefetch_rows(indptr.astype(np.int32), indices, [0])
