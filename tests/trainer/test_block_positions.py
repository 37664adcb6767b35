"""Where rows land in a buffer of aligned blocks read back to back: ``kernels.rows_in_blocks`` (the segment
window's lookup) answers exactly when every block of every row was read (and then as ``block_positions`` does),
and None otherwise -- rows of
one block, rows straddling two, rows of several blocks, against a membership test computed independently."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, blocks_of_rows
from trainer.features.base import block_positions


@pytest.mark.parametrize("row_bytes", [96, 512, 4096, 5732, 13000])
@pytest.mark.parametrize("seed", range(4))
def test_rows_in_blocks_equals_membership_and_block_positions(row_bytes: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    offset = DATA_ALIGN * int(rng.integers(0, 3))
    rows = np.unique(rng.integers(0, 400, 60))
    all_blocks = blocks_of_rows(rows, row_bytes, offset)
    for drop in (0, 1, 3):  # read every block, or all but a few
        blocks = np.sort(rng.permutation(all_blocks)[drop:]) if drop else all_blocks
        row_off = offset + rows * row_bytes
        got = kernels.rows_in_blocks(blocks, rows, offset, row_bytes)
        covered = all(np.isin(blocks_of_rows(np.array([r]), row_bytes, offset), blocks).all() for r in rows)
        if not covered:
            assert got is None
            continue
        assert got is not None and np.array_equal(got, block_positions(blocks, row_off))
        # and each row's bytes are where it says: blocks read back to back, the row's first byte found
        buffer_block = got // DATA_ALIGN
        assert np.array_equal(blocks[buffer_block], row_off // DATA_ALIGN)


def test_rows_in_blocks_of_no_rows_and_past_the_last_block() -> None:
    assert len(kernels.rows_in_blocks(np.array([3, 4]), np.empty(0, np.int64), 0, 100)) == 0
    assert kernels.rows_in_blocks(np.array([3]), np.array([0]), 3 * DATA_ALIGN + 4090, 100) is None  # block 4 too
    assert kernels.rows_in_blocks(np.array([5]), np.array([0]), 9 * DATA_ALIGN, 100) is None  # beyond every block
