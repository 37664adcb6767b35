"""On-disk locality measures of a vertex order: edge gap and feature-file pages touched per mini-batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from pipelines.core.graphio import GraphArrays
from storage_kernels.arrays import DATA_ALIGN, advise_random, blocks_of_rows
from storage_kernels.kernels import sample_blocks

__all__ = ["PAGE_BYTES", "average_edge_gap", "pages_of_rows", "pages_per_batch"]

PAGE_BYTES = DATA_ALIGN  # feature .npy files keep their data at byte 4096 (docs/CONTRACTS.md)


def average_edge_gap(graph: GraphArrays, sample_edges: int = 2_000_000) -> float:
    """Mean |u - v| over (a deterministic sample of) edges: a cheap proxy for on-disk locality."""
    e = graph.num_edges
    if e == 0:
        return 0.0
    pos = np.linspace(0, e - 1, num=min(e, sample_edges), dtype=np.int64)
    dst = np.searchsorted(np.asarray(graph.indptr), pos, side="right") - 1
    src = np.asarray(graph.indices[pos])
    return float(np.mean(np.abs(src - dst)))


def pages_of_rows(rows: np.ndarray, row_bytes: int) -> np.ndarray:
    """Distinct 4 KiB pages of the feature file that hold ``rows`` (sorted page numbers)."""
    return blocks_of_rows(rows, row_bytes)


def pages_per_batch(graph: GraphArrays, num_batches: int = 20, batch_size: int = 1024,
                    fanouts: Sequence[int] = (10, 10), seed: int = 0) -> float:
    """Mean number of distinct feature-file pages one sampled mini-batch touches.

    Each batch draws ``batch_size`` distinct random training seeds (all nodes when there is no training split),
    samples ``fanouts`` with :func:`storage_kernels.kernels.sample_blocks` on this graph and counts the 4 KiB
    pages holding the rows of every input node (a row at byte ``4096 + node * row_bytes``).
    """
    pool = np.asarray(graph.train_idx, dtype=np.int64)
    if pool.size == 0:
        pool = np.arange(graph.num_nodes, dtype=np.int64)
    if pool.size == 0 or num_batches <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    indptr, indices = np.asarray(graph.indptr), np.asarray(graph.indices)
    advise_random(graph.indptr, graph.indices)  # scattered rows: no read-around per fault (pipelines.stages.sample)
    counts = []
    for b in range(num_batches):
        seeds = rng.choice(pool, size=min(batch_size, pool.size), replace=False)
        nodes = sample_blocks(indptr, indices, seeds, list(fanouts), seed=seed * 1_000_003 + b).nodes
        counts.append(pages_of_rows(nodes, graph.row_bytes).size)
    return float(np.mean(counts))
