"""place_rows_at / gather_rows_at: known answers, NumPy references over dtypes/shapes/threads, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from tests.storage_kernels.reference import gather_rows_at_ref, place_rows_at_ref


def test_known_answer():
    rows = np.arange(6, dtype=np.float32).reshape(3, 2)  # 8-byte rows
    out = np.zeros(40, dtype=np.uint8)
    assert _native.place_rows_at(rows=rows, offsets=np.array([0, 8, 24]), out=out) is None
    np.testing.assert_array_equal(out.view(np.float32), [0, 1, 2, 3, 0, 0, 4, 5, 0, 0])
    back = kernels.gather_rows_at(out, [24, 0, 24], np.empty((3, 2), np.float32))
    np.testing.assert_array_equal(back, [[4, 5], [0, 1], [4, 5]])


def _random_offsets(rng: np.random.Generator, k: int, row_bytes: int, gap: int) -> np.ndarray:
    """Ascending, non-overlapping byte offsets with random gaps (unaligned ones included)."""
    return np.cumsum(row_bytes + rng.integers(0, gap + 1, k)) - row_bytes


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.int64, np.float64])
@pytest.mark.parametrize("seed,k,dim", [(0, 1, 1), (1, 200, 7), (2, 50, 0), (3, 0, 4), (4, 300, 33)])
def test_matches_reference(dtype, seed, k, dim):
    rng = np.random.default_rng(seed)
    rows = (rng.standard_normal((k, dim)) * 100).astype(dtype)
    row_bytes = rows.dtype.itemsize * dim
    offsets = _random_offsets(rng, k, row_bytes, gap=13)
    size = int(offsets[-1]) + row_bytes + 5 if k else 8
    for threads in (1, 3):
        got = kernels.place_rows_at(rows, offsets, np.full(size, 7, np.uint8), num_threads=threads)
        want = place_rows_at_ref(rows, offsets, np.full(size, 7, np.uint8))
        np.testing.assert_array_equal(got, want)  # bytes between rows untouched
        reads = rng.permutation(np.repeat(offsets, 2))  # any order, repeats
        out = kernels.gather_rows_at(got, reads, np.empty((len(reads), dim), dtype), num_threads=threads)
        np.testing.assert_array_equal(out.view(np.uint8), gather_rows_at_ref(got, reads, dtype, dim).view(np.uint8))


def test_many_threads_on_large_rows():
    rng = np.random.default_rng(5)
    rows = rng.standard_normal((4000, 700)).astype(np.float32)  # 2800-byte rows, 11 MiB: several threads engage
    offsets = np.arange(4000, dtype=np.int64) * 4096 + rng.integers(0, 1296, 4000)
    buf = np.zeros(4000 * 4096, np.uint8)
    want = place_rows_at_ref(rows, offsets, np.zeros_like(buf))
    for threads in (1, 2, 4, 0):
        np.testing.assert_array_equal(kernels.place_rows_at(rows, offsets, buf.copy(), num_threads=threads), want)
        np.testing.assert_array_equal(kernels.gather_rows_at(want, offsets, np.empty_like(rows), num_threads=threads),
                                      rows)


def test_invalid_inputs_raise_before_writing():
    rows = np.ones((3, 2), np.float32)
    out = np.zeros(32, np.uint8)
    with pytest.raises(IndexError, match=r"'offsets' expected byte offsets in \[0, 24\] .* \(got offsets\[2\]=25\)"):
        kernels.place_rows_at(rows, [0, 8, 25], out)
    with pytest.raises(ValueError, match=r"ascending rows that do not overlap .* \(got offsets\[1\]=4 after 0\)"):
        kernels.place_rows_at(rows, [0, 4, 16], out)
    with pytest.raises(IndexError, match=r"offsets\[0\]=-1"):
        kernels.gather_rows_at(out, [-1, 0, 0], np.empty((3, 2), np.float32))
    assert not out.any()  # nothing was written
    with pytest.raises(ValueError, match="'offsets' expected length 3"):
        kernels.place_rows_at(rows, [0, 8], out)
    with pytest.raises(ValueError, match="'out'"):
        kernels.place_rows_at(rows, [0, 8, 16], np.zeros(32, np.int32))  # out must be uint8 bytes
    with pytest.raises(ValueError, match="'src'"):
        kernels.gather_rows_at(np.zeros(32, np.float32), [0], np.empty((1, 2), np.float32))
    with pytest.raises(ValueError, match="'out'"):
        kernels.gather_rows_at(out, [0, 8], np.empty((2, 4), np.float32)[:, ::2])  # not C-contiguous
