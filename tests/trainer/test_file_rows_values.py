"""``read_values``: rows of a float32 or float16 feature file (odd widths padded) as float32 values, read with
aligned block reads, equal to the memory map's rows."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels.arrays import ArrayWriter
from storage_kernels.halfwords import encode_rows, file_columns, file_dtype
from trainer.features.file import read_values


@pytest.mark.parametrize(("dtype", "dim"), [("float32", 7), ("float16", 1), ("float16", 6), ("float16", 33)])
def test_read_values_equals_the_rows_of_the_file(tmp_path, dtype, dim):
    rng = np.random.default_rng(dim)
    values = rng.normal(size=(5000, dim)).astype(np.float32)
    path = tmp_path / "features.npy"
    writer = ArrayWriter(path, file_dtype(dtype), (file_columns(dim, dtype),))
    writer.append(encode_rows(values, dtype))
    writer.close()
    ids = rng.integers(0, 5000, 700)  # scattered, unsorted, repeated
    want = values[ids].astype(np.float16).astype(np.float32) if dtype == "float16" else values[ids]
    got = read_values(path, ids, dim)
    assert got.dtype == np.float32 and got.shape == (700, dim)
    np.testing.assert_array_equal(got, want)
