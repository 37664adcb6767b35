"""Ingest stage: read a source, validate it, and write the graph (the ``ingest`` artifact) with bounded memory.

The CSR is built in two passes over the source's edge chunks (count, then place with the C kernels), so
only O(N) counters and one chunk are in memory; the indices go straight into a memory-mapped file. Sources
that may repeat an edge are de-duplicated row block by row block. Features stream chunk by chunk into an
aligned array file. Every chunk is validated on the way through (ids in range, no NaN/Inf, dimensions).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.nodeids import write_node_ids
from pipelines.core.progress import Progress
from pipelines.methods.sources.base import GraphSource, dedupe_csr_rows
from pipelines.methods.sources.fingerprint import fingerprint_files
from pipelines.methods.sources.linksplit import write_link_split
from pipelines.methods.sources.spec import parse_source_spec
from pipelines.methods.sources.validate import validate_source
from pipelines.stages.common import StageResult, materialize
from storage_kernels import kernels
from storage_kernels.arrays import ArrayWriter, row_ranges
from storage_kernels.halfwords import encode_rows, file_columns, file_dtype
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "check_train_classes", "open_source", "run", "summary"]

FORMAT_VERSION = 1  # the version also hashes the inputs' content digests (pipelines.methods.sources.fingerprint)
_DEDUPE_BLOCK_EDGES = 8_000_000


def open_source(cfg: PipelineConfig) -> GraphSource:
    """Parse and validate the configured source (cheap: nothing is streamed yet)."""
    return validate_source(parse_source_spec(cfg.dataset, cfg.ingest.options))


def _fingerprint(source: GraphSource, root: Path) -> dict[str, Any]:
    """Path, size and content digest of every input file, so a changed file gives a new version (even one
    rewritten with the same size and mtime); see :mod:`pipelines.methods.sources.fingerprint`."""
    return fingerprint_files(source.files, root)


def _build_csr(builder: ArtifactBuilder, source: GraphSource, progress: Progress | None) -> tuple[int, int]:
    n = source.num_nodes
    counts = np.zeros(n, dtype=np.int64)
    seen = 0
    for src, _dst in source.edge_chunks():
        kernels.csr_count(src, counts)
        seen += len(src)
        if progress:
            progress("ingest: counting edges", seen, 0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    num_edges = int(indptr[-1])
    del counts

    if source.deduplicated:
        indices = builder.allocate_array("indices.npy", np.int64, (num_edges,))
        _place(source, indptr, indices, num_edges, progress)
        builder.save_array("indptr.npy", indptr)
        return num_edges, 0

    # Place into a scratch file beside the artifact, then de-duplicate row blocks into the real file.
    scratch = builder.scratch_sibling("edges", ".npy")
    try:
        raw = ArrayWriter.allocate(scratch, np.int64, (num_edges,))
        _place(source, indptr, raw, num_edges, progress)
        out_indices = builder.array_writer("indices.npy", np.int64)
        new_indptr = np.zeros(n + 1, dtype=np.int64)
        bounds = row_ranges(indptr, _DEDUPE_BLOCK_EDGES)
        for row, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            block_ptr, block_cols = dedupe_csr_rows(indptr[row : stop + 1], raw[indptr[row] : indptr[stop]])
            out_indices.append(block_cols)
            new_indptr[row + 1 : stop + 1] = new_indptr[row] + block_ptr[1:]
            if progress:
                progress("ingest: de-duplicating", stop, n)
        out_indices.close()
        del raw
    finally:
        if scratch.exists():
            os.unlink(scratch)
    builder.save_array("indptr.npy", new_indptr)
    return int(new_indptr[-1]), num_edges - int(new_indptr[-1])


def _place(source: GraphSource, indptr: np.ndarray, indices: np.ndarray, num_edges: int,
           progress: Progress | None) -> None:
    cursor = indptr[:-1].copy()
    placed = 0
    for src, dst in source.edge_chunks():
        kernels.csr_place(src, dst, cursor, indices)
        placed += len(src)
        if progress:
            progress("ingest: placing edges", placed, num_edges)
    if placed != num_edges:
        raise ValueError(f"'{source.where('edges')}' expected the same edges on every pass "
                         f"(got {num_edges} counted, {placed} placed)")
    if isinstance(indices, np.memmap):
        indices.flush()


def run(store: ArtifactStore, cfg: PipelineConfig, *, progress: Progress | None = None) -> StageResult:
    """Write the ``ingest`` artifact (the graph) for ``cfg.dataset``."""
    source = open_source(cfg)
    derived = {"source": cfg.dataset, "description": source.description,
               "files": _fingerprint(source, store.root)}

    def build(builder: ArtifactBuilder) -> None:
        num_edges, duplicates = _build_csr(builder, source, progress)
        dtype = cfg.ingest.feature_dtype
        columns = file_columns(source.feature_dim, dtype)
        features = builder.array_writer("features.npy", file_dtype(dtype), (columns,))
        rows = 0
        for chunk in source.feature_chunks():
            features.append(encode_rows(chunk, dtype, rows, source.where("features")))
            rows += len(chunk)
            if progress:
                progress("ingest: features", rows, source.num_nodes)
        features.close()
        builder.save_array("labels.npy", source.labels)
        builder.save_array("train_idx.npy", source.train_idx)
        builder.save_array("val_idx.npy", source.val_idx)
        builder.save_array("test_idx.npy", source.test_idx)
        degrees = np.diff(np.load(builder.dir / "indptr.npy", mmap_mode="r"))
        builder.stats.update(
            {
                "num_nodes": source.num_nodes,
                "num_edges": num_edges,
                "duplicate_edges_dropped": duplicates,
                "feature_dim": source.feature_dim,
                "num_classes": source.num_classes,
                "max_label": int(source.labels.max()) if len(source.labels) else -1,
                "feature_bytes": source.num_nodes * columns * file_dtype(dtype).itemsize,
                "feature_dtype": dtype,
                "max_degree": int(degrees.max()) if len(degrees) else 0,
                "mean_degree": float(degrees.mean()) if len(degrees) else 0.0,
                "isolated_nodes": int(np.count_nonzero(degrees == 0)),
                "train_nodes": len(source.train_idx),
                "val_nodes": len(source.val_idx),
                "test_nodes": len(source.test_idx),
            }
        )
        if source.node_names is not None:  # named nodes (string ids): the original id of each source id
            write_node_ids(builder, source.node_names)
            builder.stats["node_ids"] = "named"
        if source.link_split is not None:  # the source's own edge split (pipelines.methods.sources.linksplit)
            builder.stats.update(write_link_split(builder, source.link_split, source.num_nodes))

    result = materialize(store, cfg, "ingest", FORMAT_VERSION, {}, build, derived=derived)
    check_train_classes(cfg, result.artifact)
    return result


def check_train_classes(cfg: PipelineConfig, graph: Artifact) -> None:
    """An explicit ``train.num_classes`` must cover every label of the graph: refused here, at the first stage of
    every run (built or reused), not in torch once sampling, planning and packing are done."""
    want = cfg.train.num_classes
    if not want or cfg.train.task != "node":
        return
    top = graph.stats.get("max_label")
    if top is None:  # an artifact written before the stat: its labels (N int64, streamed once)
        labels = graph.array("labels.npy")
        top = int(labels.max()) if len(labels) else -1
    if want <= int(top):
        raise ValueError(f"'train.num_classes' expected at least {int(top) + 1}, the largest label of "
                         f"{cfg.dataset_name} + 1 (got {want}); 0 sizes the model from the labels")


_SUMMARY_STATS = ("num_nodes", "num_edges", "feature_dim", "num_classes", "max_degree", "mean_degree")


def summary(artifact: Artifact) -> dict[str, Any]:
    """Degree and size statistics (asset metadata)."""
    stats = artifact.stats
    return {"summary": markdown_table({k: stats[k] for k in _SUMMARY_STATS if k in stats})}

