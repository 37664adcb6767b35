"""Reader of an ``outre`` pack artifact's training topology: the pruned batches and their pull/push lists.

The pack (``pipelines.methods.policies.outre.policy``) holds a sample set of the pruned training batches (batch ``j``
is the
original batch ``pruned_batch.npy[j]``) and, per pruned batch, three lists in CSR form (``<name>_offset.npy``
of ``num_pruned + 1`` entries): ``skip_pos`` (positions whose input row no layer reads), ``pull_pos`` /
``pull_slot`` and ``push_pos`` / ``push_slot`` (positions in the pruned node list, slots into
``candidates.npy``). :class:`PrunedSamples` serves them under the original batch ids; other batches
(evaluation) come from the original sample set unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from storage_kernels.sampleset import SampledBatch, SampleSet, SampleSetView

__all__ = ["HistoryLists", "PrunedBatch", "PrunedSamples"]


@dataclass(frozen=True)
class PrunedBatch(SampledBatch):
    """A training batch with pulled candidates' subtrees removed; ``skip`` are the positions whose input
    row no layer reads (a feature source returns zeros there without reading them)."""

    skip: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))


class HistoryLists(NamedTuple):
    """One pruned batch's historical-cache exchange (positions in its node list, candidate slots)."""

    pull_pos: np.ndarray
    pull_slot: np.ndarray
    push_pos: np.ndarray
    push_slot: np.ndarray


class PrunedSamples(SampleSetView):
    """The trainer's view of the sample set under ``outre``: pruned training batches from ``pack_dir``,
    every other batch from ``samples``; ``batch_ids``, ``epochs`` and ``num_layers`` are the original's."""

    def __init__(self, pack_dir: str | Path, samples: SampleSet) -> None:
        self.path = Path(pack_dir)
        self.samples = samples
        self.pruned = SampleSet(self.path)
        ids = np.load(self.path / "pruned_batch.npy")
        if len(ids) != self.pruned.num_batches:
            raise ValueError(f"'{self.path / 'pruned_batch.npy'}' expected {self.pruned.num_batches} batch ids "
                             f"(got {len(ids)})")
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= samples.num_batches):
            raise ValueError(f"'{self.path / 'pruned_batch.npy'}' expected batch ids < {samples.num_batches} "
                             f"(got {int(ids.min())}..{int(ids.max())})")
        self._index = {int(b): j for j, b in enumerate(ids)}
        self._arrays = {k: np.load(self.path / f"{k}.npy", mmap_mode="r")
                        for k in ("skip_pos", "pull_pos", "pull_slot", "push_pos", "push_slot")}
        self._offsets = {k: np.load(self.path / f"{k}_offset.npy") for k in ("skip", "pull", "push")}
        for k, off in self._offsets.items():
            if len(off) != len(ids) + 1 or int(off[-1]) != len(self._arrays[f"{k}_pos"]):
                raise ValueError(f"'{self.path / f'{k}_offset.npy'}' expected {len(ids) + 1} offsets ending at "
                                 f"{len(self._arrays[f'{k}_pos'])} (got {len(off)} ending at {int(off[-1])})")
        self.num_candidates = len(np.load(self.path / "candidates.npy", mmap_mode="r"))

    def is_pruned(self, i: int) -> bool:
        """Whether batch ``i`` is one of the pruned training batches."""
        return int(i) in self._index

    def _slice(self, key: str, kind: str, j: int) -> np.ndarray:
        off = self._offsets[kind]
        return np.array(self._arrays[key][int(off[j]) : int(off[j + 1])], dtype=np.int64)

    def batch(self, i: int) -> SampledBatch:
        """Batch ``i``: pruned (a :class:`PrunedBatch`) for a training batch, else the original."""
        j = self._index.get(int(i))
        if j is None:
            return self.samples.batch(i)
        b = self.pruned.batch(j)
        return PrunedBatch(batch=int(i), split=b.split, epoch=b.epoch, step=b.step, nodes=b.nodes,
                           hop_counts=b.hop_counts, indptrs=b.indptrs, cols=b.cols,
                           skip=self._slice("skip_pos", "skip", j))

    def lists(self, i: int) -> HistoryLists | None:
        """Batch ``i``'s pull and push lists (None for a batch that is not pruned)."""
        j = self._index.get(int(i))
        if j is None:
            return None
        return HistoryLists(self._slice("pull_pos", "pull", j), self._slice("pull_slot", "pull", j),
                            self._slice("push_pos", "push", j), self._slice("push_slot", "push", j))
