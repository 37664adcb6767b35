"""gather_rows: known answer, NumPy reference over dtypes/shapes/threads, memmaps, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from tests.storage_kernels.reference import gather_rows_ref


def test_known_answer():
    src = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = kernels.gather_rows(src, [3, 0, 3])
    np.testing.assert_array_equal(out, [[9, 10, 11], [0, 1, 2], [9, 10, 11]])
    buf = np.zeros((2, 3), dtype=np.float32)
    assert _native.gather_rows(src, np.array([1, 2]), buf) is None
    np.testing.assert_array_equal(buf, [[3, 4, 5], [6, 7, 8]])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.uint16, np.int64, np.complex128])
@pytest.mark.parametrize("seed,num_rows,dim,k", [(0, 1, 1, 5), (1, 100, 7, 300), (2, 50, 0, 10), (3, 10, 3, 0)])
def test_matches_reference(dtype, seed, num_rows, dim, k):
    rng = np.random.default_rng(seed)
    src = (rng.standard_normal((num_rows, dim)) * 100).astype(dtype)
    idx = rng.integers(0, num_rows, k)
    for threads in (1, 3):
        np.testing.assert_array_equal(kernels.gather_rows(src, idx, num_threads=threads), gather_rows_ref(src, idx))


def test_many_threads_on_large_gather():
    rng = np.random.default_rng(4)
    src = rng.standard_normal((20_000, 64)).astype(np.float32)  # 16 MiB of output: several threads engage
    idx = rng.integers(0, 20_000, 65_536)
    outs = [kernels.gather_rows(src, idx, num_threads=t) for t in (1, 2, 4, 0)]
    for out in outs:
        np.testing.assert_array_equal(out, gather_rows_ref(src, idx))


def test_from_memmap(tmp_path):
    rng = np.random.default_rng(5)
    data = rng.standard_normal((500, 16)).astype(np.float32)
    np.save(tmp_path / "f.npy", data)
    src = np.load(tmp_path / "f.npy", mmap_mode="r")
    idx = rng.integers(0, 500, 1000)
    np.testing.assert_array_equal(kernels.gather_rows(src, idx), data[idx])


def test_non_contiguous_src_is_normalised():
    src = np.arange(40, dtype=np.int32).reshape(10, 4)[:, ::2]
    np.testing.assert_array_equal(kernels.gather_rows(src, [9, 1]), src[[9, 1]])


def test_bad_ids_index_error_and_out_untouched():
    src = np.arange(12, dtype=np.float32).reshape(4, 3)
    out = np.full((3, 3), -1, dtype=np.float32)
    with pytest.raises(IndexError, match=r"'idx' expected row ids in \[0, 4\) \(got idx\[2\]=4\)"):
        kernels.gather_rows(src, [0, 1, 4], out)
    with pytest.raises(IndexError, match=r"idx\[1\]=-1"):
        kernels.gather_rows(src, [0, -1, 2], out)
    np.testing.assert_array_equal(out, -1)


def test_value_errors():
    src = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(ValueError, match=r"'out' expected shape \(2, 3\) \(got \(2, 4\)\)"):
        kernels.gather_rows(src, [0, 1], np.zeros((2, 4), np.float32))
    with pytest.raises(ValueError, match="'out' expected the element type of 'src' \\('f'\\) \\(got 'd'\\)"):
        kernels.gather_rows(src, [0, 1], np.zeros((2, 3), np.float64))
    with pytest.raises(ValueError, match="'out' expected a writable C-contiguous 2-D array"):
        kernels.gather_rows(src, [0, 1], np.zeros((3, 2), np.float32).T)
    readonly = np.zeros((2, 3), np.float32)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.gather_rows(src, [0, 1], readonly)
    with pytest.raises(ValueError, match="'src' expected a C-contiguous 2-D array"):
        _native.gather_rows(src.ravel(), np.array([0]), np.zeros((1, 3), np.float32))
    with pytest.raises(ValueError, match="'idx' expected an integer array"):
        kernels.gather_rows(src, [0.0])
