"""The feature source of ``outre``: a CPU feature cache over the ordered feature file, node-addressed, with
OUTRE's pruned batches (their skipped rows are zeros, never read) and the historical cache's training hook.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from storage_kernels.packstore import BatchAddresses, Tier
from storage_kernels.sampleset import SampleSet
from trainer.features.base import NodeBatch
from trainer.features.cache import CPUCacheTier
from trainer.features.file import FileTier
from trainer.features.source import BatchRead, TieredSource
from trainer.history import HistoricalCache, HistoryHook
from trainer.pruned_samples import PrunedSamples

__all__ = ["NodeTable", "PrunedFeatures"]


@dataclass(frozen=True)
class _Rows:
    """The readable part of a batch: its id and the nodes whose rows are read."""

    batch: int
    nodes: np.ndarray


class NodeTable:
    """Every node's address, independent of the batch: ``Tier.CPU`` with its cache slot, or ``Tier.FILE``
    (slot = node id), from the pack's ``node_tier.npy`` / ``node_slot.npy``."""

    def __init__(self, path: str | Path, feature_dim: int) -> None:
        self.path = Path(path)
        self.feature_dim = int(feature_dim)
        self.tier = np.load(self.path / "node_tier.npy")
        self.slot = np.load(self.path / "node_slot.npy")

    def for_nodes(self, batch: int, nodes: np.ndarray) -> BatchAddresses:
        """The addresses of ``nodes``; ``ValueError`` for a node the plan never tiered."""
        nodes = np.asarray(nodes, dtype=np.int64)
        planned = self.tier[nodes]
        if np.any(planned < 0):
            bad = int(np.flatnonzero(planned < 0)[0])
            raise ValueError(f"'{self.path / 'node_tier.npy'}' expected a tier for node {int(nodes[bad])} of batch "
                             f"{batch} (got none: plan and samples disagree)")
        cached = planned == Tier.CPU
        tier = np.where(cached, Tier.CPU, Tier.FILE).astype(np.int8)
        slot = np.where(cached, self.slot[nodes], nodes).astype(np.int64)
        return BatchAddresses(batch=int(batch), tier=tier, slot=slot, chunk_offset=0, chunk_rows=0, chunk_bytes=0)


class PrunedFeatures(TieredSource):
    """CPU cache (``cpu_cache.npy``) -> the feature file (merged aligned direct reads), addressed per node by
    :class:`NodeTable`. A :class:`~trainer.pruned_samples.PrunedBatch`'s ``skip`` rows are zeros and never read.
    ``train_hook`` (:class:`~trainer.history.HistoryHook`) gives the trainer the pruned batches and the
    historical cache's forward."""

    def __init__(self, pack_dir: str | Path, samples: SampleSet, features_path: str | Path,
                 device: torch.device | str = "cpu", staleness: int = 1, num_threads: int = 0,
                 record_pulls: bool = False) -> None:
        self.pack_dir = Path(pack_dir)
        pin = torch.device(device).type == "cuda"
        file = FileTier(features_path, merge=True, num_threads=num_threads)
        rows = np.load(self.pack_dir / "cpu_cache.npy")
        top = CPUCacheTier(rows, file, pin_memory=pin, num_threads=num_threads)
        self.table = NodeTable(self.pack_dir, top.feature_dim)
        # the table stands in for a packed store: it addresses the cache and the file (see ``addresses``)
        super().__init__(top, device, self.table)  # type: ignore[arg-type]
        pruned = PrunedSamples(self.pack_dir, samples)
        self.train_hook = HistoryHook(pruned, HistoricalCache(pruned.num_candidates, staleness, record_pulls))

    def addresses(self, batch: NodeBatch) -> BatchAddresses:
        return self.table.for_nodes(int(batch.batch), batch.nodes)

    def _read(self, batch: NodeBatch) -> BatchRead:
        """The I/O stage; a pruned batch reads only the rows some layer reads, straight to their rows of the
        whole batch's staging block, whose ``skip`` rows are zeros."""
        skip = getattr(batch, "skip", None)
        if skip is None or not len(skip):
            return super()._read(batch)
        read = np.ones(len(batch.nodes), dtype=bool)
        read[skip] = False
        pos = np.flatnonzero(read)  # (k,) rows some layer reads
        return self._read_into(_Rows(int(batch.batch), np.asarray(batch.nodes)[pos]), len(read), pos)
