"""window_schedule: known answer, the Python reference on random traces (rows spanning blocks included), replay
of the changes (every needed row is in the buffer or in a block read, the buffer never exceeds its bound, each
block read at most once with a buffer that holds the whole segment), buffer 0 = every batch's own blocks
(the unbuffered reader), and invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.arrays import blocks_of_rows
from tests.storage_kernels.reference_window import row_blocks, window_schedule_ref


def _trace(batches: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batches], out=ptr[1:])
    rows = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches]) if batches else np.empty(0, np.int64)
    return ptr, rows


def _random_batches(rng: np.random.Generator, num_rows: int, steps: int, size: int) -> list[np.ndarray]:
    """Batches with a skewed row popularity (and an occasional duplicate row)."""
    weights = 1.0 / np.arange(1, num_rows + 1) ** 0.8
    weights /= weights.sum()
    out = []
    for _ in range(steps):
        n = int(rng.integers(0, min(size, num_rows) + 1))
        batch = rng.choice(num_rows, n, replace=False, p=weights)
        out.append(np.concatenate([batch, batch[:1]]) if n and rng.random() < 0.2 else batch)
    return out


def test_known_answer():
    # 8 rows of 512 bytes per block; K = 2; batches [0 9] [0 1] [9]
    got = kernels.window_schedule(*_trace([np.array([0, 9]), np.array([0, 1]), np.array([9])]), num_rows=16,
                                  row_bytes=512, buffer_rows=2)
    np.testing.assert_array_equal(got.read_ptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(got.read_blocks, [0, 1, 1])  # block 1 again: row 1 (a neighbour) beat row 9
    np.testing.assert_array_equal(got.in_rows, [0, 1])  # both next used at iteration 1, row 9 only at 2
    np.testing.assert_array_equal(got.in_slots, [0, 1])
    np.testing.assert_array_equal(got.hits, [0, 2, 0])
    np.testing.assert_array_equal(got.out_rows, [0, 1])  # never used again: dropped after iteration 1
    np.testing.assert_array_equal(got.out_ptr, [0, 0, 2, 2])


@pytest.mark.parametrize("seed,num_rows,steps,size,k,row_bytes", [
    (0, 64, 20, 12, 8, 512), (1, 300, 30, 60, 40, 512), (2, 40, 15, 40, 40, 1000), (3, 30, 25, 6, 1, 4096),
    (4, 50, 10, 10, 0, 512), (5, 80, 30, 20, 500, 768), (6, 500, 40, 100, 64, 6000), (7, 1, 5, 1, 3, 100),
])
def test_matches_reference_and_replays(seed, num_rows, steps, size, k, row_bytes):
    rng = np.random.default_rng(seed)
    batches = _random_batches(rng, num_rows, steps, size)
    got = kernels.window_schedule(*_trace(batches), num_rows=num_rows, row_bytes=row_bytes, buffer_rows=k)
    *want, states = window_schedule_ref(batches, num_rows, row_bytes, k)
    for name, a, b in zip(got._fields, got, want, strict=True):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # replay: the buffer as the reader keeps it (slot -> row) follows the reference states
    slots = np.full(min(k, num_rows), -1)
    for i, batch in enumerate(batches):
        buffered = set(slots[slots >= 0].tolist())
        assert buffered == states[i]
        read = set(got.read_blocks[got.read_ptr[i]:got.read_ptr[i + 1]].tolist())
        for r in {int(x) for x in batch} - buffered:  # every missing row comes whole from this batch's reads
            assert set(row_blocks(r, row_bytes)) <= read
        assert got.hits[i] == len({int(x) for x in batch} & buffered)
        for r in got.out_rows[got.out_ptr[i]:got.out_ptr[i + 1]]:
            slots[slots == r] = -1
        for r, s in zip(got.in_rows[got.in_ptr[i]:got.in_ptr[i + 1]], got.in_slots[got.in_ptr[i]:got.in_ptr[i + 1]],
                        strict=True):
            assert slots[s] == -1 and set(row_blocks(int(r), row_bytes)) <= read  # a free slot, a row just read
            slots[s] = r
    assert not np.any(slots >= 0)  # nothing is used after the last batch: the buffer ends empty


def test_buffer_zero_reads_every_batch_its_own_blocks():
    rng = np.random.default_rng(11)
    batches = _random_batches(rng, 200, 12, 50)
    got = kernels.window_schedule(*_trace(batches), num_rows=200, row_bytes=700, buffer_rows=0)
    for i, batch in enumerate(batches):
        np.testing.assert_array_equal(got.read_blocks[got.read_ptr[i]:got.read_ptr[i + 1]],
                                      blocks_of_rows(batch, 700, 0, 4096))
    assert not got.hits.any() and not len(got.in_rows) and not len(got.out_rows)


def test_a_buffer_holding_the_segment_reads_each_block_once():
    rng = np.random.default_rng(5)
    batches = _random_batches(rng, 400, 30, 80)
    ptr, rows = _trace(batches)
    got = kernels.window_schedule(ptr, rows, num_rows=400, row_bytes=512, buffer_rows=400)
    assert len(np.unique(got.read_blocks)) == len(got.read_blocks) == len(blocks_of_rows(rows, 512, 0, 4096))
    # and a bigger buffer never reads more (on this trace)
    reads = [len(kernels.window_schedule(ptr, rows, num_rows=400, row_bytes=512, buffer_rows=b).read_blocks)
             for b in (0, 16, 64, 200, 400)]
    assert reads == sorted(reads, reverse=True) and reads[0] > reads[-1]


def test_invalid_inputs():
    ptr, rows = _trace([np.array([0, 1]), np.array([2])])
    with pytest.raises(ValueError, match=r"'batch_ptr' expected non-decreasing offsets from 0 to len\(rows\) = 3"):
        kernels.window_schedule(np.array([0, 2, 1]), rows, num_rows=3, row_bytes=8, buffer_rows=1)
    with pytest.raises(ValueError, match="batch_ptr"):
        kernels.window_schedule(np.array([0, 2]), rows, num_rows=3, row_bytes=8, buffer_rows=1)
    with pytest.raises(IndexError, match="rows"):
        kernels.window_schedule(ptr, rows, num_rows=2, row_bytes=8, buffer_rows=1)
    with pytest.raises(ValueError, match="row_bytes"):
        kernels.window_schedule(ptr, rows, num_rows=3, row_bytes=0, buffer_rows=1)
    with pytest.raises(ValueError, match="buffer_rows"):
        kernels.window_schedule(ptr, rows, num_rows=3, row_bytes=8, buffer_rows=-1)
    with pytest.raises(ValueError, match="fit in int64"):
        kernels.window_schedule(ptr, rows, num_rows=2**40, row_bytes=2**40, buffer_rows=1)
    empty = kernels.window_schedule(np.zeros(1, np.int64), np.empty(0, np.int64), num_rows=0, row_bytes=8,
                                    buffer_rows=4)
    assert [len(a) for a in empty] == [1, 0, 1, 0, 0, 1, 0, 0]
