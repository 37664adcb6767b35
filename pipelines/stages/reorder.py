"""Reorder stage: choose a vertex order and rewrite the CSR, features, labels and splits in it.

Locality on disk follows the id order: nodes that are sampled together should sit on the same pages. The
first strategies are ``identity``, ``degree`` (hubs first, so the hot set is one contiguous prefix) and
``bfs`` (from the highest-degree vertex, so neighbourhoods are contiguous). The rewrite streams in chunks of
new ids, so memory stays at O(N) ids plus one chunk of rows.
"""

from __future__ import annotations

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.stages.common import Progress, StageResult, materialize
from pipelines.stages.graphio import GraphArrays, load_graph
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "compute_order", "run"]

FORMAT_VERSION = 1


def compute_order(graph: GraphArrays, strategy: str) -> np.ndarray:
    """Return ``perm`` (new id -> old id) for ``strategy``."""
    n = graph.num_nodes
    if strategy == "identity":
        return np.arange(n, dtype=np.int64)
    degrees = graph.degrees()
    by_degree = np.argsort(-degrees, kind="stable").astype(np.int64)
    if strategy == "degree":
        return by_degree
    if strategy == "bfs":
        return _bfs_order(graph, by_degree)
    raise ValueError(f"'reorder.strategy' expected one of identity, degree, bfs (got {strategy!r})")


def _bfs_order(graph: GraphArrays, by_degree: np.ndarray) -> np.ndarray:
    """BFS from the top hub (scipy's C BFS); unreached nodes follow in degree order."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order

    n = graph.num_nodes
    if n == 0:
        return np.arange(0, dtype=np.int64)
    data = np.ones(graph.num_edges, dtype=np.int8)
    adjacency = csr_matrix((data, np.asarray(graph.indices), np.asarray(graph.indptr)), shape=(n, n))
    reached = breadth_first_order(adjacency, int(by_degree[0]), directed=True, return_predecessors=False)
    seen = np.zeros(n, dtype=bool)
    seen[reached] = True
    rest = by_degree[~seen[by_degree]]
    return np.concatenate([reached.astype(np.int64), rest])


def _write_relabelled(builder: ArtifactBuilder, graph: GraphArrays, perm: np.ndarray, chunk_rows: int,
                      progress: Progress | None) -> None:
    n = graph.num_nodes
    inverse = np.empty(n, dtype=np.int64)
    inverse[perm] = np.arange(n, dtype=np.int64)
    builder.save_array("perm.npy", perm)
    builder.save_array("inverse.npy", inverse)

    degrees = graph.degrees()[perm]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    builder.save_array("indptr.npy", indptr)

    indices_out = builder.array_writer("indices.npy", np.int64)
    features_out = builder.array_writer("features.npy", graph.features.dtype, (graph.feature_dim,))
    old_indptr = graph.indptr
    for start in range(0, n, chunk_rows):
        stop = min(n, start + chunk_rows)
        old = perm[start:stop]
        # Neighbour lists of the chunk's nodes, in new-id order, relabelled through `inverse`.
        begins = np.asarray(old_indptr[old])
        lengths = np.asarray(old_indptr[old + 1]) - begins
        flat = np.repeat(begins - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        flat += np.arange(flat.size, dtype=np.int64)
        indices_out.append(inverse[_read_ascending(graph.indices, flat)])
        # Feature rows: read in ascending old-id order (page-friendly), place in new order.
        features_out.append(_read_ascending(graph.features, old))
        if progress:
            progress("reorder: rewriting", stop, n)
    indices_out.close()
    features_out.close()

    builder.save_array("labels.npy", np.asarray(graph.labels)[perm])
    for name in ("train", "val", "test"):
        builder.save_array(f"{name}_idx.npy", np.sort(inverse[np.asarray(graph.split(name))]))


def _read_ascending(array: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``array[positions]``, read in ascending position order so a memory map is walked forwards."""
    order = np.argsort(positions, kind="stable")
    out = np.empty(positions.shape + array.shape[1:], dtype=array.dtype)
    out[order] = array[positions[order]]
    return out


def run(store: ArtifactStore, cfg: PipelineConfig, *, graph: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Write the ``ordering`` artifact: ``perm``/``inverse`` and the relabelled graph."""
    params = {"strategy": cfg.reorder.strategy}

    def build(builder: ArtifactBuilder) -> None:
        arrays = load_graph(graph)
        perm = compute_order(arrays, cfg.reorder.strategy)
        _write_relabelled(builder, arrays, perm, cfg.reorder.chunk_rows, progress)
        gaps = _average_edge_gap(load_graph_from_builder(builder, arrays))
        builder.stats.update(
            {
                "strategy": cfg.reorder.strategy,
                "num_nodes": arrays.num_nodes,
                "num_edges": arrays.num_edges,
                "avg_edge_gap": gaps,
                "avg_edge_gap_before": _average_edge_gap(arrays),
            }
        )

    return materialize(store, cfg.dataset_name, "ordering", FORMAT_VERSION, params, {"graph": graph}, build)


def load_graph_from_builder(builder: ArtifactBuilder, original: GraphArrays) -> GraphArrays:
    """The relabelled CSR just written (memory-mapped from the builder's directory)."""
    indptr = np.load(builder.dir / "indptr.npy", mmap_mode="r")
    indices = np.load(builder.dir / "indices.npy", mmap_mode="r")
    return GraphArrays(indptr, indices, original.features, original.labels, original.train_idx,
                       original.val_idx, original.test_idx)


def _average_edge_gap(graph: GraphArrays, sample_edges: int = 2_000_000) -> float:
    """Mean |u - v| over (a deterministic sample of) edges: a cheap proxy for on-disk locality."""
    e = graph.num_edges
    if e == 0:
        return 0.0
    pos = np.linspace(0, e - 1, num=min(e, sample_edges), dtype=np.int64)
    dst = np.searchsorted(np.asarray(graph.indptr), pos, side="right") - 1
    src = np.asarray(graph.indices[pos])
    return float(np.mean(np.abs(src - dst)))
