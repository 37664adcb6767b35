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

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pipelines.methods.policies.inputs import PlanInputs, TierPlan
from storage_kernels import kernels
from storage_kernels.kernels._common import DIRECT_ALIGN
from storage_kernels.packstore import Tier

__all__ = ["EpochReads", "epoch_batches", "file_block_reads", "row_reads", "training_rows", "uncached_chunks"]


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


#: Trace entries (batch node ids) held at once while counting: the whole trace of a large graph is gigabytes.
_CHUNK_ENTRIES = 1 << 22


def uncached_chunks(inputs: PlanInputs, plan: TierPlan) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(rows, ptr)`` per chunk of consecutive training batches (every sampled epoch), at most about
    :data:`_CHUNK_ENTRIES` entries each: the batches' node ids with the nodes a cache tier holds set to -1."""
    samples = inputs.samples
    batches = samples.batch_ids("train")
    cached_tier = (plan.tier == Tier.GPU) | (plan.tier == Tier.CPU)
    start = 0
    while start < len(batches):
        ranges, size = [], 0
        while start < len(batches) and (not ranges or size < _CHUNK_ENTRIES):
            lo, hi = samples.node_range(batches[start])
            ranges.append((lo, hi))
            size += hi - lo
            start += 1
        ptr = np.zeros(len(ranges) + 1, dtype=np.int64)
        ptr[1:] = np.cumsum([hi - lo for lo, hi in ranges])
        rows = np.concatenate([np.asarray(samples.nodes[lo:hi], dtype=np.int64) for lo, hi in ranges])
        rows[cached_tier[rows]] = -1
        yield rows, ptr


def file_block_reads(inputs: PlanInputs, plan: TierPlan) -> EpochReads:
    """Page-merged aligned reads of each training batch's uncached rows from the ordered feature file."""
    blocks = sum(int(kernels.count_blocks(rows, ptr, inputs.graph.row_bytes).sum())
                 for rows, ptr in uncached_chunks(inputs, plan))
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
