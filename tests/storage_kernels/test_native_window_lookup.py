"""window_split, rows_in_blocks and window_update (cache/window_lookup.c): the segment window's per-batch
bookkeeping against its NumPy references on random inputs (rows spanning blocks, missing blocks, off-schedule
entries), known answers and invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.arrays import blocks_of_rows
from tests.storage_kernels.reference_window import rows_in_blocks_ref, window_split_ref, window_update_ref


def _tables(rng: np.random.Generator, num_rows: int, buffer_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """A consistent window: ``buffer_rows`` slots, some holding distinct rows."""
    row_slot = np.full(num_rows, -1, np.int64)
    slot_row = np.full(buffer_rows, -1, np.int64)
    held = rng.choice(num_rows, int(rng.integers(0, min(num_rows, buffer_rows) + 1)), replace=False)
    slots = rng.choice(buffer_rows, len(held), replace=False)
    row_slot[held], slot_row[slots] = slots, held
    return row_slot, slot_row


@pytest.mark.parametrize("seed", range(6))
def test_window_split_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    row_slot, _ = _tables(rng, 500, 120)
    slots = rng.choice(500, int(rng.integers(0, 300)), replace=False)
    pos = rng.permutation(1000)[: len(slots)]
    got = kernels.window_split(slots, pos, row_slot)
    for g, want in zip(got, window_split_ref(slots, pos, row_slot), strict=True):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, want)


@pytest.mark.parametrize(("seed", "row_bytes", "base"), [(0, 512, 0), (1, 700, 4096 * 3), (2, 4096, 8192),
                                                         (3, 9000, 0), (4, 4, 4096), (5, 2800, 12288)])
def test_rows_in_blocks_matches_the_reference(seed, row_bytes, base):
    rng = np.random.default_rng(seed)
    rows = rng.choice(400, 60, replace=False)
    blocks = blocks_of_rows(rows, row_bytes, base, 4096)  # every block of every row
    np.testing.assert_array_equal(kernels.rows_in_blocks(blocks, rows, base, row_bytes),
                                  rows_in_blocks_ref(blocks, rows, base, row_bytes))
    extra = np.union1d(blocks, rng.integers(0, blocks.max() + 5, 30))  # unneeded blocks between: positions shift
    np.testing.assert_array_equal(kernels.rows_in_blocks(extra, rows, base, row_bytes),
                                  rows_in_blocks_ref(extra, rows, base, row_bytes))
    for drop in rng.choice(len(blocks), min(5, len(blocks)), replace=False):  # a needed block missing: None
        partial = np.delete(blocks, drop)
        assert kernels.rows_in_blocks(partial, rows, base, row_bytes) is None
        assert rows_in_blocks_ref(partial, rows, base, row_bytes) is None


def test_rows_in_blocks_known_answer_and_edges():
    # 512-byte rows: row 9 is in block 1, row 17 in block 2; blocks [1, 2] land at 0 and 4096
    np.testing.assert_array_equal(kernels.rows_in_blocks([1, 2], [9, 17, 8], 0, 512), [512, 4096 + 512, 0])
    assert kernels.rows_in_blocks([1, 2], [0], 0, 512) is None  # block 0 not read
    # blocks spread far apart: looked up by binary search instead of a dense table, the same answers
    np.testing.assert_array_equal(kernels.rows_in_blocks([1, 2, 10**9], [9, 17, 8], 0, 512), [512, 4096 + 512, 0])
    np.testing.assert_array_equal(kernels.rows_in_blocks([1, 2, 10**9], [10**9 * 8 + 1], 0, 512), [2 * 4096 + 512])
    assert kernels.rows_in_blocks([1, 2, 10**9], [0], 0, 512) is None
    assert kernels.rows_in_blocks([1, 2, 10**9], [10**9 * 8 + 8], 0, 512) is None  # past the last block
    assert kernels.rows_in_blocks([5], [7], 0, 4096) is None  # row 7 is block 7
    # a row across two blocks needs both, consecutive in the buffer
    np.testing.assert_array_equal(kernels.rows_in_blocks([0, 1], [1], 0, 3000), [3000])
    assert kernels.rows_in_blocks([0, 2], [1], 0, 3000) is None
    assert len(kernels.rows_in_blocks([], [], 0, 512)) == 0
    assert kernels.rows_in_blocks([], [3], 0, 512) is None


@pytest.mark.parametrize("seed", range(8))
def test_window_update_matches_the_reference(seed):
    rng = np.random.default_rng(seed)
    row_slot, slot_row = _tables(rng, 300, 64)
    held = np.flatnonzero(row_slot >= 0)
    out_rows = rng.choice(held, int(rng.integers(0, len(held) + 1)), replace=False) if len(held) else held
    in_rows = rng.choice(300, int(rng.integers(0, 40)), replace=False)  # some still held: off schedule
    in_slots = rng.choice(64, len(in_rows), replace=False)
    want_rs, want_sr = row_slot.copy(), slot_row.copy()
    window_update_ref(want_rs, want_sr, out_rows, in_rows, in_slots)
    kernels.window_update(row_slot, slot_row, out_rows, in_rows, in_slots)
    np.testing.assert_array_equal(row_slot, want_rs)
    np.testing.assert_array_equal(slot_row, want_sr)
    # the tables stay each other's inverse: no row in two slots, no stale slot
    held = np.flatnonzero(row_slot >= 0)
    np.testing.assert_array_equal(slot_row[row_slot[held]], held)
    assert np.count_nonzero(slot_row >= 0) == len(held)


def test_a_row_entering_again_frees_its_old_slot():
    row_slot = np.array([-1, 0, -1], np.int64)  # row 1 held in slot 0
    slot_row = np.array([1, -1], np.int64)
    kernels.window_update(row_slot, slot_row, [], [1], [1])  # row 1 enters slot 1 (off schedule)
    np.testing.assert_array_equal(row_slot, [-1, 1, -1])
    np.testing.assert_array_equal(slot_row, [-1, 1])


def test_invalid_inputs_name_the_entry_and_change_nothing():
    row_slot, slot_row = np.array([0, -1, -1], np.int64), np.array([0, -1], np.int64)
    with pytest.raises(IndexError, match=r"window_split: 'slots' expected rows of the segment cache in \[0, 3\) "
                                         r"\(got slots\[1\]=3\)"):
        kernels.window_split([0, 3], [0, 1], row_slot)
    with pytest.raises(ValueError, match="'pos' expected length 2"):
        kernels.window_split([0, 1], [0], row_slot)
    with pytest.raises(ValueError, match=r"'blocks' expected ascending distinct block numbers \(got blocks\[1\]=1 "
                                         r"after 1\)"):
        kernels.rows_in_blocks([1, 1], [0], 0, 512)
    with pytest.raises(IndexError, match=r"'rows' expected rows >= 0.*rows\[0\]=-1"):
        kernels.rows_in_blocks([0], [-1], 0, 512)
    with pytest.raises(ValueError, match="'row_bytes' expected >= 1"):
        kernels.rows_in_blocks([0], [0], 0, 0)
    for args, match in ((([5], [], []), r"'out_rows' expected .* \(got out_rows\[0\]=5\)"),
                        (([], [1, 7], [0, 1]), r"'in_rows' expected .* \(got in_rows\[1\]=7\)"),
                        (([], [1], [2]), r"'in_slots' expected buffer slots in \[0, 2\) \(got in_slots\[0\]=2\)")):
        rs, sr = row_slot.copy(), slot_row.copy()
        with pytest.raises(IndexError, match=match):
            kernels.window_update(rs, sr, *args)
        np.testing.assert_array_equal(rs, row_slot)
        np.testing.assert_array_equal(sr, slot_row)
    with pytest.raises(ValueError, match="'in_slots' expected length 1"):
        kernels.window_update(row_slot.copy(), slot_row.copy(), [], [1], [])
