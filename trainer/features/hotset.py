"""The hotset: hub rows held in RAM, chosen by degree x access frequency, refreshed from decayed counters.

AGNES-style (design note, section 4): the score of a node is ``degree(v) * access_frequency(v)``; the hotset
is the highest scores that fit a byte budget, chosen greedily (all rows cost the same, so the greedy choice
for weighted coverage is the top scores; ties go to the smaller id, so the choice is deterministic). Access
counters decay by ``decay`` each epoch; every ``refresh_epochs`` epochs the hotset is re-selected from them
and only the difference moves, in place: kept rows stay in their slots, new rows are read from the
block-aligned file (counted in the tier's ``bytes_read`` / ``read_requests``) into the slots of the evicted
ones, in rounds of at most 64 MiB. The rows live in one block of ``budget_rows`` rows for the whole run, so
the hotset never costs more than its budget (a copy-on-refresh design held the old and the new rows at once,
and was killed at its memory limit on a 10M-node graph). The tier copies a batch's hot rows out at read time,
so a batch read before a refresh and assembled after it is not affected by the rows moving.
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

# blocks read per round when the hotset loads or refreshes: the rows go straight from the read buffer into their
# slots, so that buffer is the only transient memory (a budget's calibration runs without a hotset)
_ROUND_BYTES = 8 << 20


def _host_rows(num_rows: int, dim: int, pin_memory: bool) -> np.ndarray:
    """An uninitialised ``(num_rows, dim)`` float32 block, page-locked when ``pin_memory`` (for async H2D)."""
    return torch.empty((num_rows, dim), dtype=torch.float32, pin_memory=pin_memory).numpy()


class Hotset:
    """Hub rows in RAM: ``nodes`` (sorted) with their ``rows`` ((H, F) float32), ``slot`` (N,) (row of each
    hot node, -1 otherwise), decayed access ``counts`` (N,) float64 and the ``degree`` (N,) they are weighed
    by. ``version`` grows at every refresh that changed the set (work planned against an older hotset is
    stale)."""

    def __init__(self, nodes: np.ndarray, rows: np.ndarray | AlignedBlocks, degree: np.ndarray, budget_rows: int,
                 decay: float = 0.5, pin_memory: bool = False) -> None:
        """``rows``: the hot nodes' rows ``(H, F)`` float32, or the block-aligned file to read them from."""
        nodes = np.asarray(nodes, dtype=np.int64)
        source = rows if isinstance(rows, AlignedBlocks) else None
        if source is None and (rows.ndim != 2 or rows.dtype != np.float32 or rows.shape[0] != len(nodes)):
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
        dim = source.layout.feature_dim if source is not None else rows.shape[1]
        self.rows = _host_rows(max(self.budget_rows, len(nodes)), dim, self.pin_memory)  # (capacity, F), for good
        slots = np.arange(len(nodes), dtype=np.int64)
        if source is not None:
            self._read_into(source, nodes, slots)
        else:
            self.rows[: len(nodes)] = rows
        self.slot[nodes] = slots
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

    def _read_into(self, source: AlignedBlocks, nodes: np.ndarray, slots: np.ndarray) -> None:
        """``rows[slots[k]] = row of nodes[k]`` (sorted ``nodes``), read in rounds of at most 8 MiB of blocks."""
        source.read_rows(nodes, self.rows, slots, max_buffer_bytes=_ROUND_BYTES)

    def refresh(self, source: AlignedBlocks) -> tuple[np.ndarray, np.ndarray]:
        """Re-select from the scores; drop the evicted rows, read the new ones from ``source``. Returns
        ``(evicted, loaded)`` node ids."""
        new = select_hotset(self.scores(), self.budget_rows)
        evicted = np.setdiff1d(self.nodes, new, assume_unique=True)
        loaded = np.setdiff1d(new, self.nodes, assume_unique=True)
        self.refreshes += 1
        if not len(evicted) and not len(loaded):
            return evicted, loaded
        free = self.slot[evicted]  # the evicted rows' slots, then slots never used
        if len(loaded) > len(free):
            used = np.zeros(len(self.rows), dtype=bool)
            used[self.slot[self.nodes]] = True
            free = np.concatenate([free, np.flatnonzero(~used)])
        dest = free[: len(loaded)]
        self.slot[evicted] = -1
        self._read_into(source, loaded, dest)
        self.slot[loaded] = dest
        self.nodes = new
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
        # the rows' capacity, not the hot node count: a refresh that keeps fewer nodes leaves kept rows in
        # their slots, which may lie past the new count
        return len(self.hotset.rows)

    def refresh(self) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`Hotset.refresh` from the tier's file, counted."""
        before_bytes, before_requests = self.source.bytes_read, self.source.requests
        out = self.hotset.refresh(self.source)
        self.bytes_read += self.source.bytes_read - before_bytes
        self.read_requests += self.source.requests - before_requests
        return out

    def fetch(self, addr: BatchAddresses, part: TierRead) -> None:
        """No I/O: copy the part's rows into the staging block now. A refresh rewrites slots in place, so a
        batch read before a refresh and assembled after it (a pipelined loader reads ahead) must not gather
        from the hotset later."""
        assert part.staging is not None  # the batch's node-order block, handed over by the source
        kernels.gather_rows_into(self.hotset.rows, part.slot, part.staging, part.pos, self.num_threads)

    def gather(self, part: TierRead) -> None:
        """Nothing to do: the read stage put the rows in place."""

    def close(self) -> None:
        self.source.close()
