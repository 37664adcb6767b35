"""Out-of-core learned embeddings (``policy=mariusgnn``, ``train.task=link``, ``train.link_encoder=embedding``).

The embedding table and its Adagrad state live in a partitioned node file: ``p`` partitions of contiguous node
ids (the reorder artifact's order), partition-major, each partition's rows ``[embedding (D) | state (D)]``
float32 back to back from an aligned offset. A CPU buffer (:class:`PartitionedEmbeddings`) holds ``c``
partitions in slots of one aligned pool; :meth:`PartitionedEmbeddings.activate` makes a set resident: partitions
leaving the buffer are written back when dirty (``O_DIRECT`` writes of whole aligned partitions, on a writer
thread: the slot is reused, and the partition read again, only after its write completed), missing ones are read
whole with ``DirectFile`` (``O_DIRECT``, one read request per :data:`READ_RANGE`). A batch reads and updates the
rows of resident partitions only (``storage_kernels.kernels.gather_rows_at`` / ``place_rows_at``, C).

Prefetch (``plan.prefetch_partitions`` = ``d``, MariusGNN's prefetch thread): the pool has ``c + d`` slots;
after a set is activated, :meth:`PartitionedEmbeddings.prefetch` hands the next set's incoming partitions (at
most ``d``) to one reader thread (``trainer.link.prefetch``), which reads them into spare slots while the current
set trains, each after the write-back it must follow; the next :meth:`~PartitionedEmbeddings.activate` adopts
them and reads the rest synchronously. Memory: ``(c + d) * stride`` bytes of pool (``buffer_bytes``); at most
``c`` partitions resident (``max_resident``), at most ``c + d`` slots holding a partition (``max_slots_used``).
The rows trained, and so the results, do not depend on ``d``; ``load_wait_s`` is the time the trainer spent
blocked making sets resident.

An epoch (:func:`bucket_batches`) follows MariusGNN: the training edges are grouped into the ``p x p`` edge
buckets (``kernels.bucket_rows``, C; bucket ``{i, j}`` holds the edges between partitions ``i`` and ``j``); the
order ``train.partition_order`` (BETA or COMET, ``trainer.partition_orders``) gives the sequence of
partition sets and the set each bucket is trained in; per set, its buckets' edges are shuffled and cut into
batches whose negatives are drawn from the resident nodes only. The same epoch replayed over an in-memory table
(``on_set`` a no-op) draws the same batches and negatives, so the two runs give the same embeddings.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up, blocks_of_rows
from trainer.features.base import DirectFile, block_positions, read_blocks
from trainer.link.embeddings import INIT_BLOCK, adagrad_rows, initial_rows
from trainer.link.negatives import chunk_bounds
from trainer.link.prefetch import PartitionPrefetcher
from trainer.link.train import LinkBatch

__all__ = ["READ_RANGE", "PartitionedEmbeddings", "bucket_batches", "group_buckets", "partition_bounds"]

READ_RANGE = 8 << 20  # bytes per read request of a partition (a multiple of the 4 KiB block)
READ_ANY_BYTES = 64 << 20  # blocks one round of an evaluation read may hold


def partition_bounds(num_nodes: int, p: int) -> np.ndarray:
    """``(p + 1,)`` int64: partition ``q`` holds nodes ``[bounds[q], bounds[q + 1])`` (sizes differ by <= 1)."""
    if not 1 <= p <= max(num_nodes, 1):
        raise ValueError(f"'plan.num_partitions' expected 1..{num_nodes} partitions (got {p})")
    return (np.arange(p + 1, dtype=np.int64) * num_nodes) // p


class PartitionedEmbeddings:
    """The table and Adagrad state of ``num_nodes`` rows in ``p`` partitions of ``path`` (created and
    initialised from ``seed`` with :func:`~trainer.link.embeddings.initial_rows`), ``capacity`` resident, and
    ``prefetch`` spare slots the prefetch thread reads ahead into (0: every load synchronous).

    Counters: ``bytes_read``/``read_requests`` and ``bytes_written``/``write_requests`` (training traffic,
    prefetches included), ``loads`` (partitions read for training), ``prefetched`` (of them, by the prefetch
    thread), ``writebacks``, ``max_resident`` (<= ``capacity``), ``max_slots_used`` (<= ``capacity +
    prefetch``), ``load_wait_s``, ``write_waits`` (loads issued while the partition's write-back was still in
    flight: they waited for it); ``written`` records, per partition, how many times it was written back.
    """

    def __init__(self, path: str | Path, num_nodes: int, dim: int, p: int, capacity: int, seed: int,
                 num_threads: int = 0, prefetch: int = 0) -> None:
        if capacity < 1:
            raise ValueError(f"'plan.buffer_partitions' expected >= 1 (got {capacity})")
        if prefetch < 0:
            raise ValueError(f"'plan.prefetch_partitions' expected >= 0 (got {prefetch})")
        self.path = Path(path)
        self.num_nodes, self.dim, self.capacity = int(num_nodes), int(dim), int(capacity)
        self.bounds = partition_bounds(self.num_nodes, p)
        self.p = int(p)
        self.row_bytes = 2 * self.dim * 4  # [embedding | Adagrad state], float32
        rows = np.diff(self.bounds)
        self.lengths = align_up(rows * self.row_bytes, DATA_ALIGN)  # (p,) bytes of each partition on disk
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.stride = int(self.lengths.max(initial=DATA_ALIGN))
        self.num_threads = int(num_threads)
        self.prefetch_depth = int(prefetch)
        self.num_slots = self.capacity + self.prefetch_depth
        self._initialise(seed)
        self.pool = kernels.aligned_empty(self.num_slots * self.stride)
        self.reader = DirectFile(self.path, "embedding partitions")
        self.wfd, self.direct_writes = kernels.open_direct(str(self.path), write=True)
        self.slot_of = np.full(self.p, -1, dtype=np.int64)
        self.dirty = np.zeros(self.p, dtype=bool)
        # free slots, each with the write-back of its last tenant (None: nothing pending), oldest first
        self.free: list[tuple[int, Future[None] | None]] = [(s, None) for s in range(self.num_slots)]
        self._writing: dict[int, Future[None]] = {}  # partition -> its latest write-back
        self.current = np.empty(0, dtype=np.int64)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-embedding-writer")
        self._lock = threading.Lock()
        # the prefetch thread reads with its own file (its own request counter)
        self._ahead = DirectFile(self.path, "embedding partitions") if self.prefetch_depth else None
        self._prefetcher = PartitionPrefetcher(self._read_ahead) if self._ahead is not None else None
        self.bytes_read = self.read_requests = self.bytes_written = self.write_requests = 0
        self.loads = self.prefetched = self.writebacks = self.max_resident = self.max_slots_used = 0
        self.load_wait_s = 0.0
        self.write_waits = 0  # loads issued while their partition's write-back was still pending
        self.written = np.zeros(self.p, dtype=np.int64)

    # ------------------------------------------------------------------------------------------ the file
    def _initialise(self, seed: int) -> None:
        """Write every partition's initial rows (state zero), one partition at a time."""
        with open(self.path, "wb") as f:
            f.truncate(int(self.offsets[-1] + self.lengths[-1]))
            for q in range(self.p):  # a block of rows at a time: a partition may be larger than the budget
                f.seek(int(self.offsets[q]))
                for lo in range(int(self.bounds[q]), int(self.bounds[q + 1]), INIT_BLOCK):
                    hi = min(lo + INIT_BLOCK, int(self.bounds[q + 1]))
                    rows = np.zeros((hi - lo, 2 * self.dim), dtype=np.float32)
                    rows[:, : self.dim] = initial_rows(seed, self.dim, lo, hi)
                    f.write(rows.tobytes())

    def _slot_view(self, slot: int, q: int) -> np.ndarray:
        return self.pool[slot * self.stride: slot * self.stride + int(self.lengths[q])]

    def _read_into(self, reader: DirectFile, q: int, slot: int) -> tuple[int, int]:
        """Read partition ``q`` whole into ``slot`` with ``reader``: ``(bytes, requests)``."""
        offs, lens, outs = [], [], []
        for lo in range(0, int(self.lengths[q]), READ_RANGE):
            offs.append(int(self.offsets[q]) + lo)
            lens.append(min(READ_RANGE, int(self.lengths[q]) - lo))
            outs.append(slot * self.stride + lo)
        before = reader.requests
        nbytes = reader.pread(np.asarray(offs, np.int64), np.asarray(lens, np.int64), self.pool,
                              np.asarray(outs, np.int64), self.num_threads, merge=False)
        return nbytes, reader.requests - before

    def _read_ahead(self, q: int, slot: int) -> tuple[int, int]:
        assert self._ahead is not None
        return self._read_into(self._ahead, q, slot)

    def _read(self, q: int, slot: int) -> None:
        """Synchronous load of ``q`` into ``slot``, after ``q``'s write-back (if one is pending)."""
        pending = self._writing.get(q)
        if pending is not None:
            self.write_waits += not pending.done()
            pending.result()  # a partition written back must not be read stale
        nbytes, requests = self._read_into(self.reader, q, slot)
        self.bytes_read += nbytes
        self.read_requests += requests
        self.loads += 1

    def _write(self, q: int, slot: int) -> None:
        """Write partition ``q`` from ``slot`` (aligned address, offset and length: O_DIRECT)."""
        view = memoryview(self._slot_view(slot, q))
        done = 0
        while done < len(view):  # pwrite may write less than asked
            done += os.pwrite(self.wfd, view[done:], int(self.offsets[q]) + done)
        with self._lock:
            self.bytes_written += len(view)
            self.write_requests += 1
            self.written[q] += 1

    # ------------------------------------------------------------------------------------------ the buffer
    def _take_slot(self) -> int:
        slot, pending = self.free.pop(0)
        if pending is not None:
            pending.result()  # its write-back must land before the slot is overwritten
        return slot

    def _evict(self, q: int) -> None:
        slot = int(self.slot_of[q])
        self.slot_of[q] = -1
        pending = None
        if self.dirty[q]:
            self.dirty[q] = False
            self.writebacks += 1
            pending = self._writer.submit(self._write, q, slot)
            self._writing[q] = pending
        self.free.append((slot, pending))

    def activate(self, members: np.ndarray) -> None:
        """Make exactly ``members`` (at most ``capacity`` partitions) resident."""
        members = np.unique(np.asarray(members, dtype=np.int64))
        if len(members) > self.capacity:
            raise ValueError(f"'partition set' expected at most {self.capacity} partitions (got {len(members)})")
        t0 = time.perf_counter()
        staged = self._prefetcher.collect() if self._prefetcher is not None else None
        for q in np.setdiff1d(self.current, members).tolist():  # evict first: residency stays <= capacity
            self._evict(q)
        if staged is not None:
            self.bytes_read += staged.bytes_read
            self.read_requests += staged.read_requests
            for q, slot in zip(staged.parts, staged.slots, strict=True):
                if q in members:  # read ahead for this set
                    self.slot_of[q] = slot
                    self.loads += 1
                    self.prefetched += 1
                else:  # read ahead for another set: the slot is clean, free at once
                    self.free.append((slot, None))
        for q in members[self.slot_of[members] < 0].tolist():
            slot = self._take_slot()
            self._read(q, slot)
            self.slot_of[q] = slot
        self.current = members
        self.load_wait_s += time.perf_counter() - t0
        resident = int(np.count_nonzero(self.slot_of >= 0))
        self.max_resident = max(self.max_resident, resident)
        self.max_slots_used = max(self.max_slots_used, resident)

    def prefetch(self, members: np.ndarray) -> None:
        """Start reading the partitions of the next set ``members`` that are not resident (at most
        ``prefetch`` of them) into spare slots on the prefetch thread; a no-op without spare slots or while a
        prefetch is in flight. Each read waits for its partition's and its slot's pending write-backs."""
        if self._prefetcher is None or self._prefetcher.busy:
            return
        incoming = np.setdiff1d(np.asarray(members, dtype=np.int64), self.current)
        incoming = incoming[self.slot_of[incoming] < 0][: min(self.prefetch_depth, len(self.free))].tolist()
        if not incoming:
            return
        taken = [self.free.pop(0) for _ in incoming]
        own = [self._writing.get(q) for q in incoming]
        self.write_waits += sum(f is not None and not f.done() for f in own)
        after = [f for _, f in taken] + own
        self._prefetcher.start(incoming, [s for s, _ in taken], after)
        used = int(np.count_nonzero(self.slot_of >= 0)) + len(incoming)
        self.max_slots_used = max(self.max_slots_used, used)

    def flush(self) -> None:
        """Write back every dirty resident partition and wait for all writes."""
        futures = [self._writer.submit(self._write, q, int(self.slot_of[q]))
                   for q in np.flatnonzero(self.dirty & (self.slot_of >= 0)).tolist()]
        self.writebacks += len(futures)
        self.dirty[:] = False
        for f in futures:
            f.result()
        for _, pending in self.free:
            if pending is not None:
                pending.result()
        for f in self._writing.values():  # slots a prefetch took still had their writes pending
            f.result()
        self._writing.clear()

    def _byte_offsets(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Byte offsets of ``nodes``' rows in the pool, and their partitions; ValueError for one not resident."""
        part = np.searchsorted(self.bounds, nodes, side="right") - 1
        slots = self.slot_of[part]
        if np.any(slots < 0):
            bad = int(nodes[np.flatnonzero(slots < 0)[0]])
            raise ValueError(f"'embedding buffer' expected node {bad} (partition {int(part[slots < 0][0])}) to be "
                             f"resident (got partitions {self.current.tolist()})")
        return slots * self.stride + (nodes - self.bounds[part]) * self.row_bytes, part

    def _rows(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        offsets, part = self._byte_offsets(np.asarray(nodes, dtype=np.int64))
        rows = np.empty((len(offsets), 2 * self.dim), dtype=np.float32)
        kernels.gather_rows_at(self.pool, offsets, rows, self.num_threads)
        return rows, offsets, part

    def read(self, nodes: np.ndarray) -> np.ndarray:
        """``(U, D)`` embeddings of ``nodes``: from the buffer when all are resident (training), else from the
        file after a flush (:meth:`read_any`: evaluation between epochs)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        part = np.searchsorted(self.bounds, nodes, side="right") - 1
        if len(nodes) and np.all(self.slot_of[part] >= 0):
            return self._rows(nodes)[0][:, : self.dim]
        return self.read_any(nodes)

    def update(self, nodes: np.ndarray, grad: np.ndarray, lr: float) -> None:
        """Adagrad on the rows of resident, distinct ``nodes``; their partitions become dirty."""
        rows, offsets, part = self._rows(nodes)
        emb, state = rows[:, : self.dim].copy(), rows[:, self.dim:].copy()
        adagrad_rows(emb, state, np.asarray(grad, dtype=np.float32), lr)
        rows[:, : self.dim], rows[:, self.dim:] = emb, state
        order = np.argsort(offsets, kind="stable")  # place_rows_at takes ascending offsets
        kernels.place_rows_at(rows[order], offsets[order], self.pool, self.num_threads)
        self.dirty[np.unique(part)] = True

    def release(self) -> None:
        """Evict everything (written back) and wait: the file then holds the whole state."""
        self.activate(np.empty(0, dtype=np.int64))
        self.flush()

    def read_partition(self, q: int) -> np.ndarray:
        """``(rows, 2D)`` float32 of partition ``q`` as the file holds it (a fresh direct read, uncounted)."""
        buf = kernels.aligned_empty(int(self.lengths[q]))
        self.reader.pread(np.array([self.offsets[q]]), np.array([self.lengths[q]]), buf, np.zeros(1, np.int64),
                          merge=False)
        rows = int(self.bounds[q + 1] - self.bounds[q])
        return buf[: rows * self.row_bytes].view(np.float32).reshape(rows, 2 * self.dim).copy()

    def read_any(self, nodes: np.ndarray) -> np.ndarray:
        """``(U, D)`` embeddings of any ``nodes`` from the file (evaluation, between epochs): the buffer is
        released (every partition written back, none resident) and its pool becomes the read buffer, so
        evaluation allocates no buffer of its own; only the aligned blocks that hold the rows are read, with
        merged direct reads, in rounds of at most ``READ_ANY_BYTES`` (and the pool) of blocks (a whole-partition
        read per call made evaluation in groups read the table once per group)."""
        self.release()
        nodes = np.asarray(nodes, dtype=np.int64)
        out = np.empty((len(nodes), self.dim), dtype=np.float32)
        if not len(nodes):
            return out
        part = np.searchsorted(self.bounds, nodes, side="right") - 1
        start = self.offsets[part] + (nodes - self.bounds[part]) * self.row_bytes  # (U,) byte of each row
        order = np.argsort(start, kind="stable")
        # rounds fit the resident slots (not the prefetch spares: the traffic does not depend on the depth)
        span = max(min(READ_ANY_BYTES, self.capacity * self.stride), align_up(self.row_bytes, DATA_ALIGN) + DATA_ALIGN)
        lo = 0
        while lo < len(order):  # rows in file order, a round of blocks at a time
            hi = int(np.searchsorted(start[order], start[order[lo]] + span - self.row_bytes - DATA_ALIGN,
                                     side="right"))
            hi = max(hi, lo + 1)
            at = order[lo:hi]
            blocks = blocks_of_rows(np.zeros(len(at), np.int64), self.row_bytes, start[at])  # (m,) sorted
            before = self.reader.requests
            buffer, nbytes, _ = read_blocks(self.reader, blocks, self.pool, self.num_threads)
            self.bytes_read += nbytes
            self.read_requests += self.reader.requests - before
            # the embedding half of each row (its first D floats) straight to its place in ``out``
            kernels.gather_rows_at_into(buffer, block_positions(blocks, start[at]), out, at, self.num_threads)
            lo = hi
        return out

    def write_table(self, out: np.ndarray) -> np.ndarray:
        """Fill ``out`` (N, D) (e.g. a memmap) with the embeddings, one partition at a time."""
        self.release()
        for q in range(self.p):
            out[self.bounds[q]: self.bounds[q + 1]] = self.read_partition(q)[:, : self.dim]
        return out

    def close(self) -> None:
        if self._prefetcher is not None:
            self._prefetcher.close()
        if self._ahead is not None:
            self._ahead.close()
        self._writer.shutdown(wait=True)
        self.reader.close()
        if self.wfd >= 0:
            kernels.close_fd(self.wfd)
            self.wfd = -1


def group_buckets(edges: np.ndarray, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The edges grouped by unordered bucket ``{i, j}`` (key ``min * p + max``), stably (``kernels.bucket_rows``):
    ``(grouped (E, 2), ptr (p * p + 1,))``, bucket ``(i, j)``'s edges ``grouped[ptr[k]:ptr[k + 1]]``."""
    p = len(bounds) - 1
    part = np.searchsorted(bounds, edges, side="right") - 1  # (E, 2)
    keys = np.minimum(part[:, 0], part[:, 1]) * p + np.maximum(part[:, 0], part[:, 1])
    grouped, _, ptr = kernels.bucket_rows(np.ascontiguousarray(edges, dtype=np.int64), keys,
                                          np.arange(p * p + 1, dtype=np.int64))
    return grouped, ptr


def bucket_batches(grouped: np.ndarray, ptr: np.ndarray, bounds: np.ndarray, cfg: Any, order_name: str, c: int,
                   epoch: int, on_set: Callable[[np.ndarray], None] = lambda s: None,
                   on_next: Callable[[np.ndarray], None] | None = None) -> Iterator[LinkBatch]:
    """One epoch in MariusGNN's order: per partition set of ``epoch_order(order_name, p, c)`` with edges,
    ``on_set(set)`` and ``on_next(the next such set)`` (what a prefetch reads ahead; not after the last), then
    its buckets' edges shuffled (random direction) in batches of ``cfg.link_batch_size``, negatives
    (``cfg.negatives`` per ``cfg.negative_chunk``) uniform over the set's nodes or, with
    ``negative_sampler=degree``, endpoints of the set's edges. Seeded by ``cfg.seed`` and ``epoch``."""
    from trainer.partition_orders import epoch_order

    p = len(bounds) - 1
    rng = np.random.default_rng([int(cfg.seed), 104_729, int(epoch)])
    order = epoch_order(order_name, p, c, rng)
    upper = np.triu(np.ones((p, p), dtype=bool))
    sets = []  # (members, bucket keys) of the sets with edges: the sets made resident, in order
    for k, members in enumerate(order.sets):
        keys = np.flatnonzero((order.bucket_set == k) & upper)  # i <= j: each unordered bucket once
        if int((ptr[keys + 1] - ptr[keys]).sum()):
            sets.append((members, keys))
    for i, (members, keys) in enumerate(sets):
        on_set(members)
        if on_next is not None and i + 1 < len(sets):
            on_next(sets[i + 1][0])
        edges = np.concatenate([grouped[ptr[b]: ptr[b + 1]] for b in keys.tolist()])
        edges = edges[rng.permutation(len(edges))]
        flip = rng.random(len(edges)) < 0.5
        edges[flip] = edges[flip][:, ::-1]
        resident = np.concatenate([np.arange(bounds[q], bounds[q + 1]) for q in members.tolist()])
        pool = edges.ravel() if cfg.negative_sampler == "degree" else resident
        for lo in range(0, len(edges), cfg.link_batch_size):
            batch = edges[lo: lo + cfg.link_batch_size]
            chunks = len(chunk_bounds(len(batch), cfg.negative_chunk)) - 1
            yield LinkBatch(batch, pool[rng.integers(0, len(pool), size=(chunks, cfg.negatives))])
