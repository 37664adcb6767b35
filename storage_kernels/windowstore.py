"""The segment window's files in a packed store (optional, written by ``diskgnn``'s pack with a buffer > 0).

Per batch id (training batches; evaluation batches have empty ranges), int64 ``.npy``:

``window_meta.json``
    ``format`` (:data:`FORMAT_VERSION`), ``buffer_rows`` (the buffer's size in rows), ``row_bytes``.
``window_read_ptr.npy`` (NB+1,) / ``window_read_blocks.npy``
    the sorted absolute 4096-byte blocks of ``disk_cache.bin`` batch ``b`` reads:
    ``read_blocks[read_ptr[b]:read_ptr[b+1]]``.
``window_out_ptr.npy`` (NB+1,) / ``window_out_rows.npy``
    rows of the batch's segment cache that leave the buffer after the batch (applied first).
``window_in_ptr.npy`` (NB+1,) / ``window_in_rows.npy`` / ``window_in_slots.npy``
    rows that enter it after the batch, at those buffer slots (each read whole by the batch's blocks).
``window_hits.npy`` (NB,)
    the batch's disk-cache rows the buffer serves (the plan's prediction).

Read in trace order from a buffer empty at every segment's start, the batches' rows are each in the buffer or
in the batch's blocks (:func:`storage_kernels.kernels.window_schedule`). Nothing here knows about torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from storage_kernels.store import ArtifactBuilder

__all__ = ["FORMAT_VERSION", "WINDOW_FILES", "WINDOW_META", "SegmentWindow", "write_window"]

FORMAT_VERSION = 1
WINDOW_META = "window_meta.json"
READ_PTR, READ_BLOCKS = "window_read_ptr.npy", "window_read_blocks.npy"
OUT_PTR, OUT_ROWS = "window_out_ptr.npy", "window_out_rows.npy"
IN_PTR, IN_ROWS, IN_SLOTS = "window_in_ptr.npy", "window_in_rows.npy", "window_in_slots.npy"
HITS = "window_hits.npy"
#: Every file of the segment window (all or none).
WINDOW_FILES = (WINDOW_META, READ_PTR, READ_BLOCKS, OUT_PTR, OUT_ROWS, IN_PTR, IN_ROWS, IN_SLOTS, HITS)


def _by_batch(ptr: np.ndarray, data: np.ndarray, batches: np.ndarray, num_batches: int
              ) -> tuple[np.ndarray, np.ndarray]:
    """Ranges ``data[ptr[p]:ptr[p+1]]`` of trace positions ``p`` (batch ``batches[p]``) regrouped by batch id:
    ``(ptr_by_batch (NB+1,), data_by_batch)``."""
    counts = np.zeros(num_batches, np.int64)
    counts[batches] = np.diff(ptr)
    order = np.argsort(batches, kind="stable")  # positions by batch id
    lens, starts = np.diff(ptr)[order], ptr[:-1][order]
    first = np.concatenate([[0], np.cumsum(lens)[:-1]]) if len(lens) else lens
    idx = np.repeat(starts - first, lens) + np.arange(int(lens.sum()))
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), np.asarray(data, np.int64)[idx]


def write_window(builder: ArtifactBuilder, plan: Any, batches: np.ndarray, num_batches: int, row_bytes: int) -> None:
    """Write a schedule in trace order (``plan``: a ``pipelines.methods.policies.diskgnn.window.WindowPlan``;
    position ``p`` is
    batch ``batches[p]``) as the window files of ``builder``'s packed store."""
    batches = np.asarray(batches, np.int64)
    builder.write_json(WINDOW_META, {"format": FORMAT_VERSION, "buffer_rows": int(plan.buffer_rows),
                                     "row_bytes": int(row_bytes)})
    for ptr_name, names, ptr, arrays in (
        (READ_PTR, (READ_BLOCKS,), plan.read_ptr, (plan.read_blocks,)),
        (OUT_PTR, (OUT_ROWS,), plan.out_ptr, (plan.out_rows,)),
        (IN_PTR, (IN_ROWS, IN_SLOTS), plan.in_ptr, (plan.in_rows, plan.in_slots)),
    ):
        for name, data in zip(names, arrays, strict=True):
            by_ptr, by_data = _by_batch(ptr, data, batches, num_batches)
            builder.save_array(name, by_data)
        builder.save_array(ptr_name, by_ptr)
    hits = np.zeros(num_batches, np.int64)
    hits[batches] = plan.hits
    builder.save_array(HITS, hits)


class SegmentWindow:
    """Read side of the window files of a packed store: validated tables and each batch's schedule.

    ``FileNotFoundError`` / ``ValueError`` naming the file when the files are partial, of another format, or
    disagree with each other or with ``num_batches``."""

    def __init__(self, path: str | Path, num_batches: int) -> None:
        self.path = Path(path)
        present = [n for n in WINDOW_FILES if (self.path / n).exists()]
        if len(present) != len(WINDOW_FILES):
            missing = [n for n in WINDOW_FILES if n not in present]
            raise FileNotFoundError(f"'packed' expected the window files {list(WINDOW_FILES)} together (got "
                                    f"{present}, missing {missing} in {self.path})")
        meta = json.loads((self.path / WINDOW_META).read_text())
        if meta.get("format") != FORMAT_VERSION:
            raise ValueError(f"'{self.path / WINDOW_META}' expected format {FORMAT_VERSION} (got "
                             f"{meta.get('format')!r}); rebuild the pack artifact")
        self.buffer_rows, self.row_bytes = int(meta["buffer_rows"]), int(meta["row_bytes"])
        load = lambda name: np.asarray(np.load(self.path / name), dtype=np.int64)  # noqa: E731
        self.read_ptr, self.read_blocks = load(READ_PTR), load(READ_BLOCKS)
        self.out_ptr, self.out_rows = load(OUT_PTR), load(OUT_ROWS)
        self.in_ptr, self.in_rows, self.in_slots = load(IN_PTR), load(IN_ROWS), load(IN_SLOTS)
        self.hits = load(HITS)
        for name, ptr, total in ((READ_PTR, self.read_ptr, len(self.read_blocks)),
                                 (OUT_PTR, self.out_ptr, len(self.out_rows)), (IN_PTR, self.in_ptr, len(self.in_rows))):
            if (len(ptr) != num_batches + 1 or ptr[0] != 0 or ptr[-1] != total or np.any(np.diff(ptr) < 0)):
                raise ValueError(f"'{self.path / name}' expected {num_batches + 1} non-decreasing offsets from 0 to "
                                 f"{total} (got {len(ptr)} offsets ending at {int(ptr[-1]) if len(ptr) else None})")
        if len(self.in_slots) != len(self.in_rows) or (len(self.in_slots) and (
                int(self.in_slots.min()) < 0 or int(self.in_slots.max()) >= self.buffer_rows)):
            raise ValueError(f"'{self.path / IN_SLOTS}' expected one slot in [0, {self.buffer_rows}) per entering row "
                             f"(got {len(self.in_slots)} slots for {len(self.in_rows)} rows)")
        if self.hits.shape != (num_batches,):
            raise ValueError(f"'{self.path / HITS}' expected shape ({num_batches},) (got {self.hits.shape})")

    def reads(self, batch: int) -> np.ndarray:
        """Batch ``batch``'s absolute blocks of ``disk_cache.bin``, sorted."""
        return self.read_blocks[self.read_ptr[batch]:self.read_ptr[batch + 1]]

    def changes(self, batch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(out_rows, in_rows, in_slots)`` applied after batch ``batch`` (rows of its segment cache)."""
        lo, hi = self.in_ptr[batch], self.in_ptr[batch + 1]
        return (self.out_rows[self.out_ptr[batch]:self.out_ptr[batch + 1]], self.in_rows[lo:hi],
                self.in_slots[lo:hi])

    @staticmethod
    def present(path: str | Path) -> bool:
        """Whether a packed store directory has window files (any of them: partial sets fail on reading)."""
        return any((Path(path) / n).exists() for n in WINDOW_FILES)
