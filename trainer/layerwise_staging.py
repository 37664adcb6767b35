"""Staged sources for layer-wise inference (:mod:`trainer.layerwise`): a group of a layer's intervals gets its
input rows in one pass over the input instead of one pass each.

An interval of destinations reads the rows of its distinct sources. Read straight from the input, every interval
is a pass over it: on a reordered graph a tenth or so of the edges are random, so each interval touches nearly
every 4 KiB block of the input and a layer reads ``intervals x input`` bytes. Staged, the sources of a group of
intervals are listed first (an ids file per interval: its source positions, ascending, int32 when they fit);
then ONE forward pass over the input, a window at a time (the next window read on a thread), reads the rows any
interval of the group needs and appends each interval's rows to its own rows file (an aligned ``.npy`` in the
input's storage dtype: float16 words stay float16, bit for bit); then each interval reads its rows file
forward, every row of it needed. A layer reads ``groups x input + 2 x staged`` bytes. The files of an interval
are removed as soon as it is done, so the disk holds one group's staged rows at most. Once the sources are
listed their staged size is known: a group whose staging would move more bytes than its intervals reading the
input each (few intervals, each needing most of the input's blocks) is not staged (:meth:`StagedSources.pays`).

:data:`STAGE_GROUP` bounds a group: open files (an ids mapping and a rows writer per interval) and the scratch
disk. The pass holds two windows of rows (one read ahead), one interval's gathered rows and a mark per window
row: sized by the caller from its window share.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import ArrayWriter, open_array, release_pages

__all__ = ["STAGE_COST_FACTOR", "STAGE_GROUP", "StagedSources", "group_size", "read_ahead"]

#: The most intervals staged by one pass over the input (0: no staging, every interval reads the input itself).
STAGE_GROUP = 128
#: A group is staged when its pass and staged bytes (:meth:`StagedSources.staged_cost`) times this are fewer than
#: the bytes its intervals would read from the input themselves (0: always staged).
STAGE_COST_FACTOR = 1.0

Plan = TypeVar("Plan", bound=tuple)


def read_ahead(plans: Iterable[Plan], read: Callable[[np.ndarray], object], reader: ThreadPoolExecutor
               ) -> Iterator[tuple[Plan, object]]:
    """Each window plan with its input rows (``read(plan[-1])``, the plan's last item the positions to read),
    the next window's rows being read on ``reader`` while the caller computes with these: at most two windows'
    rows in hand."""
    pending = None
    for plan in plans:
        future = reader.submit(read, plan[-1])
        if pending is not None:
            yield pending[0], pending[1].result()
        pending = (plan, future)
    if pending is not None:
        yield pending[0], pending[1].result()


def group_size(intervals: int, cap: int | None = None) -> int:
    """Intervals per staging group: at most ``cap`` (default :data:`STAGE_GROUP`) and a quarter of the open-file
    limit (two files an interval while the group's pass runs); 0 when ``cap`` is 0 or one interval holds the
    layer (it reads the input once already)."""
    cap = STAGE_GROUP if cap is None else cap
    if cap <= 0 or intervals <= 1:
        return 0
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = files // 4 if files != resource.RLIM_INFINITY else cap
    return max(1, min(cap, room, intervals))


class StagedSources:
    """The staged input of a group of intervals, in a directory of its own under ``scratch``.

    ``count`` is the number of input rows (positions ``0..count-1``); ``dtype`` and ``cols`` the input's
    storage (a row is ``cols`` values of ``dtype``: float16 words as ``2W`` float16, float32 as they are). Add
    each interval's sources with :meth:`add` (its ids file), stage their rows with :meth:`fill`, then per
    interval take :meth:`ids` and :meth:`rows_path` and :meth:`remove` its files. :meth:`close` removes what is
    left. ``bytes_written`` and ``bytes_read`` count the data bytes of the ids and rows files."""

    def __init__(self, scratch: Path, count: int, dtype: np.dtype | type, cols: int) -> None:
        self.count, self.dtype, self.cols = int(count), np.dtype(dtype), int(cols)
        self.id_dtype = np.dtype(np.int32 if self.count < 1 << 31 else np.int64)
        self.dir = Path(tempfile.mkdtemp(dir=scratch, prefix="staged."))
        self.ids_paths: list[Path] = []
        self.sizes: list[int] = []  # each interval's staged rows
        self.rows_paths: list[Path] = []
        self.bytes_written = 0
        self.bytes_read = 0
        self.rows = 0  # staged rows of the group, once its sources are listed
        self.direct_bytes = 0  # what its intervals would read from the input themselves

    def add(self, parts: Iterable[np.ndarray], direct: Callable[[np.ndarray], int]) -> None:
        """An interval's distinct source positions, ascending over ``parts``, written to its ids file;
        ``direct(positions)`` is what reading those rows from the input costs (bytes of the blocks holding
        them)."""
        path = self.dir / f"{len(self.ids_paths)}.ids.npy"
        self.ids_paths.append(path)
        with ArrayWriter(path, self.id_dtype) as writer:
            for part in parts:
                writer.append(part.astype(self.id_dtype, copy=False))
                self.direct_bytes += direct(part)
        writer.close(checksum=False)
        self.bytes_written += writer.rows * self.id_dtype.itemsize
        self.rows += writer.rows
        self.sizes.append(writer.rows)

    def staged_cost(self, input_bytes: int) -> int:
        """The bytes staging the listed intervals reads and writes: a pass over the input (at most
        ``input_bytes``, at most what the intervals read directly), the rows written and read back, the ids read
        twice."""
        rows = self.rows * self.cols * self.dtype.itemsize
        return min(input_bytes, self.direct_bytes) + 2 * rows + 2 * self.rows * self.id_dtype.itemsize

    def pays(self, input_bytes: int) -> bool:
        """Whether staging the listed intervals moves fewer bytes than their reading the input each
        (:data:`STAGE_COST_FACTOR`)."""
        return self.staged_cost(input_bytes) * STAGE_COST_FACTOR < self.direct_bytes

    def fill(self, read: Callable[[np.ndarray], np.ndarray], window: int, reader: ThreadPoolExecutor) -> None:
        """One forward pass over the input in windows of ``window`` positions: ``read(positions)`` (sorted) gives
        their rows as float32 words ``(len, cols * itemsize / 4)``, read a window ahead on ``reader``; each
        interval's rows in the window are appended to its rows file."""
        ids = [open_array(path) if size else np.empty(0, self.id_dtype)  # an empty file cannot be mapped
               for path, size in zip(self.ids_paths, self.sizes, strict=True)]
        at = [0] * len(ids)  # each interval's first id not yet staged
        writers: list[ArrayWriter] = []
        try:
            for k in range(len(ids)):
                path = self.dir / f"{k}.rows.npy"
                writers.append(ArrayWriter(path, self.dtype, self.cols, len(ids[k])))
                self.rows_paths.append(path)
            wanted = np.zeros(max(window, 1), dtype=bool)

            def plans() -> Iterator[tuple[list[tuple[int, int]], np.ndarray]]:
                """Each window's id ranges (one per interval) and the positions any of them needs."""
                for p0 in range(0, self.count, max(window, 1)):
                    p1 = min(p0 + window, self.count)
                    spans, wanted[:] = [], False
                    for k, these in enumerate(ids):
                        c0 = at[k]  # at most a window of ids fall in the window: they are distinct
                        c1 = c0 + int(np.searchsorted(these[c0 : c0 + p1 - p0], p1))
                        at[k] = c1
                        spans.append((c0, c1))
                        wanted[these[c0:c1] - p0] = True
                        self.bytes_read += (c1 - c0) * self.id_dtype.itemsize
                    if any(c1 > c0 for c0, c1 in spans):
                        yield spans, np.flatnonzero(wanted[: p1 - p0]) + p0

            for (spans, need), words in read_ahead(plans(), read, reader):
                for k, (c0, c1) in enumerate(spans):
                    if c1 > c0:  # this interval's rows of the window, in source order
                        rows = kernels.gather_rows(words, np.searchsorted(need, ids[k][c0:c1]))
                        writers[k].append(rows.view(self.dtype))
                for these in ids:  # streamed once: keep the ids' pages out of this process's memory
                    release_pages(these)
            for writer in writers:
                writer.close(checksum=False)
                self.bytes_written += writer.rows * self.cols * self.dtype.itemsize
        except BaseException:
            for writer in writers:
                writer.abort()
            raise

    def ids(self, k: int) -> np.ndarray:
        """Interval ``k``'s source positions (ascending), read into memory."""
        these = open_array(self.ids_paths[k], mmap=False)
        self.bytes_read += these.nbytes
        return these

    def rows_path(self, k: int) -> Path:
        """Interval ``k``'s rows file: the input rows of :meth:`ids` ``(k)``, in that order."""
        return self.rows_paths[k]

    def remove(self, k: int) -> None:
        """Remove interval ``k``'s files (it is done)."""
        self.ids_paths[k].unlink(missing_ok=True)
        if k < len(self.rows_paths):
            self.rows_paths[k].unlink(missing_ok=True)

    def close(self) -> None:
        """Remove every file left (after an error, or an iteration closed early)."""
        shutil.rmtree(self.dir, ignore_errors=True)
