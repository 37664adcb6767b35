"""The segment window: a bounded in-memory buffer over DiskGNN's segment disk caches, scheduled at pack time.

Without it, every training batch reads the 4096-byte blocks of its segment's disk cache that hold its rows, and
the segment's batches read the same blocks again and again. The access trace is known offline (the samples), so
per segment :func:`storage_kernels.kernels.window_schedule` decides, batch by batch, which blocks to read (those
of the batch's rows the buffer does not hold, merged into runs by the reader) and which rows the buffer keeps
afterwards: of the rows it holds and those the reads brought whole, the ``buffer_rows`` used again soonest
(Belady's furthest-next-use eviction; rows the segment never reads again are dropped, so every segment starts
empty). ``buffer_rows = 0`` is the unbuffered reader: every batch reads all its blocks.

Costs stay exact: the bytes read per batch are its packed chunk plus ``4096 x`` its scheduled blocks, which the
pack predicts and the reader (:class:`trainer.features.window.WindowedDiskCacheTier`) measures.

Each run of consecutive scheduled blocks is one read request. ``gap_blocks`` > 0 also schedules the unneeded
blocks between two runs of a batch at most that far apart (:func:`fill_gaps`): one request instead of two, for
those blocks' bytes; on a disk where a request costs far more than a block's transfer, fewer and larger reads
win, and the bytes stay exactly predicted.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import segment_ranges
from storage_kernels.packstore import CHUNK_ALIGN, chunk_bytes

__all__ = ["WindowPlan", "buffer_rows_for", "fill_gaps", "schedule_windows", "segment_block_offsets"]


@dataclass(frozen=True)
class WindowPlan:
    """The schedule of every training position (trace order): blocks to read ``read_blocks[read_ptr[i]:read_ptr[i +
    1]]`` (absolute blocks of ``disk_cache.bin``, sorted), rows leaving the buffer ``out_rows[out_ptr[i]:...]`` and
    entering it ``in_rows[in_ptr[i]:...]`` at slots ``in_slots`` after the batch (rows of the segment's cache),
    ``hits[i]`` its rows served by the buffer; ``buffer_rows`` the buffer's size in rows."""

    buffer_rows: int
    read_ptr: np.ndarray
    read_blocks: np.ndarray
    in_ptr: np.ndarray
    in_rows: np.ndarray
    in_slots: np.ndarray
    out_ptr: np.ndarray
    out_rows: np.ndarray
    hits: np.ndarray

    @property
    def blocks(self) -> np.ndarray:
        """(NT,) blocks read per training position."""
        return np.diff(self.read_ptr)


def buffer_rows_for(buffer_bytes: int, row_bytes: int, segment_rows: np.ndarray) -> int:
    """Rows of a buffer of ``buffer_bytes`` (at most the largest segment cache: more is never used)."""
    if buffer_bytes < 0:
        raise ValueError(f"'plan.disk_cache_buffer_bytes' expected >= 0 (got {buffer_bytes})")
    return int(min(buffer_bytes // max(row_bytes, 1), int(np.max(segment_rows, initial=0))))


def segment_block_offsets(segment_rows: np.ndarray, row_bytes: int) -> np.ndarray:
    """(G,) first block of every segment cache in ``disk_cache.bin`` (each starts at a multiple of 4096)."""
    padded = chunk_bytes(segment_rows, row_bytes) // CHUNK_ALIGN
    return np.concatenate([[0], np.cumsum(padded)[:-1]]).astype(np.int64) if len(padded) else padded


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64, copy=False) if parts else np.empty(0, np.int64)


def _ptr(counts: list[np.ndarray]) -> np.ndarray:
    c = _cat(counts)
    return np.concatenate([[0], np.cumsum(c)]).astype(np.int64)


def fill_gaps(ptr: np.ndarray, blocks: np.ndarray, gap_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """Per position ``i`` (blocks ``blocks[ptr[i]:ptr[i + 1]]``, sorted and distinct), the same blocks plus every
    block between two of them at most ``gap_blocks`` apart, so those runs are read as one: ``(ptr, blocks)``."""
    ptr, blocks = np.asarray(ptr, np.int64), np.asarray(blocks, np.int64)
    if gap_blocks <= 0 or len(blocks) < 2:
        return ptr, blocks
    position = np.repeat(np.arange(len(ptr) - 1), np.diff(ptr))  # (B,) the position of every block
    between = blocks[1:] - blocks[:-1] - 1  # (B - 1,) unneeded blocks before the next one
    fill = np.where((position[1:] == position[:-1]) & (between <= gap_blocks), between, 0)
    counts = 1 + np.append(fill, 0)  # (B,) each block and the gap filled after it
    filled = np.repeat(blocks, counts) + segment_ranges(counts)
    per_position = np.bincount(position, weights=counts, minlength=len(ptr) - 1).astype(np.int64)
    return np.concatenate([[0], np.cumsum(per_position)]).astype(np.int64), filled


def schedule_windows(entry_slot: np.ndarray, ptr: np.ndarray, m: int, segment_rows: np.ndarray, row_bytes: int,
                     buffer_rows: int, num_threads: int = 0, gap_blocks: int = 0) -> WindowPlan:
    """The :class:`WindowPlan` of a segmented trace: position ``i`` reads the cache rows ``entry_slot[ptr[i]:ptr[i +
    1]]`` (``-1``: not in the disk cache) of segment ``i // m`` (``segment_rows[g]`` rows), each batch's runs of
    blocks at most ``gap_blocks`` apart joined (:func:`fill_gaps`). Segments run on up to ``num_threads``
    threads (0: all cores; the kernel releases the GIL)."""
    entry_slot, ptr = np.asarray(entry_slot, np.int64), np.asarray(ptr, np.int64)
    nt, g_count = len(ptr) - 1, len(segment_rows)
    if m < 1 or -(-nt // m) != g_count:
        raise ValueError(f"'segment_batches' expected {g_count} segments of m batches over {nt} positions (got m={m})")
    cached = np.concatenate([[0], np.cumsum(entry_slot >= 0)])  # (T + 1,) disk-cache entries before
    rows_all = entry_slot[entry_slot >= 0]
    first_block = segment_block_offsets(segment_rows, row_bytes)

    def one(g: int) -> kernels.WindowSchedule:
        lo, hi = g * m, min((g + 1) * m, nt)
        local = cached[ptr[lo:hi + 1]]
        return kernels.window_schedule(local - local[0], rows_all[local[0]:local[-1]], num_rows=int(segment_rows[g]),
                                       row_bytes=row_bytes, buffer_rows=buffer_rows)

    workers = max(1, min(num_threads or len(os.sched_getaffinity(0)), max(g_count, 1)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        parts = list(pool.map(one, range(g_count)))
    read_ptr, read_blocks = fill_gaps(_ptr([np.diff(w.read_ptr) for w in parts]),
                                      _cat([w.read_blocks + first_block[g] for g, w in enumerate(parts)]), gap_blocks)
    return WindowPlan(
        buffer_rows=int(buffer_rows),
        read_ptr=read_ptr,
        read_blocks=read_blocks,
        in_ptr=_ptr([np.diff(w.in_ptr) for w in parts]),
        in_rows=_cat([w.in_rows for w in parts]),
        in_slots=_cat([w.in_slots for w in parts]),
        out_ptr=_ptr([np.diff(w.out_ptr) for w in parts]),
        out_rows=_cat([w.out_rows for w in parts]),
        hits=_cat([w.hits for w in parts]),
    )
