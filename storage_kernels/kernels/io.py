"""Wrappers of the ``io/`` kernels: direct I/O and io_uring reads (``dio.c``, ``uring.c``), row gathers
(``gather.c``, ``gather_into.c``, ``rows_at.c``), DiskGNN's batched packing (``pack.c``, with the
:func:`pack_batches` driver), the split of a batch's address table by tier code (``split.c``), the blocks a set
of rows needs (``blocks.c``) and the segment disk caches' MinHash signatures and block counts (``diskcache.c``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from storage_kernels.kernels._common import DIRECT_ALIGN, _index_array, _native
from storage_kernels.kernels.cache import rows_in_blocks

# ---- gathers ----------------------------------------------------------------------------------------------


def gather_rows(src: np.ndarray, idx, out: np.ndarray | None = None, num_threads: int = 0) -> np.ndarray:
    """``out[k] = src[idx[k]]`` for a 2-D C-contiguous ``src`` of any dtype (e.g. a memmap'd feature file).

    ``out`` (``(len(idx), src.shape[1])``, same dtype) is allocated when None; returns ``out``. Raises
    IndexError naming ``k`` and the id before anything is copied.
    """
    if not (isinstance(src, np.ndarray) and src.ndim == 2 and src.flags.c_contiguous):
        src = np.ascontiguousarray(src)
    idx = _index_array("idx", idx)
    if out is None:
        out = np.empty((idx.shape[0], src.shape[1] if src.ndim == 2 else 0), dtype=src.dtype)
    _native.gather_rows(src=src, idx=idx, out=out, num_threads=num_threads)
    return out


# ---- direct I/O -------------------------------------------------------------------------------------------


def open_direct(path: str | os.PathLike, write: bool = False) -> tuple[int, bool]:
    """Open ``path`` with ``O_DIRECT`` (read-only unless ``write``, which creates without truncating).

    Returns ``(fd, direct)``; ``direct`` is False when the filesystem refused ``O_DIRECT`` and the file was
    reopened buffered. Close with :func:`close_fd`.
    """
    return _native.open_direct(path=os.fspath(path), write=bool(write))


def close_fd(fd: int) -> None:
    """Close a descriptor returned by :func:`open_direct`."""
    _native.close_fd(fd=fd)


def _range_args(offsets, lengths, out: np.ndarray, out_offsets, direct: bool) -> dict:
    """The keyword arguments :func:`pread_ranges` and :func:`uring_read_ranges` pass alike to the C function."""
    return {"offsets": _index_array("offsets", offsets), "lengths": _index_array("lengths", lengths), "out": out,
            "out_offsets": _index_array("out_offsets", out_offsets), "direct": bool(direct)}


def pread_ranges(fd: int, offsets, lengths, out: np.ndarray, out_offsets, direct: bool, num_threads: int = 0) -> int:
    """Read ``lengths[k]`` bytes at file offset ``offsets[k]`` into ``out[out_offsets[k]:]`` for every ``k``.

    ``out`` is a writable C-contiguous uint8 buffer (see :func:`aligned_empty`). When ``direct``, offsets,
    lengths and destination addresses must be multiples of :data:`DIRECT_ALIGN` (ValueError naming ``k``
    otherwise). Reads run on ``num_threads`` threads and are retried until complete; returns the bytes read.
    Raises OSError naming the fd and offset on a failed read or end of file inside a range.
    """
    return _native.pread_ranges(fd=fd, **_range_args(offsets, lengths, out, out_offsets, direct),
                                num_threads=num_threads)


#: io_uring requests in flight by default: the ring waits for a quarter of it per ``io_uring_enter``, so a deeper
#: ring makes fewer system calls (``train.io_queue_depth``'s default too).
URING_QUEUE_DEPTH = 256


def uring_read_ranges(fd: int, offsets, lengths, out: np.ndarray, out_offsets, direct: bool,
                      queue_depth: int = URING_QUEUE_DEPTH, merge: bool = True) -> tuple[int, int]:
    """:func:`pread_ranges` through an io_uring: the same reads, checks and errors, with up to ``queue_depth``
    requests in flight on one thread.

    With ``merge``, ranges are read in file order, a range inside the previous one read (the same pages) is
    copied from it instead of read again, and a range starting where the previous one ends joins its request
    (one READV scattering a contiguous file span); ``merge=False`` issues every range as given. Returns
    ``(bytes, reads)``: the bytes delivered (the sum of ``lengths``) and the reads issued after merging
    (``len(offsets)`` without it). Needs :func:`io_uring_available`; raises OSError otherwise.
    """
    return _native.uring_read_ranges(fd=fd, **_range_args(offsets, lengths, out, out_offsets, direct),
                                     queue_depth=int(queue_depth), merge=bool(merge))


#: Setting this environment variable to 1 makes :func:`io_uring_available` say no (forces the pread pool).
DISABLE_IO_URING_ENV = "STRATA_DISABLE_IO_URING"


def io_uring_available() -> tuple[bool, str]:
    """``(True, "")`` when io_uring works here (a ring is set up and completes a NOP; probed once per
    process), else ``(False, reason)``: no io_uring in the kernel (ENOSYS), refused by seccomp or
    ``/proc/sys/kernel/io_uring_disabled`` (EPERM), or ``STRATA_DISABLE_IO_URING=1``."""
    if os.environ.get(DISABLE_IO_URING_ENV, "") == "1":
        return False, f"io_uring disabled by {DISABLE_IO_URING_ENV}=1"
    return _native.io_uring_available()


def aligned_empty(nbytes: int, alignment: int = DIRECT_ALIGN) -> np.ndarray:
    """Uninitialised ``uint8[nbytes]`` whose data address is a multiple of ``alignment`` (a power of two)."""
    return _native.aligned_empty(nbytes=int(nbytes), alignment=int(alignment))


# ---- batched packing (DiskGNN) ----------------------------------------------------------------------------


def pack_partition(
    features: np.ndarray,
    row_start: int,
    ids: np.ndarray,
    batch_ptr: np.ndarray,
    cursor: np.ndarray,
    fd: int,
    chunk_offsets: np.ndarray,
    num_threads: int = 0,
) -> int:
    """Pack one partition ``features`` = rows ``[row_start, row_start + R)`` of the float32 feature file.

    For each batch ``b`` the ids ``ids[batch_ptr[b]:batch_ptr[b+1]]`` are sorted ascending and
    ``cursor[b]`` of them are already written; those falling in this partition are gathered and written
    with one ``pwrite`` at byte ``chunk_offsets[b] + cursor[b] * F * 4``, then ``cursor`` (int64, updated
    in place) advances. Partitions must be visited in ascending row order. Returns the bytes written.
    """
    features = np.asarray(features)
    if features.dtype != np.float32:
        raise ValueError(f"'features' expected float32 rows (got {features.dtype})")
    return _native.pack_partition(
        features=np.ascontiguousarray(features),
        row_start=int(row_start),
        ids=_index_array("ids", ids),
        batch_ptr=_index_array("batch_ptr", batch_ptr),
        cursor=cursor,
        fd=fd,
        chunk_offsets=_index_array("chunk_offsets", chunk_offsets),
        num_threads=num_threads,
    )


def pack_batches(
    feature_array: np.ndarray,
    batch_ids: Sequence[np.ndarray],
    path: str | os.PathLike,
    partition_rows: int,
    chunk_align: int = DIRECT_ALIGN,
    num_threads: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Write every batch's feature rows as one contiguous chunk of ``path``, in one pass over the features.

    Parameters
    ----------
    feature_array
        ``(N, F)`` float32, typically a read-only ``np.memmap`` of the feature file.
    batch_ids
        Per batch, the sorted unique int64 node ids whose rows the batch needs from this chunk.
    path
        Output file (created or truncated); its size is padded to a multiple of ``chunk_align`` so every
        chunk can be read with aligned direct reads.
    partition_rows
        Rows of ``feature_array`` read per step (memory bound of the pass: ``partition_rows * F * 4`` bytes
        of page cache plus one staging buffer per thread).
    chunk_align
        Chunks start at multiples of this many bytes (a power of two).

    Returns
    -------
    (chunk_offsets, chunk_rows)
        int64 ``(num_batches,)``: batch ``b``'s rows are at bytes
        ``[chunk_offsets[b], chunk_offsets[b] + chunk_rows[b] * F * 4)``, in ``batch_ids[b]`` order.
    """
    features = np.asarray(feature_array)  # a view of a memmap, no copy
    if features.dtype != np.float32 or features.ndim != 2:
        raise ValueError(
            f"'feature_array' expected a 2-D float32 array (got {features.dtype} array of shape {features.shape})"
        )
    if partition_rows < 1:
        raise ValueError(f"'partition_rows' expected >= 1 (got {partition_rows})")
    if chunk_align < 1 or chunk_align & (chunk_align - 1):
        raise ValueError(f"'chunk_align' expected a power of two (got {chunk_align})")
    num_rows, dim = features.shape
    row_bytes = dim * 4

    ids_list = []
    for b, ids in enumerate(batch_ids):
        ids = _index_array(f"batch_ids[{b}]", ids)
        if ids.size:
            if ids[0] < 0 or ids[-1] >= num_rows:
                bad = int(np.flatnonzero((ids < 0) | (ids >= num_rows))[0])
                raise IndexError(
                    f"'batch_ids[{b}]' expected row ids in [0, {num_rows}) (got batch_ids[{b}][{bad}]={ids[bad]})"
                )
            steps = np.flatnonzero(np.diff(ids) <= 0)
            if steps.size:
                i = int(steps[0]) + 1
                raise ValueError(
                    f"'batch_ids[{b}]' expected strictly ascending ids "
                    f"(got batch_ids[{b}][{i}]={ids[i]} after {ids[i - 1]})"
                )
        ids_list.append(ids)

    num_batches = len(ids_list)
    chunk_rows = np.array([ids.size for ids in ids_list], dtype=np.int64)
    padded = (chunk_rows * row_bytes + chunk_align - 1) // chunk_align * chunk_align
    chunk_offsets = np.zeros(num_batches, dtype=np.int64)
    np.cumsum(padded[:-1], out=chunk_offsets[1:])
    total_bytes = int(padded.sum())
    ids_all = np.concatenate(ids_list) if ids_list else np.empty(0, dtype=np.int64)
    batch_ptr = np.zeros(num_batches + 1, dtype=np.int64)
    np.cumsum(chunk_rows, out=batch_ptr[1:])
    cursor = np.zeros(num_batches, dtype=np.int64)
    num_parts = -(-num_rows // partition_rows) if partition_rows > 0 else 0
    wanted = np.zeros(num_parts, dtype=bool)  # partitions some batch needs (the others are skipped)
    for ids in ids_list:
        wanted[np.unique(ids // partition_rows)] = True  # per batch: no sort of every id at once

    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, total_bytes)
        for start in range(0, num_rows, partition_rows):
            stop = min(num_rows, start + partition_rows)
            if not wanted[start // partition_rows]:
                continue
            part = np.ascontiguousarray(features[start:stop])  # (R, F) view of the memmap, read sequentially
            _native.pack_partition(features=part, row_start=start, ids=ids_all, batch_ptr=batch_ptr, cursor=cursor,
                                   fd=fd, chunk_offsets=chunk_offsets, num_threads=num_threads)
    finally:
        os.close(fd)
    if not np.array_equal(cursor, chunk_rows):
        b = int(np.flatnonzero(cursor != chunk_rows)[0])
        raise ValueError(f"'batch_ids[{b}]' expected all {chunk_rows[b]} rows packed (got {cursor[b]})")
    return chunk_offsets, chunk_rows


# ---- rows at byte offsets: the block-aligned feature layout (rows_at.c) -----------------------------------


def place_rows_at(rows: np.ndarray, offsets, out: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """``out[offsets[k] : offsets[k] + row_bytes] = rows[k]`` (as bytes) for a flat writable uint8 ``out``.

    ``rows`` is 2-D (any dtype; made C-contiguous), ``row_bytes`` its ``shape[1] * itemsize``; the offsets must
    be ascending and the rows must not overlap (ValueError naming ``k``); IndexError naming ``k`` for a row
    outside ``out``, before anything is written. Returns ``out``.
    """
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.flags.c_contiguous):
        rows = np.ascontiguousarray(rows)
    _native.place_rows_at(rows=rows, offsets=_index_array("offsets", offsets), out=out, num_threads=num_threads)
    return out


def gather_rows_at(src: np.ndarray, offsets, out: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """``out[k] = the out.shape[1] * itemsize bytes at src[offsets[k]]`` for a flat uint8 ``src`` (e.g. blocks
    read with :func:`pread_ranges`) and a writable 2-D C-contiguous ``out`` of any dtype.

    Offsets may repeat and come in any order; IndexError naming ``k`` for a row outside ``src``, before
    anything is written. Returns ``out``.
    """
    _native.gather_rows_at(src=src, offsets=_index_array("offsets", offsets), out=out, num_threads=num_threads)
    return out


def gather_rows_into(src: np.ndarray, idx, out: np.ndarray, pos, num_threads: int = 0) -> np.ndarray:
    """``out[pos[k]] = src[idx[k]]`` for a 2-D C-contiguous ``src`` and a writable 2-D C-contiguous ``out`` of
    the same dtype and width (a batch's rows written straight to their node-order position).

    ``idx`` may repeat; ``pos`` must name distinct rows of ``out`` (ValueError naming ``k``). IndexError naming
    ``k`` for an id or a position out of range; every check runs before anything is written. Returns ``out``.
    """
    if not (isinstance(src, np.ndarray) and src.ndim == 2 and src.flags.c_contiguous):
        src = np.ascontiguousarray(src)
    _native.gather_rows_into(src=src, idx=_index_array("idx", idx), out=out, pos=_index_array("pos", pos),
                             num_threads=num_threads)
    return out


def gather_rows_at_into(src: np.ndarray, offsets, out: np.ndarray, pos, num_threads: int = 0) -> np.ndarray:
    """``out[pos[k]] = the out.shape[1] * itemsize bytes at src[offsets[k]]`` for a flat uint8 ``src`` (blocks
    read with :func:`pread_ranges`) and a writable 2-D C-contiguous ``out`` of any dtype.

    Offsets may repeat and come in any order; ``pos`` must name distinct rows of ``out`` (ValueError naming
    ``k``). IndexError naming ``k`` for a row outside ``src`` or a position outside ``out``; every check runs
    before anything is written. Returns ``out``.
    """
    _native.gather_rows_at_into(src=src, offsets=_index_array("offsets", offsets), out=out,
                                pos=_index_array("pos", pos), num_threads=num_threads)
    return out


def blocks_for_rows(rows, base: int, row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(blocks, at)``: the sorted distinct 4096-byte blocks holding ``rows`` of a file (row ``r`` at bytes
    ``base + r * row_bytes``), and where each row starts in a buffer of those blocks read back to back. In C
    over a dense table of the blocks' span; rows far apart (a span beyond 16 blocks a row) are sorted by NumPy
    instead. IndexError for a negative row."""
    from storage_kernels.arrays import blocks_of_rows

    rows = _index_array("rows", rows)
    out = _native.blocks_for_rows(rows=rows, base=int(base), row_bytes=int(row_bytes))
    if out is not None:
        return out
    blocks = blocks_of_rows(rows, int(row_bytes), int(base), DIRECT_ALIGN)  # far apart: a few rows, a cheap sort
    return blocks, rows_in_blocks(blocks, rows, base, row_bytes)


class TierGroups(NamedTuple):
    """A batch's nodes grouped by tier code (:func:`split_by_code`): code ``c``'s positions (ascending)
    ``order[ptr[c]:ptr[c + 1]]``, their slots ``slots[ptr[c]:ptr[c + 1]]``, and ``lo[c]`` / ``hi[c]`` the
    smallest and largest of those slots (0 and -1 for a code without nodes)."""

    order: np.ndarray
    slots: np.ndarray
    ptr: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def split_by_code(codes: np.ndarray, slots, num_codes: int) -> TierGroups:
    """Group positions ``0..n-1`` by ``codes`` (int8, each in ``[0, num_codes)``; a stable counting sort, one
    C pass to count and one to place). ValueError naming the first position with a code out of range."""
    codes = np.asarray(codes)
    if codes.dtype != np.int8 or codes.ndim != 1:
        raise ValueError(f"'codes' expected a 1-D int8 array (got {codes.dtype} array of shape {codes.shape})")
    codes = np.ascontiguousarray(codes)
    return TierGroups(*_native.split_by_code(codes=codes, slots=_index_array("slots", slots),
                                             num_codes=int(num_codes)))


# ---- segment disk caches (DiskGNN, diskcache.c) -----------------------------------------------------------


def minhash_signatures(items, set_ptr, num_items: int, k: int = 2, seed: int = 0, num_threads: int = 0
                       ) -> np.ndarray:
    """MinHash signatures of items over the sets containing them (DiskGNN Alg. 1), ``uint64 (num_items, k)``.

    Set ``s`` is ``items[set_ptr[s]:set_ptr[s + 1]]`` (item ids in ``[0, num_items)``); ``out[v, j]`` is the
    minimum over the sets containing ``v`` of hash ``j`` of ``s`` (``UINT64_MAX`` when none does). Items read by
    the same sets get equal or close signatures, so sorting by signature (lexicographically) places them side
    by side. The hash is in ``diskcache.c``; independent of ``num_threads``.
    """
    if k < 0 or num_items < 0:
        raise ValueError(f"'k' and 'num_items' expected >= 0 (got k={k}, num_items={num_items})")
    out = np.empty((int(num_items), int(k)), dtype=np.uint64)
    _native.minhash_signatures(items=_index_array("items", items), set_ptr=_index_array("set_ptr", set_ptr),
                               out=out, seed=int(seed) & ((1 << 64) - 1), num_threads=num_threads)
    return out


def count_blocks(slots, set_ptr, row_bytes: int, num_threads: int = 0) -> np.ndarray:
    """Distinct 4096-byte blocks each set's page-merged read of a block-aligned region fetches, ``int64 (S,)``.

    Set ``s`` reads rows ``slots[set_ptr[s]:set_ptr[s + 1]]`` of the region (row ``r`` at bytes
    ``[r * row_bytes, (r + 1) * row_bytes)``); negative slots are rows served elsewhere and are skipped
    (DiskGNN: a batch's reads of its segment disk cache, ``cache_blocks`` per batch).
    """
    ptr = _index_array("set_ptr", set_ptr)
    out = np.empty(max(len(ptr) - 1, 0), dtype=np.int64)
    _native.count_blocks(slots=_index_array("slots", slots), set_ptr=ptr, row_bytes=int(row_bytes), out=out,
                         num_threads=num_threads)
    return out
