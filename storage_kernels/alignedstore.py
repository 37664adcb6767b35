"""The block-aligned feature layout and the hyperbatch tables (the ``hyperbatch`` policy's ``pack`` artifact).

Block-aligned layout (``aligned.bin``)
    every feature row of the ordered feature file, padded so that a row never straddles a 4 KiB block: rows
    of at most 4096 bytes are packed ``rows_per_block = 4096 // row_bytes`` to a block (the block's tail is
    zero padding); a larger row starts a block and is rounded up to whole blocks. The row of node ``v`` is at
    :meth:`BlockLayout.aligned_feature_offset` (the design note's ``aligned_feature_offset(node, dim, block)``);
    a set of rows is read as its distinct blocks (:meth:`BlockLayout.blocks_of`), whole, with aligned direct
    reads. The disk blow-up is ``file_bytes / (N * row_bytes)`` (:meth:`BlockLayout.disk_blowup`).
Hyperbatch tables (``hb_batches.npy``, ``hb_ptr.npy``, ``hb_epoch_ptr.npy``, int64)
    every sampled training epoch's batches, in training order, cut into runs of consecutive batches (the
    hyperbatches): hyperbatch ``h`` is ``hb_batches[hb_ptr[h]:hb_ptr[h + 1]]``; sample epoch ``e`` has the
    hyperbatches ``hb_epoch_ptr[e]:hb_epoch_ptr[e + 1]``. :func:`group_hyperbatches` cuts them so that the
    distinct blocks of a hyperbatch's nodes fit a RAM budget (a single batch over budget is a hyperbatch alone).

The hotset (``hotset_nodes.npy``, int64, sorted)
    the rows held in RAM, chosen by :func:`select_hotset` from ``degree x access frequency`` scores.

Writers use :func:`write_aligned` (one streaming pass over the feature file, rows placed by the native
``place_rows_at``) and :func:`group_hyperbatches`; readers use :class:`BlockLayout` and :class:`HyperbatchTable`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN

__all__ = [
    "ALIGNED_BIN",
    "BLOCK_BYTES",
    "HB_BATCHES",
    "HB_EPOCH_PTR",
    "HB_PTR",
    "HOTSET_NODES",
    "LAYOUT_JSON",
    "BlockLayout",
    "HyperbatchTable",
    "check_tables",
    "group_hyperbatches",
    "layout_stats",
    "save_hyperbatch_tables",
    "hotset_refresh_due",
    "select_hotset",
    "write_aligned",
]

#: The block a row never straddles: the O_DIRECT unit of the layout's reads.
BLOCK_BYTES = DATA_ALIGN

ALIGNED_BIN = "aligned.bin"
LAYOUT_JSON = "aligned_layout.json"
HB_BATCHES = "hb_batches.npy"
HB_PTR = "hb_ptr.npy"
HB_EPOCH_PTR = "hb_epoch_ptr.npy"
HOTSET_NODES = "hotset_nodes.npy"


def select_hotset(score: np.ndarray, budget_rows: int) -> np.ndarray:
    """The hotset rule: the nodes of the ``budget_rows`` highest positive scores, sorted (int64).

    The design note's greedy selection under a byte budget; every row costs the same, so greedy is the top
    scores. Ties go to the smaller id, so the choice is deterministic.

    Found from the k-th largest score (``np.partition`` of a copy of the positive scores) rather than a sort of
    them all: the ids scoring above it, then the smallest ids scoring it.
    """
    k = max(int(budget_rows), 0)
    positive = score[score > 0]
    if k == 0 or not len(positive):
        return np.empty(0, dtype=np.int64)
    if k >= len(positive):
        return np.flatnonzero(score > 0).astype(np.int64)
    positive.partition(len(positive) - k)
    kth = positive[len(positive) - k]
    del positive
    above = np.flatnonzero(score > kth)
    ties = np.flatnonzero(score == kth)[: k - len(above)]
    return np.sort(np.concatenate([above, ties])).astype(np.int64)


def hotset_refresh_due(epoch: int, refresh_epochs: int) -> bool:
    """The hotset's refresh schedule: whether it is re-selected when training epoch ``epoch`` (0-based) starts --
    every ``refresh_epochs`` epochs after the first (0: never). The feature source follows it, and the plan's
    simulation of that source."""
    return refresh_epochs > 0 and epoch > 0 and epoch % refresh_epochs == 0


@dataclass(frozen=True)
class BlockLayout:
    """Where each row of an ``(num_rows, row_bytes / 4)`` float32 feature matrix lies in ``aligned.bin``.

    Rows are laid out in *groups*: ``group_rows`` consecutive rows filling ``group_blocks`` whole blocks
    (small rows: ``group_rows = block_bytes // row_bytes`` rows in one block; big rows: one row in
    ``ceil(row_bytes / block_bytes)`` blocks).
    """

    num_rows: int
    row_bytes: int
    block_bytes: int = BLOCK_BYTES

    def __post_init__(self) -> None:
        if self.row_bytes <= 0 or self.row_bytes % 4:
            raise ValueError(f"'row_bytes' expected a positive multiple of 4 (got {self.row_bytes})")
        if self.num_rows < 0:
            raise ValueError(f"'num_rows' expected >= 0 (got {self.num_rows})")
        if self.block_bytes <= 0 or self.block_bytes % DATA_ALIGN:
            raise ValueError(f"'block_bytes' expected a positive multiple of {DATA_ALIGN} (got {self.block_bytes})")

    @property
    def feature_dim(self) -> int:
        return self.row_bytes // 4

    @property
    def group_rows(self) -> int:
        """Rows per group: ``block_bytes // row_bytes`` for small rows, 1 for rows over a block."""
        return max(1, self.block_bytes // self.row_bytes)

    @property
    def group_blocks(self) -> int:
        """Blocks per group: 1 for small rows, ``ceil(row_bytes / block_bytes)`` for rows over a block."""
        return -(-self.row_bytes // self.block_bytes) if self.row_bytes > self.block_bytes else 1

    @property
    def group_bytes(self) -> int:
        return self.group_blocks * self.block_bytes

    @property
    def num_blocks(self) -> int:
        """Blocks of the whole file."""
        return -(-self.num_rows // self.group_rows) * self.group_blocks

    @property
    def file_bytes(self) -> int:
        return self.num_blocks * self.block_bytes

    @property
    def disk_blowup(self) -> float:
        """``file_bytes`` over the unpadded feature bytes (1.0 when rows fill blocks exactly)."""
        raw = self.num_rows * self.row_bytes
        return self.file_bytes / raw if raw else 1.0

    def aligned_feature_offset(self, node: Any) -> Any:
        """Byte offset of ``node``'s row (an int or an int64 array): the addressing rule of the layout."""
        node = np.asarray(node, dtype=np.int64) if not isinstance(node, int | np.integer) else int(node)
        return node // self.group_rows * self.group_bytes + node % self.group_rows * self.row_bytes

    def first_block(self, nodes: np.ndarray) -> np.ndarray:
        """The first block of each node's row (int64, same shape)."""
        return np.asarray(nodes, dtype=np.int64) // self.group_rows * self.group_blocks

    def blocks_of(self, nodes: np.ndarray) -> np.ndarray:
        """The distinct blocks holding the rows of ``nodes``, sorted (int64)."""
        first = np.unique(self.first_block(nodes))
        if self.group_blocks == 1:
            return first
        return (first[:, None] + np.arange(self.group_blocks, dtype=np.int64)).ravel()  # each row's blocks, sorted

    def buffer_offsets(self, blocks: np.ndarray, nodes: np.ndarray) -> np.ndarray:
        """Byte offsets of ``nodes``' rows in a buffer holding ``blocks`` (sorted, as read) back to back.

        ``KeyError`` naming the first node whose block is not among ``blocks``.
        """
        first = self.first_block(nodes)
        pos = np.searchsorted(blocks, first)
        missing = (pos >= len(blocks)) | (blocks[np.minimum(pos, len(blocks) - 1)] != first) if len(blocks) else (
            np.ones(len(first), dtype=bool))
        if np.any(missing):
            i = int(np.flatnonzero(missing)[0])
            raise KeyError(f"'blocks' expected block {int(first[i])} of node {int(np.asarray(nodes)[i])} "
                           f"(got {len(blocks)} blocks without it)")
        return pos * self.block_bytes + np.asarray(nodes, dtype=np.int64) % self.group_rows * self.row_bytes

    def to_json(self) -> dict[str, int]:
        return {"num_rows": self.num_rows, "row_bytes": self.row_bytes, "block_bytes": self.block_bytes,
                "group_rows": self.group_rows, "group_blocks": self.group_blocks}

    @classmethod
    def load(cls, path: str | Path) -> BlockLayout:
        """The layout described by an ``aligned_layout.json``."""
        doc = json.loads(Path(path).read_text())
        layout = cls(int(doc["num_rows"]), int(doc["row_bytes"]), int(doc["block_bytes"]))
        if (layout.group_rows, layout.group_blocks) != (doc["group_rows"], doc["group_blocks"]):
            raise ValueError(f"'{path}' expected group_rows/group_blocks {layout.group_rows}/{layout.group_blocks} "
                             f"for {layout.row_bytes}-byte rows (got {doc['group_rows']}/{doc['group_blocks']})")
        return layout


def write_aligned(features: np.ndarray, path: str | Path, partition_rows: int, num_threads: int = 0,
                  progress: Callable[[int, int], None] | None = None) -> BlockLayout:
    """Write ``features`` ((N, F) float32, typically a memmap) block-aligned to ``path``, in one sequential
    pass of ``partition_rows`` rows at a time (rounded to whole groups): each partition's rows are placed
    into a zeroed staging buffer by the native ``place_rows_at`` and written with one ``pwrite``.
    ``progress(rows_done, N)`` is called after each partition. Returns the layout."""
    if features.ndim != 2 or features.dtype != np.float32:
        raise ValueError(f"'features' expected a 2-D float32 array (got {features.dtype} {features.shape})")
    layout = BlockLayout(int(features.shape[0]), int(features.shape[1]) * 4)
    step = max(1, int(partition_rows) // layout.group_rows) * layout.group_rows  # whole groups per partition
    staging = np.empty(-(-step // layout.group_rows) * layout.group_bytes, dtype=np.uint8)
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, layout.file_bytes)
        for start in range(0, layout.num_rows, step):
            stop = min(layout.num_rows, start + step)
            base = int(layout.aligned_feature_offset(start))  # a group boundary: start is a multiple of group_rows
            nbytes = -(-(stop - start) // layout.group_rows) * layout.group_bytes
            buf = staging[:nbytes]
            buf.fill(0)  # padding is zeros: the file's bytes do not depend on the staging buffer's history
            offsets = layout.aligned_feature_offset(np.arange(start, stop, dtype=np.int64)) - base
            kernels.place_rows_at(np.ascontiguousarray(features[start:stop]), offsets, buf, num_threads)
            view = memoryview(buf)
            done = 0
            while done < nbytes:  # pwrite may write less than asked
                done += os.pwrite(fd, view[done:], base + done)
            if progress:
                progress(stop, layout.num_rows)
    finally:
        os.close(fd)
    return layout


def group_hyperbatches(nodes: np.ndarray, epochs: Sequence[Sequence[int]],
                       node_range: Callable[[int], tuple[int, int]], layout: BlockLayout, budget_bytes: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Cut each epoch's batches (``epochs[e]``: batch ids in training order; batch ``b``'s nodes are
    ``nodes[slice(*node_range(b))]``) into hyperbatches: runs of consecutive batches whose distinct blocks,
    all nodes counted (so the bound holds whatever the hotset), stay within ``budget_bytes``; a batch over
    budget on its own is a hyperbatch alone.

    Returns ``(hb_batches, hb_ptr, hb_epoch_ptr, hb_blocks)`` (int64; ``hb_blocks[h]``: the distinct blocks
    of hyperbatch ``h``). Visits each batch once; a per-block stamp (the hyperbatch that last counted the
    block) makes the union incremental.
    """
    budget_blocks = max(1, int(budget_bytes) // layout.block_bytes)
    stamp = np.full(layout.num_blocks, -1, dtype=np.int64)  # (num_blocks,) last hyperbatch counting the block
    hb_batches: list[int] = []
    hb_ptr, hb_epoch_ptr, hb_blocks = [0], [0], []
    h, size = 0, 0  # the open hyperbatch and its distinct blocks so far

    def close() -> None:
        nonlocal h, size
        hb_ptr.append(len(hb_batches))
        hb_blocks.append(size)
        h, size = h + 1, 0

    for batch_ids in epochs:
        for b in batch_ids:
            start, stop = node_range(int(b))
            blocks = layout.blocks_of(np.asarray(nodes[start:stop]))
            new = blocks[stamp[blocks] != h]  # blocks the open hyperbatch does not hold yet
            if size + len(new) > budget_blocks and len(hb_batches) > hb_ptr[-1]:
                close()
                new = blocks
            stamp[new] = h
            size += len(new)
            hb_batches.append(int(b))
        if len(hb_batches) > hb_ptr[-1]:  # hyperbatches never span epochs
            close()
        hb_epoch_ptr.append(len(hb_ptr) - 1)
    return (np.asarray(hb_batches, dtype=np.int64), np.asarray(hb_ptr, dtype=np.int64),
            np.asarray(hb_epoch_ptr, dtype=np.int64), np.asarray(hb_blocks, dtype=np.int64))


def save_hyperbatch_tables(save_array: Callable[[str, np.ndarray], Any], batches: np.ndarray, ptr: np.ndarray,
                           epoch_ptr: np.ndarray, hotset_nodes: np.ndarray) -> None:
    """Save :func:`group_hyperbatches`' tables and the hotset under their file names, each as
    ``save_array(name, array)`` (an :class:`~storage_kernels.store.ArtifactBuilder`'s, or one writing into a
    directory); :class:`HyperbatchTable` reads them back."""
    for name, arr in ((HB_BATCHES, batches), (HB_PTR, ptr), (HB_EPOCH_PTR, epoch_ptr), (HOTSET_NODES, hotset_nodes)):
        save_array(name, arr)


class HyperbatchTable:
    """Read side of the hyperbatch tables in ``path`` (validated): which hyperbatch serves a training batch."""

    def __init__(self, path: str | Path, num_batches: int) -> None:
        self.path = Path(path)
        for name in (HB_BATCHES, HB_PTR, HB_EPOCH_PTR):
            if not (self.path / name).exists():
                raise FileNotFoundError(f"'hyperbatch' expected {self.path / name} (got no such file)")
        self.batches = np.load(self.path / HB_BATCHES).astype(np.int64, copy=False)
        self.ptr = np.load(self.path / HB_PTR).astype(np.int64, copy=False)
        self.epoch_ptr = np.load(self.path / HB_EPOCH_PTR).astype(np.int64, copy=False)
        problem = check_tables(self.batches, self.ptr, self.epoch_ptr, num_batches)
        if problem:
            raise ValueError(f"'{self.path}': {problem}")
        counts = np.diff(self.ptr)
        self.hb_of_batch = np.full(num_batches, -1, dtype=np.int64)  # (NB,) -1: not a training batch
        self.hb_of_batch[self.batches] = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        self.pos_of_batch = np.full(num_batches, -1, dtype=np.int64)  # (NB,) position in hb_batches
        self.pos_of_batch[self.batches] = np.arange(len(self.batches), dtype=np.int64)
        self.epoch_of_hb = np.repeat(np.arange(len(self.epoch_ptr) - 1, dtype=np.int64), np.diff(self.epoch_ptr))

    @property
    def num_hyperbatches(self) -> int:
        return len(self.ptr) - 1

    @property
    def epochs(self) -> int:
        return len(self.epoch_ptr) - 1

    def batches_of(self, h: int) -> np.ndarray:
        """The batch ids of hyperbatch ``h``, in training order."""
        return self.batches[self.ptr[h] : self.ptr[h + 1]]

    def is_epoch_start(self, batch: int) -> bool:
        """Whether ``batch`` is the first training batch of its sample epoch."""
        h = int(self.hb_of_batch[batch])
        return h >= 0 and int(self.pos_of_batch[batch]) == int(self.ptr[self.epoch_ptr[self.epoch_of_hb[h]]])

    def next_of(self, h: int, cross_epochs: bool) -> int | None:
        """The hyperbatch trained after ``h``: the next of its epoch, else (``cross_epochs``) the first of the
        next sample epoch (cyclically), else None."""
        e = int(self.epoch_of_hb[h])
        if h + 1 < int(self.epoch_ptr[e + 1]):
            return h + 1
        if not cross_epochs:
            return None
        nxt = int(self.epoch_ptr[(e + 1) % self.epochs])
        return nxt if nxt < int(self.epoch_ptr[(e + 1) % self.epochs + 1]) else None


def check_tables(batches: np.ndarray, ptr: np.ndarray, epoch_ptr: np.ndarray, num_batches: int) -> str:
    """The empty string when the hyperbatch tables are consistent, else the first problem (project error style)."""
    if len(ptr) < 1 or int(ptr[0]) != 0 or int(ptr[-1]) != len(batches) or np.any(np.diff(ptr) <= 0):
        return f"'{HB_PTR}' expected increasing offsets from 0 to {len(batches)} (got {ptr[:8].tolist()}...)"
    if (len(epoch_ptr) < 1 or int(epoch_ptr[0]) != 0 or int(epoch_ptr[-1]) != len(ptr) - 1
            or np.any(np.diff(epoch_ptr) < 0)):
        return (f"'{HB_EPOCH_PTR}' expected non-decreasing offsets from 0 to {len(ptr) - 1} "
                f"(got {epoch_ptr[:8].tolist()}...)")
    if len(batches) and (int(batches.min()) < 0 or int(batches.max()) >= num_batches):
        bad = int(np.flatnonzero((batches < 0) | (batches >= num_batches))[0])
        return f"'{HB_BATCHES}[{bad}]' expected a batch id in [0, {num_batches}) (got {int(batches[bad])})"
    if len(np.unique(batches)) != len(batches):
        return f"'{HB_BATCHES}' expected each batch once (got {len(batches) - len(np.unique(batches))} repeats)"
    return ""


def layout_stats(layout: BlockLayout) -> dict[str, Any]:
    """The layout's figures for the ``pack`` artifact's stats."""
    return {"aligned_bytes": layout.file_bytes, "rows_per_block": layout.group_rows,
            "blocks_per_row": layout.group_blocks, "aligned_blocks": layout.num_blocks,
            "disk_blowup": layout.disk_blowup}
