"""Validation and test accuracy for ``trainer.train``: :func:`evaluate` (one loader's batches),
:func:`eval_batch_ids` (a split's batches) and :class:`SplitEvaluator` (a run's splits, as the run evaluates
them: sampled batches, sharded over the ranks of a distributed run, or full-neighbourhood layer-wise
inference with ``eval_mode="layerwise"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from trainer.config import TrainConfig
from trainer.distributed import DistributedRun
from trainer.features import FeatureSource
from trainer.layerwise import LayerwiseGraph, layerwise_accuracies
from trainer.loader import BatchLoader, Samples
from trainer.models import GraphModel
from trainer.precision import autocast

__all__ = ["SplitEvaluator", "eval_batch_ids", "evaluate"]


class SplitSamples(Samples, Protocol):
    """What evaluation reads of a sample set: its batches by split (``storage_kernels.sampleset.SampleSet``)."""

    def batch_ids(self, split: str, epoch: int | None = None) -> list[int]: ...


def eval_batch_ids(samples: SplitSamples, split: str) -> list[int]:
    """Evaluation batches of ``split``: those of sample epoch 0, or all of them if epoch 0 has none."""
    return samples.batch_ids(split, 0) or samples.batch_ids(split)


@torch.no_grad()
def evaluate(model: GraphModel, loader: BatchLoader, device: torch.device) -> float:
    """Accuracy over the labelled seeds of ``loader``'s batches, dropout off (train mode restored after);
    nan when no seed is labelled."""
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=device)
    total = torch.zeros((), dtype=torch.int64, device=device)
    for lb in loader:
        pred = model(lb.x, lb.blocks).argmax(dim=1)  # (num_seeds,)
        labelled = lb.y >= 0
        correct += (pred == lb.y)[labelled].sum()
        total += labelled.sum()
    model.train()
    num_correct, num_total = correct.item(), total.item()  # note: CPU-GPU sync point, once per evaluation
    return num_correct / num_total if num_total else float("nan")


@dataclass(frozen=True)
class SplitEvaluator:
    """The accuracy of ``model`` (the plain model, never its DDP wrapper) on a run's val/test splits.

    ``eval_ids`` maps a split to its batches (:func:`eval_batch_ids`), read through ``source`` with the run's
    prefetch and pipeline settings (``cfg``) under ``cfg.autocast``. With ``cfg.eval_mode="layerwise"`` the
    splits come from full-neighbourhood layer-wise inference over ``layerwise`` instead, one pass for all the
    splits asked; with ``ddp`` every rank evaluates its share of the batches and gets the total.
    """

    model: GraphModel
    samples: Samples
    source: FeatureSource
    eval_ids: Mapping[str, Sequence[int]]
    labels: np.ndarray
    device: torch.device
    cfg: TrainConfig
    layerwise: LayerwiseGraph | None = None
    ddp: DistributedRun | None = None

    def accuracies(self, *splits: str) -> dict[str, float]:
        """``{split: accuracy}`` for each of ``splits`` (nan for a split without a labelled seed)."""
        cfg, ddp = self.cfg, self.ddp
        with autocast(self.device, cfg.autocast):
            if cfg.eval_mode == "layerwise":
                assert self.layerwise is not None  # trainer.train checks it at the start
                return layerwise_accuracies(self.model, self.layerwise, splits, self.device)
            accs = {}
            for split in splits:
                ids = ddp.shard_eval(self.eval_ids[split]) if ddp else self.eval_ids[split]
                # each batch is done once the next is asked for: its staging block may be reused
                loader = BatchLoader(self.samples, self.source, ids, self.labels, cfg.prefetch, self.device,
                                     cfg.sequential, release_batches=True,
                                     max_bytes=(cfg.loader_memory_mb << 20) or None)
                accs[split] = ddp.evaluate(self.model, loader) if ddp else evaluate(self.model, loader, self.device)
            return accs
