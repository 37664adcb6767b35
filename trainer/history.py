"""OUTRE's historical-embedding cache on the trainer side, and the training hook that uses it.

:class:`HistoricalCache` holds h^{L-1} (the last layer's input) of a fixed candidate set, one row per
candidate slot on the training device. Per training batch it *pushes* the freshly computed rows of the
candidates the pack's FSM scheduled for a push (detached) and *pulls* the cached rows of those scheduled for
a pull into the layer input (no gradient flows into them). It re-runs the staleness FSM online from its own
iteration count and refuses a scheduled pull whose entry was never pushed or is ``staleness`` iterations old
(the pulled node's subtree was pruned, so it cannot be recomputed); ``online_pulls`` logs, per iteration, the
slots its own FSM found fresh (tests compare them with the schedule).

A model takes part by splitting its forward in two (:class:`HistoryModel`): ``forward_lower(x, blocks[:-1])``
-> h^{L-1}, and ``forward_last(h, blocks[-1])`` -> logits; ``forward_last(forward_lower(...))`` must equal
``forward`` (``trainer.models.GraphSAGE`` has them; GCN and GAT inherit them from
``trainer.split_forward.LayerwiseSplit``; another model adds the same two methods).

:class:`HistoryHook` is what ``trainer.train`` picks up as a feature source's ``train_hook``: the pruned
training topology (``samples``) and the training step's ``forward``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from trainer.batch import TrainHook
from trainer.blocks import TensorBlock
from trainer.pruned_samples import HistoryLists, PrunedSamples

if TYPE_CHECKING:
    from trainer.batch import LoadedBatch

__all__ = ["HistoricalCache", "HistoryHook", "HistoryModel", "split_forward"]


class HistoryModel(Protocol):
    """A model whose forward is split around the last layer's input (see the module docstring)."""

    def forward_lower(self, x: torch.Tensor, blocks: list[TensorBlock]) -> torch.Tensor: ...

    def forward_last(self, h: torch.Tensor, block: TensorBlock) -> torch.Tensor: ...


def split_forward(model: Any) -> HistoryModel:
    """``model`` if it has ``forward_lower`` and ``forward_last``, else a ``ValueError`` naming it."""
    if not (callable(getattr(model, "forward_lower", None)) and callable(getattr(model, "forward_last", None))):
        raise ValueError(f"'train.model' expected a model with forward_lower and forward_last for policy outre "
                         f"(got {type(model).__name__})")
    return model


def _index(arr: np.ndarray, device: torch.device) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.int64))
    return t.to(device, non_blocking=True) if device.type != "cpu" else t


class HistoricalCache:
    """h^{L-1} rows of ``num_candidates`` candidates (allocated on the first push, on its device) with the
    online staleness FSM; counters ``pulls``, ``pushes``, ``iteration``."""

    def __init__(self, num_candidates: int, staleness: int, record: bool = False) -> None:
        if staleness < 1:
            raise ValueError(f"'plan.staleness' expected >= 1 (got {staleness})")
        self.staleness = int(staleness)
        self.rows: torch.Tensor | None = None  # (num_candidates, hidden)
        self.pushed_at = np.full(int(num_candidates), -1, dtype=np.int64)
        self.iteration = self.pulls = self.pushes = 0
        self.record = record
        self.online_pulls: list[np.ndarray] = []

    def _check(self, lists: HistoryLists) -> None:
        present = np.concatenate([lists.pull_slot, lists.push_slot])
        stamp = self.pushed_at[present]
        fresh = (stamp >= 0) & (self.iteration - stamp < self.staleness)
        if self.record:
            self.online_pulls.append(np.sort(present[fresh]))
        stale = ~fresh[: len(lists.pull_slot)]
        if np.any(stale):
            k = int(np.flatnonzero(stale)[0])
            slot, at = int(lists.pull_slot[k]), int(stamp[k])
            raise ValueError(f"'outre' historical cache expected candidate slot {slot} pushed within the last "
                             f"{self.staleness} iterations at iteration {self.iteration} (got "
                             f"{'never pushed' if at < 0 else f'pushed at {at}'}; the cache is not "
                             "checkpointed: a resumed run cannot replay a pruned schedule)")

    def exchange(self, h: torch.Tensor, lists: HistoryLists) -> torch.Tensor:
        """Push the scheduled candidates' rows of ``h`` (detached), then return ``h`` with the scheduled
        pulls' rows replaced by their cached rows (out of place: gradients reach every other row)."""
        self._check(lists)
        if self.rows is None:
            self.rows = torch.zeros((len(self.pushed_at), h.shape[1]), dtype=h.dtype, device=h.device)
        elif self.rows.shape[1] != h.shape[1]:
            raise ValueError(f"'outre' historical cache expected rows of width {self.rows.shape[1]} (got "
                             f"{h.shape[1]})")
        if len(lists.push_slot):
            self.rows.index_copy_(0, _index(lists.push_slot, h.device),
                                  h.detach().index_select(0, _index(lists.push_pos, h.device)))
            self.pushed_at[lists.push_slot] = self.iteration
        if len(lists.pull_slot):
            h = h.index_copy(0, _index(lists.pull_pos, h.device),
                             self.rows.index_select(0, _index(lists.pull_slot, h.device)))
        self.pulls += len(lists.pull_slot)
        self.pushes += len(lists.push_slot)
        self.iteration += 1
        return h


class HistoryHook(TrainHook):
    """``trainer.train``'s hook for ``outre``: the pruned training batches (``samples``) and the forward that
    exchanges candidates' h^{L-1} with the cache."""

    def __init__(self, samples: PrunedSamples, cache: HistoricalCache) -> None:
        self.samples = samples
        self.cache = cache

    def forward(self, model: Any, lb: LoadedBatch) -> torch.Tensor:
        """Logits of one loaded training batch (a plain forward for a batch that is not pruned)."""
        lists = self.samples.lists(lb.batch_id)
        if lists is None:
            return model(lb.x, lb.blocks)
        split = split_forward(model)
        h = split.forward_lower(lb.x, lb.blocks[:-1])  # (num_src_last, hidden)
        return split.forward_last(self.cache.exchange(h, lists), lb.blocks[-1])
