"""The hotset: hub rows held in RAM, chosen by degree x access frequency, refreshed from decayed counters.

AGNES-style (design note, section 4): the score of a node is ``degree(v) * access_frequency(v)``; the hotset
is the highest scores that fit a byte budget, chosen greedily (all rows cost the same, so the greedy choice
for weighted coverage is the top scores; ties go to the smaller id, so the choice is deterministic). Access
counters decay by ``decay`` each epoch; every ``refresh_epochs`` epochs the hotset is re-selected from them
and only the difference moves: evicted rows are dropped, kept rows are copied over, new rows are read from
the block-aligned file (counted in the tier's ``bytes_read`` / ``read_requests``).
"""

from __future__ import annotations

import numpy as np
import torch

from storage_kernels import kernels
from storage_kernels.alignedstore import select_hotset
from storage_kernels.packstore import BatchAddresses, Tier
from trainer.features.aligned import AlignedBlocks
from trainer.features.base import FeatureTier, TierRead

__all__ = ["Hotset", "HotsetTier"]


def _host_rows(num_rows: int, dim: int, pin_memory: bool) -> np.ndarray:
    """An uninitialised ``(num_rows, dim)`` float32 block, page-locked when ``pin_memory`` (for async H2D)."""
    return torch.empty((num_rows, dim), dtype=torch.float32, pin_memory=pin_memory).numpy()


class Hotset:
    """Hub rows in RAM: ``nodes`` (sorted) with their ``rows`` ((H, F) float32), ``slot`` (N,) (row of each
    hot node, -1 otherwise), decayed access ``counts`` (N,) float64 and the ``degree`` (N,) they are weighed
    by. ``version`` grows at every refresh that changed the set (work planned against an older hotset is
    stale)."""

    def __init__(self, nodes: np.ndarray, rows: np.ndarray, degree: np.ndarray, budget_rows: int,
                 decay: float = 0.5, pin_memory: bool = False) -> None:
        nodes = np.asarray(nodes, dtype=np.int64)
        if rows.ndim != 2 or rows.dtype != np.float32 or rows.shape[0] != len(nodes):
            raise ValueError(f"'hotset rows' expected ({len(nodes)}, F) float32 (got {rows.dtype} {rows.shape})")
        if len(nodes) and (np.any(np.diff(nodes) <= 0) or nodes[0] < 0 or nodes[-1] >= len(degree)):
            raise ValueError(f"'hotset nodes' expected sorted distinct ids in [0, {len(degree)}) (got {nodes[:8]}...)")
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"'decay' expected a value in [0, 1] (got {decay})")
        self.degree = np.asarray(degree, dtype=np.float64)
        self.budget_rows = int(budget_rows)
        self.decay = float(decay)
        self.pin_memory = bool(pin_memory)
        self.counts = np.zeros(len(degree), dtype=np.float64)  # (N,) decayed accesses
        self.slot = np.full(len(degree), -1, dtype=np.int64)  # (N,)
        self.nodes = nodes
        self.rows = _host_rows(len(nodes), rows.shape[1], self.pin_memory)
        self.rows[:] = rows
        self.slot[nodes] = np.arange(len(nodes))
        self.version = 0
        self.refreshes = 0  # refreshes that ran
        self.evicted = 0  # rows dropped by them
        self.loaded = 0  # rows read by them

    @property
    def feature_dim(self) -> int:
        return int(self.rows.shape[1])

    def record(self, nodes: np.ndarray, counts: np.ndarray) -> None:
        """``counts[k]`` more accesses of ``nodes[k]`` (distinct)."""
        self.counts[nodes] += counts

    def end_epoch(self) -> None:
        """Decay every counter (once per epoch)."""
        self.counts *= self.decay

    def scores(self) -> np.ndarray:
        """``degree x decayed access frequency`` per node (float64)."""
        return self.degree * self.counts

    def refresh(self, source: AlignedBlocks) -> tuple[np.ndarray, np.ndarray]:
        """Re-select from the scores; drop the evicted rows, read the new ones from ``source``. Returns
        ``(evicted, loaded)`` node ids."""
        new = select_hotset(self.scores(), self.budget_rows)
        evicted = np.setdiff1d(self.nodes, new, assume_unique=True)
        loaded = np.setdiff1d(new, self.nodes, assume_unique=True)
        self.refreshes += 1
        if not len(evicted) and not len(loaded):
            return evicted, loaded
        kept = np.intersect1d(self.nodes, new, assume_unique=True)
        rows = _host_rows(len(new), self.feature_dim, self.pin_memory)  # (H', F)
        if len(kept):
            kernels.place_rows(kernels.gather_rows(self.rows, self.slot[kept]), np.searchsorted(new, kept), rows)
        if len(loaded):
            kernels.place_rows(source.read_rows(loaded), np.searchsorted(new, loaded), rows)
        self.slot[self.nodes] = -1
        self.slot[new] = np.arange(len(new))
        self.nodes, self.rows = new, rows
        self.version += 1
        self.evicted += len(evicted)
        self.loaded += len(loaded)
        return evicted, loaded


class HotsetTier(FeatureTier):
    """The hotset as the CPU tier: serves the nodes addressed to ``Tier.CPU`` (slot = hotset row). It reads
    the disk only when a refresh loads new rows (``bytes_read``, ``read_requests``). Any number of batches may
    be read ahead of their assembly (``max_reads_ahead`` 0)."""

    reads_disk = True

    def __init__(self, hotset: Hotset, source: AlignedBlocks, fallback: FeatureTier | None = None, *,
                 num_threads: int = 0) -> None:
        super().__init__(Tier.CPU, hotset.feature_dim, fallback, "hotset")
        self.hotset = hotset
        self.source = source
        self.num_threads = int(num_threads)
        self.direct_io, self.fallback_reason = source.direct, source.fallback_reason

    def num_slots(self, addr: BatchAddresses) -> int:
        return len(self.hotset.nodes)

    def refresh(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`Hotset.refresh` from the tier's file, counted."""
        before_bytes, before_requests = self.source.bytes_read, self.source.requests
        out = self.hotset.refresh(self.source)
        self.bytes_read += self.source.bytes_read - before_bytes
        self.read_requests += self.source.requests - before_requests
        return out

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        """No I/O: pin the part to the hotset's rows as they are now. A refresh replaces the rows array
        (never writes into it), so a batch read before a refresh and assembled after it (a pipelined loader
        reads ahead) still gathers the rows its slots were computed against."""
        part.buffer = self.hotset.rows

    def gather(self, part: TierRead) -> None:
        assert part.buffer is not None  # set by the read stage
        kernels.gather_rows_into(part.buffer, part.slot, part.staging, part.pos, self.num_threads)

    def close(self) -> None:
        self.source.close()
