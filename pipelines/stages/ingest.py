"""Ingest stage: read a source, validate it, and write the graph (the ``ingest`` artifact) with bounded memory.

The CSR is built in two passes over the source's edge chunks (count, then place with the C kernels), in
memory when its edges fit ``ingest.memory_mb``, else out of core through scratch buckets of source rows
(:func:`_build_csr`): only the O(N) ``indptr``, one chunk and one bucket are in memory, and the indices file
is written sequentially. Sources
that may repeat an edge are de-duplicated row block by row block. Features stream chunk by chunk into an
aligned array file. Every chunk is validated on the way through (ids in range, no NaN/Inf, dimensions).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.graphio import ROW_CHUNK, degree_chunks
from pipelines.core.nodeids import write_node_ids
from pipelines.core.progress import Progress
from pipelines.methods.sources.base import GraphSource
from pipelines.methods.sources.fingerprint import fingerprint_files
from pipelines.methods.sources.linksplit import write_link_split
from pipelines.methods.sources.spec import parse_source_spec
from pipelines.methods.sources.validate import validate_source
from pipelines.stages.common import StageResult, materialize
from storage_kernels import kernels
from storage_kernels.arrays import ArrayWriter, release_pages, row_ranges
from storage_kernels.buckets import load_bucket, scratch_id_dtype, spill_buckets
from storage_kernels.halfwords import encode_rows, file_columns, file_dtype
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "check_train_classes", "open_source", "run", "summary"]

FORMAT_VERSION = 1  # the version also hashes the inputs' content digests (pipelines.methods.sources.fingerprint)
#: Working bytes an edge costs while the CSR is built: a bucket's int64 placed copy beside its sources and
#: destinations as loaded (int32 on disk, int64 for the kernel); de-duplication is in place.
BUILD_EDGE_BYTES = 32


def open_source(cfg: PipelineConfig) -> GraphSource:
    """Parse and validate the configured source (cheap: nothing is streamed yet)."""
    return validate_source(parse_source_spec(cfg.dataset, cfg.ingest.options))


def _fingerprint(source: GraphSource, root: Path) -> dict[str, Any]:
    """Path, size and content digest of every input file, so a changed file gives a new version (even one
    rewritten with the same size and mtime); see :mod:`pipelines.methods.sources.fingerprint`."""
    return fingerprint_files(source.files, root)


def _count(source: GraphSource, progress: Progress | None) -> np.ndarray:
    """Pass 1: the CSR's ``indptr`` before de-duplication (int64, N + 1), counted in place (one O(N) array)."""
    indptr = np.zeros(source.num_nodes + 1, dtype=np.int64)
    seen = 0
    for src, _dst in source.edge_chunks():
        kernels.csr_count(src, indptr[1:])
        seen += len(src)
        if progress:
            progress("ingest: counting edges", seen, 0)
    np.cumsum(indptr, out=indptr)
    return indptr


def _degree_stats(indptr: np.ndarray) -> dict[str, Any]:
    """``max_degree``, ``mean_degree`` and ``isolated_nodes`` of the CSR offsets ``indptr`` (a memory map:
    streamed a chunk of rows at a time, not an O(N) array of degrees)."""
    n = len(indptr) - 1
    top = isolated = 0
    for _, degrees in degree_chunks(indptr):
        top = max(top, int(degrees.max()))
        isolated += int(np.count_nonzero(degrees == 0))
    release_pages(indptr)
    return {"max_degree": top, "mean_degree": float(indptr[-1]) / n if n else 0.0, "isolated_nodes": isolated}


def _build_csr(builder: ArtifactBuilder, source: GraphSource, memory_mb: int, progress: Progress | None
               ) -> tuple[int, int]:
    """Write ``indices.npy`` and ``indptr.npy``; returns ``(edges kept, duplicates dropped)``.

    A graph whose edges fit ``memory_mb`` (at :data:`BUILD_EDGE_BYTES` an edge) is placed in memory in one
    pass; a larger one out of core: its edges are distributed to scratch buckets of source rows (sequential
    appends beside the build), then each bucket is placed and written in turn, so memory holds one bucket and
    the O(N) ``indptr``. Both give the same file: a row lists its neighbours in input order (sorted, and
    without repeats, when the source may repeat an edge).
    """
    indptr = _count(source, progress)
    num_edges = int(indptr[-1])
    budget_edges = max(1, memory_mb * (1 << 20) // BUILD_EDGE_BYTES)
    bounds = row_ranges(indptr, budget_edges)
    out = builder.array_writer("indices.npy", np.int64)
    scratch = builder.scratch_sibling("edges")
    try:
        if len(bounds) <= 2:
            buckets = _placed_in_memory(source, indptr, num_edges, progress)
        else:
            buckets = _placed_from_buckets(source, indptr, bounds, scratch, progress)
        kept = _write_rows(buckets, indptr, out, source.deduplicated, progress)
    finally:
        out.close()
        shutil.rmtree(scratch, ignore_errors=True)
    builder.save_array("indptr.npy", indptr)  # rewritten in place by _write_rows when rows were de-duplicated
    return kept, num_edges - kept


Placed = Iterator[tuple[int, np.ndarray, np.ndarray]]
"""Consecutive row ranges, in row order: ``(lo, ptr, indices)``, rows ``lo .. lo + len(ptr) - 2`` as counted
(``ptr`` their offsets into ``indices``, from 0; a copy, as ``indptr`` is rewritten while they are written)."""


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


def _placed_in_memory(source: GraphSource, indptr: np.ndarray, num_edges: int, progress: Progress | None
                      ) -> Placed:
    indices = np.empty(num_edges, dtype=np.int64)
    _place(source, indptr, indices, num_edges, progress)
    yield 0, indptr.copy(), indices


def _placed_from_buckets(source: GraphSource, indptr: np.ndarray, bounds: np.ndarray, scratch: Path,
                         progress: Progress | None) -> Placed:
    """Distribute every edge to the bucket of its source row (ids stored as int32 when N allows: 8 bytes an
    edge of scratch), then place each bucket's edges in row order, stably (the input order within a row)."""
    id_dtype = scratch_id_dtype(len(indptr) - 1)
    scratch.mkdir(parents=True, exist_ok=True)
    num_edges, seen = int(indptr[-1]), 0
    bases = indptr[bounds]  # each bucket's first offset (indptr[lo] is rewritten before bucket lo is placed)
    for src, dst in source.edge_chunks():
        dst_out, src_out, ptr = kernels.bucket_rows(np.asarray(dst, dtype=id_dtype).reshape(-1, 1), src, bounds)
        spill_buckets(scratch, ptr, dst=dst_out, src=src_out.astype(id_dtype))
        seen += len(src)
        if progress:
            progress("ingest: distributing edges", seen, num_edges)
    if seen != num_edges:
        raise ValueError(f"'{source.where('edges')}' expected the same edges on every pass "
                         f"(got {num_edges} counted, {seen} distributed)")
    for b in range(len(bounds) - 1):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        base = int(bases[b])
        ptr = indptr[lo : hi + 1] - base
        ptr[0] = 0
        src = load_bucket(scratch, "src", b, id_dtype).astype(np.int64)
        dst = load_bucket(scratch, "dst", b, id_dtype)
        placed = np.empty(int(ptr[-1]), dtype=np.int64)
        if len(src) != len(placed):
            raise ValueError(f"'{source.where('edges')}' expected {len(placed)} edges from rows [{lo}, {hi}) "
                             f"(got {len(src)}): the source changed between passes")
        src -= lo
        kernels.csr_place(src, dst, ptr[:-1].copy(), placed)
        del src, dst
        yield lo, ptr, placed


def _write_rows(buckets: Placed, indptr: np.ndarray, out: ArrayWriter, deduplicated: bool,
                progress: Progress | None) -> int:
    """Append each range's rows to ``out`` (sorted and de-duplicated in place, in C, unless the source is
    ``deduplicated``), rewriting ``indptr`` in place to the rows written; returns the entries written."""
    n = len(indptr) - 1
    written = 0
    for lo, old, placed in buckets:
        hi = lo + len(old) - 1
        if not deduplicated:
            new_ptr, placed = kernels.csr_dedupe(old, placed)
            indptr[lo + 1 : hi + 1] = written + new_ptr[1:]
        out.append(placed)
        written += len(placed)
        if progress:
            progress("ingest: writing rows", hi, n)
    return written


def run(store: ArtifactStore, cfg: PipelineConfig, *, progress: Progress | None = None) -> StageResult:
    """Write the ``ingest`` artifact (the graph) for ``cfg.dataset``."""
    source = open_source(cfg)
    derived = {"source": cfg.dataset, "description": source.description,
               "files": _fingerprint(source, store.root)}

    def build(builder: ArtifactBuilder) -> None:
        num_edges, duplicates = _build_csr(builder, source, cfg.ingest.memory_mb, progress)
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
        with builder.array_writer("labels.npy", np.int64) as labels_out:  # the file's type, held narrow
            for start in range(0, len(source.labels), ROW_CHUNK):
                labels_out.append(source.labels[start : start + ROW_CHUNK].astype(np.int64))
        builder.save_array("train_idx.npy", source.train_idx)
        builder.save_array("val_idx.npy", source.val_idx)
        builder.save_array("test_idx.npy", source.test_idx)
        degrees = _degree_stats(np.load(builder.dir / "indptr.npy", mmap_mode="r"))
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
                **degrees,
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

