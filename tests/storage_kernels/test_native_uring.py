"""uring_read_ranges / io_uring_available: differential against pread_ranges and a NumPy read of the file.

Random ranges with and without O_DIRECT (aligned, and unaligned through a buffered descriptor), many more
ranges than the queue depth, ranges that merge (adjacent, the same pages, overlapping), large ranges split
into several requests, empty lists, and end-of-file / descriptor errors. Skipped with the reason where the
kernel refuses io_uring.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from storage_kernels import kernels

ALIGN = kernels.DIRECT_ALIGN
AVAILABLE, WHY = kernels.io_uring_available()
pytestmark = pytest.mark.skipif(not AVAILABLE, reason=f"io_uring unavailable: {WHY}")

FILE_BLOCKS = 300
TAIL = 100  # bytes past the last whole block: the file size is not aligned


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("uring") / "data.bin"
    rng = np.random.default_rng(0)
    rng.integers(0, 256, FILE_BLOCKS * ALIGN + TAIL, dtype=np.uint8).tofile(path)
    return path


@pytest.fixture(scope="module")
def file_bytes(data_file):
    return np.fromfile(data_file, dtype=np.uint8)  # the NumPy reference read


@pytest.fixture
def direct_fd(data_file):
    fd, direct = kernels.open_direct(data_file)
    assert direct, "the test files live on a filesystem that accepts O_DIRECT (ext4)"
    yield fd
    kernels.close_fd(fd)


@pytest.fixture
def buffered_fd(data_file):
    fd = os.open(data_file, os.O_RDONLY)
    yield fd
    os.close(fd)


def scattered(lengths: np.ndarray, rng: np.random.Generator, align: int) -> tuple[np.ndarray, int]:
    """Non-overlapping destinations for ``lengths``, in a shuffled order with gaps, each a multiple of align."""
    order = rng.permutation(len(lengths))
    pos, out_offsets = 0, np.zeros(len(lengths), np.int64)
    for k in order:
        pos += int(rng.integers(0, 2)) * align  # a gap now and then
        out_offsets[k] = pos
        pos += -(-int(lengths[k]) // align) * align
    return out_offsets, pos + align


def check_against_references(fd, file_bytes, offsets, lengths, out_offsets, nbytes, direct, queue_depth, merge=True):
    """uring_read_ranges == pread_ranges == the NumPy read, byte for byte (untouched bytes stay as they were)."""
    got = kernels.aligned_empty(nbytes)
    got[:] = 0xAB
    want = got.copy()
    for o, n, d in zip(offsets, lengths, out_offsets, strict=True):
        want[d : d + n] = file_bytes[o : o + n]
    pool = kernels.aligned_empty(nbytes)
    pool[:] = 0xAB
    total, reads = kernels.uring_read_ranges(fd, offsets, lengths, got, out_offsets, direct, queue_depth, merge)
    assert total == int(np.sum(lengths)) == kernels.pread_ranges(fd, offsets, lengths, pool, out_offsets, direct)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(pool, want)
    return reads


def test_available_here():
    ok, reason = kernels.io_uring_available()
    assert ok is True and reason == ""
    assert kernels.io_uring_available() == (ok, reason)  # probed once, same answer


def test_disabled_by_environment(monkeypatch):
    monkeypatch.setenv(kernels.DISABLE_IO_URING_ENV, "1")
    assert kernels.io_uring_available() == (False, "io_uring disabled by STRATA_DISABLE_IO_URING=1")


@pytest.mark.parametrize("queue_depth", [1, 4, 16, 64, 256])
@pytest.mark.parametrize("merge", [True, False])
def test_random_direct_ranges(direct_fd, file_bytes, queue_depth, merge):
    """Many more aligned ranges than the queue depth, repeats and neighbours included, O_DIRECT."""
    rng = np.random.default_rng(queue_depth)
    K = 700
    blocks = rng.integers(0, FILE_BLOCKS - 4, K)
    offsets = blocks * ALIGN
    lengths = rng.integers(1, 5, K) * ALIGN
    out_offsets, nbytes = scattered(lengths, rng, ALIGN)
    reads = check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, nbytes, True,
                                     queue_depth, merge)
    assert reads == K if not merge else 1 <= reads < K


@pytest.mark.parametrize("queue_depth", [1, 3, 32])
def test_random_unaligned_buffered_ranges(buffered_fd, file_bytes, queue_depth):
    """Without O_DIRECT any offset, length and destination goes, up to the last byte of the file."""
    rng = np.random.default_rng(10 + queue_depth)
    K = 500
    size = len(file_bytes)
    offsets = rng.integers(0, size - 1, K)
    lengths = np.minimum(rng.integers(0, 3 * ALIGN, K), size - offsets)
    out_offsets, nbytes = scattered(lengths, rng, 1)
    for merge in (True, False):
        check_against_references(buffered_fd, file_bytes, offsets, lengths, out_offsets, nbytes, False, queue_depth,
                                 merge)


def test_direct_descriptor_without_direct_flag_matches(direct_fd, file_bytes):
    """direct=False on an O_DIRECT descriptor skips the checks only; aligned ranges still read right."""
    offsets = np.arange(0, 64, 3) * ALIGN
    lengths = np.full(len(offsets), 2 * ALIGN)
    out_offsets = np.arange(len(offsets)) * 2 * ALIGN
    check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, int(lengths.sum()), False, 8)


def test_adjacent_ranges_merge_into_one_read(direct_fd, file_bytes):
    """Consecutive blocks, given out of order and scattered in the output: one READV for the span."""
    blocks = np.array([7, 5, 6, 8, 4])
    offsets, lengths = blocks * ALIGN, np.full(5, ALIGN)
    out_offsets = np.array([0, 4, 2, 3, 1]) * ALIGN
    reads = check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, 5 * ALIGN, True, 2)
    assert reads == 1
    # the same with a gap (block 10): two spans
    offsets = np.append(offsets, 10 * ALIGN)
    lengths, out_offsets = np.append(lengths, ALIGN), np.append(out_offsets, 5 * ALIGN)
    reads = check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, 6 * ALIGN, True, 2)
    assert reads == 2


def test_same_pages_read_once(direct_fd, file_bytes):
    """A block asked for three times, and a block inside a longer range: read once, copied to the others."""
    offsets = np.array([20, 20, 21, 20, 40]) * ALIGN
    lengths = np.array([1, 3, 1, 1, 1]) * ALIGN
    out_offsets = np.array([0, 1, 4, 5, 6]) * ALIGN
    reads = check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, 7 * ALIGN, True, 4)
    assert reads == 2  # blocks 20..22 and block 40
    reads = check_against_references(direct_fd, file_bytes, offsets, lengths, out_offsets, 7 * ALIGN, True, 4,
                                     merge=False)
    assert reads == 5


def test_partial_overlap_reads_both(buffered_fd, file_bytes):
    offsets, lengths = np.array([100, 150, 160]), np.array([100, 100, 10])
    out_offsets = np.array([0, 100, 300])
    reads = check_against_references(buffered_fd, file_bytes, offsets, lengths, out_offsets, 400, False, 2)
    assert reads == 2  # [100, 200) then [150, 250), which holds [160, 170)


def test_large_ranges_split_and_complete(tmp_path):
    """Ranges longer than one request (4 MiB) are split; the pieces complete in any order."""
    path = tmp_path / "big.bin"
    data = np.random.default_rng(3).integers(0, 256, 11 << 20, dtype=np.uint8)
    data.tofile(path)
    fd, direct = kernels.open_direct(path)
    try:
        # two adjacent ranges (one span of 11 MiB - 4 KiB), the second landing first in the output
        offsets, lengths = np.array([ALIGN, ALIGN + (9 << 20)]), np.array([9 << 20, (2 << 20) - ALIGN])
        out_offsets = np.array([(2 << 20) - ALIGN, 0])
        out = kernels.aligned_empty((11 << 20) - ALIGN)
        for depth in (1, 2, 8):
            out[:] = 0
            got = kernels.uring_read_ranges(fd, offsets, lengths, out, out_offsets, direct, depth)
            assert got == ((11 << 20) - ALIGN, 1)
            np.testing.assert_array_equal(out[(2 << 20) - ALIGN :], data[ALIGN : ALIGN + (9 << 20)])
            np.testing.assert_array_equal(out[: (2 << 20) - ALIGN], data[ALIGN + (9 << 20) :])
    finally:
        kernels.close_fd(fd)


def test_empty_and_zero_length(direct_fd):
    out = kernels.aligned_empty(ALIGN)
    assert kernels.uring_read_ranges(direct_fd, [], [], out, [], True) == (0, 0)
    out[:] = 9
    # zero-length ranges read nothing (and, like pread_ranges, count as ranges without merging)
    assert kernels.uring_read_ranges(direct_fd, [0, 1 << 30], [0, 0], out, [0, 0], True, merge=False) == (0, 2)
    assert (out == 9).all()


# ---- errors ----------------------------------------------------------------------------------------------


def test_range_past_end_of_file(direct_fd, buffered_fd):
    out = kernels.aligned_empty(8 * ALIGN)
    past = (FILE_BLOCKS + 5) * ALIGN
    with pytest.raises(OSError, match=rf"fd {direct_fd} expected 4096 bytes at offset {past} \(range 1\) "
                                      r"\(got 0 before end of file\)"):
        kernels.uring_read_ranges(direct_fd, [0, past], [ALIGN, ALIGN], out, [0, ALIGN], True)
    # straddling the unaligned end: O_DIRECT stops mid-block after the TAIL bytes
    last = FILE_BLOCKS * ALIGN
    with pytest.raises(OSError, match=rf"expected 8192 bytes at offset {last - ALIGN} \(range 0\) "
                                      rf"\(got {ALIGN + TAIL} before end of file\)"):
        kernels.uring_read_ranges(direct_fd, [last - ALIGN], [2 * ALIGN], out, [0], True)
    # merged with a good neighbour, the error names the range that ran out
    with pytest.raises(OSError, match=r"\(range 2\) \(got 100 before end of file\)"):
        kernels.uring_read_ranges(direct_fd, [last - 2 * ALIGN, last - ALIGN, last], [ALIGN, ALIGN, ALIGN], out,
                                  [0, ALIGN, 2 * ALIGN], True)
    with pytest.raises(OSError, match=rf"fd {buffered_fd} expected 200 bytes at offset {last} \(range 0\) "
                                      rf"\(got {TAIL} before end of file\)"):
        kernels.uring_read_ranges(buffered_fd, [last], [200], out, [0], False)


def test_bad_descriptor_names_fd_and_offset(data_file):
    fd, _ = kernels.open_direct(data_file)
    kernels.close_fd(fd)
    out = kernels.aligned_empty(ALIGN)
    with pytest.raises(OSError, match=rf"reading fd {fd} at offset 8192 \(range 0, length 4096\)") as info:
        kernels.uring_read_ranges(fd, [2 * ALIGN], [ALIGN], out, [0], True)
    assert info.value.errno == 9  # EBADF


def test_value_errors(direct_fd):
    out = kernels.aligned_empty(4 * ALIGN)
    with pytest.raises(ValueError, match=r"uring_read_ranges: direct range 1 expected .*offsets\[1\]=100"):
        kernels.uring_read_ranges(direct_fd, [0, 100], [ALIGN, ALIGN], out, [0, ALIGN], True)
    with pytest.raises(ValueError, match=r"destination address % 4096 = 8"):
        kernels.uring_read_ranges(direct_fd, [0], [ALIGN], out, [8], True)
    with pytest.raises(ValueError, match=r"out_offsets\[k\] \+ lengths\[k\] <= out.nbytes=16384"):
        kernels.uring_read_ranges(direct_fd, [0], [ALIGN], out, [4 * ALIGN], True)
    with pytest.raises(ValueError, match=r"non-negative .*offsets\[0\]=-4096"):
        kernels.uring_read_ranges(direct_fd, [-ALIGN], [ALIGN], out, [0], True)
    with pytest.raises(ValueError, match="expected the length of 'offsets'"):
        kernels.uring_read_ranges(direct_fd, [0, 0], [ALIGN], out, [0], True)
    with pytest.raises(ValueError, match=r"'queue_depth' expected >= 1 \(got 0\)"):
        kernels.uring_read_ranges(direct_fd, [0], [ALIGN], out, [0], True, queue_depth=0)
    with pytest.raises(ValueError, match=r"'queue_depth' expected <= 4096 \(got 5000\)"):
        kernels.uring_read_ranges(direct_fd, [0], [ALIGN], out, [0], True, queue_depth=5000)
    with pytest.raises(ValueError, match="'fd' expected a descriptor >= 0"):
        kernels.uring_read_ranges(-1, [0], [ALIGN], out, [0], True)
