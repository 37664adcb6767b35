"""Partition stage: split the (reordered) nodes into parts, and describe the parts for batch construction.

The method is ``partition.method``, an entry of :data:`pipelines.methods.partitioners.PARTITIONERS` (``range``,
``metis``, ``fennel``, ``grem``; each documented in its module), run by
:func:`pipelines.methods.partitioners.partition_graph_info`.

``multilevel`` (``partition.multilevel``, default on; fennel and grem)
    :mod:`pipelines.methods.partitioners.multilevel`: size-constrained label propagation coarsens the graph (the finest
    level streamed from disk in chunks), the method above partitions the coarsest weighted graph (a few
    thousand nodes: FENNEL with node, edge and training weights; GREM with weighted METIS seeds), and
    label-propagation refinement improves the labels level by level on the way back, the finest level
    streamed again. The streaming methods alone decide one node at a time and settle in local optima of
    fragments; multilevel moves whole clusters (BENCHMARKS.md, "Multilevel"). Off, or when its O(N) state does not fit
    ``memory_mb`` (or FENNEL must count with Bloom filters), the single-level algorithm runs and the
    statistics say so (``multilevel``).

Streaming methods keep O(N) state (labels, flags, estimates) plus one chunk of edges in memory; single-level,
they stream nodes in the id order of their input ordering and their cut depends on it a lot (after
``reorder.strategy=community`` neighbours arrive together).

Artifact ``partition`` (FORMAT_VERSION 2):
``parts.npy`` i32 (N,); ``part_ptr.npy`` i64 (p+1,) / ``part_nodes.npy`` i64 (ascending ids per part);
``part_{train,val,test}_ptr.npy`` / ``part_{train,val,test}.npy`` the same per split; ``bucket_counts.npy``
i64: entry (i, j) = CSR entries whose source node (the neighbour u in row v) is in part i and whose row v
is in part j, shape (p, p), or (p*p,) row-major flattened when p > 4096; ``cross_counts.npy`` i32 (N,):
neighbours of v in another part. Stats: ``edge_cut`` (fraction of CSR entries crossing parts), ``balance``
(max part / (n/p)), ``train_balance`` (max training nodes per part / (|T|/p)), ``time_s``, ``peak_rss_mb``,
``method``, ``num_parts``, ``min/max_part_size``, ``max_train_per_part``, ``counting`` (fennel), ``multilevel``
(``on``, ``off`` or ``skipped: why``) and, when on, ``ml_levels``, ``ml_coarse_nodes``, ``ml_coarse_entries``,
``ml_initial_cut`` (cut of the coarsest partition, as a fraction of the fine CSR entries), ``ml_refine_moves``,
``ml_coarsen_s``, ``ml_time_s``.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.graphio import load_graph
from pipelines.core.progress import Progress
from pipelines.methods.partitioners import partition_graph_info
from pipelines.methods.partitioners.cut import cut_statistics, part_sizes
from pipelines.stages.common import StageResult, materialize, stage_peak_rss_mb
from storage_kernels.arrays import release_pages
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "run", "summary"]

FORMAT_VERSION = 2
_SHOWN_PARTS = 16
_NODE_CHUNK = 1 << 20  # nodes per chunk of the grouping pass (its temporaries: ~6 x 8 MiB)


def _write_part_nodes(builder: ArtifactBuilder, parts: np.ndarray, p: int) -> None:
    """``part_ptr.npy`` / ``part_nodes.npy``: every node grouped by part, ascending within a part, by a counting
    sort over chunks of ``parts`` into the memory-mapped output (no O(N) temporaries: at 100M nodes the
    in-memory ``argsort`` held ~28 bytes per node)."""
    n = len(parts)
    sizes = part_sizes(parts, p)
    ptr = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(sizes, out=ptr[1:])
    builder.save_array("part_ptr.npy", ptr)
    out = builder.allocate_array("part_nodes.npy", np.int64, (n,))
    cursor = ptr[:-1].copy()
    for start in range(0, n, _NODE_CHUNK):
        of = np.asarray(parts[start : start + _NODE_CHUNK])
        order = np.argsort(of, kind="stable")
        counts = np.bincount(of, minlength=p)
        first = np.cumsum(counts) - counts  # where each part's nodes start in the sorted chunk
        ranked = of[order]
        out[cursor[ranked] + np.arange(len(of)) - first[ranked]] = order + start
        cursor += counts
        release_pages(out)  # written once: the page cache keeps it, this process need not
    out.flush()


def _grouped(ids: np.ndarray, parts: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr (p+1), ids grouped by part, ascending within a part) for ascending ``ids``."""
    ids = np.asarray(ids, dtype=np.int64)
    of = parts[ids]
    ptr = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(np.bincount(of, minlength=p), out=ptr[1:])
    return ptr, ids[np.argsort(of, kind="stable")]


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Write the ``partition`` artifact: labels, per-part node/split lists, edge buckets and statistics."""

    def build(builder: ArtifactBuilder) -> None:
        start = time.perf_counter()
        graph = load_graph(reorder)
        num_parts = min(cfg.partition.num_parts, max(graph.num_nodes, 1))
        parts, info = partition_graph_info(graph, cfg.partition.method, num_parts, cfg.partition, progress)
        builder.save_array("parts.npy", parts)
        _write_part_nodes(builder, parts, num_parts)
        for split in ("train", "val", "test"):
            ptr, ids = _grouped(graph.split(split), parts, num_parts)
            builder.save_array(f"part_{split}_ptr.npy", ptr)
            builder.save_array(f"part_{split}.npy", ids)
        stats, buckets, cross = cut_statistics(graph, parts, num_parts, progress)
        builder.save_array("bucket_counts.npy", buckets)
        builder.save_array("cross_counts.npy", cross)
        builder.stats.update(stats)
        builder.stats.update(info)
        builder.stats.update(
            {"method": cfg.partition.method, "num_parts": num_parts,
             "time_s": round(time.perf_counter() - start, 4), "peak_rss_mb": round(stage_peak_rss_mb(), 1)}
        )

    return materialize(store, cfg, "partition", FORMAT_VERSION, {"reorder": reorder}, build)


def summary(artifact: Artifact) -> dict[str, Any]:
    """Cut statistics and the sizes of the first parts (asset metadata)."""
    sizes = np.diff(np.asarray(artifact.array("part_ptr.npy")))
    rows = [{"part": p, "nodes": int(n)} for p, n in enumerate(sizes[:_SHOWN_PARTS])]
    return {
        "part_sizes": markdown_table(rows, ["part", "nodes"]),
        "smallest_part": int(sizes.min()) if len(sizes) else 0,
        "largest_part": int(sizes.max()) if len(sizes) else 0,
    }
