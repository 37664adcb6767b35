"""pack_partition / pack_batches (DiskGNN batched packing): known answer, reference file bytes, errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import pack_batches_ref

ALIGN = kernels.DIRECT_ALIGN


@pytest.fixture
def out_fd(tmp_path):
    fd = os.open(tmp_path / "packed.bin", os.O_RDWR | os.O_CREAT, 0o644)
    yield fd, tmp_path / "packed.bin"
    os.close(fd)


def test_pack_partition_known_answer(out_fd):
    fd, path = out_fd
    features = np.arange(8, dtype=np.float32).reshape(4, 2)  # row r = [2r, 2r+1]
    ids = np.array([1, 3, 0, 2, 3])  # batch 0 = {1, 3}, batch 1 = {0, 2, 3}
    batch_ptr = np.array([0, 2, 5])
    chunk_offsets = np.array([0, 64])
    cursor = np.zeros(2, dtype=np.int64)
    # partition rows [0, 2): batch 0 gets row 1, batch 1 gets row 0
    assert kernels.pack_partition(features[:2], 0, ids, batch_ptr, cursor, fd, chunk_offsets) == 16
    np.testing.assert_array_equal(cursor, [1, 1])
    # partition rows [2, 4): batch 0 gets row 3 after its row 1, batch 1 gets rows 2, 3 after row 0
    assert kernels.pack_partition(features[2:], 2, ids, batch_ptr, cursor, fd, chunk_offsets) == 24
    np.testing.assert_array_equal(cursor, [2, 3])
    data = np.frombuffer(path.read_bytes(), dtype=np.float32)
    np.testing.assert_array_equal(data[:4], [2, 3, 6, 7])
    np.testing.assert_array_equal(data[16:22], [0, 1, 4, 5, 6, 7])


@pytest.mark.parametrize(
    "seed,num_rows,dim,num_batches,partition_rows",
    [(0, 10, 3, 2, 1), (1, 500, 16, 7, 64), (2, 1000, 5, 12, 1000), (3, 300, 1, 4, 10_000), (4, 50, 8, 0, 7)],
)
def test_pack_batches_matches_reference(tmp_path, seed, num_rows, dim, num_batches, partition_rows):
    rng = np.random.default_rng(seed)
    features = rng.standard_normal((num_rows, dim)).astype(np.float32)
    np.save(tmp_path / "features.npy", features)
    memmap = np.load(tmp_path / "features.npy", mmap_mode="r")
    batch_ids = [
        np.sort(rng.choice(num_rows, int(rng.integers(0, num_rows // 2 + 1)), replace=False))
        for _ in range(num_batches)
    ]
    for threads in (1, 3):
        path = tmp_path / f"packed{threads}.bin"
        offsets, rows = kernels.pack_batches(memmap, batch_ids, path, partition_rows, num_threads=threads)
        want, want_offsets, want_rows = pack_batches_ref(features, batch_ids)
        np.testing.assert_array_equal(offsets, want_offsets)
        np.testing.assert_array_equal(rows, want_rows)
        assert offsets.dtype == np.int64 and np.all(offsets % ALIGN == 0)
        assert path.read_bytes() == want
        assert path.stat().st_size % ALIGN == 0


def test_packed_chunks_read_back_with_direct_io(tmp_path):
    rng = np.random.default_rng(9)
    features = rng.standard_normal((2000, 33)).astype(np.float32)
    batch_ids = [np.sort(rng.choice(2000, 300, replace=False)) for _ in range(5)]
    path = tmp_path / "packed.bin"
    offsets, rows = kernels.pack_batches(features, batch_ids, path, partition_rows=256, chunk_align=ALIGN)
    fd, direct = kernels.open_direct(path)
    try:
        row_bytes = 33 * 4
        lengths = (rows * row_bytes + ALIGN - 1) // ALIGN * ALIGN  # whole aligned blocks
        out = kernels.aligned_empty(int(lengths.sum()))
        out_offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        kernels.pread_ranges(fd, offsets, lengths, out, out_offsets, direct)
    finally:
        kernels.close_fd(fd)
    for b, ids in enumerate(batch_ids):
        chunk = out[out_offsets[b] : out_offsets[b] + rows[b] * row_bytes].view(np.float32).reshape(-1, 33)
        np.testing.assert_array_equal(chunk, features[ids])


# ---- invalid inputs --------------------------------------------------------------------------------------


def args_for(ids, batch_ptr):
    return dict(ids=np.array(ids), batch_ptr=np.array(batch_ptr), chunk_offsets=np.zeros(len(batch_ptr) - 1))


def test_pack_partition_value_errors(out_fd):
    fd, _ = out_fd
    features = np.zeros((4, 2), dtype=np.float32)
    cursor = np.zeros(1, dtype=np.int64)
    with pytest.raises(ValueError, match=r"strictly ascending ids \(got ids\[1\]=1 after 2\)"):
        kernels.pack_partition(features, 0, [2, 1], [0, 2], cursor, fd, [0])
    with pytest.raises(ValueError, match=r"ids >= row_start=4.*ids\[0\]=2 still unwritten"):
        kernels.pack_partition(features, 4, [2, 5], [0, 2], cursor, fd, [0])
    with pytest.raises(ValueError, match=r"'cursor' expected values in \[0, 2\] for batch 0 \(got cursor\[0\]=3\)"):
        kernels.pack_partition(features, 0, [2, 5], [0, 2], np.array([3]), fd, [0])
    with pytest.raises(ValueError, match=r"batch_ptr\[0\]=0, batch_ptr\[1\]=5"):
        kernels.pack_partition(features, 0, [2, 5], [0, 5], cursor, fd, [0])
    with pytest.raises(ValueError, match="'features' expected float32"):
        kernels.pack_partition(features.astype(np.float64), 0, [2], [0, 1], cursor, fd, [0])
    with pytest.raises(ValueError, match="'cursor' expected a writable"):
        kernels.pack_partition(features, 0, [2], [0, 1], np.zeros(1, np.int32), fd, [0])
    with pytest.raises(ValueError, match="'row_start' expected >= 0"):
        kernels.pack_partition(features, -1, [2], [0, 1], cursor, fd, [0])
    np.testing.assert_array_equal(cursor, [0])


def test_pack_partition_index_error(out_fd):
    fd, _ = out_fd
    with pytest.raises(IndexError, match=r"ids >= 0 \(got ids\[1\]=-1\)"):
        kernels.pack_partition(
            np.zeros((4, 2), np.float32), 0, [0, -1, 1], [0, 1, 3], np.zeros(2, np.int64), fd, [0, 4096]
        )


def test_pack_partition_os_error(tmp_path):
    fd = os.open(tmp_path / "ro.bin", os.O_RDONLY | os.O_CREAT, 0o644)  # not open for writing
    try:
        cursor = np.zeros(1, dtype=np.int64)
        with pytest.raises(OSError, match=f"writing batch 0 to fd {fd} at offset 0") as info:
            kernels.pack_partition(np.zeros((4, 2), np.float32), 0, [1], [0, 1], cursor, fd, [0])
        assert info.value.errno == 9  # EBADF
        np.testing.assert_array_equal(cursor, [0])  # cursors advance only after every write succeeded
    finally:
        os.close(fd)


def test_pack_batches_errors(tmp_path):
    features = np.zeros((10, 2), dtype=np.float32)
    with pytest.raises(
        IndexError, match=r"'batch_ids\[1\]' expected row ids in \[0, 10\) \(got batch_ids\[1\]\[1\]=10\)"
    ):
        kernels.pack_batches(features, [[1], [3, 10]], tmp_path / "p.bin", 4)
    with pytest.raises(ValueError, match=r"strictly ascending ids \(got batch_ids\[0\]\[2\]=3 after 3\)"):
        kernels.pack_batches(features, [[1, 3, 3]], tmp_path / "p.bin", 4)
    with pytest.raises(ValueError, match="'feature_array' expected a 2-D float32"):
        kernels.pack_batches(features.astype(np.float16), [[1]], tmp_path / "p.bin", 4)
    with pytest.raises(ValueError, match="'partition_rows' expected >= 1"):
        kernels.pack_batches(features, [[1]], tmp_path / "p.bin", 0)
    with pytest.raises(ValueError, match="'chunk_align' expected a power of two"):
        kernels.pack_batches(features, [[1]], tmp_path / "p.bin", 4, chunk_align=1000)
