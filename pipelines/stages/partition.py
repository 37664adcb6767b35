"""Partition stage: split the (reordered) nodes into parts and measure the cut.

The first method is ``range``: contiguous id ranges of near-equal size. After a locality-preserving
reorder (BFS, degree) contiguous ranges already keep many edges inside a part; the streaming
partitioners (FENNEL, GREM) and METIS come in a later issue behind the same artifact layout.
"""

from __future__ import annotations

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.stages.common import Progress, StageResult, materialize
from pipelines.stages.graphio import GraphArrays, load_graph
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "range_parts", "cut_statistics", "run"]

FORMAT_VERSION = 1
_EDGE_CHUNK = 8_000_000


def range_parts(num_nodes: int, num_parts: int) -> np.ndarray:
    """Part label of each node when ids are cut into ``num_parts`` contiguous, near-equal ranges."""
    if num_parts <= 0:
        raise ValueError(f"'partition.num_parts' expected > 0 (got {num_parts})")
    ids = np.arange(num_nodes, dtype=np.int64)
    return (ids * num_parts // max(num_nodes, 1)).astype(np.int32)


def cut_statistics(graph: GraphArrays, parts: np.ndarray, num_parts: int,
                   progress: Progress | None = None) -> dict[str, float]:
    """Edge-cut fraction, balance (largest part / mean part) and per-node cross-part neighbour counts."""
    indptr = np.asarray(graph.indptr)
    cut = 0
    e = graph.num_edges
    for start in range(0, e, _EDGE_CHUNK):
        stop = min(e, start + _EDGE_CHUNK)
        dst = np.searchsorted(indptr, np.arange(start, stop, dtype=np.int64), side="right") - 1
        src = np.asarray(graph.indices[start:stop])
        cut += int(np.count_nonzero(parts[src] != parts[dst]))
        if progress:
            progress("partition: measuring cut", stop, e)
    sizes = np.bincount(parts, minlength=num_parts)
    return {
        "edge_cut": cut / e if e else 0.0,
        "balance": float(sizes.max() / sizes.mean()) if len(sizes) and sizes.mean() > 0 else 1.0,
        "min_part_size": int(sizes.min()) if len(sizes) else 0,
        "max_part_size": int(sizes.max()) if len(sizes) else 0,
    }


def run(store: ArtifactStore, cfg: PipelineConfig, *, ordering: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Write the ``partitioning`` artifact: labels, per-part node lists and cut statistics."""
    params = {"method": cfg.partition.method, "num_parts": cfg.partition.num_parts}

    def build(builder: ArtifactBuilder) -> None:
        graph = load_graph(ordering)
        num_parts = min(cfg.partition.num_parts, max(graph.num_nodes, 1))
        if cfg.partition.method != "range":
            raise ValueError(f"'partition.method' expected 'range' (got {cfg.partition.method!r})")
        parts = range_parts(graph.num_nodes, num_parts)
        order = np.argsort(parts, kind="stable").astype(np.int64)
        part_ptr = np.zeros(num_parts + 1, dtype=np.int64)
        np.cumsum(np.bincount(parts, minlength=num_parts), out=part_ptr[1:])
        builder.save_array("parts.npy", parts)
        builder.save_array("part_ptr.npy", part_ptr)
        builder.save_array("part_nodes.npy", order)
        train_parts = np.bincount(parts[np.asarray(graph.train_idx)], minlength=num_parts)
        builder.stats.update(cut_statistics(graph, parts, num_parts, progress))
        builder.stats.update(
            {"method": cfg.partition.method, "num_parts": num_parts,
             "max_train_per_part": int(train_parts.max()) if num_parts else 0}
        )

    return materialize(store, cfg.dataset_name, "partitioning", FORMAT_VERSION, params,
                       {"ordering": ordering}, build)
