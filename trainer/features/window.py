"""The disk-cache tier through a segment window: a bounded buffer of the segment disk cache's rows, filled and
evicted by the pack's precomputed schedule (:mod:`storage_kernels.windowstore`, :mod:`pipelines.policies.window`)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, blocks_of_rows
from storage_kernels.packstore import BatchAddresses, PackedStore
from storage_kernels.windowstore import SegmentWindow
from trainer.features.base import (
    AheadRead,
    FeatureTier,
    TierRead,
    block_positions,
    positions_if_read,
    read_blocks,
    rows_read,
)
from trainer.features.diskcache import DiskCacheTier

__all__ = ["WindowedDiskCacheTier"]


class WindowedDiskCacheTier(DiskCacheTier):
    """:class:`DiskCacheTier` with a buffer of ``SegmentWindow.buffer_rows`` rows (``buffer_bytes``).

    A batch reads the blocks its schedule names (merged into runs of consecutive blocks, aligned direct reads),
    takes its rows from the buffer where it holds them and from those blocks otherwise, then applies its changes:
    rows that leave the buffer, rows that enter it (copied from the blocks just read). In trace order from an
    empty buffer, ``bytes_read`` and ``window_hits`` (rows served by the buffer) are exactly the schedule's.

    Batches out of that order (a resumed epoch, a subset of batches) stay correct: a row the buffer does not hold
    is read with its blocks whatever the schedule says (then more bytes are read than planned), and the buffer
    forgets everything when the segment changes.

    The scheduled blocks depend on the batch alone, so :meth:`read_ahead` reads them for the next batch (into
    the second of two read buffers) while this one's rows are gathered.
    """

    def __init__(self, store: PackedStore, fallback: FeatureTier | None = None, *, num_threads: int = 0,
                 window: SegmentWindow | None = None) -> None:
        super().__init__(store, fallback, num_threads=num_threads)
        self.window = window if window is not None else SegmentWindow(store.path, store.samples.num_batches)
        if self.window.row_bytes != store.row_bytes:
            raise ValueError(f"'{store.path}/window_meta.json' expected row_bytes {store.row_bytes} (got "
                             f"{self.window.row_bytes})")
        w, rows = self.window, int(store.segment_rows.max(initial=0))
        blocks = -(-store.disk_cache_path.stat().st_size // DATA_ALIGN)
        for what, values, bound in (("window_read_blocks.npy", w.read_blocks, blocks),
                                    ("window_in_rows.npy", w.in_rows, rows), ("window_out_rows.npy", w.out_rows, rows)):
            if len(values) and (int(values.min()) < 0 or int(values.max()) >= bound):
                raise ValueError(f"'{store.path / what}' expected values in [0, {bound}) (got "
                                 f"{int(values.min())}..{int(values.max())})")
        self.name = f"disk cache through a {self.window.buffer_rows}-row window ({store.disk_cache_path})"
        k = self.window.buffer_rows
        self._rows = np.zeros((k, self.feature_dim), np.float32)  # the buffer: (K, F)
        self._slot_row = np.full(k, -1, np.int64)  # buffer slot -> row of the current segment (-1: free)
        self._row_slot = np.full(int(store.segment_rows.max(initial=0)), -1, np.int64)  # row -> slot (-1: absent)
        self._segment = -1
        self.window_hits = 0
        self._read_buffers = [self._buffer, kernels.aligned_empty(DATA_ALIGN)]  # a batch's blocks, and the next's
        self._next_buffer = 0
        self._scratch = kernels.aligned_empty(DATA_ALIGN)  # blocks of rows read off the schedule

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the buffer's rows."""
        return int(self._rows.nbytes)

    def _reset(self, segment: int) -> None:
        held = self._slot_row[self._slot_row >= 0]
        self._row_slot[held] = -1
        self._slot_row[:] = -1
        self._segment = segment

    def _take_buffer(self) -> int:
        i = self._next_buffer
        self._next_buffer = 1 - i
        return i

    def _read_scheduled(self, batch: int, blocks: np.ndarray, i: int) -> AheadRead:
        # read_blocks grows a buffer that is too small: keep the grown one for this slot's next batches
        self._read_buffers[i], nbytes, runs = read_blocks(self._file, blocks, self._read_buffers[i], self.num_threads)
        return AheadRead(batch, self._read_buffers[i], nbytes, runs, blocks)

    def read_ahead(self, addr: BatchAddresses) -> Callable[[], AheadRead] | None:
        blocks = self.window.reads(addr.batch)  # (m,) absolute blocks, sorted (none: the job reads nothing)
        batch, i = addr.batch, self._take_buffer()
        return lambda: self._read_scheduled(batch, blocks, i)

    def fetch(self, addr: BatchAddresses, part: TierRead, ahead: AheadRead | None = None) -> None:
        assert part.staging is not None  # the batch's node-order block, handed over by the source
        segment = int(self.store.batch_segment[addr.batch])
        if segment != self._segment:  # a new segment: nothing of the old one is ever read again
            self._reset(segment)
        row_bytes = self.store.row_bytes
        slots = part.slot  # (k,) rows of the segment cache
        where = self._row_slot[slots]  # (k,) buffer slot or -1
        held = where >= 0
        if ahead is None:  # not read ahead: read the scheduled blocks now
            ahead = self._read_scheduled(addr.batch, self.window.reads(addr.batch), self._take_buffer())
        assert ahead.blocks is not None
        self.count(ahead)
        blocks, buffer = ahead.blocks, ahead.buffer  # (m,) absolute blocks, sorted; their bytes back to back
        hits = int(held.sum())
        unheld = slots[~held] if hits else slots
        unheld_off = addr.cache_offset + unheld * row_bytes
        unheld_pos = part.pos[~held] if hits else part.pos

        # buffered rows and rows read, each straight to its node-order row of the staging block
        if hits:
            kernels.gather_rows_into(self._rows, where[held], part.staging, part.pos[held], self.num_threads)
        at = positions_if_read(blocks, unheld_off, row_bytes)
        if at is not None:
            kernels.gather_rows_at_into(buffer, at, part.staging, unheld_pos, self.num_threads)
        else:  # out of the schedule's order: the rows whose blocks were not scheduled are read now
            self._read_unscheduled(addr, blocks, buffer, unheld, unheld_pos, part.staging)
        self.window_hits += hits
        out_rows, in_rows, in_slots = self.window.changes(addr.batch)
        gone = self._row_slot[out_rows]
        self._slot_row[gone[gone >= 0]] = -1
        self._row_slot[out_rows] = -1
        if len(in_rows):
            previous = self._slot_row[in_slots]  # off schedule a slot may still hold another row
            self._row_slot[previous[previous >= 0]] = -1
            self._slot_row[in_slots] = in_rows
            self._row_slot[in_rows] = in_slots
            # the rows entering the buffer were read with the scheduled blocks; off schedule, from the batch's block
            at = positions_if_read(blocks, addr.cache_offset + in_rows * row_bytes, row_bytes)
            if at is not None:
                kernels.gather_rows_at_into(buffer, at, self._rows, in_slots, self.num_threads)
            else:
                order = np.argsort(slots)
                at = order[np.minimum(np.searchsorted(slots, in_rows, sorter=order), len(slots) - 1)]
                if not np.array_equal(slots[at], in_rows):
                    raise ValueError(f"'{self.store.path / 'window_in_rows.npy'}' expected the rows entering the "
                                     f"buffer at batch {addr.batch} among the batch's disk-cache rows")
                kernels.gather_rows_into(part.staging, part.pos[at], self._rows, in_slots, self.num_threads)

    def _read_unscheduled(self, addr: BatchAddresses, blocks: np.ndarray, buffer: np.ndarray, rows: np.ndarray,
                          pos: np.ndarray, staging: np.ndarray) -> None:
        """``staging[pos] = rows`` (segment-cache rows) off the schedule: the rows whose blocks ``blocks`` holds
        from ``buffer``, the others from their own blocks, read now into a scratch buffer."""
        row_bytes = self.store.row_bytes
        row_off = addr.cache_offset + rows * row_bytes
        ok = rows_read(blocks, row_off, row_bytes)
        kernels.gather_rows_at_into(buffer, block_positions(blocks, row_off[ok]), staging, pos[ok], self.num_threads)
        extra = blocks_of_rows(rows[~ok], row_bytes, addr.cache_offset, DATA_ALIGN)  # (e,) sorted, distinct
        self._scratch, nbytes, runs = read_blocks(self._file, extra, self._scratch, self.num_threads)
        self.bytes_read += nbytes
        self.read_requests += runs
        kernels.gather_rows_at_into(self._scratch, block_positions(extra, row_off[~ok]), staging, pos[~ok],
                                    self.num_threads)

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "window_hits": float(self.window_hits)}

    def reset_counters(self) -> None:
        super().reset_counters()
        self.window_hits = 0
