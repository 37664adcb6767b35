"""Export batches cut by bytes: the sampled batches the export runs its ONNX models on (the variants'
validation accuracy, int8 calibration, the browser app's subgraph), each restricted to as many of its seeds as
keep one batch's working memory in onnxruntime under a budget (``export.memory_mb``), as
``sample.eval_memory_mb`` bounds an evaluation batch's feature rows.

A batch's working memory (:func:`feed_bytes`) is its feature rows (``x``, ``num_nodes x in_dim`` float32, counted
twice: the gathered rows and the first layer's destination rows) plus, per layer, its edge-sized tensors:
the gathered messages, the scatter's index expanded to their shape (int64) and the fp16 variant's float32 cast
of them, :data:`MESSAGE_BYTES` per edge and message column over the block's edges plus one self loop per
destination. The message width is the layer's ``message_width`` (:func:`message_widths`: the narrower of its
two widths where it projects first, ``trainer.export``), the input width for a layer that does not say.

A batch over the budget is cut (:func:`cut_by_bytes`) into parts of consecutive seeds, each with exactly the
nodes and edges its seeds' computation trees use (:func:`~trainer.subgraph_file.restrict_batch`, so every seed's
prediction is the one the whole batch gives it), and a part still over the budget is cut again (parts of fewer
seeds share fewer neighbours). A single seed is never cut.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice
from typing import Any

import numpy as np

from storage_kernels.sampleset import SampledBatch
from trainer.subgraph_file import restrict_batch

__all__ = ["MESSAGE_BYTES", "cut_by_bytes", "export_batches", "feed_bytes", "message_widths"]

#: Bytes per edge and message column at a layer's peak: the float32 message, its int64 scatter index (the
#: exporter expands the destination index to the message's shape) and a float32 cast (the fp16 variant).
MESSAGE_BYTES = 16


def message_widths(model: Any) -> list[int]:
    """Per layer (input layer first), the columns of the per-edge messages of ``model``'s ONNX form: each
    layer's ``message_width`` where it declares one, else the model's input width (the widest it could be)."""
    layers = list(getattr(model, "layers", []))
    if len(layers) != model.num_layers:
        return [int(model.in_dim)] * int(model.num_layers)
    return [int(getattr(layer, "message_width", model.in_dim)) for layer in layers]


def feed_bytes(batch: SampledBatch, in_dim: int, widths: Sequence[int]) -> int:
    """Estimated working memory of one onnxruntime run on ``batch`` (see the module docstring)."""
    hops = batch.num_layers
    if len(widths) != hops:
        raise ValueError(f"'widths' expected {hops} message widths (one per layer) (got {len(widths)})")
    total = 2 * int(batch.hop_counts[-1]) * int(in_dim) * 4  # x and the first layer's destination rows
    for i, width in enumerate(widths):  # layer i consumes hop L-1-i
        hop = hops - 1 - i
        edges, num_dst = len(batch.cols[hop]), int(batch.hop_counts[hop])
        total += (edges + num_dst) * (int(width) * MESSAGE_BYTES + 2 * 8)  # messages + the edge index feeds
    return total


def cut_by_bytes(batch: SampledBatch, budget: int, cost: Callable[[SampledBatch], int]) -> Iterator[SampledBatch]:
    """``batch`` when ``cost(batch) <= budget`` (or it has one seed), else parts of its consecutive seeds in
    order, each within ``budget`` or of a single seed."""
    need = cost(batch)
    if need <= budget or batch.num_seeds == 1:
        yield batch
        return
    parts = min(batch.num_seeds, max(2, -(-need // max(budget, 1))))
    bounds = np.linspace(0, batch.num_seeds, parts + 1).round().astype(np.int64)
    for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if hi > lo:
            yield from cut_by_bytes(restrict_batch(batch, hi - lo, first=lo), budget, cost)


def export_batches(batches: Iterable[SampledBatch], budget: int, in_dim: int, widths: Sequence[int],
                   limit: int | None = None) -> Iterator[SampledBatch]:
    """The parts of ``batches`` cut to ``budget`` bytes each (:func:`cut_by_bytes` with :func:`feed_bytes`), in
    order; the first ``limit`` only when given (int8 calibration needs a bounded sample, not every batch)."""
    def cost(b: SampledBatch) -> int:
        return feed_bytes(b, in_dim, widths)

    parts = (part for batch in batches for part in cut_by_bytes(batch, budget, cost))
    return islice(parts, limit) if limit is not None else parts
