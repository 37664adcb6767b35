"""Aligned `.npy` files: known answers, NumPy interoperability, invalid inputs, streaming writes."""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
from pathlib import Path

import numpy as np
import pytest

from storage_kernels.arrays import (
    DATA_ALIGN,
    ArrayWriter,
    FileInfo,
    file_checksum,
    file_info,
    open_array,
    read_header,
    release_pages,
    save_array,
)


def blake2b_of(path: Path) -> str:
    return "blake2b:" + hashlib.blake2b(path.read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------ known answers


def test_save_array_layout_known_answer(tmp_path: Path) -> None:
    arr = np.arange(10, dtype=np.int64)
    path = tmp_path / "a.npy"
    info = save_array(path, arr)
    raw = path.read_bytes()
    assert raw[:6] == b"\x93NUMPY"
    assert raw[6:8] == bytes([2, 0])  # format 2.0
    assert int.from_bytes(raw[8:12], "little") == DATA_ALIGN - 12
    header = raw[12:DATA_ALIGN].decode("latin1")
    assert header.startswith("{'descr': '<i8', 'fortran_order': False, 'shape': (10,), }")
    assert header.endswith(" \n") and set(header[header.index("}") + 1 : -1]) == {" "}
    assert raw[DATA_ALIGN : DATA_ALIGN + 80] == arr.tobytes()
    assert len(raw) == 2 * DATA_ALIGN and raw[DATA_ALIGN + 80 :] == b"\0" * (DATA_ALIGN - 80)
    assert info == FileInfo("a.npy", "<i8", (10,), 2 * DATA_ALIGN, blake2b_of(path), DATA_ALIGN)


@pytest.mark.parametrize(
    "arr",
    [
        np.arange(12, dtype=np.float32).reshape(3, 4),
        np.array([True, False, True]),
        np.array(3.5),  # 0-d
        np.zeros((0, 5), dtype=np.float32),  # empty
        np.arange(24, dtype=np.int32).reshape(2, 3, 4)[:, ::2, 1:],  # non-contiguous
        np.asfortranarray(np.arange(6, dtype=np.int16).reshape(2, 3)),
        np.arange(5, dtype=">i4"),  # big-endian input is written little-endian
        np.arange(DATA_ALIGN // 8, dtype=np.int64),  # data exactly one block
        np.array(["ab", "cde"]),
        np.array([0, 1, 2], dtype="datetime64[s]"),
    ],
    ids=[
        "f32-2d",
        "bool",
        "0d",
        "empty",
        "strided",
        "fortran",
        "big-endian",
        "one-block",
        "unicode",
        "datetime",
    ],
)
def test_roundtrip_matches_numpy(tmp_path: Path, arr: np.ndarray) -> None:
    path = tmp_path / "x.npy"
    info = save_array(path, arr)
    assert info.data_offset == DATA_ALIGN and info.bytes % DATA_ALIGN == 0
    assert info.bytes == path.stat().st_size and info.checksum == file_checksum(path)
    assert info.shape == arr.shape and np.dtype(info.dtype) == arr.dtype.newbyteorder("<")
    for loaded in (
        np.load(path),
        np.load(path, mmap_mode="r"),
        open_array(path),
        open_array(path, mmap=False),
    ):
        assert loaded.shape == arr.shape
        np.testing.assert_array_equal(loaded, arr)
    assert read_header(path).data_offset == DATA_ALIGN
    assert open_array(path).dtype.byteorder in ("<", "|", "=")


def test_open_array_memmap_is_read_only_and_copy_is_not(tmp_path: Path) -> None:
    save_array(tmp_path / "a.npy", np.ones((4, 2), np.float32))
    m = open_array(tmp_path / "a.npy")
    assert isinstance(m, np.memmap) and not m.flags.writeable
    c = open_array(tmp_path / "a.npy", mmap=False)
    assert not isinstance(c, np.memmap) and c.flags.writeable


def test_open_array_reads_plain_numpy_files(tmp_path: Path) -> None:
    ref = np.arange(7, dtype=np.int64)
    np.save(tmp_path / "plain.npy", ref)
    assert read_header(tmp_path / "plain.npy").data_offset != DATA_ALIGN
    np.testing.assert_array_equal(open_array(tmp_path / "plain.npy"), ref)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(6).reshape(2, 3)))
    np.testing.assert_array_equal(open_array(tmp_path / "f.npy"), np.arange(6).reshape(2, 3))


def test_file_checksum_known_answer_and_multi_block(tmp_path: Path) -> None:
    small = tmp_path / "s.bin"
    small.write_bytes(b"hello")
    assert file_checksum(small) == "blake2b:" + hashlib.blake2b(b"hello").hexdigest()
    big = tmp_path / "b.bin"
    big.write_bytes(os.urandom((8 << 20) + 12345))  # crosses the 8 MiB read block
    assert file_checksum(big) == blake2b_of(big)
    empty = tmp_path / "e.bin"
    empty.write_bytes(b"")
    assert file_checksum(empty) == "blake2b:" + hashlib.blake2b(b"").hexdigest()


def test_file_info_raw_and_npy(tmp_path: Path) -> None:
    raw = tmp_path / "packed.bin"
    raw.write_bytes(b"\1" * 100)
    assert file_info(raw) == FileInfo("packed.bin", None, None, 100, blake2b_of(raw), 0)
    info = save_array(tmp_path / "a.npy", np.zeros((2, 3), np.float32))
    assert file_info(tmp_path / "a.npy") == info
    assert FileInfo.from_dict(info.to_dict()) == info
    assert FileInfo.from_dict(file_info(raw).to_dict()) == file_info(raw)


def test_o_direct_reads_the_last_block(tmp_path: Path) -> None:
    arr = np.arange(1000, dtype=np.int64)  # 8000 bytes: the last data block is partial
    path = tmp_path / "d.npy"
    save_array(path, arr)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    except OSError as e:
        if e.errno == errno.EINVAL:
            pytest.skip(f"filesystem of {tmp_path} refuses O_DIRECT")
        raise
    try:
        buf = mmap.mmap(-1, 2 * DATA_ALIGN)  # page-aligned
        n = os.preadv(fd, [buf], DATA_ALIGN)
    finally:
        os.close(fd)
    assert n == 2 * DATA_ALIGN
    np.testing.assert_array_equal(np.frombuffer(buf, np.int64, count=1000), arr)


# ------------------------------------------------------------------------------------- ArrayWriter


def test_array_writer_streams_chunks(tmp_path: Path) -> None:
    path = tmp_path / "w.npy"
    rng = np.random.default_rng(0)
    chunks = [rng.standard_normal((n, 3)).astype(np.float32) for n in (5, 0, 17, 1)]
    w = ArrayWriter(path, np.float32, row_shape=(3,))
    assert np.load(path).shape == (0, 3)  # valid (empty) while being written
    for c in chunks:
        w.append(c)
    info = w.close()
    ref = np.concatenate(chunks)
    np.testing.assert_array_equal(np.load(path, mmap_mode="r"), ref)
    assert info == file_info(path)
    assert info.shape == (23, 3) and info.bytes % DATA_ALIGN == 0
    assert w.close() == info  # idempotent
    # Same bytes as save_array of the concatenation.
    assert save_array(tmp_path / "ref.npy", ref).checksum == info.checksum


def test_array_writer_capacity_and_casting(tmp_path: Path) -> None:
    w = ArrayWriter(tmp_path / "c.npy", np.int64, capacity=10)
    w.append(np.arange(4, dtype=np.int32))  # int32 -> int64: same kind
    with pytest.raises(ValueError, match="capacity=10"):
        w.append(np.arange(7))
    with pytest.raises(ValueError, match="castable"):
        w.append(np.ones(2, np.float64))
    with pytest.raises(ValueError, match=r"expected shape \(k, \)"):
        w.append(np.ones((2, 2), np.int64))
    info = w.close()
    assert info.shape == (4,) and (tmp_path / "c.npy").stat().st_size == 2 * DATA_ALIGN
    np.testing.assert_array_equal(open_array(tmp_path / "c.npy"), np.arange(4))
    with pytest.raises(ValueError, match="closed"):
        w.append(np.arange(1))


def test_array_writer_context_manager_aborts_on_error(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    with pytest.raises(RuntimeError, match="boom"), ArrayWriter(path, np.int64) as w:
        w.append(np.arange(3))
        raise RuntimeError("boom")
    assert not path.exists()
    with ArrayWriter(path, np.int64, row_shape=2) as w:
        w.append(np.ones((2, 2), np.int64))
    assert w.info is not None and w.info.shape == (2, 2)


def test_allocate_gives_writable_aligned_memmap(tmp_path: Path) -> None:
    path = tmp_path / "m.npy"
    mm = ArrayWriter.allocate(path, np.float32, (5, 3))
    assert isinstance(mm, np.memmap) and mm.flags.writeable and mm.offset == DATA_ALIGN
    assert not mm.any()
    mm[:] = np.arange(15, dtype=np.float32).reshape(5, 3)
    mm.flush()
    del mm
    np.testing.assert_array_equal(np.load(path), np.arange(15, dtype=np.float32).reshape(5, 3))
    assert path.stat().st_size == 2 * DATA_ALIGN and read_header(path).data_offset == DATA_ALIGN
    assert ArrayWriter.allocate(tmp_path / "e.npy", np.int64, (0,)).shape == (0,)


# ---------------------------------------------------------------------------------- invalid inputs


@pytest.mark.parametrize(
    "arr",
    [np.array([{"a": 1}], dtype=object), np.zeros(2, dtype=[("a", "i4"), ("b", "f8")])],
    ids=["object", "structured"],
)
def test_save_array_rejects_unsupported_dtypes(tmp_path: Path, arr: np.ndarray) -> None:
    with pytest.raises(ValueError, match="expected a plain"):
        save_array(tmp_path / "bad.npy", arr)


def test_invalid_writer_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="dtype' expected a NumPy dtype"):
        ArrayWriter(tmp_path / "a.npy", "not-a-dtype")
    with pytest.raises(ValueError, match="row_shape' expected"):
        ArrayWriter(tmp_path / "a.npy", np.int64, row_shape=(-1,))
    with pytest.raises(ValueError, match="capacity' expected"):
        ArrayWriter(tmp_path / "a.npy", np.int64, capacity=-3)
    with pytest.raises(ValueError, match="header of at most"):
        ArrayWriter.allocate(tmp_path / "h.npy", np.int8, (1,) * 2000)


def test_open_array_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_array(tmp_path / "missing.npy")
    junk = tmp_path / "junk.npy"
    junk.write_bytes(b"not an npy file at all")
    with pytest.raises(ValueError, match=r"junk\.npy' expected the \.npy magic"):
        open_array(junk)
    save_array(tmp_path / "t.npy", np.arange(1000, dtype=np.int64))
    with open(tmp_path / "t.npy", "r+b") as f:
        f.truncate(DATA_ALIGN + 100)
    with pytest.raises(ValueError, match=r"t\.npy' expected at least 12096 bytes"):
        open_array(tmp_path / "t.npy")
    with pytest.raises(ValueError, match="expected at least"):
        file_info(tmp_path / "t.npy")


def test_file_info_from_dict_missing_field() -> None:
    with pytest.raises(ValueError, match=r"'FileInfo' expected fields \['checksum'"):
        FileInfo.from_dict({"name": "a", "dtype": None, "shape": None, "bytes": 1, "data_offset": 0})


def test_alignment_helpers_match_brute_force() -> None:
    from storage_kernels.arrays import align_up, blocks_of_rows, segment_ranges

    rng = np.random.default_rng(0)
    for row_bytes in (12, 64, 512, 5000, 9000):
        rows = rng.integers(0, 10000, 300)
        want = np.unique(np.concatenate([
            np.arange((4096 + r * row_bytes) // 4096, (4096 + (r + 1) * row_bytes - 1) // 4096 + 1) for r in rows
        ]))
        assert np.array_equal(blocks_of_rows(rows, row_bytes), want)
    assert blocks_of_rows(np.empty(0, dtype=np.int64), 64).size == 0
    assert np.array_equal(segment_ranges(np.array([3, 0, 2])), [0, 1, 2, 0, 1])
    assert segment_ranges(np.empty(0, dtype=np.int64)).size == 0
    assert align_up(1) == 4096 and align_up(4096) == 4096 and align_up(0) == 0
    assert list(align_up(np.array([0, 4097]))) == [0, 8192]
    assert align_up(5, 4) == 8


def _rss_file_kb() -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssFile:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def test_release_pages_drops_resident_file_pages(tmp_path):
    if _rss_file_kb() is None:
        pytest.skip("needs /proc/self/status (Linux)")
    path = tmp_path / "big.npy"
    save_array(path, np.arange(8_000_000, dtype=np.int64))  # 64 MB
    a = open_array(path)
    before = _rss_file_kb()
    assert int(a[::512].sum()) > 0  # touch every page
    touched = _rss_file_kb()
    assert touched - before > 40_000
    assert release_pages(a[100:200])  # any view of the mapping releases the whole mapping
    assert _rss_file_kb() - before < 10_000
    assert a[123] == 123  # still readable: faulted back in from the page cache
    assert not release_pages(np.zeros(3))  # not a mapping: nothing to do


def test_row_ranges_cut_rows_by_entries() -> None:
    from storage_kernels.arrays import row_ranges

    indptr = np.array([0, 3, 4, 4, 10, 11, 12])  # row lengths 3, 1, 0, 6, 1, 1
    assert row_ranges(indptr, 4).tolist() == [0, 3, 4, 6]  # the 6-entry row stands alone
    assert row_ranges(indptr, 100).tolist() == [0, 6]
    assert row_ranges(indptr, 1).tolist() == [0, 1, 3, 4, 5, 6]
    assert row_ranges(np.array([0]), 5).tolist() == [0]
    assert row_ranges(indptr, 1, min_rows=4).tolist() == [0, 4, 6]  # at least 4 rows a range, or the rest
