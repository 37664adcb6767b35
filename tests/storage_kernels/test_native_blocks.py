"""blocks_for_rows (io/blocks.c): the blocks a set of rows needs and where each row lands, against
``blocks_of_rows`` and ``block_positions`` (NumPy) on random rows of every shape, on both of its paths (the
dense table and, for rows far apart, NumPy's sort), and invalid rows."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from storage_kernels.arrays import DATA_ALIGN, blocks_of_rows
from trainer.features.base import block_positions


def _reference(rows: np.ndarray, base: int, row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    blocks = blocks_of_rows(rows, row_bytes, base, DATA_ALIGN)
    return blocks, block_positions(blocks, base + rows * row_bytes)


@pytest.mark.parametrize(("seed", "row_bytes", "base"), [(0, 512, 4096), (1, 700, 0), (2, 4096, 8192), (3, 9000, 4096),
                                                         (4, 4, 0), (5, 2800, 12288), (6, 5732, 4096)])
def test_matches_blocks_of_rows_and_block_positions(seed, row_bytes, base):
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, 5000, 800)  # repeats and any order
    got = kernels.blocks_for_rows(rows, base, row_bytes)
    assert _native.blocks_for_rows(rows=rows, base=base, row_bytes=row_bytes) is not None  # the C path ran
    for g, want in zip(got, _reference(rows, base, row_bytes), strict=True):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, want)


def test_rows_far_apart_take_numpy_and_agree():
    rows = np.array([3, 10**9, 7, 3], np.int64)  # a span of ~1.25e8 blocks for 4 rows: no dense table
    assert _native.blocks_for_rows(rows=rows, base=4096, row_bytes=512) is None
    for g, want in zip(kernels.blocks_for_rows(rows, 4096, 512), _reference(rows, 4096, 512), strict=True):
        np.testing.assert_array_equal(g, want)


def test_known_answer_and_edges():
    blocks, at = kernels.blocks_for_rows([9, 17, 8, 9], 0, 512)  # blocks 1 and 2
    np.testing.assert_array_equal(blocks, [1, 2])
    np.testing.assert_array_equal(at, [512, 4096 + 512, 0, 512])
    blocks, at = kernels.blocks_for_rows([1], 0, 3000)  # bytes 3000..5999: blocks 0 and 1
    np.testing.assert_array_equal(blocks, [0, 1])
    np.testing.assert_array_equal(at, [3000])
    blocks, at = kernels.blocks_for_rows([], 4096, 512)
    assert len(blocks) == 0 and len(at) == 0


def test_invalid_rows():
    with pytest.raises(IndexError, match=r"blocks_for_rows: 'rows' expected rows >= 0.*rows\[1\]=-2"):
        kernels.blocks_for_rows([0, -2], 0, 512)
    with pytest.raises(IndexError, match=r"rows\[0\]="):
        kernels.blocks_for_rows([2**62], 0, 512)  # its byte offset overflows
    with pytest.raises(ValueError, match="'row_bytes' expected >= 1"):
        kernels.blocks_for_rows([0], 0, 0)
