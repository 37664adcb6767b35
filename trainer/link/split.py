"""The deterministic train/valid/test split of a graph's undirected edges (link prediction).

Every undirected edge ``{u, v}`` (``u < v``; self loops dropped) of the symmetric CSR is listed once, in CSR
order; a seeded permutation deals ``round(valid_fraction * E)`` of them to validation, ``round(test_fraction *
E)`` to test and the rest to training. The split is a pure function of the CSR, the fractions and the seed, so
it needs no artifact of its own: the train stage recomputes it from the reorder artifact (and stores it in
the ``train`` artifact, ``link_split.npz``, for export and inspection). The held-out edges are removed from the
topology the encoder samples from (:meth:`EdgeSplit.train_csr`, both directions, built by the native two-pass
CSR construction). A source that ships its own split (``pipelines.methods.sources.linksplit``) bypasses
:func:`split_edges`: its edges go into an :class:`EdgeSplit` as given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from storage_kernels import kernels

__all__ = ["EdgeSplit", "split_edges", "undirected_edges"]


def undirected_edges(indptr: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """``(E, 2)`` int64: each edge ``{u, v}`` of the symmetric CSR once, as ``u < v``, in CSR order
    (duplicates kept as listed; self loops dropped)."""
    indptr = np.asarray(indptr, dtype=np.int64)
    indices = np.asarray(indices, dtype=np.int64)
    src = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    keep = src < indices
    return np.stack([src[keep], indices[keep]], axis=1)


@dataclass(frozen=True)
class EdgeSplit:
    """Edges ``(E_s, 2)`` int64 of each split of a graph of ``num_nodes`` nodes: ``u < v`` when generated
    (:func:`split_edges`), as listed when a source supplies them (any direction; both are trained and asked)."""

    num_nodes: int
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray

    def train_csr(self) -> tuple[np.ndarray, np.ndarray]:
        """The training topology: the training edges in both directions as a CSR (held-out edges absent)."""
        src = np.concatenate([self.train[:, 0], self.train[:, 1]])
        dst = np.concatenate([self.train[:, 1], self.train[:, 0]])
        return kernels.build_csr(lambda: [(src, dst)], self.num_nodes)

    def counts(self) -> dict[str, int]:
        return {"train_edges": len(self.train), "valid_edges": len(self.valid), "test_edges": len(self.test)}

    def save(self, path: str | Path) -> None:
        np.savez(path, num_nodes=np.int64(self.num_nodes), train=self.train, valid=self.valid, test=self.test)

    @classmethod
    def load(cls, path: str | Path) -> EdgeSplit:
        with np.load(path) as z:
            return cls(int(z["num_nodes"]), z["train"], z["valid"], z["test"])


def split_edges(indptr: np.ndarray, indices: np.ndarray, valid_fraction: float, test_fraction: float,
                seed: int) -> EdgeSplit:
    """Split the undirected edges of a symmetric CSR; see the module docstring. Raises ValueError when a
    split would be empty or leave no training edge."""
    for name, frac in (("train.link_valid_fraction", valid_fraction), ("train.link_test_fraction", test_fraction)):
        if not 0.0 < frac < 1.0:
            raise ValueError(f"'{name}' expected a fraction in (0, 1) (got {frac})")
    edges = undirected_edges(indptr, indices)
    num = len(edges)
    n_valid, n_test = round(valid_fraction * num), round(test_fraction * num)
    if min(n_valid, n_test) < 1 or n_valid + n_test >= num:
        raise ValueError(f"'train.link_valid_fraction'/'train.link_test_fraction' expected non-empty held-out "
                         f"splits and training edges left (got {num} undirected edges: {n_valid} valid, "
                         f"{n_test} test)")
    order = np.random.default_rng(seed).permutation(num)
    valid, test, train = np.split(order, [n_valid, n_valid + n_test])
    # each split in CSR order: the result is the same whatever order the permutation dealt them in
    return EdgeSplit(len(indptr) - 1, edges[np.sort(train)], edges[np.sort(valid)], edges[np.sort(test)])
