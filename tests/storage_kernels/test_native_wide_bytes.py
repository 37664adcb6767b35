"""64-bit byte positions: every kernel that reads, writes or computes a byte offset, past 2**31 and 2**32.

Over sparse files (``tests/storage_kernels/wide.py``): a 5 GiB feature file or byte buffer that costs a few
pages. Rows of 1028 bytes (257 float32) put row ids that fit in 32 bits (about 4.2 million) at byte offsets
past 4 GiB, the ``row * row_bytes`` product a 32-bit multiplication gets wrong. References: ``os.pread`` /
``os.pwrite``, NumPy indexing of the same map, the NumPy/Python twins of the kernels, or the same call with
everything shifted back to small offsets.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from storage_kernels import _native, kernels
from storage_kernels.arrays import blocks_of_rows
from tests.storage_kernels.reference import count_blocks_ref
from tests.storage_kernels.reference_window import rows_in_blocks_ref, window_schedule_ref
from tests.storage_kernels.wide import PAST_INT32, PAST_UINT32, allocated_bytes, sparse_maker

ALIGN = kernels.DIRECT_ALIGN
FILE_BYTES = 5 << 30  # past 2**32
DIM = 257  # float32 columns: 1028-byte rows, not a divisor of the block
ROW_BYTES = DIM * 4
NUM_ROWS = FILE_BYTES // ROW_BYTES  # ~5.2 million rows: every id fits in 32 bits, row * ROW_BYTES does not
ROW_PAST_INT32 = PAST_INT32 // ROW_BYTES + 1  # the first rows whose bytes start past 2**31 and 2**32
ROW_PAST_UINT32 = PAST_UINT32 // ROW_BYTES + 1
HIGH_ROWS = np.array([ROW_PAST_UINT32, ROW_PAST_INT32, NUM_ROWS - 1, 0, ROW_PAST_UINT32 + 3], dtype=np.int64)
URING, URING_WHY = kernels.io_uring_available()


@pytest.fixture
def sparse(tmp_path):
    yield from sparse_maker(tmp_path)


@pytest.fixture
def features(sparse):
    """A 5 GiB float32 (NUM_ROWS, DIM) feature map with distinct values in the rows of HIGH_ROWS only."""
    feats = sparse("features.bin", np.float32, (NUM_ROWS, DIM))
    rng = np.random.default_rng(0)
    feats[HIGH_ROWS] = rng.standard_normal((len(HIGH_ROWS), DIM)).astype(np.float32)
    return feats


def _ranges() -> tuple[np.ndarray, np.ndarray]:
    """Aligned (offset, length) ranges: past 2**31, past 2**32, straddling both, the last block, the first."""
    offsets = np.array([PAST_UINT32, (1 << 32) - ALIGN, PAST_INT32, (1 << 31) - ALIGN, FILE_BYTES - ALIGN, 0])
    lengths = np.array([ALIGN, 2 * ALIGN, 3 * ALIGN, 2 * ALIGN, ALIGN, ALIGN])
    return offsets.astype(np.int64), lengths.astype(np.int64)


def _fill_ranges(fd: int, offsets: np.ndarray, lengths: np.ndarray) -> list[bytes]:
    """Random bytes written at every range with os.pwrite (64-bit offsets in Python); returns them."""
    rng = np.random.default_rng(1)
    out = []
    for off, n in zip(offsets.tolist(), lengths.tolist(), strict=True):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert os.pwrite(fd, data, off) == n
        out.append(data)
    return out


# ---- reads: pread_ranges and uring_read_ranges ------------------------------------------------------------


def _read(reader: str, fd: int, offsets, lengths, out, out_offsets, direct: bool) -> int:
    if reader == "uring":
        return kernels.uring_read_ranges(fd, offsets, lengths, out, out_offsets, direct)[0]
    return kernels.pread_ranges(fd, offsets, lengths, out, out_offsets, direct, num_threads=2)


@pytest.mark.parametrize("reader", ["pread", "uring"])
@pytest.mark.parametrize("direct", [False, True])
@pytest.mark.parametrize("width", ["list", "int64", "uint64"])
def test_reads_past_4_gib(sparse, reader, direct, width):
    if reader == "uring" and not URING:
        pytest.skip(f"io_uring unavailable: {URING_WHY}")
    path = sparse("data.bin", np.uint8, FILE_BYTES).filename
    offsets, lengths = _ranges()
    wfd = os.open(path, os.O_WRONLY)
    try:
        want = _fill_ranges(wfd, offsets, lengths)
    finally:
        os.close(wfd)
    fd, is_direct = kernels.open_direct(path)
    try:
        if direct and not is_direct:
            pytest.skip("the filesystem refuses O_DIRECT")
        out = kernels.aligned_empty(int(lengths.sum()))
        out_offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        given = offsets.tolist() if width == "list" else offsets.astype(width)
        assert _read(reader, fd, given, lengths, out, out_offsets, direct and is_direct) == lengths.sum()
        for k, data in enumerate(want):
            assert out[out_offsets[k] : out_offsets[k] + lengths[k]].tobytes() == data, f"range {k}"
        with pytest.raises(OSError, match=rf"expected 8192 bytes at offset {FILE_BYTES - ALIGN} \(range 0\)"):
            _read(reader, fd, [FILE_BYTES - ALIGN], [2 * ALIGN], out, [0], direct and is_direct)
    finally:
        kernels.close_fd(fd)
    assert allocated_bytes(path) < 1 << 24  # the file stayed sparse


@pytest.mark.parametrize("reader", ["pread", "uring"])
def test_reads_into_a_buffer_past_4_gib(sparse, reader):
    """The destination offsets are 64-bit too: ranges land past 2**31 and 2**32 of a 5 GiB mapped buffer."""
    if reader == "uring" and not URING:
        pytest.skip(f"io_uring unavailable: {URING_WHY}")
    src = sparse("src.bin", np.uint8, 8 * ALIGN)
    src[:] = np.random.default_rng(2).integers(0, 256, len(src), dtype=np.uint8)
    src.flush()
    out = sparse("out.bin", np.uint8, FILE_BYTES)
    out_offsets = np.array([PAST_UINT32 + 5, (1 << 32) - 3, PAST_INT32, FILE_BYTES - 100], dtype=np.int64)
    offsets, lengths = np.array([0, 100, 4096, 9000]), np.array([4096, 10, 3000, 100])
    fd = os.open(src.filename, os.O_RDONLY)
    try:
        assert _read(reader, fd, offsets, lengths, out, out_offsets, False) == lengths.sum()
    finally:
        os.close(fd)
    for o, n, d in zip(offsets, lengths, out_offsets, strict=True):
        np.testing.assert_array_equal(out[d : d + n], src[o : o + n])


# ---- writes: pack_partition ------------------------------------------------------------------------------


def test_pack_partition_writes_past_4_gib(sparse):
    """Chunks at byte offsets past 2**31 and 2**32, of rows whose ids are past 2**31."""
    path = sparse("packed.bin", np.uint8, FILE_BYTES).filename
    rng = np.random.default_rng(3)
    row_start = PAST_INT32  # the partition's first row id
    part = rng.standard_normal((6, DIM)).astype(np.float32)
    ids = row_start + np.array([1, 4, 0, 2, 3, 5, 5])  # batches {1, 4}, {0, 2, 3, 5}, {5}
    batch_ptr = np.array([0, 2, 6, 7])
    chunk_offsets = np.array([PAST_UINT32, PAST_INT32, (1 << 32) - ALIGN])
    cursor = np.zeros(3, dtype=np.int64)
    fd = os.open(path, os.O_RDWR)
    try:
        assert kernels.pack_partition(part, row_start, ids, batch_ptr, cursor, fd, chunk_offsets) == 7 * ROW_BYTES
        np.testing.assert_array_equal(cursor, [2, 4, 1])
        for b in range(3):
            rows = ids[batch_ptr[b] : batch_ptr[b + 1]] - row_start
            got = os.pread(fd, len(rows) * ROW_BYTES, int(chunk_offsets[b]))
            np.testing.assert_array_equal(np.frombuffer(got, np.float32).reshape(-1, DIM), part[rows])
        with pytest.raises(ValueError, match=r"batch 0 expected a byte offset below 2\*\*63"):
            kernels.pack_partition(part, row_start, ids[:1], [0, 1], np.zeros(1, np.int64), fd,
                                   [(1 << 63) - ROW_BYTES // 2])
    finally:
        os.close(fd)


# ---- copies at byte offsets: rows_at, gathers, place_rows, cache_update -----------------------------------


def test_rows_at_past_4_gib(sparse):
    buf = sparse("buf.bin", np.uint8, FILE_BYTES)
    rows = np.random.default_rng(4).standard_normal((4, DIM)).astype(np.float32)
    # straddling 2**31, straddling 2**32, past 2**32 (unaligned), the very end
    offsets = np.array([(1 << 31) - 500, (1 << 32) - 3, PAST_UINT32 + 7, FILE_BYTES - ROW_BYTES], dtype=np.int64)
    kernels.place_rows_at(rows, offsets, buf, num_threads=2)
    for k, o in enumerate(offsets):
        np.testing.assert_array_equal(buf[o : o + ROW_BYTES].view(np.float32), rows[k])
    back = kernels.gather_rows_at(buf, offsets[::-1], np.empty((4, DIM), np.float32), num_threads=2)
    np.testing.assert_array_equal(back, rows[::-1])
    into = kernels.gather_rows_at_into(buf, offsets, np.zeros((6, DIM), np.float32), [5, 0, 3, 1])
    np.testing.assert_array_equal(into[[5, 0, 3, 1]], rows)
    with pytest.raises(IndexError, match=rf"\(got offsets\[0\]={FILE_BYTES - ROW_BYTES + 1}\)"):
        kernels.gather_rows_at(buf, [FILE_BYTES - ROW_BYTES + 1], np.empty((1, DIM), np.float32))


def test_row_gathers_past_4_gib(features):
    """gather_rows / gather_rows_into read, place_rows / gather_rows_into write rows at bytes past 2**32."""
    want = np.asarray(features[HIGH_ROWS])  # NumPy's 64-bit indexing of the same map
    np.testing.assert_array_equal(kernels.gather_rows(features, HIGH_ROWS, num_threads=2), want)
    pos = np.array([4, 0, 2, 1, 3])
    got = kernels.gather_rows_into(features, HIGH_ROWS, np.zeros((5, DIM), np.float32), pos)
    np.testing.assert_array_equal(got[pos], want)
    # the other way: small rows placed at high positions of the big map
    new = np.random.default_rng(5).standard_normal((3, DIM)).astype(np.float32)
    targets = np.array([ROW_PAST_UINT32 + 10, ROW_PAST_INT32 + 10, NUM_ROWS - 2])
    kernels.place_rows(new, targets, features, num_threads=2)
    np.testing.assert_array_equal(features[targets], new)
    kernels.gather_rows_into(new[::-1].copy(), [0, 1, 2], features, targets)
    np.testing.assert_array_equal(features[targets], new[::-1])
    with pytest.raises(IndexError, match=rf"\(got idx\[0\]={NUM_ROWS}\)"):
        kernels.gather_rows(features, [NUM_ROWS])


def test_cache_update_slots_past_4_gib(features):
    """Ginex's cache as a 5 GiB map: slots whose bytes lie past 2**31 and 2**32 receive the batch rows."""
    table = np.full(8, -1, dtype=np.int64)
    table[[1, 6]] = [ROW_PAST_UINT32, ROW_PAST_INT32]  # nodes 1 and 6 are cached there
    batch = np.random.default_rng(6).standard_normal((3, DIM)).astype(np.float32)
    kernels.cache_update(features, table, batch, in_ids=[3, 5], out_ids=[1, 6], in_positions=[2, 0])
    np.testing.assert_array_equal(table[[1, 3, 5, 6]], [-1, ROW_PAST_UINT32, ROW_PAST_INT32, -1])
    np.testing.assert_array_equal(features[[ROW_PAST_UINT32, ROW_PAST_INT32]], batch[[2, 0]])


# ---- byte arithmetic without a file: blocks of rows, the disk-cache and window schedules ------------------


@pytest.mark.parametrize("base", [0, PAST_INT32 + 100, PAST_UINT32 + 3])
def test_blocks_of_rows_past_4_gib(base):
    rng = np.random.default_rng(7)
    rows = np.concatenate([ROW_PAST_UINT32 + rng.integers(0, 400, 60), ROW_PAST_INT32 + rng.integers(0, 400, 60)])
    far = np.concatenate([rng.integers(0, 400, 20), NUM_ROWS - 1 - rng.integers(0, 400, 20)])
    assert _native.blocks_for_rows(rows=rows, base=base, row_bytes=ROW_BYTES) is not None  # C's dense table
    assert _native.blocks_for_rows(rows=far, base=base, row_bytes=ROW_BYTES) is None  # NumPy's sort instead
    for where in (rows, far):
        blocks, at = kernels.blocks_for_rows(where, base, ROW_BYTES)
        np.testing.assert_array_equal(blocks, blocks_of_rows(where, ROW_BYTES, base, ALIGN))  # NumPy, int64
        np.testing.assert_array_equal(at, rows_in_blocks_ref(blocks, where, base, ROW_BYTES))
    want = blocks_of_rows(rows, ROW_BYTES, base, ALIGN)
    np.testing.assert_array_equal(kernels.rows_in_blocks(want, rows, base, ROW_BYTES),
                                  rows_in_blocks_ref(want, rows, base, ROW_BYTES))
    assert kernels.rows_in_blocks(want[1:], rows, base, ROW_BYTES) is None  # a block missing


def test_row_bytes_beyond_int64_are_refused():
    """A row whose first byte fits int64 but whose last does not: IndexError, not a wrapped block number."""
    row = (1 << 63) // ALIGN - 1  # starts at 2**63 - 4096, + base 4095 = 2**63 - 1: the last byte overflows
    for fn in (lambda: kernels.rows_in_blocks([0], [row], ALIGN - 1, ALIGN),
               lambda: _native.blocks_for_rows(rows=np.array([row]), base=ALIGN - 1, row_bytes=ALIGN)):
        with pytest.raises(IndexError, match=rf"whose bytes fit int64 \(got rows\[0\]={row}\)"):
            fn()


def test_count_blocks_past_4_gib():
    rng = np.random.default_rng(8)
    slots = np.concatenate([ROW_PAST_UINT32 + rng.integers(0, 300, 40), [-1],
                            ROW_PAST_INT32 + rng.integers(0, 300, 40), rng.integers(0, 300, 40)])
    set_ptr = np.array([0, 20, 41, 81, 121])
    np.testing.assert_array_equal(kernels.count_blocks(slots, set_ptr, ROW_BYTES, num_threads=2),
                                  count_blocks_ref(slots, set_ptr, ROW_BYTES))


def test_window_schedule_past_4_gib():
    """The segment window over a 4.3 GB region whose accessed rows lie at its end equals the schedule of the same
    accesses at the start of a small region, shifted: blocks by the shift's bytes / 4096, rows by the shift."""
    rng = np.random.default_rng(9)
    small_rows, buffer_rows = 300, 40
    batches = [np.unique(rng.integers(0, small_rows, rng.integers(1, 30))) for _ in range(25)]
    ptr = np.concatenate([[0], np.cumsum([len(b) for b in batches])])
    small = kernels.window_schedule(ptr, np.concatenate(batches), small_rows, ROW_BYTES, buffer_rows)
    for got, want in zip(small, window_schedule_ref(batches, small_rows, ROW_BYTES, buffer_rows)[:8], strict=True):
        np.testing.assert_array_equal(got, want)
    shift = 1024 * 4100  # rows: shift * ROW_BYTES is a multiple of 4096 past 2**32, so blocks keep their rows
    assert shift * ROW_BYTES % ALIGN == 0 and shift * ROW_BYTES > 1 << 32
    big = kernels.window_schedule(ptr, np.concatenate(batches) + shift, shift + small_rows, ROW_BYTES, buffer_rows)
    blocks_shift = shift * ROW_BYTES // ALIGN
    np.testing.assert_array_equal(big.read_blocks, small.read_blocks + blocks_shift)
    np.testing.assert_array_equal(big.in_rows, small.in_rows + shift)
    np.testing.assert_array_equal(big.out_rows, small.out_rows + shift)
    for name in ("read_ptr", "in_ptr", "in_slots", "out_ptr", "hits"):
        np.testing.assert_array_equal(getattr(big, name), getattr(small, name), err_msg=name)
