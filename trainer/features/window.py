"""The disk-cache tier through a segment window: a bounded buffer of the segment disk cache's rows, filled and
evicted by the pack's precomputed schedule (:mod:`storage_kernels.windowstore`,
:mod:`pipelines.methods.policies.diskgnn.window`)."""

from __future__ import annotations

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, blocks_of_rows
from storage_kernels.packstore import BatchAddresses, PackedStore
from storage_kernels.windowstore import SegmentWindow
from trainer.features.base import FeatureTier, TierRead, read_blocks
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

    @property
    def buffer_bytes(self) -> int:
        """Bytes of the buffer's rows."""
        return int(self._rows.nbytes)

    def _reset(self, segment: int) -> None:
        held = self._slot_row[self._slot_row >= 0]
        self._row_slot[held] = -1
        self._slot_row[:] = -1
        self._segment = segment

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        assert part.staging is not None  # the batch's node-order block, handed over by the source
        segment = int(self.store.batch_segment[addr.batch])
        if segment != self._segment:  # a new segment: nothing of the old one is ever read again
            self._reset(segment)
        row_bytes, base = self.store.row_bytes, addr.cache_offset
        # the part's rows of the segment cache: buffer slots of those held, the others to read
        held_slots, held_pos, unheld, unheld_pos = kernels.window_split(part.slot, part.pos, self._row_slot)
        blocks = self.window.reads(addr.batch)  # (m,) absolute blocks, sorted
        at = kernels.rows_in_blocks(blocks, unheld, base, row_bytes)
        if at is None:  # out of the schedule's order: some rows' blocks are not scheduled, read them too
            blocks = np.union1d(blocks, blocks_of_rows(unheld, row_bytes, base, DATA_ALIGN))
            at = kernels.rows_in_blocks(blocks, unheld, base, row_bytes)
        self._buffer, nbytes, runs = read_blocks(self._file, blocks, self._buffer, self.num_threads)
        self.bytes_read += nbytes
        self.read_requests += runs

        # buffered rows and rows read, each straight to its node-order row of the staging block
        if len(held_slots):
            kernels.gather_rows_into(self._rows, held_slots, part.staging, held_pos, self.num_threads)
        kernels.gather_rows_at_into(self._buffer, at, part.staging, unheld_pos, self.num_threads)
        self.window_hits += len(held_slots)
        out_rows, in_rows, in_slots = self.window.changes(addr.batch)
        kernels.window_update(self._row_slot, self._slot_row, out_rows, in_rows, in_slots)
        if len(in_rows):  # rows entering the buffer, from the blocks just read (each comes whole with them)
            at = kernels.rows_in_blocks(blocks, in_rows, base, row_bytes)
            if at is None:
                raise ValueError(f"'{self.store.path}/window_in_rows.npy' expected rows of batch {addr.batch}'s "
                                 f"scheduled blocks (got a row whose blocks were not read)")
            kernels.gather_rows_at_into(self._buffer, at, self._rows, in_slots, self.num_threads)

    def stats(self) -> dict[str, float]:
        return {**super().stats(), "window_hits": float(self.window_hits)}

    def reset_counters(self) -> None:
        super().reset_counters()
        self.window_hits = 0
