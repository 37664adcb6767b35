"""MariusGNN's CPU partition buffer and the ``mariusgnn`` policy's feature source
(``pipelines.methods.policies.mariusgnn.policy``).

:class:`PartitionBuffer` holds at most ``capacity`` (``c``) physical partitions of ``partitions.bin`` resident,
in slots of one aligned pool, plus ``staging`` slots the prefetch thread reads the next set's incoming
partitions into. Partitions are read whole: large sequential aligned direct reads (``DirectFile``; ranges of
at most :data:`READ_RANGE` bytes, each one read request). :meth:`PartitionBuffer.activate` makes a set
resident (the prefetched partitions, then the rest read synchronously; partitions outside the set evicted
first, so residency never exceeds ``c``), and :meth:`PartitionBuffer.prefetch` starts reading the next one's.
Nothing is written back: node-classification features are read-only, so there is no writer thread.

The source's chain::

    BufferTier (packed) -> FileTier (file)
    rows of the resident partitions     evaluation batches: block-merged reads of the ordered features.npy

Training batches are the pack's per-set batches (:class:`SetSamples`, served under ids above the sample set's
own, listed per sample epoch by the ``train_hook``); a training batch's first read activates its set.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up
from storage_kernels.packstore import BatchAddresses, Tier
from storage_kernels.sampleset import SampledBatch, SampleSet, SampleSetView
from trainer.batch import TrainHook
from trainer.features.base import DirectFile, FeatureTier, NodeBatch, TierRead
from trainer.features.file import FileTier
from trainer.features.source import BatchRead, TieredSource

__all__ = ["READ_RANGE", "BufferTier", "PartitionBuffer", "PartitionBufferSource", "SetHook", "SetSamples"]

READ_RANGE = 8 << 20  # bytes per read request of a partition (a multiple of the 4 KiB block)


class PartitionBuffer:
    """``capacity`` resident partitions of ``path`` (``offsets``/``rows`` per partition, ``row_bytes`` per row)
    in one aligned pool of ``capacity + staging`` slots; see the module docstring.

    Counters: ``bytes_read``, ``read_requests`` (counted when a read is collected), ``loads`` (partitions
    read), ``prefetched`` (of them, read by the prefetch thread), ``max_resident``, ``wait_s`` (the serving
    thread waiting for reads), ``activations``.
    """

    def __init__(self, path: str | Path, offsets: np.ndarray, rows: np.ndarray, row_bytes: int, capacity: int,
                 staging: int = 1, num_threads: int = 0) -> None:
        self.offsets = np.asarray(offsets, dtype=np.int64)
        self.rows = np.asarray(rows, dtype=np.int64)
        if len(self.offsets) != len(self.rows):
            raise ValueError(f"'part_offset.npy' expected one offset per partition, {len(self.rows)} "
                             f"(got {len(self.offsets)})")
        if capacity < 1:
            raise ValueError(f"'plan.buffer_partitions' expected >= 1 (got {capacity})")
        self.row_bytes, self.capacity, self.staging = int(row_bytes), int(capacity), max(int(staging), 0)
        self.lengths = align_up(self.rows * self.row_bytes, DATA_ALIGN)  # (p,) bytes one partition read covers
        self.stride = int(self.lengths.max(initial=DATA_ALIGN))
        self.num_slots = self.capacity + self.staging
        self.pool = kernels.aligned_empty(self.num_slots * self.stride)
        self.file = DirectFile(path, "partitions")
        self.num_threads = int(num_threads)
        self.slot_of = np.full(len(self.rows), -1, dtype=np.int64)  # partition -> slot while resident
        self.free = list(range(self.num_slots))
        self.current: np.ndarray = np.empty(0, np.int64)
        self._pending: tuple[np.ndarray, list[int], Future[tuple[int, int]]] | None = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-partitions")
        self.bytes_read = self.read_requests = self.loads = self.prefetched = self.activations = 0
        self.max_resident = 0
        self.wait_s = 0.0

    @property
    def resident(self) -> np.ndarray:
        """The partitions servable now (sorted)."""
        return self.current

    def _read(self, parts: np.ndarray, slots: list[int]) -> tuple[int, int]:
        """Read ``parts`` whole into ``slots`` (ranges of at most ``READ_RANGE``); returns (bytes, requests)."""
        offs, lens, outs = [], [], []
        for q, s in zip(parts.tolist(), slots, strict=True):
            for lo in range(0, int(self.lengths[q]), READ_RANGE):
                offs.append(int(self.offsets[q]) + lo)
                lens.append(min(READ_RANGE, int(self.lengths[q]) - lo))
                outs.append(s * self.stride + lo)
        if not offs:
            return 0, 0
        before = self.file.requests
        nbytes = self.file.pread(np.asarray(offs, np.int64), np.asarray(lens, np.int64), self.pool,
                                 np.asarray(outs, np.int64), self.num_threads, merge=False)
        return nbytes, self.file.requests - before

    def _collect(self) -> tuple[np.ndarray, list[int]]:
        """Wait for the prefetch in flight (if any): its partitions and slots, counted."""
        if self._pending is None:
            return np.empty(0, np.int64), []
        parts, slots, future = self._pending
        t0 = time.perf_counter()
        nbytes, requests = future.result()
        self.wait_s += time.perf_counter() - t0
        self._pending = None
        self.bytes_read += nbytes
        self.read_requests += requests
        self.loads += len(parts)
        self.prefetched += len(parts)
        return parts, slots

    def activate(self, members: np.ndarray) -> None:
        """Make exactly ``members`` (at most ``capacity`` partitions) resident."""
        members = np.unique(np.asarray(members, dtype=np.int64))
        if len(members) > self.capacity:
            raise ValueError(f"'partition set' expected at most {self.capacity} partitions (got {len(members)})")
        staged, staged_slots = self._collect()
        for q in np.setdiff1d(self.current, members).tolist():  # evict first: residency stays <= capacity
            self.free.append(int(self.slot_of[q]))
            self.slot_of[q] = -1
        for q, s in zip(staged.tolist(), staged_slots, strict=True):
            if q in members:
                self.slot_of[q] = s
            else:  # prefetched for a set that is not the one activated
                self.free.append(s)
        missing = members[self.slot_of[members] < 0]
        if len(missing):
            slots = [self.free.pop() for _ in range(len(missing))]
            t0 = time.perf_counter()
            nbytes, requests = self._read(missing, slots)
            self.wait_s += time.perf_counter() - t0
            self.bytes_read += nbytes
            self.read_requests += requests
            self.loads += len(missing)
            self.slot_of[missing] = slots
        self.current = members
        self.activations += 1
        self.max_resident = max(self.max_resident, int(np.count_nonzero(self.slot_of >= 0)))

    def prefetch(self, members: np.ndarray) -> None:
        """Start reading the partitions of ``members`` not resident, as many as free slots allow, on the
        prefetch thread (no-op while one is in flight)."""
        if self._pending is not None:
            return
        incoming = np.setdiff1d(np.asarray(members, dtype=np.int64), self.current)[: len(self.free)]
        if not len(incoming):
            return
        slots = [self.free.pop() for _ in range(len(incoming))]
        self._pending = (incoming, slots, self._pool.submit(self._read, incoming, slots))

    def gather(self, parts: np.ndarray, rows: np.ndarray, out: np.ndarray, pos: np.ndarray | None = None) -> None:
        """``out[pos[k]]`` = row ``rows[k]`` of resident partition ``parts[k]`` (``pos`` distinct rows of
        ``out``, default ``arange(len(parts))``); ValueError for one not resident."""
        slots = self.slot_of[parts]  # (k,) -1: not resident
        if np.any(slots < 0):
            bad = int(parts[np.flatnonzero(slots < 0)[0]])
            raise ValueError(f"'partition buffer' expected partition {bad} to be resident (got "
                             f"{self.current.tolist()})")
        offsets = slots * self.stride + rows * self.row_bytes  # (k,) bytes into the pool
        if pos is None:
            kernels.gather_rows_at(self.pool, offsets, out, self.num_threads)
        else:
            kernels.gather_rows_at_into(self.pool, offsets, out, pos, self.num_threads)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        if self._pending is not None:
            self._pending[2].result()
            self._pending = None
        self.file.close()


class SetSamples(SampleSetView):
    """The trainer's sample set under ``mariusgnn``: the pack's per-set training batches under ids
    ``base + j`` (``base`` = the offline sample set's batch count), every other batch from ``samples``."""

    def __init__(self, pack_dir: str | Path, samples: SampleSet) -> None:
        self.samples = samples
        self.sets = SampleSet(pack_dir)
        self.base = int(samples.num_batches)

    @property
    def num_batches(self) -> int:
        return self.base + self.sets.num_batches

    def train_ids(self, epoch: int) -> list[int]:
        """The per-set training batches of sample epoch ``epoch`` (in training order)."""
        return [self.base + j for j in self.sets.batch_ids("train", epoch)]

    def is_set_batch(self, i: int) -> bool:
        return int(i) >= self.base

    def batch(self, i: int) -> SampledBatch:
        if int(i) < self.base:
            return self.samples.batch(i)
        b = self.sets.batch(int(i) - self.base)
        return SampledBatch(batch=int(i), split=b.split, epoch=b.epoch, step=b.step, nodes=b.nodes,
                            hop_counts=b.hop_counts, indptrs=b.indptrs, cols=b.cols)


class SetHook(TrainHook):
    """The ``train_hook``: the per-set batches (``samples``, ``batch_ids(epoch)``) and a plain forward."""

    def __init__(self, samples: SetSamples) -> None:
        self.samples = samples

    def batch_ids(self, epoch: int) -> list[int]:
        return self.samples.train_ids(epoch)


class BufferTier(FeatureTier):
    """Rows of the nodes addressed to ``Tier.PACKED`` (slot = node id) from the partition buffer; the read
    stage copies them out (any number of batches may be read ahead: ``max_reads_ahead`` 0)."""

    reads_disk = True

    def __init__(self, buffer: PartitionBuffer, node_part: np.ndarray, node_row: np.ndarray, feature_dim: int,
                 fallback: FeatureTier | None = None) -> None:
        super().__init__(Tier.PACKED, feature_dim, fallback, f"partition buffer ({buffer.file.path})")
        self.buffer, self.node_part, self.node_row = buffer, node_part, node_row
        self.direct_io, self.fallback_reason = buffer.file.direct, buffer.file.fallback_reason

    def num_slots(self, addr: BatchAddresses) -> int:
        return len(self.node_part)

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        assert part.staging is not None  # reserved by the source before the I/O
        self.buffer.gather(self.node_part[part.slot].astype(np.int64), self.node_row[part.slot], part.staging,
                           part.pos)

    def gather(self, part: TierRead) -> None:
        """Nothing to do: the read stage put the rows in place."""

    def sync(self) -> None:
        """Fold the buffer's I/O counters into this tier's."""
        self.bytes_read, self.read_requests = self.buffer.bytes_read, self.buffer.read_requests

    def close(self) -> None:
        self.buffer.close()


class PartitionBufferSource(TieredSource):
    """The ``mariusgnn`` policy's feature source over its ``pack`` artifact at ``pack_dir``; ``samples`` is
    the offline sample set (evaluation batches), ``features_path`` the ordered feature file they read."""

    def __init__(self, pack_dir: str | Path, samples: SampleSet, features_path: str | Path,
                 device: torch.device | str = "cpu", num_threads: int = 0) -> None:
        self.pack_dir = Path(pack_dir)
        load = lambda name: np.load(self.pack_dir / name)  # noqa: E731
        # memory-mapped: 12 bytes a node (1.2 GB at 100M nodes) read where batches look them up, page cache
        self.node_part = np.load(self.pack_dir / "node_part.npy", mmap_mode="r")
        self.node_row = np.load(self.pack_dir / "node_row.npy", mmap_mode="r")
        self.set_ptr, self.set_parts = load("set_ptr.npy"), load("set_parts.npy")
        self.set_epoch, self.batch_set = load("set_epoch.npy"), load("batch_set.npy")
        offsets, rows = load("part_offset.npy"), load("part_rows.npy")
        self.hook_samples = SetSamples(self.pack_dir, samples)
        if len(self.batch_set) != self.hook_samples.sets.num_batches:
            raise ValueError(f"'{self.pack_dir / 'batch_set.npy'}' expected one set per training batch, "
                             f"{self.hook_samples.sets.num_batches} (got {len(self.batch_set)})")
        file = FileTier(features_path, merge=True, num_threads=num_threads)
        row_bytes = file.feature_dim * 4
        sizes = np.diff(self.set_ptr)
        capacity = int(sizes.max(initial=1))
        self.next_set = self._successors()
        # staging: the most partitions one swap within an epoch brings in (epoch changes read the rest in turn)
        staging = max((len(np.setdiff1d(self.members(int(self.next_set[g])), self.members(g)))
                       for g in range(len(sizes)) if self.next_set[g] > g
                       and self.set_epoch[self.next_set[g]] == self.set_epoch[g]), default=0)
        self.buffer = PartitionBuffer(self.pack_dir / "partitions.bin", offsets, rows, row_bytes, capacity, staging,
                                      num_threads)
        self.buffer_tier = BufferTier(self.buffer, self.node_part, self.node_row, file.feature_dim, file)
        self.active_set = -1
        super().__init__(self.buffer_tier, device)
        self.train_hook = SetHook(self.hook_samples)

    def members(self, g: int) -> np.ndarray:
        """The partitions of set ``g``."""
        return np.asarray(self.set_parts[self.set_ptr[g] : self.set_ptr[g + 1]], dtype=np.int64)

    def _successors(self) -> np.ndarray:
        """The set training activates after each set: the next one with batches, cyclically through the sample
        epochs (a set no training node was assigned to is never loaded)."""
        n = len(self.set_epoch)
        used = np.flatnonzero(np.bincount(self.batch_set, minlength=n) > 0)  # (u,) ascending = training order
        nxt = np.full(n, -1, dtype=np.int64)
        if len(used):
            nxt[used] = np.roll(used, -1)
        return nxt

    def addresses(self, batch: NodeBatch) -> BatchAddresses:
        nodes = np.asarray(batch.nodes, dtype=np.int64)
        tier = Tier.PACKED if self.hook_samples.is_set_batch(int(batch.batch)) else Tier.FILE
        return BatchAddresses(batch=int(batch.batch), tier=np.full(len(nodes), int(tier), dtype=np.int8), slot=nodes,
                              chunk_offset=0, chunk_rows=0, chunk_bytes=0)

    def read(self, batch: NodeBatch) -> BatchRead:
        """The I/O stage, after making a training batch's partition set resident (and prefetching the next)."""
        if self.hook_samples.is_set_batch(int(batch.batch)):
            t0 = time.perf_counter()
            g = int(self.batch_set[int(batch.batch) - self.hook_samples.base])
            if g != self.active_set:
                self.buffer.activate(self.members(g))
                self.active_set = g
                self.buffer.prefetch(self.members(int(self.next_set[g])))
            self.buffer_tier.sync()
            self.read_s += time.perf_counter() - t0
        return super().read(batch)

    @property
    def bytes_read(self) -> int:
        self.buffer_tier.sync()
        return super().bytes_read

    @property
    def read_requests(self) -> int:
        self.buffer_tier.sync()
        return super().read_requests

    def reset_counters(self) -> None:
        """Zero the tiers' and the buffer's counters."""
        b = self.buffer
        b.bytes_read = b.read_requests = b.loads = b.prefetched = b.activations = 0
        b.wait_s = 0.0
        super().reset_counters()

    def stats(self) -> dict[str, float]:
        """The tiered counters plus the buffer's."""
        out = super().stats()
        b = self.buffer
        out.update({"partitions_loaded": float(b.loads), "partitions_prefetched": float(b.prefetched),
                    "partition_sets_activated": float(b.activations), "max_resident_partitions": float(b.max_resident),
                    "buffer_partitions": float(b.capacity), "staging_partitions": float(b.staging),
                    "partition_wait_s": b.wait_s})
        return out
