"""Staged sources for layer-wise inference (:mod:`trainer.layerwise`): a group of a layer's intervals gets its
input rows in one pass over the input instead of one pass each.

An interval of destinations reads the rows of its distinct sources. Read straight from the input, every interval is
a pass over it: on a reordered graph a tenth or so of the edges are random, so each interval touches nearly every
4 KiB block of the input and a layer reads ``intervals x input`` bytes. Staged, the sources of a group of intervals
are listed first (an ids file per interval: its source positions, ascending, int32 when they fit); then ONE forward
pass over the input, a window at a time (the next window read on a thread), reads the rows any interval of the group
needs and appends each interval's rows to its own rows file (an aligned ``.npy`` in the input's storage dtype:
float16 words stay float16, bit for bit); then each interval reads its rows file forward, every row of it needed. A
layer whose messages are narrower than its input rows stages them instead (float32, ``acc_dim`` a source:
``convert`` computes a window's messages once for the whole group) and its targets' own terms in an own file per
interval: its intervals then read no input row. A layer reads ``groups x input + 2 x staged`` bytes. The files of an
interval are removed as soon as it is done, so the disk holds one group's staged rows at most. Once the sources are
listed their staged size is known: a group whose staging would move more bytes than its intervals reading the input
each (few intervals, each needing most of the input's blocks) is not staged (:meth:`StagedSources.pays`).

:data:`STAGE_GROUP` bounds a group's open files (an ids mapping, a rows writer and an own writer per interval) and
:func:`disk_cap` its staged bytes (half the scratch disk's free space unless set: a group closes once its listed
sources reach it, so one interval over it is a group of its own). The pass holds two windows of rows (one read
ahead), one interval's gathered rows and a mark per window row (staging messages, also what ``convert`` and
``own`` make of a window): sized by the caller from its window share.
"""

from __future__ import annotations

import resource
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import ArrayWriter, open_array, release_pages

__all__ = ["STAGE_COST_FACTOR", "STAGE_DISK_BYTES", "STAGE_DISK_SHARE", "STAGE_GROUP", "StagedSources", "disk_cap",
           "group_size", "read_ahead"]

#: The most intervals staged by one pass over the input (0: no staging, every interval reads the input itself).
STAGE_GROUP = 128
#: The most bytes a group's staged rows may take on the scratch disk; None: :data:`STAGE_DISK_SHARE` of the
#: scratch filesystem's free space when the group starts (a group closes once its listed sources reach it).
STAGE_DISK_BYTES: int | None = None
#: The share of the scratch filesystem's free space a group's staged rows may take (the rest is left to the
#: layer's output table and to everything else on the disk).
STAGE_DISK_SHARE = 0.5
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
    """Intervals per staging group: at most ``cap`` (default :data:`STAGE_GROUP`) and a sixth of the open-file
    limit (up to three files an interval while the group's pass runs: its ids mapping, rows and own writers); 0
    when ``cap`` is 0 or one interval holds the layer (it reads the input once already)."""
    cap = STAGE_GROUP if cap is None else cap
    if cap <= 0 or intervals <= 1:
        return 0
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    room = files // 6 if files != resource.RLIM_INFINITY else cap
    return max(1, min(cap, room, intervals))


def disk_cap(scratch: Path) -> int:
    """The most bytes one group's staged files may take in ``scratch``: :data:`STAGE_DISK_BYTES`, else
    :data:`STAGE_DISK_SHARE` of its filesystem's free space now. At 10M nodes a group of 128 intervals staged
    ~16 GB of float16 rows and filled the disk: a group closes once its sources reach this."""
    if STAGE_DISK_BYTES is not None:
        return int(STAGE_DISK_BYTES)
    return int(shutil.disk_usage(scratch).free * STAGE_DISK_SHARE)


class StagedSources:
    """The staged input of a group of intervals, in a directory of its own under ``scratch``.

    ``count`` is the number of input rows (positions ``0..count-1``); ``dtype`` and ``cols`` what a staged row
    is: the input's storage (``cols`` values of ``dtype``: float16 words as ``2W`` float16, float32 as they are),
    or a source's message (float32, the layer's ``acc_dim``: :meth:`fill`'s ``convert``), then with
    ``own_cols`` float32 own terms per target in an own file. Add each interval's sources with :meth:`add` (its
    ids file), stage their rows with :meth:`fill`, then per interval take :meth:`ids`, :meth:`rows_path` (and
    :meth:`own_path`) and :meth:`remove` its files. :meth:`close` removes what is left. ``bytes_written`` and
    ``bytes_read`` count the data bytes of the ids, rows and own files."""

    def __init__(self, scratch: Path, count: int, dtype: np.dtype | type, cols: int, own_cols: int = 0) -> None:
        self.count, self.dtype, self.cols, self.own_cols = int(count), np.dtype(dtype), int(cols), int(own_cols)
        self.id_dtype = np.dtype(np.int32 if self.count < 1 << 31 else np.int64)
        self.dir = Path(tempfile.mkdtemp(dir=scratch, prefix="staged."))
        self.ids_paths: list[Path] = []
        self.sizes: list[int] = []  # each interval's staged rows
        self.rows_paths: list[Path] = []
        self.targets: list[np.ndarray] = []  # each interval's targets with an own term staged (own_cols)
        self.own_paths: list[Path] = []
        self.bytes_written = 0
        self.bytes_read = 0
        self.rows = 0  # staged rows of the group, once its sources are listed
        self.own_rows = 0  # staged own terms of the group
        self.direct_bytes = 0  # what its intervals would read from the input themselves

    def add(self, parts: Iterable[tuple[np.ndarray, np.ndarray]], direct: Callable[[np.ndarray], int],
            targets: np.ndarray | None = None) -> None:
        """An interval's distinct source positions, ascending over ``parts`` (``(staged, extra)`` pairs:
        ``staged`` written to its ids file, ``extra`` rows only its own terms read); ``direct(positions)`` is
        what reading both from the input costs (bytes of the blocks holding them). ``targets`` (sorted
        positions, kept by reference; with ``own_cols``): the interval's targets, an own term staged each."""
        path = self.dir / f"{len(self.ids_paths)}.ids.npy"
        self.ids_paths.append(path)
        with ArrayWriter(path, self.id_dtype) as writer:
            for part, extra in parts:
                writer.append(part.astype(self.id_dtype, copy=False))
                self.direct_bytes += direct(np.sort(np.concatenate([part, extra])) if len(extra) else part)
        writer.close(checksum=False)
        self.bytes_written += writer.rows * self.id_dtype.itemsize
        self.rows += writer.rows
        self.sizes.append(writer.rows)
        if self.own_cols:
            if targets is None:
                raise ValueError("'targets' expected an interval's target positions with own terms staged (got None)")
            self.targets.append(targets)
            self.own_rows += len(targets)

    @property
    def data_bytes(self) -> int:
        """The bytes :meth:`fill` will write for the intervals listed so far (rows and own terms)."""
        return self.rows * self.cols * self.dtype.itemsize + self.own_rows * self.own_cols * 4

    def staged_cost(self, input_bytes: int) -> int:
        """The bytes staging the listed intervals reads and writes: a pass over the input (at most
        ``input_bytes``, at most what the intervals read directly), the rows written and read back, the ids read
        twice."""
        return min(input_bytes, self.direct_bytes) + 2 * self.data_bytes + 2 * self.rows * self.id_dtype.itemsize

    def pays(self, input_bytes: int) -> bool:
        """Whether staging the listed intervals moves fewer bytes than their reading the input each
        (:data:`STAGE_COST_FACTOR`)."""
        return self.staged_cost(input_bytes) * STAGE_COST_FACTOR < self.direct_bytes

    def fill(self, read: Callable[[np.ndarray], np.ndarray], window: int, reader: ThreadPoolExecutor,
             convert: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, Any]] | None = None,
             own: Callable[[int, int, int, Any, np.ndarray], np.ndarray] | None = None) -> None:
        """One forward pass over the input in windows of ``window`` positions: ``read(positions)`` (sorted) gives
        their rows as float32 words, read a window ahead on ``reader``; each interval's rows in the window are
        appended to its rows file: the words as stored, or ``convert(need, words)``'s rows (``(len(need), cols)``
        of the staged dtype for the window's needed positions ``need``: their messages, computed once for every
        interval of the group) and, with ``own_cols``, ``own(k, c0, c1, x, at)``'s rows to interval ``k``'s own
        file: the own terms of its targets ``c0:c1``, ``x`` what ``convert`` handed beside the rows (the decoded
        input) and ``at`` those targets' rows in it."""
        ids = [open_array(path) if size else np.empty(0, self.id_dtype)  # an empty file cannot be mapped
               for path, size in zip(self.ids_paths, self.sizes, strict=True)]
        at = [0] * len(ids)  # each interval's first id not yet staged
        done = [0] * len(self.targets)  # each interval's first target without its own term staged
        writers: list[ArrayWriter] = []
        own_writers: list[ArrayWriter] = []
        try:
            for k in range(len(ids)):
                path = self.dir / f"{k}.rows.npy"
                writers.append(ArrayWriter(path, self.dtype, self.cols, len(ids[k])))
                self.rows_paths.append(path)
            for k, mine in enumerate(self.targets):
                path = self.dir / f"{k}.own.npy"
                own_writers.append(ArrayWriter(path, np.float32, self.own_cols, len(mine)))
                self.own_paths.append(path)
            wanted = np.zeros(max(window, 1), dtype=bool)

            def plans() -> Iterator[tuple[list[tuple[int, int]], list[tuple[int, int]], np.ndarray]]:
                """Each window's id ranges and target ranges (one per interval) and the positions any needs."""
                for p0 in range(0, self.count, max(window, 1)):
                    p1 = min(p0 + window, self.count)
                    spans, tspans, wanted[:] = [], [], False
                    for k, these in enumerate(ids):
                        c0 = at[k]  # at most a window of ids fall in the window: they are distinct
                        c1 = c0 + int(np.searchsorted(these[c0 : c0 + p1 - p0], p1))
                        at[k] = c1
                        spans.append((c0, c1))
                        wanted[these[c0:c1] - p0] = True
                        self.bytes_read += (c1 - c0) * self.id_dtype.itemsize
                    for k, mine in enumerate(self.targets):
                        c0 = done[k]
                        c1 = c0 + int(np.searchsorted(mine[c0 : c0 + p1 - p0], p1))
                        done[k] = c1
                        tspans.append((c0, c1))
                        wanted[mine[c0:c1] - p0] = True
                    if any(c1 > c0 for c0, c1 in spans + tspans):
                        yield spans, tspans, np.flatnonzero(wanted[: p1 - p0]) + p0

            for (spans, tspans, need), words in read_ahead(plans(), read, reader):
                values, x = (words, None) if convert is None else convert(need, words)
                for k, (c0, c1) in enumerate(spans):
                    if c1 > c0:  # this interval's rows of the window, in source order
                        rows = kernels.gather_rows(values, np.searchsorted(need, ids[k][c0:c1]))
                        writers[k].append(rows.view(self.dtype))
                for k, (c0, c1) in enumerate(tspans):
                    if c1 > c0 and own is not None:
                        own_writers[k].append(own(k, c0, c1, x, np.searchsorted(need, self.targets[k][c0:c1])))
                del values, x
                for these in ids:  # streamed once: keep the ids' pages out of this process's memory
                    release_pages(these)
            for writer in writers:
                writer.close(checksum=False)
                self.bytes_written += writer.rows * self.cols * self.dtype.itemsize
            for writer in own_writers:
                writer.close(checksum=False)
                self.bytes_written += writer.rows * self.own_cols * 4
        except BaseException:
            for writer in writers + own_writers:
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

    def own_path(self, k: int) -> Path:
        """Interval ``k``'s own file (with ``own_cols``): the own terms of its targets, in order."""
        return self.own_paths[k]

    def remove(self, k: int) -> None:
        """Remove interval ``k``'s files (it is done)."""
        self.ids_paths[k].unlink(missing_ok=True)
        for paths in (self.rows_paths, self.own_paths):
            if k < len(paths):
                paths[k].unlink(missing_ok=True)

    def close(self) -> None:
        """Remove every file left (after an error, or an iteration closed early)."""
        shutil.rmtree(self.dir, ignore_errors=True)
