"""The graph as the partitioners see it: a CSR with optional node, edge and training weights.

The finest level is the (memory-mapped) graph of a ``reorder`` artifact, unweighted: every node weighs 1,
every CSR entry 1, and a node's training weight is 1 when it is a training node. Coarse levels of the
multilevel scheme (:mod:`pipelines.methods.partitioners.multilevel`) are small in-memory graphs whose node weight is the
number of fine nodes inside, whose training weight counts the training nodes inside and whose edge weight
counts the fine CSR entries between two coarse nodes. Streaming partitioners read either one the same way:
chunks of rows (:func:`rows`), with the weights that apply to them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pipelines.core.graphio import GraphArrays
from storage_kernels.arrays import release_pages, row_ranges

__all__ = ["CHUNK_ENTRIES", "PartGraph", "capacity", "enforce_capacity", "internal_weight", "node_chunks", "rows",
           "split_shares"]

CHUNK_ENTRIES = 1 << 21  # CSR entries per streamed chunk of node_chunks: 16 MiB of int64 columns


@dataclass(frozen=True)
class PartGraph:
    """CSR (``indptr`` int64 (n+1,), ``indices`` int64) plus weights; ``None`` weights mean 1 everywhere.

    ``train_weight`` is int64 (n,) on coarse levels and the 0/1 uint8 training flag on the finest level.
    """

    indptr: np.ndarray
    indices: np.ndarray
    train_weight: np.ndarray
    node_weight: np.ndarray | None = None
    edge_weight: np.ndarray | None = None

    @classmethod
    def of(cls, graph: GraphArrays) -> PartGraph:
        """The unweighted view of a graph artifact (training flags from its ``train_idx``)."""
        is_train = np.zeros(graph.num_nodes, dtype=np.uint8)
        is_train[np.asarray(graph.train_idx)] = 1
        return cls(graph.indptr, graph.indices, is_train)

    @property
    def num_nodes(self) -> int:
        return len(self.indptr) - 1

    @property
    def num_entries(self) -> int:
        """CSR entries (each undirected edge appears twice)."""
        return int(self.indptr[-1])

    @property
    def weighted(self) -> bool:
        return self.node_weight is not None or self.edge_weight is not None

    def total_node_weight(self) -> int:
        return self.num_nodes if self.node_weight is None else int(self.node_weight.sum())

    def total_edge_weight(self) -> int:
        """Sum of the weights of all CSR entries (twice the undirected edge weight)."""
        return self.num_entries if self.edge_weight is None else int(self.edge_weight.sum())

    def node_weights_of(self, nodes: np.ndarray) -> np.ndarray | None:
        return None if self.node_weight is None else self.node_weight[nodes]

    def weight_of(self, nodes: np.ndarray) -> int:
        """Total node weight of ``nodes``."""
        return len(nodes) if self.node_weight is None else int(self.node_weight[nodes].sum())

    def train_weights_of(self, nodes: np.ndarray) -> np.ndarray | None:
        """Training weights of ``nodes`` (None on the finest level, where the 0/1 flags say it all)."""
        return None if self.train_weight.dtype == np.uint8 else self.train_weight[nodes]

    def train_flags_of(self, nodes: np.ndarray) -> np.ndarray:
        """0/1 flag per node: does it hold training nodes (what ``is_train`` means to the kernels)."""
        return (self.train_weight[nodes] > 0).astype(np.uint8)


def rows(graph: PartGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Local indptr (len(nodes)+1, from 0), the concatenated CSR rows of ``nodes`` and their edge weights.

    A contiguous ascending run of ids is one slice of the (memory-mapped) arrays: a sequential read.
    """
    indptr = graph.indptr
    weights = graph.edge_weight
    if len(nodes) and int(nodes[-1]) - int(nodes[0]) + 1 == len(nodes):  # contiguous: one slice
        s, e = int(nodes[0]), int(nodes[-1]) + 1
        ptr = np.asarray(indptr[s : e + 1], dtype=np.int64) - int(indptr[s])
        lo, hi = int(indptr[s]), int(indptr[e])
        cols = np.ascontiguousarray(graph.indices[lo:hi], dtype=np.int64)
        return ptr, cols, None if weights is None else np.ascontiguousarray(weights[lo:hi], dtype=np.int64)
    starts = np.asarray(indptr[nodes], dtype=np.int64)
    lens = np.asarray(indptr[nodes + 1], dtype=np.int64) - starts
    ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    pos = np.repeat(starts - ptr[:-1], lens) + np.arange(ptr[-1], dtype=np.int64)
    cols = np.ascontiguousarray(graph.indices[pos], dtype=np.int64)
    return ptr, cols, None if weights is None else np.ascontiguousarray(weights[pos], dtype=np.int64)


def node_chunks(graph: PartGraph, chunk_nodes: int, max_entries: int = CHUNK_ENTRIES) -> Iterator[np.ndarray]:
    """Consecutive node ranges (int64 ids) of at most ``chunk_nodes`` nodes and about ``max_entries`` CSR
    entries (at least one node each), for sequential streaming passes. After each chunk is used, the
    process's pages of a memory-mapped ``indices`` are dropped (:func:`storage_kernels.arrays.release_pages`):
    a pass over a file larger than memory must not pile the whole file up in the RSS."""
    bounds = row_ranges(graph.indptr, max_entries)
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        for a in range(s, e, chunk_nodes):
            yield np.arange(a, min(e, a + chunk_nodes), dtype=np.int64)
            release_pages(graph.indices)
            if graph.edge_weight is not None:
                release_pages(graph.edge_weight)


def capacity(total_weight: int, num_parts: int, imbalance: float, shares) -> np.ndarray:
    """Weight capacity of groups that will hold ``shares`` final parts each: ``ceil((1+imbalance)·W/p·q)``."""
    per = (1.0 + imbalance) * total_weight / num_parts
    return np.array([math.ceil(per * q) for q in shares], dtype=np.int64)


def enforce_capacity(labels: np.ndarray, cap: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Move the highest-id surplus nodes of over-full parts to parts with room (sizes by ``weights``, default 1).

    Unweighted, every part ends within its capacity whenever the capacities hold all nodes; weighted, a node
    goes to the part with the most room, so a part may end over capacity when no part has room enough."""
    w = np.ones(len(labels), dtype=np.int64) if weights is None else np.asarray(weights, dtype=np.int64)
    sizes = np.bincount(labels, weights=w, minlength=len(cap)).astype(np.int64)
    if np.all(sizes <= cap):
        return labels
    if weights is None:  # vectorised: surplus nodes fill the free slots in part order
        order = np.argsort(labels, kind="stable")
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        over = sizes - cap
        movers = np.concatenate([order[starts[k] + cap[k] : starts[k] + sizes[k]] for k in np.flatnonzero(over > 0)])
        room = np.maximum(cap - sizes, 0)
        targets = np.repeat(np.arange(len(cap), dtype=np.int32), room)[: len(movers)]
        labels[np.sort(movers)] = targets
        return labels
    for k in np.flatnonzero(sizes > cap):  # coarse graphs only (few nodes): highest ids leave first
        for v in np.flatnonzero(labels == k)[::-1]:
            if sizes[k] <= cap[k]:
                break
            room = cap - sizes
            room[k] = -1
            target = int(np.argmax(room))
            if room[target] <= 0:
                break
            labels[v] = target
            sizes[k] -= w[v]
            sizes[target] += w[v]
    return labels


def internal_weight(graph: PartGraph, nodes: np.ndarray, labels: np.ndarray, chunk_nodes: int) -> int:
    """Weight of the CSR entries of ``nodes``' rows whose two endpoints share a label (chunked)."""
    total = 0
    for s in range(0, len(nodes), chunk_nodes):
        chunk = nodes[s : s + chunk_nodes]
        ptr, cols, ew = rows(graph, chunk)
        same = np.repeat(labels[chunk], np.diff(ptr)) == labels[cols]
        total += int(np.count_nonzero(same)) if ew is None else int(ew[same].sum())
    return total


def split_shares(q: int, k: int) -> list[int]:
    """``q`` final parts split over ``k`` groups as evenly as possible (larger groups first)."""
    return [q // k + (i < q % k) for i in range(k)]
