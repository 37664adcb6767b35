"""The innermost tier: rows of a feature file read with aligned (``O_DIRECT`` when allowed) block reads.

:class:`FileRows` is the reader (a ``.npy`` float32 (N, F) file whose data starts at a 4096-aligned offset,
``docs/CONTRACTS.md``; a float16 (N, 2W) file is read as W 4-byte words per row, ``storage_kernels.halfwords``);
:class:`FileTier` serves a batch's file-addressed rows through it, block-merged (each needed block read once:
evaluation batches of the packed store) or per row (the naive baseline).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up, read_header
from storage_kernels.packstore import BatchAddresses, Tier
from trainer.features.base import DirectFile, FeatureTier, TierRead, read_blocks
from trainer.features.half import decode_half_words

__all__ = ["FileRows", "FileTier", "read_values"]


class FileRows:
    """Rows of a C-order float32 ``.npy`` feature file read with aligned (``O_DIRECT`` when allowed) block
    reads into a reusable aligned buffer.

    ``merge=False`` is the per-row baseline: every requested row is its own read of the 4096-byte block(s)
    holding it, repeats included. ``merge=True`` reads each needed block once, coalescing consecutive blocks
    into one read (DiskGNN merges same-page requests the same way).
    """

    def __init__(self, path: str | Path, num_threads: int = 0, max_buffer_bytes: int = 64 << 20) -> None:
        self.path = Path(path)
        if not self.path.exists():
            raise FileNotFoundError(f"'features' expected an .npy file at {self.path} (got no such file)")
        header = read_header(self.path)
        shape, dtype, self.data_offset = header.shape, header.dtype, header.data_offset
        half = dtype == np.float16 and len(shape) == 2 and shape[1] % 2 == 0  # rows of 4-byte words (halfwords)
        if len(shape) != 2 or not (dtype == np.float32 or half) or header.fortran_order:
            order = "Fortran" if header.fortran_order else "C"
            raise ValueError(f"'{self.path}' expected a 2-D C-order float32 array, or float16 with an even number "
                             f"of columns (got {dtype} {shape} {order})")
        if self.data_offset % 4:
            raise ValueError(f"'{self.path}' expected its data at a multiple of 4 bytes (got {self.data_offset})")
        self.half = half
        self.num_rows, self.feature_dim = shape[0], shape[1] // 2 if half else shape[1]  # float32 words per row
        self.row_bytes = self.feature_dim * 4
        self.num_threads = int(num_threads)
        self.slot_bytes = align_up(DATA_ALIGN - 4 + self.row_bytes)  # whole blocks one row can span
        self.max_buffer_bytes = max(int(max_buffer_bytes), self.slot_bytes)
        self._file = DirectFile(self.path, "rows")
        self.direct, self.fallback_reason = self._file.direct, self._file.fallback_reason
        self._buffer = kernels.aligned_empty(self.slot_bytes)

    @property
    def requests(self) -> int:
        """Read requests issued on the file so far (one per ``pread`` range)."""
        return self._file.requests

    def _ensure(self, nbytes: int) -> np.ndarray:
        if self._buffer.nbytes < nbytes:
            self._buffer = kernels.aligned_empty(nbytes)
        return self._buffer

    def read(self, ids: np.ndarray, out: np.ndarray, merge: bool, pos: np.ndarray | None = None,
             max_round_bytes: int | None = None) -> int:
        """``out[pos[k]] = features[ids[k]]`` (``out`` (M, F) float32 C-contiguous; ``pos`` distinct rows of
        ``out``, default ``arange(len(ids))``); returns the bytes read. The rows go from the read blocks
        straight to their rows of ``out``, in rounds of at most ``max_round_bytes`` of read blocks (default and
        upper bound ``max_buffer_bytes``; at least one row's blocks), which bounds the read buffer."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.num_rows):
            bad = int(np.flatnonzero((ids < 0) | (ids >= self.num_rows))[0])
            raise IndexError(f"'{self.path}' expected row ids < {self.num_rows} (got {int(ids[bad])} at {bad})")
        pos = np.arange(len(ids), dtype=np.int64) if pos is None else np.ascontiguousarray(pos, dtype=np.int64)
        if len(pos) != len(ids):
            raise ValueError(f"'pos' expected one position per id, {len(ids)} (got {len(pos)})")
        round_bytes = self.max_buffer_bytes if max_round_bytes is None else int(max_round_bytes)
        round_bytes = max(min(round_bytes, self.max_buffer_bytes), self.slot_bytes)
        step = round_bytes // self.slot_bytes  # rows per round: bounds the buffer either way
        if not merge:
            total = 0
            for lo in range(0, len(ids), step):
                total += self._read_each(ids[lo : lo + step], out, pos[lo : lo + step])
            return total
        # rounds of at most max_buffer_bytes of distinct blocks, visiting rows in file order: a row's blocks
        # are all in one round, and consecutive rounds share at most one boundary block
        order = np.argsort(ids, kind="stable")
        row_off = self.data_offset + ids[order] * self.row_bytes  # (k,) ascending
        first, last = row_off // DATA_ALIGN, (row_off + self.row_bytes - 1) // DATA_ALIGN  # (k,) ascending
        budget = round_bytes // DATA_ALIGN  # >= the blocks of one row (slot_bytes)
        total, lo = 0, 0
        while lo < len(ids):
            hi = int(np.searchsorted(last, first[lo] + budget - 1, side="right"))
            part = order[lo:hi]
            total += self._read_merged(ids[part], out, pos[part])
            lo = hi
        return total

    def _read_each(self, ids: np.ndarray, out: np.ndarray, pos: np.ndarray) -> int:
        k = len(ids)
        row_off = self.data_offset + ids * self.row_bytes  # (k,) byte offset of each row in the file
        block_off = row_off // DATA_ALIGN * DATA_ALIGN  # (k,)
        lengths = align_up(row_off + self.row_bytes) - block_off  # (k,) one or more whole blocks
        out_offsets = np.arange(k, dtype=np.int64) * self.slot_bytes  # (k,) one slot per row
        buffer = self._ensure(k * self.slot_bytes)
        # the baseline: every row its own read, even under io_uring (no same/adjacent-page merging)
        nbytes = self._file.pread(block_off, lengths, buffer, out_offsets, self.num_threads, merge=False)
        self._extract(buffer, out_offsets + row_off - block_off, out, pos)
        return nbytes

    def _read_merged(self, ids: np.ndarray, out: np.ndarray, pos: np.ndarray) -> int:
        blocks, at = kernels.blocks_for_rows(ids, self.data_offset, self.row_bytes)  # (m,) needed, sorted; (k,)
        buffer, nbytes, _ = read_blocks(self._file, blocks, self._ensure(len(blocks) * DATA_ALIGN), self.num_threads)
        self._extract(buffer, at, out, pos)
        return nbytes

    def _extract(self, buffer: np.ndarray, byte_pos: np.ndarray, out: np.ndarray, pos: np.ndarray) -> None:
        kernels.gather_rows_at_into(buffer, byte_pos, out, pos, self.num_threads)  # out[pos[k]]: (F,) at byte_pos[k]

    def close(self) -> None:
        self._file.close()


def read_values(path: str | Path, ids: np.ndarray, value_dim: int, num_threads: int = 0) -> np.ndarray:
    """Rows ``ids`` of a feature file as float32 values ``(len(ids), value_dim)`` (float16 files decoded), read
    block-merged with aligned (``O_DIRECT`` where allowed) reads: a memory map's page faults would read ahead
    around every row, many times the rows' bytes when the ids are scattered and memory is confined."""
    rows = FileRows(path, num_threads=num_threads)
    try:
        words = np.empty((len(ids), rows.feature_dim), dtype=np.float32)
        rows.read(np.asarray(ids, dtype=np.int64), words, merge=True)
    finally:
        rows.close()
    return decode_half_words(torch.from_numpy(words), value_dim).numpy() if rows.half else words


class FileTier(FeatureTier):
    """Rows of the feature file at ``path`` for the nodes addressed to ``Tier.FILE`` (slot = row = node id).

    ``merge=True`` reads each needed 4096-byte block once per batch, coalescing consecutive blocks (DiskGNN
    merges same-page requests the same way); ``merge=False`` is the per-row baseline (PyG+ / DGL-OnDisk /
    GraphBolt's disk feature without a cache): every row is its own aligned read of its block(s), repeats
    included. Reads go through ``pread_ranges`` in rounds of at most ``max_buffer_bytes``. The read stage
    reads the rows straight into their rows of the staging block (``part.staging``): nothing is left to
    gather.

    >>> tier = FileTier("features.npy", merge=False)                          # the naive baseline
    >>> tier = FileTier("features.npy", num_threads=4)                        # under a packed tier
    """

    reads_disk = True

    def __init__(self, path: str | Path, fallback: FeatureTier | None = None, *, merge: bool = True,
                 num_threads: int = 0, max_buffer_bytes: int = 64 << 20) -> None:
        self.file = FileRows(path, num_threads, max_buffer_bytes)
        super().__init__(Tier.FILE, self.file.feature_dim, fallback, str(self.file.path))
        self.merge = bool(merge)
        self.direct_io, self.fallback_reason = self.file.direct, self.file.fallback_reason

    def num_slots(self, addr: BatchAddresses) -> int:
        return self.file.num_rows

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        assert part.staging is not None  # reserved by the source before the I/O
        before = self.file.requests
        self.bytes_read += self.file.read(part.slot, part.staging, merge=self.merge, pos=part.pos)
        self.read_requests += self.file.requests - before

    def gather(self, part: TierRead) -> None:
        """Nothing to do: the read stage put the rows in place."""

    def close(self) -> None:
        self.file.close()
