"""Hyperbatch training's feature source: hotset in RAM, each hyperbatch's cold blocks read once, prefetched.

A hyperbatch is a run of consecutive training batches of the sample set (``storage_kernels.alignedstore``'s
tables, cut by the pack stage within a RAM budget). For each hyperbatch, the union of its batches' nodes
that are not in the hotset (its *cold* nodes) is read as the distinct 4 KiB blocks of ``aligned.bin`` that
hold them -- once, with merged aligned direct reads (one request per run of consecutive blocks) -- and its
batches are then served from that buffer and the hotset, in node order. A background thread loads hyperbatch
``k + 1`` while the batches of ``k`` are served (double buffering: two buffers, at most one load in flight).

The chain (:class:`HyperbatchSource`)::

    HotsetTier (CPU) -> HyperbatchTier (packed) -> FileTier (file)
    hub rows in RAM     the hyperbatch's blocks    evaluation batches: block-merged reads of features.npy

Epochs are seen from the batch order: the first training batch of a sample epoch starts an epoch, at which
the hotset's counters decay and, every ``refresh_epochs`` epochs, the hotset is re-selected (evict/load the
difference). A hyperbatch's accesses are counted when it becomes current. Across an epoch boundary the next
hyperbatch is prefetched only when no refresh is due there (a refresh changes which nodes are cold); a
prefetch planned against an older hotset is never served.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from storage_kernels.alignedstore import (
    ALIGNED_BIN,
    HOTSET_NODES,
    LAYOUT_JSON,
    BlockLayout,
    HyperbatchTable,
    hotset_refresh_due,
)
from storage_kernels.packstore import BatchAddresses, Tier
from trainer.features.aligned import AlignedBlocks
from trainer.features.base import FeatureTier, NodeBatch, TierRead
from trainer.features.file import FileTier
from trainer.features.hotset import Hotset, HotsetTier
from trainer.features.source import BatchRead, TieredSource

__all__ = ["HyperbatchSamples", "HyperbatchSource", "HyperbatchTier", "LoadedHyperbatch"]

class HyperbatchSamples(Protocol):
    """What the source reads of a sample set (``storage_kernels.sampleset.SampleSet``): the batch count and
    each batch's node list."""

    num_batches: int

    @property
    def nodes(self) -> np.ndarray: ...

    def node_range(self, i: int) -> tuple[int, int]: ...


@dataclass
class LoadedHyperbatch:
    """A hyperbatch in RAM: its ``blocks`` (sorted) back to back in ``buffer``, the hotset ``version`` its
    cold set was computed under, its batches' distinct ``nodes`` and their access ``counts``, and the I/O it
    cost."""

    hb: int
    version: int
    blocks: np.ndarray
    buffer: np.ndarray
    nodes: np.ndarray
    counts: np.ndarray
    nbytes: int
    requests: int
    load_s: float


class HyperbatchTier(FeatureTier):
    """Rows of the nodes addressed to ``Tier.PACKED`` (slot = node id) from the current hyperbatch's buffer.

    :meth:`activate` makes a hyperbatch current (the prefetched one when it is the one asked for and still
    valid, else a synchronous load); :meth:`prefetch` starts loading another on the background thread. Two
    buffers: the current hyperbatch's and the one being loaded. ``bytes_read`` / ``read_requests`` count
    every load when its result is collected (a hyperbatch's distinct cold blocks x block size, one request
    per run of consecutive blocks). The read stage copies a batch's rows out of the buffer, so any number of
    batches may be read ahead of their assembly (``max_reads_ahead`` 0).
    """

    reads_disk = True

    def __init__(self, blocks: AlignedBlocks, table: HyperbatchTable, samples: HyperbatchSamples, hotset: Hotset,
                 fallback: FeatureTier | None = None) -> None:
        super().__init__(Tier.PACKED, blocks.layout.feature_dim, fallback, f"hyperbatches ({blocks.path})")
        self.blocks, self.table, self.samples, self.hotset = blocks, table, samples, hotset
        self.direct_io, self.fallback_reason = blocks.direct, blocks.fallback_reason
        self.current: LoadedHyperbatch | None = None
        self._spare: np.ndarray | None = None  # the second buffer, when no load holds it
        self._pending: tuple[int, int, Future[LoadedHyperbatch]] | None = None  # (hb, hotset version, load)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="strata-hyperbatch")
        self.loads = 0  # hyperbatches read
        self.prefetched = 0  # of them, served from a prefetch
        self.wasted = 0  # loads dropped unserved
        self.wait_s = 0.0  # time the serving thread waited for a load
        self.load_s = 0.0  # time the loads took (on whichever thread)

    def num_slots(self, addr: BatchAddresses) -> int:
        return self.blocks.layout.num_rows

    # ------------------------------------------------------------------------------------------ loading
    def _load(self, hb: int, version: int, buffer: np.ndarray | None) -> LoadedHyperbatch:
        """Read hyperbatch ``hb``'s cold blocks (runs on the loader thread; the hotset does not change while
        a load is in flight)."""
        t0 = time.perf_counter()
        batches = self.table.batches_of(hb)
        parts = [np.asarray(self.samples.nodes[slice(*self.samples.node_range(int(b)))]) for b in batches]
        nodes, counts = np.unique(np.concatenate(parts), return_counts=True)  # (u,) distinct, (u,) accesses
        cold = nodes[self.hotset.slot[nodes] < 0]
        blocks = self.blocks.layout.blocks_of(cold)  # (m,) sorted
        before = self.blocks.requests
        buffer, nbytes = self.blocks.read(blocks, buffer)
        return LoadedHyperbatch(hb, version, blocks, buffer, nodes, counts.astype(np.int64), nbytes,
                                self.blocks.requests - before, time.perf_counter() - t0)

    def _collect(self) -> LoadedHyperbatch | None:
        """Wait for the load in flight (if any) and count it."""
        if self._pending is None:
            return None
        t0 = time.perf_counter()
        loaded = self._pending[2].result()
        self.wait_s += time.perf_counter() - t0
        self._pending = None
        self.bytes_read += loaded.nbytes
        self.read_requests += loaded.requests
        self.load_s += loaded.load_s
        self.loads += 1
        return loaded

    def drain(self) -> None:
        """Finish the load in flight and drop it (before the hotset changes)."""
        loaded = self._collect()
        if loaded is not None:
            self.wasted += 1
            self._spare = loaded.buffer

    def prefetch(self, hb: int) -> None:
        """Start loading ``hb`` on the background thread into the spare buffer (no-op when one is in flight)."""
        if self._pending is not None:
            return
        buffer, self._spare = self._spare, None
        self._pending = (hb, self.hotset.version, self._pool.submit(self._load, hb, self.hotset.version, buffer))

    def activate(self, hb: int) -> LoadedHyperbatch:
        """Make ``hb`` current, freshly loaded: the prefetched load when it is ``hb`` under the current hotset,
        else a synchronous load. The previous hyperbatch's buffer becomes the spare."""
        pending = self._pending
        if pending is None or pending[0] != hb or pending[1] != self.hotset.version:
            self.drain()
            self.prefetch(hb)
        else:
            self.prefetched += 1
        loaded = self._collect()
        assert loaded is not None  # a load of hb was in flight
        if self.current is not None:
            self._spare = self.current.buffer
        self.current = loaded
        return loaded

    # ------------------------------------------------------------------------------------------ serving
    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        """Copy the part's rows from the current hyperbatch's buffer into their rows of the staging block."""
        assert part.staging is not None  # reserved by the source before the I/O
        cur = self.current
        hb = int(self.table.hb_of_batch[addr.batch])
        if cur is None or cur.hb != hb:
            raise ValueError(f"'{self.name}' expected batch {addr.batch}'s hyperbatch {hb} to be current "
                             f"(got {None if cur is None else cur.hb})")
        self.blocks.extract(cur.buffer, cur.blocks, part.slot, part.staging, part.pos)

    def gather(self, part: TierRead) -> None:
        """Nothing to do: the read stage put the rows in place."""

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.drain()
        self.blocks.close()


class _Addresses:
    """The hyperbatch source's addressing: hot nodes from the hotset (slot = hotset row), the other nodes of
    a training batch from its hyperbatch, of an evaluation batch from the feature file (slot = node id)."""

    def __init__(self, path: Path, samples: HyperbatchSamples, table: HyperbatchTable, hotset: Hotset) -> None:
        self.path, self.samples, self.table, self.hotset = path, samples, table, hotset
        self.feature_dim = hotset.feature_dim

    def addresses(self, batch: int, num_nodes: int | None = None) -> BatchAddresses:
        start, stop = self.samples.node_range(batch)
        if num_nodes is not None and stop - start != num_nodes:
            raise ValueError(f"'batch {batch}' expected {stop - start} nodes from node_range (got {num_nodes})")
        nodes = np.asarray(self.samples.nodes[start:stop], dtype=np.int64)
        hot = self.hotset.slot[nodes]  # (n,) -1: not hot
        cold_tier = Tier.PACKED if self.table.hb_of_batch[batch] >= 0 else Tier.FILE
        tier = np.where(hot >= 0, int(Tier.CPU), int(cold_tier)).astype(np.int8)
        return BatchAddresses(batch=int(batch), tier=tier, slot=np.where(hot >= 0, hot, nodes), chunk_offset=0,
                              chunk_rows=0, chunk_bytes=0)


class HyperbatchSource(TieredSource):
    """The ``hyperbatch`` policy's feature source over its ``pack`` artifact at ``pack_dir``.

    ``samples`` is the sample set the tables index; ``features_path`` the ordered feature file evaluation
    batches read (block-merged aligned reads, as ``diskgnn`` does); ``degree`` (N,) weighs the access
    counters; the hotset holds at most ``budget_rows`` rows (its initial nodes: ``hotset_nodes.npy``, read
    from ``aligned.bin`` when the source opens), decays its counters by ``decay`` per epoch and is re-selected
    every ``refresh_epochs`` epochs (0: never).

    >>> source = HyperbatchSource(pack.path, samples, reorder.file("features.npy"), degree, budget_rows)
    """

    def __init__(self, pack_dir: str | Path, samples: HyperbatchSamples, features_path: str | Path | None,
                 degree: np.ndarray, budget_rows: int, device: torch.device | str = "cpu", *, decay: float = 0.5,
                 refresh_epochs: int = 1, num_threads: int = 0) -> None:
        self.pack_dir = Path(pack_dir)
        if refresh_epochs < 0:
            raise ValueError(f"'refresh_epochs' expected >= 0 (got {refresh_epochs})")
        layout = BlockLayout.load(self.pack_dir / LAYOUT_JSON)
        if len(degree) != layout.num_rows:
            raise ValueError(f"'degree' expected {layout.num_rows} entries, one per row of {ALIGNED_BIN} "
                             f"(got {len(degree)})")
        self.table = HyperbatchTable(self.pack_dir, int(samples.num_batches))
        device = torch.device(device)
        hot_file = AlignedBlocks(self.pack_dir / ALIGNED_BIN, layout, num_threads)
        hot_nodes = np.load(self.pack_dir / HOTSET_NODES).astype(np.int64, copy=False)
        self.hotset = Hotset(hot_nodes, hot_file, degree, budget_rows, decay,
                             pin_memory=device.type == "cuda")
        file_tier = FileTier(features_path, num_threads=num_threads) if features_path is not None else None
        self.hyperbatches = HyperbatchTier(AlignedBlocks(self.pack_dir / ALIGNED_BIN, layout, num_threads),
                                           self.table, samples, self.hotset, file_tier)
        self.hot = HotsetTier(self.hotset, hot_file, self.hyperbatches, num_threads=num_threads)
        self.hot.bytes_read, self.hot.read_requests = hot_file.bytes_read, hot_file.requests  # the initial load
        self.refresh_epochs = int(refresh_epochs)
        self.epochs_started = 0
        super().__init__(self.hot, device, _Addresses(self.pack_dir, samples, self.table, self.hotset))

    def _refresh_due(self, epoch: int) -> bool:
        """Whether the hotset is re-selected when epoch ``epoch`` (0-based, as this source counts) starts."""
        return hotset_refresh_due(epoch, self.refresh_epochs)

    def _advance(self, batch: int) -> None:
        """Before a batch's addresses: start an epoch (decay, refresh) at the first batch of a sample epoch,
        make its hyperbatch current, and prefetch the next."""
        hb = int(self.table.hb_of_batch[batch])
        if hb < 0:
            return  # an evaluation batch: served by the hotset and the feature file
        tier = self.hyperbatches
        if self.table.is_epoch_start(batch):
            if self.epochs_started > 0:
                self.hotset.end_epoch()
                if self._refresh_due(self.epochs_started):
                    tier.drain()  # a load in flight was planned against the old hotset
                    self.hot.refresh()
            self.epochs_started += 1
        elif tier.current is not None and tier.current.hb == hb:
            return
        loaded = tier.activate(hb)
        self.hotset.record(loaded.nodes, loaded.counts)
        nxt = self.table.next_of(hb, cross_epochs=not self._refresh_due(self.epochs_started))
        if nxt is not None:
            tier.prefetch(nxt)

    def read(self, batch: NodeBatch) -> BatchRead:
        """The I/O stage, after advancing the hyperbatch (and the epoch) to ``batch``'s."""
        t0 = time.perf_counter()
        self._advance(int(batch.batch))  # may wait for a hyperbatch load: counted as reading
        self.read_s += time.perf_counter() - t0
        return super().read(batch)

    def stats(self) -> dict[str, float]:
        """The tiered counters plus the hyperbatches' and the hotset's."""
        out = super().stats()
        tier = self.hyperbatches
        out.update({"hyperbatches_loaded": float(tier.loads), "hyperbatches_prefetched": float(tier.prefetched),
                    "hyperbatch_wait_s": tier.wait_s, "hyperbatch_load_s": tier.load_s,
                    "hotset_rows": float(len(self.hotset.nodes)), "hotset_refreshes": float(self.hotset.refreshes),
                    "hotset_evicted": float(self.hotset.evicted), "hotset_loaded": float(self.hotset.loaded)})
        return out
