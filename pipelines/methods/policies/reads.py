"""What a policy reads from disk in one training epoch, predicted from the sampled trace and its plan.

``policy=auto`` (:mod:`pipelines.methods.policies.auto`) compares policies by these predictions; each policy
gives its own (``Policy.predict_reads``). The models, exact where the policy's reads are a function of the
trace alone:

- :func:`file_block_reads`: every row a training batch reads from the ordered feature file, fetched with
  page-merged aligned reads: the distinct 4 KiB blocks of each batch's uncached rows (``kernels.count_blocks``),
  one request per block at most (merging makes fewer). The default, for any policy that reads the file.
- :func:`row_reads`: one aligned read per needed row, every time (``naive``; ``ginex``'s misses).

A prediction is the mean over the sampled epochs of one epoch's *training* batches (training replays the
sampled epochs, and an epoch's time is what ``strata bench`` measures); evaluation reads are the same for every
policy that leaves them to the feature file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.methods.policies.inputs import PlanInputs, TierPlan
from storage_kernels import kernels
from storage_kernels.kernels._common import DIRECT_ALIGN
from storage_kernels.packstore import Tier

__all__ = ["EpochReads", "epoch_batches", "file_block_reads", "row_reads", "training_rows"]


@dataclass(frozen=True)
class EpochReads:
    """Bytes and read requests of one training epoch; ``queue_depth``: how many requests the policy's reader
    keeps in flight (1: one synchronous read at a time), which sets the random-read rate they meet."""

    bytes: int
    requests: int
    queue_depth: int = 32
    model: str = ""
    #: What the model found that a policy's ``auto_variants`` may look at (``diskgnn``: ``pure_packing``).
    detail: dict[str, Any] = field(default_factory=dict)


def epoch_batches(inputs: PlanInputs) -> list[int]:
    """The training batch ids of the first sampled epoch, in step order."""
    return inputs.samples.batch_ids("train", 0)


def _epochs(inputs: PlanInputs) -> int:
    return max(inputs.samples.epochs, 1)


def _uncached_rows(inputs: PlanInputs, plan: TierPlan, batches: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, ptr)``: each batch's node ids, with the nodes a cache tier holds set to -1 (skipped)."""
    samples = inputs.samples
    ranges = [samples.node_range(b) for b in batches]
    ptr = np.zeros(len(ranges) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([stop - start for start, stop in ranges])
    rows = np.concatenate([np.asarray(samples.nodes[a:b]) for a, b in ranges]) if ranges else np.zeros(0, np.int64)
    rows = rows.astype(np.int64, copy=False)
    cached = (plan.tier[rows] == Tier.GPU) | (plan.tier[rows] == Tier.CPU)
    return np.where(cached, -1, rows), ptr


def file_block_reads(inputs: PlanInputs, plan: TierPlan) -> EpochReads:
    """Page-merged aligned reads of each training batch's uncached rows from the ordered feature file."""
    batches = inputs.samples.batch_ids("train")
    rows, ptr = _uncached_rows(inputs, plan, batches)
    blocks = int(kernels.count_blocks(rows, ptr, inputs.graph.row_bytes).sum()) if len(batches) else 0
    blocks //= _epochs(inputs)
    return EpochReads(blocks * DIRECT_ALIGN, blocks, model="distinct 4 KiB blocks of each batch's uncached rows")


def row_reads(inputs: PlanInputs, rows: int, queue_depth: int = 1) -> EpochReads:
    """``rows`` reads of one row each (the aligned blocks that hold it)."""
    per_row = -(-inputs.graph.row_bytes // DIRECT_ALIGN) * DIRECT_ALIGN  # whole blocks (a straddling row: one more)
    return EpochReads(int(rows) * per_row, int(rows), queue_depth, model="one aligned read per row")


def training_rows(inputs: PlanInputs) -> int:
    """Rows the training batches of one epoch read (with repeats across batches; mean over sampled epochs)."""
    samples = inputs.samples
    return int(sum(b - a for a, b in (samples.node_range(i) for i in samples.batch_ids("train")))) // _epochs(inputs)
