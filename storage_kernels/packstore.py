"""The packed store's format: tiers, chunk alignment, file names, the address table and its reader.

A packed store (the ``pack`` stage's artifact, ``docs/CONTRACTS.md``) tells, for every node of every sampled
batch, where its feature row is read from at training time -- its :class:`Tier` and its *slot* in that
tier -- so that assembly needs no lookups:

``gpu_cache.npy`` / ``cpu_cache.npy``
    float32 (rows, F): the cache blocks, rows in the plan's order (slot = row).
``packed.bin``
    each training batch's uncached rows, sorted by node id, in one chunk starting at a multiple of
    :data:`CHUNK_ALIGN` (slot = row within the chunk); read with one aligned direct read per batch.
``chunk_offset.npy`` / ``chunk_rows.npy``
    int64 (num_batches,): where each batch's chunk starts and how many rows it holds (0: not packed).
``disk_cache.bin`` / ``segment_offset.npy`` / ``segment_rows.npy`` / ``batch_segment.npy`` (optional, together)
    DiskGNN's per-segment disk caches: the training batches are cut into segments of consecutive batches;
    segment ``g``'s cache is ``segment_rows[g]`` rows starting at ``segment_offset[g]`` (a multiple of
    :data:`CHUNK_ALIGN`) of ``disk_cache.bin``, MinHash-ordered; ``batch_segment[b]`` is batch ``b``'s
    segment (-1: none). A node addressed ``DISK_CACHE`` has slot = row in its batch's segment cache, read with
    page-merged aligned reads. A store without these files has no disk-cache level.
``addr_tier.npy`` (int8) / ``addr_slot.npy`` (int64)
    aligned element for element with the sample set's ``nodes.npy``: the address of every (batch, node).
    Tier ``FILE`` addresses a row of the ``reorder`` artifact's ``features.npy`` (slot = node id): evaluation
    batches are not packed.

Writers use :func:`batch_addresses` (the rule that turns a plan into a batch's addresses); readers use
:class:`PackedStore`. Nothing here knows about torch or Dagster.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Protocol

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up, blocks_of_rows

__all__ = [
    "ADDR_SLOT",
    "ADDR_TIER",
    "CHUNK_ALIGN",
    "CHUNK_OFFSET",
    "CHUNK_ROWS",
    "BATCH_SEGMENT",
    "CPU_CACHE",
    "DISK_CACHE_BIN",
    "DISK_CACHE_FILES",
    "GPU_CACHE",
    "PACKED_BIN",
    "SEGMENT_OFFSET",
    "SEGMENT_ROWS",
    "STORE_FILES",
    "BatchAddresses",
    "PackedStore",
    "Tier",
    "batch_addresses",
    "cache_blocks",
    "chunk_bytes",
    "store_budget_bytes",
]

#: Alignment of every chunk offset in ``packed.bin`` (and of each chunk's read length): the O_DIRECT unit.
CHUNK_ALIGN = DATA_ALIGN

GPU_CACHE = "gpu_cache.npy"
CPU_CACHE = "cpu_cache.npy"
PACKED_BIN = "packed.bin"
CHUNK_OFFSET = "chunk_offset.npy"
CHUNK_ROWS = "chunk_rows.npy"
ADDR_TIER = "addr_tier.npy"
ADDR_SLOT = "addr_slot.npy"
DISK_CACHE_BIN = "disk_cache.bin"
SEGMENT_OFFSET = "segment_offset.npy"
SEGMENT_ROWS = "segment_rows.npy"
BATCH_SEGMENT = "batch_segment.npy"
#: Every file a packed store has.
STORE_FILES = (GPU_CACHE, CPU_CACHE, PACKED_BIN, CHUNK_OFFSET, CHUNK_ROWS, ADDR_TIER, ADDR_SLOT)
#: The files of the optional disk-cache level (all or none).
DISK_CACHE_FILES = (DISK_CACHE_BIN, SEGMENT_OFFSET, SEGMENT_ROWS, BATCH_SEGMENT)


class Tier(IntEnum):
    """Where a node's feature row lives (the int8 codes of ``plan``'s ``tier.npy`` and ``addr_tier.npy``)."""

    NONE = -1  # never read by any batch (plan only)
    GPU = 0  # GPU cache (device memory)
    CPU = 1  # CPU cache (pinned host memory with CUDA)
    PACKED = 2  # the batch's packed chunk
    FILE = 3  # the reorder artifact's feature file (evaluation batches)
    DISK_CACHE = 4  # the batch's segment disk cache (pack only: a plan never assigns it)

    @property
    def label(self) -> str:
        """``gpu``, ``cpu``, ``packed``, ``file``, ``disk_cache`` or ``none``: the keys of ``rows_by_tier``."""
        return self.name.lower()

    @classmethod
    def readable(cls) -> tuple[Tier, ...]:
        """The tiers an address can hold (everything but ``NONE``; codes contiguous from 0)."""
        return (cls.GPU, cls.CPU, cls.PACKED, cls.FILE, cls.DISK_CACHE)


def store_budget_bytes(multiple: float | None, feature_bytes: int) -> float | None:
    """The bytes a store (cache blocks, disk caches, packed chunks) may take under ``pack.disk_budget`` =
    ``multiple`` (None: unlimited): that multiple of the feature file counted in whole :data:`CHUNK_ALIGN`
    blocks, the store's unit. So every layout search has a store that fits 1x (one segment caching each row
    once), however small the file."""
    return None if multiple is None else multiple * int(align_up(int(feature_bytes), CHUNK_ALIGN))


def chunk_bytes(rows: np.ndarray | int, row_bytes: int) -> np.ndarray:
    """Bytes one aligned read of a chunk of ``rows`` rows covers (``rows * row_bytes`` rounded up), int64."""
    return align_up(np.asarray(rows, dtype=np.int64) * row_bytes, CHUNK_ALIGN)


def cache_blocks(slots: np.ndarray, row_bytes: int, cache_offset: int) -> np.ndarray:
    """Sorted distinct :data:`CHUNK_ALIGN` blocks of ``disk_cache.bin`` holding rows ``slots`` of the segment
    cache at byte ``cache_offset``: what one batch's page-merged disk-cache read fetches (each block once)."""
    return blocks_of_rows(slots, row_bytes, cache_offset, CHUNK_ALIGN)


def batch_addresses(nodes: np.ndarray, plan_tier: np.ndarray, plan_slot: np.ndarray, packed: bool,
                    disk_nodes: np.ndarray | None = None, disk_slots: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The addresses of one batch's ``nodes`` under a plan: ``(addr_tier, addr_slot, packed_ids)``.

    Cached nodes (plan tier GPU/CPU) keep the plan's tier and slot. The others go to the batch's chunk when
    ``packed`` (training batches: slot = rank among the batch's uncached nodes sorted by id, which are
    ``packed_ids``) or to the feature file (evaluation batches: slot = node id, ``packed_ids`` empty).
    With ``disk_nodes`` (sorted node ids of the batch's segment disk cache) and ``disk_slots`` (their rows in
    it), a packed batch's uncached nodes found there are ``DISK_CACHE`` at that row instead of packed.
    A node the plan never tiered (``NONE``) is a ``ValueError``: plan and samples disagree.
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    tier = np.asarray(plan_tier)[nodes].astype(np.int8)
    if np.any(tier < 0):
        bad = int(np.flatnonzero(tier < 0)[0])
        raise ValueError(f"'tier.npy' expected a tier for node {int(nodes[bad])} (got none: plan and samples "
                         "disagree)")
    slot = np.asarray(plan_slot)[nodes].astype(np.int64)
    uncached = tier >= Tier.PACKED
    if packed and disk_nodes is not None and len(disk_nodes):
        assert disk_slots is not None and len(disk_slots) == len(disk_nodes)
        at = np.minimum(np.searchsorted(disk_nodes, nodes), len(disk_nodes) - 1)  # (n,)
        in_cache = uncached & (disk_nodes[at] == nodes)
        tier[in_cache] = Tier.DISK_CACHE
        slot[in_cache] = disk_slots[at[in_cache]]
        uncached &= ~in_cache
    if packed:
        packed_ids = np.sort(nodes[uncached])
        tier[uncached] = Tier.PACKED
        slot[uncached] = np.searchsorted(packed_ids, nodes[uncached])
    else:
        packed_ids = np.empty(0, dtype=np.int64)
        tier[uncached] = Tier.FILE
        slot[uncached] = nodes[uncached]
    return tier, slot, packed_ids


class NodeRanges(Protocol):
    """What the reader needs of a sample set: the batch count and each batch's range in ``nodes.npy``."""

    num_batches: int

    def node_range(self, i: int) -> tuple[int, int]: ...


@dataclass(frozen=True)
class BatchAddresses:
    """The address table of one batch: ``tier`` (int8) and ``slot`` (int64) per node, its chunk, and its
    segment's disk cache (``cache_offset`` in ``disk_cache.bin``, ``cache_rows``; 0 rows: none)."""

    batch: int
    tier: np.ndarray
    slot: np.ndarray
    chunk_offset: int
    chunk_rows: int
    chunk_bytes: int
    cache_offset: int = 0
    cache_rows: int = 0

    def positions(self, tier: Tier) -> np.ndarray:
        """Positions (in node order) of the nodes addressed to ``tier``."""
        return np.flatnonzero(self.tier == tier)

    @classmethod
    def single_tier(cls, batch: int, nodes: np.ndarray, tier: Tier) -> BatchAddresses:
        """Every node of a batch addressed to one ``tier`` by node id (slot = node id, no chunk): the
        addresses of a reader without a packed store (rows read straight from the feature array or file)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        return cls(batch=int(batch), tier=np.full(len(nodes), int(tier), dtype=np.int8), slot=nodes,
                   chunk_offset=0, chunk_rows=0, chunk_bytes=0)

    def groups(self) -> kernels.TierGroups:
        """The nodes grouped by tier code (:func:`storage_kernels.kernels.split_by_code`), positions ascending
        within a tier; ``ValueError`` as :meth:`check_tiers` for a code that is not a readable :class:`Tier`."""
        try:
            return kernels.split_by_code(self.tier, self.slot, len(Tier.readable()))
        except ValueError:
            self.check_tiers()  # the message naming the batch and the node
            raise

    def check_tiers(self) -> None:
        """``ValueError`` naming the first node whose tier code is not a readable :class:`Tier`."""
        codes = [int(t) for t in Tier.readable()]  # 0..4, contiguous
        bad = (self.tier < codes[0]) | (self.tier > codes[-1])
        if np.any(bad):
            i = int(np.flatnonzero(bad)[0])
            allowed = ", ".join(str(c) for c in codes[:-1]) + f" or {codes[-1]}"
            raise ValueError(f"'addr_tier' of batch {self.batch} expected {allowed} "
                             f"(got {int(self.tier[i])} at node {i})")


class PackedStore:
    """Read side of a packed store directory: validated tables, memory-mapped address arrays, cache blocks.

    ``samples`` gives each batch's range in ``nodes.npy``, which indexes ``addr_tier`` / ``addr_slot``.
    Construction checks that every file exists and that the tables agree with each other and with the
    sample set (``FileNotFoundError`` / ``ValueError`` naming the file and the first bad entry); the disk-cache
    files (:data:`DISK_CACHE_FILES`) are optional but all or none (``has_disk_cache``).
    """

    def __init__(self, path: str | Path, samples: NodeRanges) -> None:
        self.path = Path(path)
        for name in STORE_FILES:
            if not (self.path / name).exists():
                raise FileNotFoundError(f"'packed' expected {self.path / name} (got no such file)")
        self.samples = samples
        gpu = np.load(self.path / GPU_CACHE, mmap_mode="r")
        cpu = np.load(self.path / CPU_CACHE, mmap_mode="r")
        for name, arr in ((GPU_CACHE, gpu), (CPU_CACHE, cpu)):
            if arr.ndim != 2 or arr.dtype != np.float32:
                raise ValueError(f"'{name}' expected a 2-D float32 array (got {arr.dtype} {arr.shape})")
        if gpu.shape[1] != cpu.shape[1]:
            raise ValueError(f"'{CPU_CACHE}' expected {gpu.shape[1]} columns like {GPU_CACHE} (got {cpu.shape[1]})")
        self.feature_dim = int(gpu.shape[1])
        self.row_bytes = self.feature_dim * 4
        self.gpu_rows, self.cpu_rows = int(gpu.shape[0]), int(cpu.shape[0])
        self.chunk_offset = np.load(self.path / CHUNK_OFFSET).astype(np.int64, copy=False)
        self.chunk_rows = np.load(self.path / CHUNK_ROWS).astype(np.int64, copy=False)
        self.addr_tier = np.load(self.path / ADDR_TIER, mmap_mode="r")
        self.addr_slot = np.load(self.path / ADDR_SLOT, mmap_mode="r")
        self.chunk_bytes = chunk_bytes(self.chunk_rows, self.row_bytes)  # (NB,) aligned read lengths
        present = [name for name in DISK_CACHE_FILES if (self.path / name).exists()]
        if present and len(present) != len(DISK_CACHE_FILES):
            missing = [name for name in DISK_CACHE_FILES if name not in present]
            raise FileNotFoundError(f"'packed' expected the disk-cache files {list(DISK_CACHE_FILES)} together "
                                    f"(got {present}, missing {missing} in {self.path})")
        self.has_disk_cache = bool(present)
        nb = samples.num_batches
        if self.has_disk_cache:
            self.segment_offset = np.load(self.path / SEGMENT_OFFSET).astype(np.int64, copy=False)
            self.segment_rows = np.load(self.path / SEGMENT_ROWS).astype(np.int64, copy=False)
            self.batch_segment = np.load(self.path / BATCH_SEGMENT).astype(np.int64, copy=False)
        else:  # no disk-cache level: no segments, no batch in one
            self.segment_offset = np.zeros(0, np.int64)
            self.segment_rows = np.zeros(0, np.int64)
            self.batch_segment = np.full(nb, -1, np.int64)
        self._validate()
        self._validate_disk_cache()

    @property
    def packed_path(self) -> Path:
        return self.path / PACKED_BIN

    @property
    def disk_cache_path(self) -> Path:
        return self.path / DISK_CACHE_BIN

    @property
    def max_cache_bytes(self) -> int:
        """Aligned bytes of the largest segment disk cache (at least one block): the most one batch's merged
        disk-cache read can fetch."""
        rows = int(self.segment_rows.max(initial=0))
        return max(int(align_up(rows * self.row_bytes, CHUNK_ALIGN)), CHUNK_ALIGN)

    @property
    def max_chunk_bytes(self) -> int:
        """The largest aligned chunk read (at least one block): the size of a reusable read buffer."""
        return max(int(self.chunk_bytes.max(initial=0)), CHUNK_ALIGN)

    def cache(self, tier: Tier) -> np.ndarray:
        """The GPU or CPU cache block, loaded into memory ``(rows, F)``."""
        names = {Tier.GPU: GPU_CACHE, Tier.CPU: CPU_CACHE}
        if tier not in names:
            raise ValueError(f"'tier' expected GPU or CPU (got {Tier(tier).name})")
        return np.load(self.path / names[tier])

    def addresses(self, batch: int, num_nodes: int | None = None) -> BatchAddresses:
        """The address table of ``batch`` (``num_nodes``, if given, must be the batch's node count)."""
        start, stop = self.samples.node_range(batch)
        if num_nodes is not None and stop - start != num_nodes:
            raise ValueError(f"'batch {batch}' expected {stop - start} nodes from node_range (got {num_nodes})")
        seg = int(self.batch_segment[batch])
        return BatchAddresses(
            batch=batch,
            tier=np.asarray(self.addr_tier[start:stop]),
            slot=np.asarray(self.addr_slot[start:stop], dtype=np.int64),
            chunk_offset=int(self.chunk_offset[batch]),
            chunk_rows=int(self.chunk_rows[batch]),
            chunk_bytes=int(self.chunk_bytes[batch]),
            cache_offset=int(self.segment_offset[seg]) if seg >= 0 else 0,
            cache_rows=int(self.segment_rows[seg]) if seg >= 0 else 0,
        )

    def _validate(self) -> None:
        nb = self.samples.num_batches
        for name, arr in ((CHUNK_OFFSET, self.chunk_offset), (CHUNK_ROWS, self.chunk_rows)):
            if arr.shape != (nb,):
                raise ValueError(f"'{name}' expected shape ({nb},) (one per batch) (got {arr.shape})")
        if nb and np.any(self.chunk_offset % CHUNK_ALIGN):
            bad = int(np.flatnonzero(self.chunk_offset % CHUNK_ALIGN)[0])
            raise ValueError(f"'{CHUNK_OFFSET}' expected multiples of {CHUNK_ALIGN} "
                             f"(got {int(self.chunk_offset[bad])} for batch {bad})")
        if self.addr_tier.shape != self.addr_slot.shape:
            raise ValueError(f"'{ADDR_SLOT}' expected shape {self.addr_tier.shape} like {ADDR_TIER} "
                             f"(got {self.addr_slot.shape})")
        total = self.samples.node_range(nb - 1)[1] if nb else 0
        if self.addr_tier.shape[0] < total:
            raise ValueError(f"'{ADDR_TIER}' expected >= {total} entries (one per nodes.npy entry) "
                             f"(got {self.addr_tier.shape[0]})")
        size = self.packed_path.stat().st_size
        ends = self.chunk_offset + self.chunk_bytes
        if nb and int(ends.max()) > size:
            b = int(np.argmax(ends))
            raise ValueError(f"'{PACKED_BIN}' expected >= {int(ends[b])} bytes (batch {b}'s chunk padded to "
                             f"{CHUNK_ALIGN}) (got {size})")

    def _validate_disk_cache(self) -> None:
        nb, ns = self.samples.num_batches, len(self.segment_offset)
        if self.segment_offset.ndim != 1 or self.segment_rows.shape != (ns,):
            raise ValueError(f"'{SEGMENT_ROWS}' expected shape ({ns},) like {SEGMENT_OFFSET} "
                             f"(got {self.segment_rows.shape})")
        if self.batch_segment.shape != (nb,):
            raise ValueError(f"'{BATCH_SEGMENT}' expected shape ({nb},) (one per batch) "
                             f"(got {self.batch_segment.shape})")
        bad = (self.batch_segment < -1) | (self.batch_segment >= ns)
        if np.any(bad):
            b = int(np.flatnonzero(bad)[0])
            raise ValueError(f"'{BATCH_SEGMENT}' expected -1 or a segment in [0, {ns}) "
                             f"(got {int(self.batch_segment[b])} for batch {b})")
        wrong = (self.segment_rows < 0) | (self.segment_offset % CHUNK_ALIGN != 0) | (self.segment_offset < 0)
        if np.any(wrong):
            g = int(np.flatnonzero(wrong)[0])
            raise ValueError(f"'{SEGMENT_OFFSET}'/'{SEGMENT_ROWS}' expected offsets >= 0, multiples of {CHUNK_ALIGN}, "
                             f"and rows >= 0 (got offset {int(self.segment_offset[g])}, rows "
                             f"{int(self.segment_rows[g])} for segment {g})")
        if not self.has_disk_cache or ns == 0:
            return
        size = self.disk_cache_path.stat().st_size
        ends = self.segment_offset + align_up(self.segment_rows * self.row_bytes, CHUNK_ALIGN)
        if int(ends.max()) > size:
            g = int(np.argmax(ends))
            raise ValueError(f"'{DISK_CACHE_BIN}' expected >= {int(ends[g])} bytes (segment {g}'s cache padded to "
                             f"{CHUNK_ALIGN}) (got {size})")
