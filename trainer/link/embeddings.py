"""Learned node embeddings and their Adagrad state (``train.link_encoder=embedding``).

The table is updated sparsely: a batch reads the rows of its distinct nodes, the loss's gradient with respect to
those rows comes back, and :func:`adagrad_rows` applies Adagrad to them (``state += g^2; row -= lr * g /
(sqrt(state) + eps)``, MariusGNN's optimizer for embeddings) -- row by row, so a table held in RAM
(:class:`InMemoryEmbeddings`) and one held out of core in a partition buffer
(``trainer.link.outofcore.PartitionedEmbeddings``) give the same rows for the same sequence of batches.

Initial rows are a pure function of ``(seed, node)`` (:func:`initial_rows`, normal with std ``INIT_STD``
drawn per block of ``INIT_BLOCK`` nodes), so either store can produce any range of them without the others.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

__all__ = ["ADAGRAD_EPS", "INIT_BLOCK", "INIT_STD", "EmbeddingStore", "InMemoryEmbeddings", "adagrad_rows",
           "initial_rows"]

INIT_STD = 0.1
INIT_BLOCK = 1 << 16  # nodes per independently seeded block of initial rows
ADAGRAD_EPS = 1e-10


def initial_rows(seed: int, dim: int, start: int, stop: int) -> np.ndarray:
    """``(stop - start, dim)`` float32: the initial embeddings of nodes ``[start, stop)``."""
    out = np.empty((max(stop - start, 0), dim), dtype=np.float32)
    for block in range(start // INIT_BLOCK, -(-stop // INIT_BLOCK)):
        lo, hi = block * INIT_BLOCK, (block + 1) * INIT_BLOCK
        rows = np.random.default_rng([seed, block]).normal(0.0, INIT_STD, size=(INIT_BLOCK, dim))
        a, b = max(lo, start), min(hi, stop)
        out[a - start: b - start] = rows[a - lo: b - lo]
    return out


def adagrad_rows(rows: np.ndarray, state: np.ndarray, grad: np.ndarray, lr: float) -> None:
    """Adagrad on ``rows``/``state`` (U, D) float32 in place, from ``grad`` (U, D)."""
    state += grad * grad
    rows -= (lr * grad / (np.sqrt(state) + ADAGRAD_EPS)).astype(np.float32)


class EmbeddingStore(Protocol):
    """Where the embedding rows live: read a batch's rows, write back their Adagrad update."""

    num_nodes: int
    dim: int

    def read(self, nodes: np.ndarray) -> np.ndarray: ...

    def update(self, nodes: np.ndarray, grad: np.ndarray, lr: float) -> None: ...


class InMemoryEmbeddings:
    """The whole table and its Adagrad state in RAM: ``table`` and ``state`` (N, D) float32."""

    def __init__(self, num_nodes: int, dim: int, seed: int) -> None:
        self.num_nodes, self.dim = int(num_nodes), int(dim)
        self.table = initial_rows(seed, self.dim, 0, self.num_nodes)
        self.state = np.zeros_like(self.table)

    def read(self, nodes: np.ndarray) -> np.ndarray:
        """``(U, D)`` copies of the rows of ``nodes``."""
        return self.table[nodes]

    def update(self, nodes: np.ndarray, grad: np.ndarray, lr: float) -> None:
        """Adagrad on the rows of ``nodes`` (distinct) from their gradient ``grad`` (U, D)."""
        rows, state = self.table[nodes], self.state[nodes]
        adagrad_rows(rows, state, np.asarray(grad, dtype=np.float32), lr)
        self.table[nodes], self.state[nodes] = rows, state

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        """Copies of the table and its state (the best epoch's, kept while training continues)."""
        return self.table.copy(), self.state.copy()

    def restore(self, snap: tuple[np.ndarray, np.ndarray]) -> None:
        self.table[:], self.state[:] = snap
