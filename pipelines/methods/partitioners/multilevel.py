"""Multilevel partitioning around a streaming partitioner: coarsen, partition the coarsest graph, refine.

Single-pass (and restreamed) FENNEL / GREM decide one node at a time, so on graphs with fine-grained
structure they settle in local optima made of fragments and cut several times the edges METIS cuts
(BENCHMARKS.md). Multilevel partitioners (METIS, KaHIP, KaMinPar) move whole
clusters at coarse levels instead. This module gives the streaming methods that machinery while keeping
the finest level on disk -- the semi-external scheme of Akhremtsev, Sanders & Schulz (ALENEX 2015) with
size-constrained label propagation (Meyerhenke, Sanders & Schulz 2014):

1. **Coarsening.** :func:`storage_kernels.kernels.cluster_pass` rounds (at most ``CLUSTER_ROUNDS``) join
   every node to the neighbouring cluster it is most connected to, clusters weighing at most
   ``ceil(W / (p · CLUSTER_PARTS))`` nodes (a part is built from at least ``CLUSTER_PARTS`` clusters, so
   moving one never breaks the balance by much; with many parts the bound is raised so that the graph can
   still shrink to the coarsening target, see :func:`cluster_max_weight`). The finest level streams chunks of at most
   ``partition.chunk_nodes`` rows and about ``partgraph.CHUNK_ENTRIES`` entries from the memory-mapped CSR
   (sequential reads; the process's file pages are dropped after each chunk) and visits a chunk's nodes by
   degree ascending, so low-degree nodes join their hubs first. Clusters are contracted into a weighted
   coarse graph (two streaming passes: count, place; then duplicate entries are merged by
   :func:`storage_kernels.kernels.csr_aggregate`), and the coarse graph is clustered again in memory, until
   it has at most ``max(COARSE_NODES, COARSE_PER_PART · p)`` nodes or a level stops shrinking it.
2. **Initial partition.** The method itself (weighted FENNEL with OUTRE's training penalty, or GREM's
   METIS-seeded recursive bisection) partitions the coarsest graph.
3. **Uncoarsening.** Labels are projected level by level; at each level
   :func:`storage_kernels.kernels.refine_pass` rounds (at most ``REFINE_ROUNDS``) move nodes to the part
   they are most connected to, within the capacity ``ceil((1+imbalance) · W / p)`` (and, for FENNEL with a
   training penalty, the same bound on training nodes per part). The finest level is streamed again.

Memory: O(N) state at the finest level (cluster ids and weights, int64; the map to the coarse ids, int32;
the labels) plus one chunk of rows, plus the coarse graphs. The first coarse graph is refused when its
CSR (``COARSE_BYTES_PER_ENTRY`` per entry) would exceed half of ``partition.memory_mb``: coarsening stops
there, the method partitions the finest graph itself before refinement, and the statistics say why
(``ml_stopped``). When even the O(N) state does not fit, the method runs single-level (``multilevel`` =
``skipped: ...``, see :func:`unavailable`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from pipelines.core.progress import Progress
from pipelines.methods.partitioners.partgraph import (
    PartGraph,
    capacity,
    enforce_capacity,
    internal_weight,
    node_chunks,
    rows,
)
from pipelines.methods.partitioners.settings import PartitionConfig
from storage_kernels import kernels

__all__ = ["CLUSTER_PARTS", "cluster", "cluster_max_weight", "contract", "degree_bounds", "partition", "refine",
           "unavailable"]

CLUSTER_PARTS = 64  # clusters weigh at most W / (p · 64)
CLUSTER_ROUNDS = 5  # label-propagation rounds per level, at most ...
CLUSTER_STOP = 1e-3  # ... stopping once a round moves at most this fraction of the level's nodes
# A round visits nodes by degree ascending (low-degree nodes join their hubs' clusters before the hubs move):
# one streaming pass per degree bucket, bounded by these quantiles; a single id-ordered pass gives clusters of
# much lower purity and a higher final cut (BENCHMARKS.md, "Multilevel design measurements").
DEGREE_QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.99)
COARSE_NODES = 2000  # coarsening stops at max(COARSE_NODES, COARSE_PER_PART · p) nodes ...
COARSE_PER_PART = 16
SHRINK = 0.9  # ... or when a level keeps more than this fraction of the nodes ...
MAX_LEVELS = 16  # ... or after this many levels
REFINE_ROUNDS = 10  # refinement rounds per level, at most ...
REFINE_STOP = 1e-4  # ... stopping once a round moves at most this fraction of the level's nodes
COARSE_BYTES_PER_ENTRY = 24  # int64 column + int64 weight of the contracted CSR, plus place-pass slack
STATE_BYTES_PER_NODE = 40  # finest level: cluster ids + weights (int64), coarse map (int32), rank (int64), labels


class _TooLarge(Exception):
    """A coarse graph would not fit the memory budget."""


def cluster_max_weight(total_weight: int, num_parts: int) -> int:
    """Largest cluster weight: ``W / (p · CLUSTER_PARTS)``, but never so small that the coarsest graph could
    not shrink to ``max(COARSE_NODES, COARSE_PER_PART · p)`` nodes (with many parts, 64 clusters per part
    would leave a coarse graph of >= 64·p nodes for the method's O(p)-per-node scoring: 10M nodes, p = 7,824
    stalled at ~700k coarse nodes)."""
    target = max(COARSE_NODES, COARSE_PER_PART * num_parts)
    return max(1, math.ceil(total_weight / min(num_parts * CLUSTER_PARTS, target)))


def unavailable(fine: PartGraph, num_parts: int, cfg: PartitionConfig, counting: str) -> str | None:
    """Why the multilevel scheme cannot run here (then the method runs single-level), or None."""
    budget = cfg.memory_mb * 2**20
    if counting == "bloom":
        return "bloom counting asked for (single-pass FENNEL)"
    # (this also covers FENNEL's own switch to Bloom filters: int32 labels over half the budget)
    if STATE_BYTES_PER_NODE * fine.num_nodes > budget:
        return (f"{STATE_BYTES_PER_NODE} bytes per node for {fine.num_nodes} nodes exceed partition.memory_mb "
                f"({cfg.memory_mb} MiB)")
    return None


def cluster(graph: PartGraph, max_weight: int, chunk_nodes: int, rounds: int = CLUSTER_ROUNDS,
            progress: Progress | None = None, label: str = "partition: coarsening") -> np.ndarray:
    """Size-constrained label propagation; returns the cluster id (a node id) of every node, int64."""
    n = graph.num_nodes
    clusters = np.arange(n, dtype=np.int64)
    cluster_weight = np.ones(n, dtype=np.int64) if graph.node_weight is None else graph.node_weight.copy()
    bounds = degree_bounds(graph)
    steps = rounds * len(bounds) * n
    for r in range(rounds):
        moved = 0
        for b in range(len(bounds)):  # one streaming pass per degree bucket, low degrees first
            for nodes in node_chunks(graph, chunk_nodes):
                ptr, cols, ew = rows(graph, nodes)
                degree = np.diff(ptr)
                bucket = np.searchsorted(bounds, degree, side="left")
                visit = np.flatnonzero(bucket == b)
                visit = visit[np.argsort(degree[visit], kind="stable")]
                moved += kernels.cluster_pass(ptr, cols, nodes, clusters, cluster_weight, max_weight,
                                              node_weight=graph.node_weights_of(nodes), edge_weight=ew, visit=visit)
                if progress:
                    progress(label, (r * len(bounds) + b) * n + nodes[-1] + 1, steps)
        if moved <= CLUSTER_STOP * n:
            break
    return clusters


def degree_bounds(graph: PartGraph) -> np.ndarray:
    """Upper degree bounds of the visiting buckets of :func:`cluster`: the ``DEGREE_QUANTILES`` of the row
    lengths, then the maximum (bucket b holds the degrees in ``(bounds[b-1], bounds[b]]``)."""
    degree = np.diff(np.asarray(graph.indptr))
    if len(degree) == 0:
        return np.zeros(1, dtype=np.int64)
    bounds = np.unique(np.quantile(degree, DEGREE_QUANTILES, method="lower").astype(np.int64))
    return np.append(bounds[bounds < degree.max()], degree.max())


def contract(graph: PartGraph, clusters: np.ndarray, chunk_nodes: int, max_bytes: int | None = None
             ) -> tuple[PartGraph, np.ndarray]:
    """The weighted graph of the clusters and the map node -> coarse id (int32).

    Node weight = fine nodes inside (weights summed), training weight = training nodes inside, entry weight
    = fine entries between two clusters (weights summed); entries inside a cluster are dropped. Streams
    ``graph`` twice (count, place), merging parallel entries inside each chunk, then across chunks. Raises
    ``_TooLarge`` when the coarse CSR before the merge across chunks would take more than ``max_bytes``."""
    n = graph.num_nodes
    used = np.zeros(n, dtype=bool)
    used[clusters] = True
    rank = np.cumsum(used, dtype=np.int64) - 1
    num_coarse = int(rank[-1]) + 1 if n else 0
    cmap = rank[clusters].astype(np.int32)
    del used, rank
    node_weight = np.bincount(cmap, weights=graph.node_weight, minlength=num_coarse).astype(np.int64)
    train_weight = np.bincount(cmap, weights=graph.train_weight, minlength=num_coarse).astype(np.int64)

    def crossing(nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The chunk's entries between two clusters, merged inside the chunk: (src, dst, weight)."""
        ptr, cols, ew = rows(graph, nodes)
        src = np.repeat(cmap[nodes], np.diff(ptr)).astype(np.int64)
        dst = cmap[cols].astype(np.int64)
        keep = src != dst
        # local structure puts most parallel entries in one chunk: merging them here keeps the place pass
        # (and the memory check) near the size of the final coarse graph
        keys, inverse = np.unique(src[keep] * num_coarse + dst[keep], return_inverse=True)
        weight = np.bincount(inverse, weights=None if ew is None else ew[keep], minlength=len(keys))
        return keys // max(num_coarse, 1), keys % max(num_coarse, 1), weight.astype(np.int64)

    counts = np.zeros(num_coarse, dtype=np.int64)
    for nodes in node_chunks(graph, chunk_nodes):
        src, _, _ = crossing(nodes)
        kernels.csr_count(src, counts)
    entries = int(counts.sum())
    if max_bytes is not None and entries * COARSE_BYTES_PER_ENTRY > max_bytes:
        raise _TooLarge(f"the first coarse graph has {entries} CSR entries before merging across chunks "
                        f"({entries * COARSE_BYTES_PER_ENTRY / 2**20:.0f} MiB, over half of partition.memory_mb)")
    indptr = np.zeros(num_coarse + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    del counts
    indices = np.empty(entries, dtype=np.int64)
    weights = np.empty(entries, dtype=np.int64)
    cursor = indptr[:-1].copy()
    for nodes in node_chunks(graph, chunk_nodes):
        src, dst, weight = crossing(nodes)
        kernels.csr_place(src, weight, cursor.copy(), weights)
        kernels.csr_place(src, dst, cursor, indices)
    new_indptr, nnz = kernels.csr_aggregate(indptr, indices, weights)
    if nnz < entries:  # keep only the merged prefix (frees the rest)
        indices, weights = indices[:nnz].copy(), weights[:nnz].copy()
    return PartGraph(new_indptr, indices, train_weight, node_weight, weights), cmap


def refine(graph: PartGraph, labels: np.ndarray, cap: np.ndarray, train_cap: np.ndarray | None, chunk_nodes: int,
           rounds: int = REFINE_ROUNDS, progress: Progress | None = None,
           label: str = "partition: refining") -> int:
    """k-way label-propagation refinement of ``labels`` (int32, in place); returns the nodes moved."""
    n, k = graph.num_nodes, len(cap)
    sizes = np.bincount(labels, weights=graph.node_weight, minlength=k).astype(np.int64)
    train_sizes = None
    if train_cap is not None:
        train_sizes = np.bincount(labels, weights=graph.train_weight, minlength=k).astype(np.int64)
    total = 0
    for r in range(rounds):
        moved = 0
        for nodes in node_chunks(graph, chunk_nodes):
            ptr, cols, ew = rows(graph, nodes)
            train = None if train_cap is None else graph.train_weight[nodes].astype(np.int64)
            moved += kernels.refine_pass(ptr, cols, nodes, labels, sizes, cap, node_weight=graph.node_weights_of(nodes),
                                         edge_weight=ew, train_weight=train, train_sizes=train_sizes,
                                         train_capacity=train_cap)
            if progress:
                progress(label, r * n + nodes[-1] + 1, rounds * n)
        total += moved
        if moved <= REFINE_STOP * n:
            break
    return total


def partition(fine: PartGraph, num_parts: int, cfg: PartitionConfig, initial: Callable[[PartGraph], np.ndarray],
              train_balance: bool, progress: Progress | None = None) -> tuple[np.ndarray, dict]:
    """Multilevel partition of ``fine`` into ``num_parts``; ``initial`` partitions the coarsest graph.

    Returns the int32 labels and flat statistics (``multilevel``, ``ml_*``) for the artifact."""
    start = time.perf_counter()
    p = num_parts
    total = fine.total_node_weight()
    target = max(COARSE_NODES, COARSE_PER_PART * p)
    max_weight = cluster_max_weight(total, p)
    info: dict = {"multilevel": "on", "ml_cluster_max_weight": max_weight}
    hierarchy: list[tuple[PartGraph, np.ndarray]] = []
    graph = fine
    while graph.num_nodes > target and len(hierarchy) < MAX_LEVELS:
        level = len(hierarchy)
        clusters = cluster(graph, max_weight, cfg.chunk_nodes, progress=progress,
                           label=f"partition: coarsening level {level}")
        try:  # only the first (streamed) contraction can be large; later ones are smaller still
            coarse, cmap = contract(graph, clusters, cfg.chunk_nodes,
                                    cfg.memory_mb * 2**20 // 2 if level == 0 else None)
        except _TooLarge as e:
            info["ml_stopped"] = str(e)
            break
        del clusters
        if coarse.num_nodes > SHRINK * graph.num_nodes:
            break
        hierarchy.append((graph, cmap))
        graph = coarse
    info["ml_levels"] = len(hierarchy)
    info["ml_coarse_nodes"] = graph.num_nodes
    info["ml_coarse_entries"] = graph.num_entries
    info["ml_coarsen_s"] = round(time.perf_counter() - start, 3)
    labels = np.ascontiguousarray(initial(graph), dtype=np.int32)
    fine_entries = max(fine.num_entries, 1)
    if hierarchy:
        everything = np.arange(graph.num_nodes, dtype=np.int64)
        cut = graph.total_edge_weight() - internal_weight(graph, everything, labels, max(graph.num_nodes, 1))
        info["ml_initial_cut"] = round(cut / fine_entries, 6)
    cap = capacity(total, p, cfg.imbalance, [1] * p)
    train_cap = None
    if train_balance and cfg.train_penalty > 0:
        train_cap = capacity(int(fine.train_weight.sum()), p, cfg.imbalance, [1] * p)
    moves = refine(graph, labels, cap, train_cap, cfg.chunk_nodes, progress=progress,
                   label=f"partition: refining level {len(hierarchy)}")
    for level in range(len(hierarchy) - 1, -1, -1):
        finer, cmap = hierarchy.pop()
        labels = labels[cmap]
        del cmap
        moves += refine(finer, labels, cap, train_cap, cfg.chunk_nodes, progress=progress,
                        label=f"partition: refining level {level}")
    # refinement drains an over-full part through its boundary only: guarantee the capacity
    labels = enforce_capacity(labels, cap)
    info["ml_refine_moves"] = moves
    info["ml_time_s"] = round(time.perf_counter() - start, 3)
    return labels, info
