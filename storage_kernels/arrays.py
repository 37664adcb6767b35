"""Aligned array files: `.npy` files whose data starts at byte 4096.

Every array file Strata writes is a standard NumPy `.npy` file (format 2.0, or 3.0 when the header needs
UTF-8) whose header is padded with spaces so that the data starts exactly at byte :data:`DATA_ALIGN`. The
file is then padded with zero bytes to a multiple of :data:`DATA_ALIGN`, so that

* ``np.load(path, mmap_mode="r")`` (and :func:`open_array`) read it like any other `.npy` file, and
* ``O_DIRECT`` can read any 4096-aligned range of the data, including the last, partial block.

Arrays larger than RAM are written with :class:`ArrayWriter` (streaming append of row chunks) or filled
in place through the writable memmap returned by :meth:`ArrayWriter.allocate`, whose blocks are reserved up
front (:func:`reserve_space`): a full disk is then an ``OSError`` (ENOSPC) naming the file, not a ``SIGBUS`` when a
page of the map is first written.

Raw files (anything that is not `.npy`, e.g. ``packed.bin``) are described by a :class:`FileInfo` with
``dtype=None``, ``shape=None`` and ``data_offset=0``.
"""

from __future__ import annotations

import ast
import contextlib
import errno
import hashlib
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

__all__ = [
    "DATA_ALIGN",
    "ArrayHeader",
    "ArrayWriter",
    "FileInfo",
    "advise_random",
    "random_access",
    "align_up",
    "blocks_of_rows",
    "file_checksum",
    "file_info",
    "open_array",
    "read_header",
    "reserve_space",
    "row_ranges",
    "save_array",
    "segment_ranges",
]

#: Byte offset of the data in every array file, and the alignment of the file's total size.
DATA_ALIGN = 4096

_MAGIC = b"\x93NUMPY"
_PREFIX_V2 = len(_MAGIC) + 2 + 4  # magic, (major, minor), uint32 header length
_CHECKSUM_BLOCK = 8 << 20  # 8 MiB
_WRITE_CHUNK = 64 << 20  # bytes per write when copying an array to disk
_CHECKSUM_PREFIX = "blake2b:"


@dataclass(frozen=True)
class FileInfo:
    """What the manifest records about one file of an artifact.

    ``dtype`` is the NumPy dtype string (``"<f4"``) and ``shape`` the array shape for `.npy` files; both are
    ``None`` for raw files. ``bytes`` is the file size and ``data_offset`` the byte where the data starts
    (:data:`DATA_ALIGN` for array files written here, 0 for raw files).
    """

    name: str
    dtype: str | None
    shape: tuple[int, ...] | None
    bytes: int
    checksum: str
    data_offset: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``shape`` as a list)."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": None if self.shape is None else list(self.shape),
            "bytes": self.bytes,
            "checksum": self.checksum,
            "data_offset": self.data_offset,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FileInfo:
        """Inverse of :meth:`to_dict`; ValueError naming the missing field."""
        missing = [k for k in ("name", "dtype", "shape", "bytes", "checksum", "data_offset") if k not in d]
        if missing:
            raise ValueError(f"'FileInfo' expected fields {missing} (got keys {sorted(d)})")
        shape = d["shape"]
        return cls(
            name=str(d["name"]),
            dtype=None if d["dtype"] is None else str(d["dtype"]),
            shape=None if shape is None else tuple(int(s) for s in shape),
            bytes=int(d["bytes"]),
            checksum=str(d["checksum"]),
            data_offset=int(d["data_offset"]),
        )


@dataclass(frozen=True)
class ArrayHeader:
    """The parsed header of a `.npy` file."""

    dtype: np.dtype
    shape: tuple[int, ...]
    fortran_order: bool
    data_offset: int

    @property
    def nbytes(self) -> int:
        """Size of the data in bytes."""
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize


# --------------------------------------------------------------------------------------------- helpers


def align_up(nbytes: Any, to: int = DATA_ALIGN) -> Any:
    """``nbytes`` (an int or an integer array) rounded up to a multiple of ``to``."""
    return -(-nbytes // to) * to


def row_ranges(indptr: np.ndarray, max_entries: int, min_rows: int = 1) -> np.ndarray:
    """Bounds ``b`` (int64, from 0 to N) cutting CSR rows into ranges ``[b[i], b[i+1])`` of at most
    ``max_entries`` entries each, except where that would hold fewer than ``min_rows`` rows (a range holds at
    least ``min_rows`` rows, or the rest; single rows heavier than ``max_entries`` stand alone)."""
    n = len(indptr) - 1
    bounds = [0]
    while bounds[-1] < n:
        s = bounds[-1]
        e = int(np.searchsorted(indptr, int(indptr[s]) + max_entries, side="right")) - 1
        bounds.append(min(n, max(e, s + max(min_rows, 1))))
    return np.asarray(bounds, dtype=np.int64)


def segment_ranges(lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(n) for n in lengths])``, vectorised (int64)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) - np.repeat(ends - lengths, lengths)


def blocks_of_rows(rows: np.ndarray, row_bytes: int, data_offset: int | np.ndarray = DATA_ALIGN,
                   block_bytes: int = DATA_ALIGN) -> np.ndarray:
    """Sorted distinct ``block_bytes`` blocks of an array file holding the given rows (row ``r`` at byte
    ``data_offset + r * row_bytes``; ``data_offset`` may be one per row): what an aligned direct reader must
    fetch, or a page-locality count."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0 or row_bytes <= 0:
        return np.empty(0, dtype=np.int64)
    start = data_offset + rows * row_bytes
    first = start // block_bytes
    span = (start + row_bytes - 1) // block_bytes - first + 1  # blocks per row
    return np.unique(np.repeat(first, span) + segment_ranges(span))


def _check_dtype(dtype: Any, what: str = "dtype") -> np.dtype:
    """A plain little-endian dtype (no objects, fields or sub-arrays)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"'{what}' expected a NumPy dtype (got {dtype!r})") from e
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None:
        raise ValueError(f"'{what}' expected a plain numeric/bool/bytes dtype (got {dt!r})")
    if dt.byteorder == ">" or (dt.byteorder == "=" and sys.byteorder == "big"):
        dt = dt.newbyteorder("<")
    return dt


def _check_shape(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        out = tuple(int(s) for s in shape)
    except TypeError as e:
        raise ValueError(f"'{what}' expected a tuple of non-negative ints (got {shape!r})") from e
    if any(s < 0 for s in out):
        raise ValueError(f"'{what}' expected a tuple of non-negative ints (got {shape!r})")
    return out


def _header_bytes(dtype: np.dtype, shape: tuple[int, ...], path: Path) -> bytes:
    """A `.npy` 2.0/3.0 header of exactly DATA_ALIGN bytes (space padded, newline terminated)."""
    descr = np.lib.format.dtype_to_descr(dtype)
    text = "{" + f"'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, " + "}"
    room = DATA_ALIGN - _PREFIX_V2
    try:
        body, major = text.encode("latin1"), 2
    except UnicodeEncodeError:
        body, major = text.encode("utf8"), 3
    if len(body) + 1 > room:
        raise ValueError(f"'{path}' expected a .npy header of at most {room} bytes (got {len(body) + 1} for {dtype!r})")
    body = body + b" " * (room - len(body) - 1) + b"\n"
    return _MAGIC + bytes([major, 0]) + len(body).to_bytes(4, "little") + body


def _as_bytes(a: np.ndarray) -> memoryview:
    """Raw bytes of a C-contiguous array (works for dtypes the buffer protocol refuses, e.g. datetimes)."""
    return memoryview(a.reshape(-1).view(np.uint8))


def _write_rows(f: Any, arr: np.ndarray, dtype: np.dtype, h: Any = None) -> int:
    """Write ``arr`` as C-ordered ``dtype`` bytes in pieces of ~64 MiB (no full copy of large or
    non-contiguous inputs); feed ``h`` if given; return the bytes written."""
    if arr.ndim == 0 or arr.size == 0:
        pieces: Sequence[np.ndarray] = [arr]
    else:
        row_bytes = max(1, arr[0].size * dtype.itemsize)
        step = max(1, _WRITE_CHUNK // row_bytes)
        pieces = [arr[i : i + step] for i in range(0, arr.shape[0], step)]
    written = 0
    for piece in pieces:
        data = _as_bytes(np.ascontiguousarray(piece, dtype=dtype))
        f.write(data)
        if h is not None:
            h.update(data)
        written += len(data)
    return written


def _write_zeros(f: Any, n: int) -> None:
    if n:
        f.write(b"\0" * n)


# ------------------------------------------------------------------------------------------ public API


def read_header(path: str | os.PathLike[str]) -> ArrayHeader:
    """Parse the header of any `.npy` file (versions 1.0, 2.0, 3.0).

    Raises FileNotFoundError if the file is missing and ValueError naming the file if it is not a valid
    `.npy` file.
    """
    path = Path(path)
    with open(path, "rb") as f:
        prefix = f.read(_PREFIX_V2)
        if len(prefix) < 10 or prefix[:6] != _MAGIC:
            raise ValueError(f"'{path}' expected the .npy magic {_MAGIC!r} (got {prefix[:6]!r})")
        major, minor = prefix[6], prefix[7]
        if (major, minor) == (1, 0):
            hlen, start = int.from_bytes(prefix[8:10], "little"), 10
        elif (major, minor) in ((2, 0), (3, 0)):
            if len(prefix) < _PREFIX_V2:
                raise ValueError(f"'{path}' expected a {_PREFIX_V2}-byte .npy prefix (got {len(prefix)})")
            hlen, start = int.from_bytes(prefix[8:12], "little"), _PREFIX_V2
        else:
            raise ValueError(f"'{path}' expected .npy format 1.0, 2.0 or 3.0 (got {major}.{minor})")
        f.seek(start)
        raw = f.read(hlen)
    if len(raw) != hlen:
        raise ValueError(f"'{path}' expected a {hlen}-byte .npy header (got {len(raw)} bytes)")
    try:
        d = ast.literal_eval(raw.decode("utf8" if major == 3 else "latin1"))
        dtype = np.lib.format.descr_to_dtype(d["descr"])
        shape = tuple(int(s) for s in d["shape"])
        fortran = bool(d["fortran_order"])
    except (ValueError, SyntaxError, KeyError, TypeError) as e:
        raise ValueError(f"'{path}' expected a .npy header dict (got {raw[:200]!r})") from e
    return ArrayHeader(dtype=dtype, shape=shape, fortran_order=fortran, data_offset=start + hlen)


def file_checksum(path: str | os.PathLike[str]) -> str:
    """``"blake2b:<hex>"`` of the whole file, read in 8 MiB blocks."""
    h = hashlib.blake2b()
    buf = bytearray(_CHECKSUM_BLOCK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return _CHECKSUM_PREFIX + h.hexdigest()


def file_info(path: str | os.PathLike[str], name: str | None = None) -> FileInfo:
    """Describe an existing file: `.npy` files by their header, anything else as a raw file.

    ``name`` defaults to the file name. The checksum is computed by reading the whole file.
    """
    path = Path(path)
    size = path.stat().st_size
    if path.suffix == ".npy":
        hdr = read_header(path)
        if size < hdr.data_offset + hdr.nbytes:
            raise ValueError(
                f"'{path}' expected at least {hdr.data_offset + hdr.nbytes} bytes for shape {hdr.shape} "
                f"{hdr.dtype} (got {size})"
            )
        dtype, shape, offset = hdr.dtype.str, hdr.shape, hdr.data_offset
    else:
        dtype, shape, offset = None, None, 0
    return FileInfo(
        name=name or path.name,
        dtype=dtype,
        shape=shape,
        bytes=size,
        checksum=file_checksum(path),
        data_offset=offset,
    )


def save_array(path: str | os.PathLike[str], array: Any) -> FileInfo:
    """Write ``array`` as an aligned `.npy` file (data at byte 4096) and return its :class:`FileInfo`.

    Non-contiguous, Fortran-ordered or big-endian inputs are written as C-ordered little-endian data;
    memmaps larger than RAM are copied in 64 MiB pieces. The checksum is computed while writing.
    """
    path = Path(path)
    arr = np.asanyarray(array)
    dtype = _check_dtype(arr.dtype, f"{path}: dtype")
    shape = tuple(int(s) for s in arr.shape)
    header = _header_bytes(dtype, shape, path)
    h = hashlib.blake2b()
    with open(path, "wb") as f:
        f.write(header)
        h.update(header)
        written = _write_rows(f, arr, dtype, h)
        pad = align_up(DATA_ALIGN + written) - (DATA_ALIGN + written)
        _write_zeros(f, pad)
        h.update(b"\0" * pad)
    return FileInfo(
        name=path.name,
        dtype=dtype.str,
        shape=shape,
        bytes=DATA_ALIGN + written + pad,
        checksum=_CHECKSUM_PREFIX + h.hexdigest(),
        data_offset=DATA_ALIGN,
    )


def open_array(path: str | os.PathLike[str], mmap: bool = True) -> np.ndarray:
    """Open a `.npy` file: a read-only memmap (``mmap=True``) or an in-memory copy.

    Reads any `.npy` file (aligned or not). Raises FileNotFoundError if missing and ValueError naming the
    file if the header is invalid or the file is shorter than its header says.
    """
    path = Path(path)
    hdr = read_header(path)
    size = path.stat().st_size
    need = hdr.data_offset + hdr.nbytes
    if size < need:
        raise ValueError(f"'{path}' expected at least {need} bytes for shape {hdr.shape} {hdr.dtype} (got {size})")
    order = "F" if hdr.fortran_order else "C"
    if mmap:
        return np.memmap(path, dtype=hdr.dtype, mode="r", offset=hdr.data_offset, shape=hdr.shape, order=order)
    count = int(np.prod(hdr.shape, dtype=np.int64))
    with open(path, "rb") as f:
        f.seek(hdr.data_offset)
        flat = np.fromfile(f, dtype=hdr.dtype, count=count)
    return flat.reshape(hdr.shape, order=order)


def _mapping_of(array: Any) -> Any:
    """The ``mmap.mmap`` behind ``array`` (through its ``base`` chain), or None."""
    import mmap as _mmap

    base = array
    while base is not None and not isinstance(base, _mmap.mmap):
        base = getattr(base, "base", None)
    return None if base is None or getattr(base, "closed", False) else base


def advise_random(*arrays: Any) -> int:
    """Tell the kernel the file mappings behind ``arrays`` are read at random (``madvise(MADV_RANDOM)``): a page
    fault then reads its page, not the 128 KiB or more of read-around a sequential reader wants. Sampling
    neighbours from a memory-mapped CSR larger than memory touches a few entries per row, far apart: with
    read-around every miss reads tens of times the bytes it needs and evicts pages that were still in use.
    Returns how many mappings were advised (arrays not backed by one are skipped)."""
    import mmap as _mmap

    advised = 0
    for array in arrays:
        base = _mapping_of(array)
        if base is not None and hasattr(_mmap, "MADV_RANDOM"):
            base.madvise(_mmap.MADV_RANDOM)
            advised += 1
    return advised


@contextlib.contextmanager
def random_access(*arrays: Any) -> Iterator[None]:
    """:func:`advise_random` on ``arrays`` for the block, then the default read-around again
    (``MADV_NORMAL``): a mapping shared with sequential readers (an artifact's cached arrays) keeps its
    read-ahead outside the block."""
    import mmap as _mmap

    advise_random(*arrays)
    try:
        yield
    finally:
        for array in arrays:
            base = _mapping_of(array)
            if base is not None and hasattr(_mmap, "MADV_NORMAL"):
                base.madvise(_mmap.MADV_NORMAL)


def release_pages(array: Any) -> bool:
    """Drop this process's resident pages of the file mapping behind ``array`` (``madvise(MADV_DONTNEED)``).

    A memory-mapped file streamed once stays resident in the process (and counts in its RSS) until unmapped,
    although the kernel could reclaim it: streaming a 5 GB feature file would look like 5 GB of memory. For a
    read-only mapping this only forgets the page-table entries; the data stays in the page cache and a later
    access faults it back in. Returns False (and does nothing) when ``array`` is not backed by a mapping.
    """
    import mmap as _mmap

    base = _mapping_of(array)
    if base is None or not hasattr(_mmap, "MADV_DONTNEED"):
        return False
    base.madvise(_mmap.MADV_DONTNEED)
    return True


#: posix_fallocate's answers for a filesystem (or a platform) that cannot reserve blocks
_NO_RESERVE = frozenset({errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS, errno.ENODEV})


def reserve_space(fd: int, nbytes: int, path: str | os.PathLike[str]) -> bool:
    """Allocate the blocks of the first ``nbytes`` of the open file ``fd`` (extending it to at least ``nbytes``)
    before a memory map of it is written.

    A page of a shared map is given its disk block only when first written; with the disk full, that write faults
    and the kernel kills the process with ``SIGBUS`` (exit 135, no message). Reserved blocks make a full disk an
    ``OSError`` (ENOSPC, naming ``path``) here instead. ``posix_fallocate`` allocates extents without writing
    zeros on ext4, xfs and btrfs; on tmpfs it takes the memory pages the map would take anyway; where the
    filesystem has no ``fallocate`` (NFS before 4.2, ZFS before 2.2) glibc emulates it with one 1-byte write per
    4 KiB block. Returns False, leaving the file sparse as before, where nothing can reserve (no
    ``posix_fallocate`` on this platform, or the filesystem refuses it: EOPNOTSUPP, EINVAL): the map then works
    as before, and a full disk still faults there.

    Reserve only what will be written: the reserved blocks are used space, whether written or not.
    """
    if nbytes <= 0:
        return True
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:  # macOS, Windows
        return False
    size = os.fstat(fd).st_size
    try:
        fallocate(fd, 0, int(nbytes))
    except OSError as e:
        if e.errno in _NO_RESERVE:
            return False  # this filesystem cannot reserve: keep the sparse file (see the docstring)
        # a failed call can leave the extents it got allocated (ENOSPC: 11 GB of a 51 GB table filled a disk)
        os.ftruncate(fd, size)
        raise OSError(e.errno, e.strerror or os.strerror(e.errno), os.fspath(path)) from e
    return True


class ArrayWriter:
    """Streaming writer of an aligned `.npy` file, one chunk of rows at a time.

    The 4096-byte header is reserved up front (valid, with 0 rows, while writing), row chunks are appended,
    and :meth:`close` pads the file, rewrites the header with the final shape and returns the
    :class:`FileInfo`. ``capacity`` (rows), when given, preallocates the file and is an upper bound.

    Usable as a context manager: a clean exit closes, an exception removes the partial file.

    >>> with ArrayWriter(path, "int64") as w:   # doctest: +SKIP
    ...     for chunk in chunks:
    ...         w.append(chunk)
    >>> info = w.info                           # doctest: +SKIP
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        dtype: Any,
        row_shape: Sequence[int] | int = (),
        capacity: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.dtype = _check_dtype(dtype, f"{self.path}: dtype")
        self.row_shape = _check_shape(row_shape, f"{self.path}: row_shape")
        if capacity is not None and (not isinstance(capacity, (int, np.integer)) or capacity < 0):
            raise ValueError(f"'{self.path}: capacity' expected a non-negative int or None (got {capacity!r})")
        self.capacity = None if capacity is None else int(capacity)
        self.rows = 0
        self.info: FileInfo | None = None
        self._row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self._file: Any = open(self.path, "wb")  # closed in close() / abort()
        self._file.write(_header_bytes(self.dtype, (0, *self.row_shape), self.path))
        self._file.flush()  # a valid .npy of 0 rows from the start
        if self.capacity:
            # the disk cannot hold the rows to come: fail now, not after the work that makes them (a filesystem
            # that cannot reserve keeps the preallocation a hint: reserve_space returns False)
            try:
                reserve_space(self._file.fileno(), align_up(DATA_ALIGN + self.capacity * self._row_bytes), self.path)
            except OSError:
                self.abort()
                raise

    @property
    def closed(self) -> bool:
        """True once :meth:`close` or :meth:`abort` ran."""
        return self._file is None

    def append(self, chunk: Any) -> None:
        """Append rows: ``chunk`` of shape ``(k, *row_shape)``, castable (same kind) to the writer's dtype."""
        if self._file is None:
            raise ValueError(f"'{self.path}' expected an open ArrayWriter (got a closed one)")
        a = np.asanyarray(chunk)
        if a.ndim != 1 + len(self.row_shape) or tuple(a.shape[1:]) != self.row_shape:
            raise ValueError(
                f"'{self.path}: chunk' expected shape (k, {', '.join(map(str, self.row_shape))}) (got {a.shape})"
            )
        if not np.can_cast(a.dtype, self.dtype, casting="same_kind"):
            raise ValueError(f"'{self.path}: chunk' expected dtype castable to {self.dtype} (got {a.dtype})")
        if self.capacity is not None and self.rows + a.shape[0] > self.capacity:
            raise ValueError(
                f"'{self.path}' expected at most capacity={self.capacity} rows (got {self.rows + a.shape[0]})"
            )
        if a.shape[0]:
            try:
                _write_rows(self._file, a, self.dtype)
            except BaseException:
                # Drop the partial chunk so that the file stays consistent with self.rows.
                self._file.seek(DATA_ALIGN + self.rows * self._row_bytes)
                self._file.truncate()
                raise
        self.rows += a.shape[0]

    def close(self, checksum: bool = True) -> FileInfo:
        """Pad, rewrite the header with the final shape, close and return the :class:`FileInfo`.

        Calling it again returns the same info. ``checksum=False`` skips reading the file back for its
        checksum (the info's ``checksum`` is then empty): for scratch files that are never verified.
        """
        if self._file is None:
            if self.info is None:
                raise ValueError(f"'{self.path}' expected a closed ArrayWriter (got an aborted one)")
            return self.info
        f, shape = self._file, (self.rows, *self.row_shape)
        end = DATA_ALIGN + self.rows * self._row_bytes
        f.seek(end)
        f.truncate()
        _write_zeros(f, align_up(end) - end)
        f.seek(0)
        f.write(_header_bytes(self.dtype, shape, self.path))
        f.close()
        self._file = None
        self.info = FileInfo(
            name=self.path.name,
            dtype=self.dtype.str,
            shape=shape,
            bytes=align_up(end),
            checksum=file_checksum(self.path) if checksum else "",
            data_offset=DATA_ALIGN,
        )
        return self.info

    def abort(self) -> None:
        """Close and remove the partial file."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> ArrayWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @staticmethod
    def allocate(path: str | os.PathLike[str], dtype: Any, shape: Sequence[int] | int) -> np.memmap:
        """Create an aligned `.npy` file of ``shape`` (zero-filled, its blocks reserved) and return a writable
        memmap.

        The whole file is reserved (:func:`reserve_space`), so a disk without room for it raises ``OSError``
        (ENOSPC) naming ``path`` here rather than killing the process with ``SIGBUS`` while the map is filled:
        allocate only arrays that will be filled. Fill it, then ``flush()`` (or let the artifact builder do it at
        publish).
        """
        path = Path(path)
        dt = _check_dtype(dtype, f"{path}: dtype")
        shp = _check_shape(shape, f"{path}: shape")
        nbytes = int(np.prod(shp, dtype=np.int64)) * dt.itemsize
        total = align_up(DATA_ALIGN + nbytes)
        f = open(path, "wb")  # closed below; the file is removed if anything fails
        try:
            with f:
                f.write(_header_bytes(dt, shp, path))
                f.flush()
                reserve_space(f.fileno(), total, path)
                f.truncate(total)  # where nothing was reserved: the sparse file of the right size
        except BaseException as e:
            path.unlink(missing_ok=True)  # no partial file left holding the blocks it got
            if isinstance(e, OSError) and e.errno is not None and e.filename is None:  # a buffered write's
                raise OSError(e.errno, e.strerror or os.strerror(e.errno), os.fspath(path)) from e
            raise
        return np.memmap(path, dtype=dt, mode="r+", offset=DATA_ALIGN, shape=shp)
