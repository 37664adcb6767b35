"""Negative sampling for link prediction, shared per chunk of positives as MariusGNN does.

A batch of ``B`` positive edges is cut into chunks of ``negative_chunk`` consecutive positives; every chunk draws
one set of ``negatives`` nodes that corrupts the destination of each of its positives (``(u, v) -> (u, n)``),
so a chunk's negative scores are one ``(chunk, negatives)`` matrix product and the negatives' representations
are computed once per chunk, not once per positive.

``uniform``
    every node with probability ``1 / N``;
``degree``
    proportional to the node's degree in the *training* graph (degree^1, not word2vec's degree^0.75): the
    endpoint of a uniformly drawn entry of the training CSR, so a node with no training edge is never drawn.

Draws come from a ``numpy.random.Generator`` the caller seeds per batch, so a run is reproducible and an
out-of-core run can replay the in-memory run's negatives exactly.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["NEGATIVE_SAMPLERS", "NegativeSampler", "chunk_bounds"]

NEGATIVE_SAMPLERS = ("uniform", "degree")


def chunk_bounds(num_positives: int, chunk: int) -> np.ndarray:
    """``(C + 1,)`` int64 boundaries of the chunks of ``chunk`` consecutive positives (the last may be shorter)."""
    if chunk < 1:
        raise ValueError(f"'train.negative_chunk' expected >= 1 (got {chunk})")
    return np.append(np.arange(0, num_positives, chunk, dtype=np.int64), np.int64(num_positives))


class NegativeSampler:
    """Draws ``(chunks, negatives)`` node ids; ``train_indices`` is the training CSR's ``indices`` (``degree``)."""

    def __init__(self, kind: Literal["uniform", "degree"], num_nodes: int, train_indices: np.ndarray | None = None
                 ) -> None:
        if kind not in NEGATIVE_SAMPLERS:
            raise ValueError(f"'train.negative_sampler' expected one of {', '.join(NEGATIVE_SAMPLERS)} (got {kind!r})")
        if num_nodes < 1:
            raise ValueError(f"'num_nodes' expected >= 1 (got {num_nodes})")
        if kind == "degree" and (train_indices is None or len(train_indices) == 0):
            raise ValueError("'train.negative_sampler' degree expected a training graph with edges (got none)")
        self.kind, self.num_nodes = kind, int(num_nodes)
        self.train_indices = None if train_indices is None else np.asarray(train_indices, dtype=np.int64)

    def sample(self, num_chunks: int, negatives: int, rng: np.random.Generator) -> np.ndarray:
        """``(num_chunks, negatives)`` int64 node ids, drawn with replacement."""
        if self.kind == "uniform":
            return rng.integers(0, self.num_nodes, size=(num_chunks, negatives), dtype=np.int64)
        assert self.train_indices is not None
        pos = rng.integers(0, len(self.train_indices), size=(num_chunks, negatives), dtype=np.int64)
        return self.train_indices[pos]

    def probabilities(self) -> np.ndarray:
        """``(N,)`` float64: the probability of drawing each node (tests, diagnostics)."""
        if self.kind == "uniform":
            return np.full(self.num_nodes, 1.0 / self.num_nodes)
        assert self.train_indices is not None
        counts = np.bincount(self.train_indices, minlength=self.num_nodes).astype(np.float64)
        return counts / counts.sum()
