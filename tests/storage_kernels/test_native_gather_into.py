"""gather_rows_into / gather_rows_at_into: known answers, NumPy references over dtypes, shapes and thread
counts (random positions, repeated sources, empty inputs), and invalid inputs raising before any write."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from tests.storage_kernels.reference_gather_into import gather_rows_at_into_ref, gather_rows_into_ref

# the dtypes the feature tiers move: float32 rows, float16 files' 4-byte words; and a few others
DTYPES = [np.float32, np.float16, np.uint8, np.int64, np.float64]


def test_known_answer():
    src = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = np.full((5, 2), -1, np.float32)
    assert _native.gather_rows_into(src=src, idx=np.array([3, 0, 3]), out=out, pos=np.array([4, 0, 2])) is None
    np.testing.assert_array_equal(out, [[0, 1], [-1, -1], [6, 7], [-1, -1], [6, 7]])  # other rows untouched
    raw = src.view(np.uint8).ravel()  # 8-byte rows at offsets 0, 8, 16, 24; any byte offset is allowed
    back = kernels.gather_rows_at_into(raw, [24, 4], np.zeros((3, 2), np.float32), [1, 2])
    np.testing.assert_array_equal(back, [[0, 0], [6, 7], [1, 2]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed,n_src,k,extra,dim", [(0, 1, 1, 0, 1), (1, 50, 200, 0, 7), (2, 30, 20, 15, 0),
                                                    (3, 5, 0, 4, 4), (4, 400, 300, 100, 33), (5, 0, 0, 0, 3)])
def test_matches_reference(dtype, seed, n_src, k, extra, dim):
    rng = np.random.default_rng(seed)
    src = (rng.standard_normal((n_src, dim)) * 100).astype(dtype)
    idx = rng.integers(0, max(n_src, 1), k) if n_src else np.empty(0, np.int64)  # repeats allowed
    pos = rng.permutation(k + extra)[:k]  # distinct rows of out, any order; `extra` rows stay untouched
    raw = src.view(np.uint8).ravel()
    row_bytes = src.dtype.itemsize * dim
    offsets = idx * row_bytes  # the row starts of src (unaligned starts: test_unaligned_byte_offsets)
    for threads in (1, 3, 0):
        fill = np.full((k + extra, dim), 7, dtype)
        got = kernels.gather_rows_into(src, idx, fill.copy(), pos, num_threads=threads)
        want = gather_rows_into_ref(src, idx, fill.copy(), pos)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
        got_at = kernels.gather_rows_at_into(raw, offsets, fill.copy(), pos, num_threads=threads)
        want_at = gather_rows_at_into_ref(raw, offsets, fill.copy(), pos)
        np.testing.assert_array_equal(got_at.view(np.uint8), want_at.view(np.uint8))
        if row_bytes:
            np.testing.assert_array_equal(got_at.view(np.uint8), want.view(np.uint8))  # same rows both ways


def test_unaligned_byte_offsets():
    rng = np.random.default_rng(6)
    buf = rng.integers(0, 256, 1000, dtype=np.uint8)
    offsets = rng.integers(0, 1000 - 12, 40)  # 12-byte rows at any byte
    pos = rng.permutation(64)[:40]
    got = kernels.gather_rows_at_into(buf, offsets, np.zeros((64, 3), np.float32), pos, num_threads=2)
    np.testing.assert_array_equal(got, gather_rows_at_into_ref(buf, offsets, np.zeros((64, 3), np.float32), pos))


def test_many_threads_on_large_rows():
    rng = np.random.default_rng(7)
    src = rng.standard_normal((3000, 700)).astype(np.float32)  # 8 MiB of rows: several threads engage
    idx = rng.integers(0, 3000, 5000)
    pos = rng.permutation(6000)[:5000]
    want = gather_rows_into_ref(src, idx, np.zeros((6000, 700), np.float32), pos)
    raw = src.view(np.uint8).ravel()
    for threads in (1, 2, 4, 0):
        np.testing.assert_array_equal(
            kernels.gather_rows_into(src, idx, np.zeros((6000, 700), np.float32), pos, num_threads=threads), want)
        np.testing.assert_array_equal(
            kernels.gather_rows_at_into(raw, idx * 2800, np.zeros((6000, 700), np.float32), pos, num_threads=threads),
            want)


def test_invalid_inputs_raise_before_writing():
    src = np.ones((4, 2), np.float32)
    raw = src.view(np.uint8).ravel()  # 32 bytes
    out = np.zeros((3, 2), np.float32)
    with pytest.raises(IndexError, match=r"gather_rows_into: 'idx' expected row ids in \[0, 4\) \(got idx\[1\]=4\)"):
        kernels.gather_rows_into(src, [0, 4], out, [0, 1])
    with pytest.raises(IndexError, match=r"'idx' expected row ids in \[0, 4\) \(got idx\[0\]=-1\)"):
        kernels.gather_rows_into(src, [-1], out, [0])
    with pytest.raises(IndexError, match=r"'pos' expected rows of 'out' in \[0, 3\) \(got pos\[1\]=3\)"):
        kernels.gather_rows_into(src, [0, 1], out, [0, 3])
    with pytest.raises(IndexError, match=r"'pos' expected rows of 'out' in \[0, 3\) \(got pos\[0\]=-2\)"):
        kernels.gather_rows_at_into(raw, [0], out, [-2])
    with pytest.raises(ValueError, match=r"'pos' expected distinct rows of 'out' \(got pos\[2\]=1 again\)"):
        kernels.gather_rows_into(src, [0, 1, 2], out, [1, 0, 1])
    with pytest.raises(ValueError, match=r"gather_rows_at_into: 'pos' expected distinct rows"):
        kernels.gather_rows_at_into(raw, [0, 8], out, [2, 2])
    with pytest.raises(IndexError, match=r"'offsets' expected byte offsets in \[0, 24\] .* \(got offsets\[1\]=25\)"):
        kernels.gather_rows_at_into(raw, [0, 25], out, [0, 1])
    with pytest.raises(IndexError, match=r"offsets\[0\]=-1"):
        kernels.gather_rows_at_into(raw, [-1], out, [0])
    assert not out.any()  # nothing was written by any of them
    with pytest.raises(ValueError, match="'pos' expected length 2"):
        kernels.gather_rows_into(src, [0, 1], out, [0])
    with pytest.raises(ValueError, match="'out' expected 2 columns like 'src'"):
        kernels.gather_rows_into(src, [0], np.zeros((1, 3), np.float32), [0])
    with pytest.raises(ValueError, match="'out'"):
        kernels.gather_rows_into(src, [0], np.zeros((1, 2), np.float64), [0])  # another dtype
    with pytest.raises(ValueError, match="'out'"):
        kernels.gather_rows_into(src, [0], np.zeros((2, 4), np.float32)[:, ::2], [0])  # not C-contiguous
    with pytest.raises(ValueError, match="'src'"):
        kernels.gather_rows_at_into(np.zeros(32, np.float32), [0], out, [0])  # src must be uint8 bytes
    with pytest.raises(ValueError, match="'pos'"):
        kernels.gather_rows_into(src, [0], out, [0.5])  # not integer
    with pytest.raises(ValueError, match="num_threads"):
        kernels.gather_rows_into(src, [0], out, [0], num_threads=-1)

