"""Ginex's feature source: a CPU feature cache that changes after every training batch by precomputed,
Belady-optimal changesets (``storage_kernels.changesets``), over the ordered feature file.

Per training batch (at trace position ``t`` of superbatch ``b``):

1. at ``b``'s first batch, the *switch*: the cache becomes ``b``'s initial cache -- rows already cached stay in
   their slots, the others are read from the feature file (block-merged aligned direct reads) into free slots;
2. the read stage: each node is addressed through the address table (``address_table[node]`` = its cache
   slot, -1 when not cached): cached rows are served by the CPU cache tier, the others read from the feature
   file (:class:`~trainer.features.file.FileTier`, block-merged aligned direct reads);
3. the cached rows are gathered into the batch's staging block (still in the read stage);
4. the *cache update* (``kernels.cache_update``): the slot of every evicted node receives the row of an
   inserted node straight from the staging block -- no I/O.

A training batch that arrives out of trace order (not the next position nor a superbatch's first) rebuilds
the cache state of its position (a *resync*: the superbatch's initial cache replayed through the changesets
before it, then switched to), so the features are right for any order; in order, the measured hits are the
simulation's. Evaluation batches read the cached rows from the cache and the rest from the feature file and
leave the cache as it is.

Counters, beyond :class:`~trainer.features.source.TieredSource`'s: the switch's reads (``prefetch_bytes``,
``prefetch_requests``, ``prefetch_rows``, included in ``bytes_read`` / ``read_requests``), ``switches``,
``resyncs``, ``changes_applied`` (cache rows replaced), ``switch_s`` and ``update_s`` (both within ``read_s``).

All the cache's state changes happen in the read stage (``read``), the gather of cached rows included, so
the assemble stage is stateless and a pipelined loader may read any number of batches ahead.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.changesets import ChangesetStore
from storage_kernels.packstore import BatchAddresses, NodeRanges, Tier
from trainer.features.base import NodeBatch
from trainer.features.cache import CPUCacheTier
from trainer.features.file import FileTier
from trainer.features.source import BatchRead, TieredSource

__all__ = ["GinexFeatures"]

# blocks read per round while switching the cache (ids sorted: reads stay merged). The rows go straight from
# the read buffer to their cache slots; small rounds keep that buffer, the switch's only transient memory, far
# below the cache it fills (a budget's calibration runs without a cache, so it never sees a switch).
_SWITCH_ROUND_BYTES = 2 << 20


class GinexFeatures(TieredSource):
    """A changeset store (``changes_dir``, written for ``samples``) over the feature file ``features_path``:
    the CPU cache tier (``cache_rows`` rows, pinned with CUDA) -> the feature file (see the module docstring).

    >>> source = GinexFeatures(pack.path, samples, reorder.file("features.npy"), device="cuda")
    """

    def __init__(self, changes_dir: str | Path, samples: NodeRanges, features_path: str | Path,
                 device: torch.device | str = "cpu", num_threads: int = 0, max_buffer_bytes: int = 64 << 20) -> None:
        self.changes = ChangesetStore(changes_dir, samples.num_batches)
        file_tier = FileTier(features_path, merge=True, num_threads=num_threads, max_buffer_bytes=max_buffer_bytes)
        num_nodes, dim = file_tier.file.num_rows, file_tier.feature_dim
        if num_nodes != self.changes.num_nodes:
            file_tier.close()
            raise ValueError(f"'{features_path}' expected {self.changes.num_nodes} rows, the nodes of the "
                             f"changesets in {changes_dir} (got {num_nodes})")
        device = torch.device(device)
        cache = CPUCacheTier(np.zeros((self.changes.cache_rows, dim), dtype=np.float32), file_tier,
                             pin_memory=device.type == "cuda", num_threads=num_threads)
        super().__init__(cache, device)
        self.cache, self.file = cache, file_tier
        self.num_threads = int(num_threads)
        # node -> cache slot, -1: not cached; int32 below 2**31 slots (400 MB at 100M nodes, not 800)
        self.address_table = np.full(num_nodes, -1, dtype=np.int32 if self.changes.cache_rows < 1 << 31 else np.int64)
        self.slot_node = np.full(self.changes.cache_rows, -1, dtype=np.int64)  # cache slot -> node, -1: free
        self._next = -1  # the trace position whose cache state is current (-1: none)
        self._zero_own_counters()

    # ---------------------------------------------------------------------------------------- counters
    def _zero_own_counters(self) -> None:
        self.prefetch_bytes = self.prefetch_requests = self.prefetch_rows = 0
        self.switches = self.resyncs = self.changes_applied = 0
        self.switch_s = self.update_s = 0.0

    @property
    def bytes_read(self) -> int:
        """Bytes read from disk: the batches' file rows and the switches' prefetches."""
        return super().bytes_read + self.prefetch_bytes

    @property
    def read_requests(self) -> int:
        """Read requests issued to the disk, the switches' included."""
        return super().read_requests + self.prefetch_requests

    def stats(self) -> dict[str, float]:
        out = super().stats()
        out.update({"bytes_read_prefetch": float(self.prefetch_bytes), "prefetch_rows": float(self.prefetch_rows),
                    "superbatch_switches": float(self.switches), "resyncs": float(self.resyncs),
                    "cache_changes": float(self.changes_applied), "switch_s": self.switch_s,
                    "update_s": self.update_s})
        return out

    def reset_counters(self) -> None:
        super().reset_counters()
        self._zero_own_counters()

    # ---------------------------------------------------------------------------------------- addressing
    def addresses(self, batch: NodeBatch) -> BatchAddresses:
        """Cached nodes to the CPU cache (slot from the address table), the rest to the feature file."""
        nodes = np.asarray(batch.nodes, dtype=np.int64)
        slot = self.address_table[nodes]  # (n,) -1 where not cached
        cached = slot >= 0
        return BatchAddresses(batch=int(batch.batch), tier=np.where(cached, Tier.CPU, Tier.FILE).astype(np.int8),
                              slot=np.where(cached, slot, nodes), chunk_offset=0, chunk_rows=0, chunk_bytes=0)

    def position(self, batch: NodeBatch) -> int:
        """``batch``'s trace position, -1 for a batch outside the training trace (evaluation)."""
        b = int(batch.batch)
        return int(self.changes.position[b]) if 0 <= b < len(self.changes.position) else -1

    # ---------------------------------------------------------------------------------------- stages
    def _read(self, batch: NodeBatch) -> BatchRead:
        """The read stage does all the stateful work, so that any number of batches may be read ahead of
        their assembly: a training batch first moves the cache to its position (switch, resync), then its
        file rows are read, its cached rows gathered (before the update may overwrite their slots) and the
        cache updated from its rows. Evaluation batches leave the cache as it is."""
        position = self.position(batch)
        t0 = time.perf_counter()
        if position >= 0:
            self._prepare(position)
        self.switch_s += time.perf_counter() - t0
        read = super()._read(batch)
        for part in read.parts:
            if part.tier is self.cache and len(part.pos):
                self.cache.gather(part)  # into its rows of the staging block
        if position >= 0:
            t1 = time.perf_counter()
            self._update(position, read)
            self._next = position + 1
            self.update_s += time.perf_counter() - t1
        return read

    def _assemble(self, read: BatchRead) -> torch.Tensor:
        """The staging block is complete after the read stage (the cache's rows included): only the transfer
        and the node order remain."""
        return super()._assemble(replace(read, parts=[p for p in read.parts if p.tier is not self.cache]))

    def _prepare(self, position: int) -> None:
        """Bring the cache to its state before ``position``: a switch at a superbatch's first batch, a resync
        when the batch is out of order, nothing when it follows the previous one."""
        sb = int(self.changes.superbatch[position])
        start = int(self.changes.superbatch_ptr[sb])
        if position == start:
            self._switch(self.changes.init(sb))
            self.switches += 1
        elif position != self._next:
            lo, hi = int(self.changes.update_ptr[start]), int(self.changes.update_ptr[position])
            self._switch(_resident(self.changes.init(sb), np.asarray(self.changes.in_ids[lo:hi]),
                                   np.asarray(self.changes.out_ids[lo:hi])))
            self.resyncs += 1

    def _switch(self, target: np.ndarray) -> None:
        """Make the cache hold exactly ``target`` (distinct node ids, at most ``cache_rows``): cached rows stay
        in their slots, the others are read from the feature file into the freed slots."""
        table, slot_node = self.address_table, self.slot_node
        target = np.asarray(target, dtype=np.int64)
        at = table[target]  # each target's slot, -1 where not cached
        # the slots whose node stays marked by slot (a byte a slot), not an isin of the resident nodes against
        # the target: its sorts held ~8 int64 copies of the cache's ids, OOM at 100M nodes (6M-row cache)
        keep = np.zeros(len(slot_node), dtype=bool)
        keep[at[at >= 0]] = True
        evict = np.flatnonzero((slot_node >= 0) & ~keep)  # slots
        del keep
        table[slot_node[evict]] = -1
        slot_node[evict] = -1
        load = np.sort(target[at < 0])  # in file order: the block-merged reads go forwards
        slots = np.flatnonzero(slot_node < 0)[: len(load)]
        if len(slots) < len(load):
            raise ValueError(f"'ginex' expected at most {len(slot_node)} nodes in a cache state (got "
                             f"{len(target)})")
        before = self.file.file.requests
        self.prefetch_bytes += self.file.file.read(load, self.cache.rows, merge=True, pos=slots,
                                                   max_round_bytes=_SWITCH_ROUND_BYTES)
        self.prefetch_requests += self.file.file.requests - before
        table[load] = slots
        slot_node[slots] = load
        self.prefetch_rows += len(load)

    def _update(self, position: int, read: BatchRead) -> None:
        """The in-place cache update after ``position``: new rows from the batch's staging block."""
        in_ids, out_ids, in_positions = self.changes.update(position)
        if not len(in_ids):
            return
        staging = read.staging.numpy()  # (n, F) in node order, complete (every tier is a host tier)
        kernels.cache_update(self.cache.rows, self.address_table, staging, in_ids, out_ids, in_positions,
                             self.num_threads)
        self.slot_node[self.address_table[in_ids]] = in_ids
        self.changes_applied += len(in_ids)


def _resident(init: np.ndarray, in_ids: np.ndarray, out_ids: np.ndarray) -> np.ndarray:
    """The nodes resident after a superbatch's first changes: each node alternates in and out from its initial
    state, so it is resident iff ``init + ins - outs`` counts 1 for it. Counted over the listed ids (sorted),
    not in arrays of every node (three of them were 2.4 GB at 100M nodes). Sorted node ids."""
    ids = np.concatenate([np.asarray(init, dtype=np.int64), np.asarray(in_ids, dtype=np.int64),
                          np.asarray(out_ids, dtype=np.int64)])
    weight = np.ones(len(ids), dtype=np.int64)
    weight[len(ids) - len(out_ids):] = -1
    order = np.argsort(ids, kind="stable")
    ids, weight = ids[order], weight[order]
    if not len(ids):
        return ids
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    return ids[starts[np.add.reduceat(weight, starts) > 0]]
