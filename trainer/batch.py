"""What the loader hands the training step, and how a policy may train on it its own way.

:class:`LoadedBatch` is one batch ready for the model (features in node order, labels, the layered blocks);
:class:`Samples` is what the loader reads of a sample set; :class:`TrainHook` is a feature source's optional
say in training (its own training batches and forward: OUTRE's historical cache, MariusGNN's per-set batches).
They sit below the loader and the feature sources, which both name them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import torch

from storage_kernels.sampleset import SampledBatch
from trainer.blocks import TensorBlock

if TYPE_CHECKING:
    from trainer.models import GraphModel

__all__ = ["LoadedBatch", "Samples", "TrainHook"]


class Samples(Protocol):
    """What the loader reads of a sample set (``storage_kernels.sampleset.SampleSet``): one batch by id."""

    def batch(self, i: int) -> SampledBatch: ...


@dataclass
class LoadedBatch:
    """One batch ready for the model; ``ready`` is set when its copies were queued on a side CUDA stream.

    On the CPU ``x`` is a view of the source's staging block: the consumer's to keep, unless the loader runs
    with ``release_batches`` (then valid until the consumer asks for the next batch: ``trainer.loader``)."""

    batch_id: int
    x: torch.Tensor  # (num_nodes, F) float32
    y: torch.Tensor  # (num_seeds,) int64, -1 = unlabelled
    blocks: list[TensorBlock]  # input layer first
    ready: torch.cuda.Event | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the loader's ``extra(batch, device)``, if it has one

    @property
    def num_seeds(self) -> int:
        return int(self.y.shape[0])


class TrainHook:
    """A feature source's ``train_hook``: the training batches' topology (``samples``, same batch ids) and the
    training step's forward -- OUTRE's pruned batches and historical cache (``trainer.history.HistoryHook``).
    A hook whose :meth:`batch_ids` lists batches also chooses the training batches itself (``mariusgnn``'s
    per-partition-set batches). Evaluation is unchanged."""

    samples: Samples

    def batch_ids(self, sample_epoch: int) -> list[int] | None:
        """The training batches of ``sample_epoch``; None (the default): the sample set's own."""
        return None

    def forward(self, model: GraphModel, batch: LoadedBatch) -> torch.Tensor:
        """The logits of one loaded training batch (default: the model's plain forward)."""
        return model(batch.x, batch.blocks)
