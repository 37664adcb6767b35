"""Reorder stage: choose a vertex order and rewrite the CSR, features, labels and splits in it.

Locality on disk follows the id order: nodes that are sampled together should sit on the same pages.

The order is ``reorder.strategy``, an entry of :data:`pipelines.methods.orders.REORDER_STRATEGIES` (``identity``,
``random``, ``degree``, ``bfs``, ``rcm``, ``community``, ``partition``; each documented in its module).

Applying the order is an external permutation with bounded memory and sequential I/O
(:func:`external_permute_rows`, :func:`external_permute_csr`): a distribution pass streams the old file
forwards and appends every row (or relabelled neighbour) to the scratch bucket of its new id; then each bucket
is loaded, its rows placed by new id, and written to the output sequentially. Of the O(N) arrays only
``inverse`` (int64) is held throughout, plus one other at a time (the order while it is computed, the int32
degrees, the narrowed labels); ``perm`` and the new ``indptr`` are written first and streamed back from their
files (:func:`permuted_indptr`, :func:`permuted_labels`): ~12 bytes per node besides one chunk / bucket.
Scratch files live beside the builder directory (never inside it) and are removed even on error.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.config import PipelineConfig, ReorderConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.graphio import GraphArrays, degree_chunks, load_graph, narrow_labels
from pipelines.core.nodeids import NODE_IDS_FILE, has_node_ids
from pipelines.core.progress import Progress
from pipelines.methods.orders import compute_order
from pipelines.methods.orders.locality import average_edge_gap, pages_per_batch
from pipelines.methods.sources.linksplit import relabel_link_split
from pipelines.stages.common import StageResult, materialize, stage_peak_rss_mb
from storage_kernels import kernels
from storage_kernels.arrays import release_pages, row_ranges
from storage_kernels.buckets import scratch_id_dtype, spill_buckets
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = [
    "FORMAT_VERSION",
    "compute_order",
    "external_permute_csr",
    "external_permute_rows",
    "inverse_of",
    "permuted_indptr",
    "permuted_labels",
    "run",
    "summary",
]

FORMAT_VERSION = 2

# Bytes of working memory per feature row / per edge in the external permutation (see _bucket_sizes).
_ROW_OVERHEAD_BYTES = 16
_EDGE_BYTES = 40
# Ids per chunk where an O(N) array is streamed (perm, labels, offsets): 32 MiB of int64.
_ID_CHUNK = 1 << 22

Write = Callable[[np.ndarray], None]


# ---- applying an order -------------------------------------------------------------------------------


def inverse_of(perm: np.ndarray, chunk: int = _ID_CHUNK) -> np.ndarray:
    """``inverse[perm[i]] = i`` (old id -> new id, int64); ValueError when ``perm`` is not a permutation.

    ``perm`` may be a memory map (``perm.npy``): it is streamed ``chunk`` ids at a time, so nothing O(N) is
    held besides the result (a scatter of the ids a chunk; an id left unset means a repeated one)."""
    n = len(perm)
    inverse = np.full(n, -1, dtype=np.int64)
    for start in range(0, n, chunk):
        ids = np.asarray(perm[start : start + chunk], dtype=np.int64)
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= n:
            raise ValueError(f"'perm' expected ids in [0, {n}) (got min {lo}, max {hi} in [{start}, "
                             f"{start + len(ids)}))")
        inverse[ids] = np.arange(start, start + len(ids), dtype=np.int64)
    release_pages(perm)
    missing = sum(int(np.count_nonzero(inverse[s : s + chunk] < 0)) for s in range(0, n, chunk))
    if missing:
        raise ValueError(f"'perm' expected a permutation of [0, {n}) (got {missing} ids missing)")
    return inverse


def permuted_indptr(indptr: np.ndarray, perm: np.ndarray, write: Write, chunk: int = _ID_CHUNK) -> None:
    """Write the CSR offsets in ``perm``'s order (``cumsum(degrees[perm])`` with a leading 0) through ``write``,
    ``chunk`` rows at a time. ``indptr`` and ``perm`` may be memory maps: both are streamed; the degrees are
    held once, int32 where they fit."""
    n = len(indptr) - 1
    top = max((int(d.max(initial=0)) for _, d in degree_chunks(indptr, chunk)), default=0)
    degrees = np.empty(n, dtype=np.int32 if top < 2**31 else np.int64)
    for start, d in degree_chunks(indptr, chunk):
        degrees[start : start + len(d)] = d
    release_pages(indptr)
    offset = 0
    write(np.zeros(1, dtype=np.int64))
    for start in range(0, n, chunk):
        part = np.cumsum(degrees[np.asarray(perm[start : start + chunk])], dtype=np.int64)
        part += offset
        offset = int(part[-1])
        write(part)
    release_pages(perm)


def permuted_labels(labels: np.ndarray, perm: np.ndarray, write: Write, chunk: int = _ID_CHUNK) -> None:
    """Write ``labels[perm]`` (the file's dtype) through ``write``, ``chunk`` rows at a time: the labels are held
    once, in the narrowest integer type that holds them (int16 for class labels), ``perm`` is streamed."""
    n = len(labels)
    held = narrow_labels(labels, chunk)
    release_pages(labels)
    for start in range(0, n, chunk):
        write(held[np.asarray(perm[start : start + chunk])].astype(labels.dtype, copy=False))
    release_pages(perm)


def external_permute_rows(src: np.ndarray, inverse: np.ndarray, write: Write, bucket_rows: int, chunk_rows: int,
                          scratch: Path, progress: Progress | None = None) -> int:
    """Write ``src[perm]`` (rows in new-id order) through ``write`` in bucket-sized chunks; returns #buckets.

    Distribution pass: stream ``src`` forwards ``chunk_rows`` at a time and append each row (with its new id)
    to bucket ``new_id // bucket_rows`` under ``scratch``; then per bucket place rows by new id and ``write``.
    """
    n, dim = src.shape
    if bucket_rows < 1 or chunk_rows < 1:
        raise ValueError(f"'bucket_rows'/'chunk_rows' expected >= 1 (got {bucket_rows}, {chunk_rows})")
    scratch.mkdir(parents=True, exist_ok=True)
    bounds = np.arange(0, n + bucket_rows, bucket_rows, dtype=np.int64)
    bounds[-1] = n
    if n == 0:
        return 0
    num_buckets = len(bounds) - 1
    for start in range(0, n, chunk_rows):
        stop = min(n, start + chunk_rows)
        rows = np.ascontiguousarray(src[start:stop])  # sequential read of the old file
        release_pages(src)  # streamed once: do not let the whole file pile up in this process's RSS
        out_rows, out_keys, ptr = kernels.bucket_rows(rows, inverse[start:stop], bounds)
        spill_buckets(scratch, ptr, rows=out_rows, keys=out_keys)
        if progress:
            progress("reorder: distributing feature rows", stop, n)
    for b in range(num_buckets):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        keys = np.fromfile(scratch / f"keys_{b}.bin", dtype=np.int64)
        rows = np.fromfile(scratch / f"rows_{b}.bin", dtype=src.dtype).reshape(-1, dim)
        if keys.shape[0] != hi - lo or rows.shape[0] != hi - lo:
            raise ValueError(
                f"'bucket {b}' expected {hi - lo} rows (got {keys.shape[0]}): 'inverse' is not a permutation"
            )
        keys -= lo
        out = np.empty((hi - lo, dim), dtype=src.dtype)
        kernels.place_rows(rows, keys, out)
        write(out)
        (scratch / f"rows_{b}.bin").unlink()
        (scratch / f"keys_{b}.bin").unlink()
        if progress:
            progress("reorder: writing feature rows", hi, n)
    return num_buckets


def external_permute_csr(indptr: np.ndarray, indices: np.ndarray, perm: np.ndarray | None, inverse: np.ndarray,
                         write: Write, bucket_edges: int, chunk_edges: int, scratch: Path,
                         progress: Progress | None = None, new_indptr: np.ndarray | None = None
                         ) -> tuple[np.ndarray, int]:
    """Write the relabelled ``indices`` (new row order, neighbours mapped through ``inverse``, neighbour order
    kept) through ``write`` bucket by bucket; returns ``(new_indptr, #buckets)``.

    ``new_indptr`` (the offsets in the new order, e.g. the memory-mapped file :func:`permuted_indptr` wrote)
    is computed from ``perm`` when not given; given, ``perm`` is not read. Buckets are ranges of new rows
    holding <= ``bucket_edges`` edges (a single heavier row gets its own), so skewed degrees do not blow a
    bucket up. Distribution pass: stream old rows (``chunk_edges`` edges at a time), relabel neighbours in C,
    group (new_row, neighbour) records by bucket in C and append them; then per bucket place each record at
    its row's cursor (``csr_place``) and write the bucket's slice of ``indices``.
    """
    n = len(indptr) - 1
    old_indptr = np.asarray(indptr, dtype=np.int64)
    if new_indptr is None:
        if perm is None:
            raise ValueError("'perm' expected when 'new_indptr' is not given (got None)")
        parts: list[np.ndarray] = []
        permuted_indptr(old_indptr, perm, parts.append)
        new_indptr = np.concatenate(parts)
    if bucket_edges < 1 or chunk_edges < 1:
        raise ValueError(f"'bucket_edges'/'chunk_edges' expected >= 1 (got {bucket_edges}, {chunk_edges})")
    if n == 0:
        return new_indptr, 0
    scratch.mkdir(parents=True, exist_ok=True)
    id_dtype = scratch_id_dtype(n)  # scratch ids: 8 bytes an edge, not 16 (19.5 GB at 1.2B entries)
    bounds = row_ranges(new_indptr, bucket_edges)
    num_buckets = len(bounds) - 1
    chunks = row_ranges(old_indptr, chunk_edges)
    e_total = int(old_indptr[-1])
    for start, stop in zip(chunks[:-1].tolist(), chunks[1:].tolist(), strict=True):
        e0, e1 = int(old_indptr[start]), int(old_indptr[stop])
        if e1 == e0:
            continue
        nbrs = kernels.relabel_ids(np.asarray(indices[e0:e1]), inverse)
        release_pages(indices)
        release_pages(indptr)
        rows_new = np.repeat(inverse[start:stop], np.diff(old_indptr[start : stop + 1]))
        out_nbrs, out_rows, ptr = kernels.bucket_rows(nbrs.astype(id_dtype).reshape(-1, 1), rows_new, bounds)
        spill_buckets(scratch, ptr, nbrs=out_nbrs, rows=out_rows.astype(id_dtype))
        if progress:
            progress("reorder: distributing edges", e1, e_total)
    for b in range(num_buckets):
        lo, hi = int(bounds[b]), int(bounds[b + 1])
        base = int(new_indptr[lo])
        size = int(new_indptr[hi]) - base
        if size == 0:
            continue
        rows = np.fromfile(scratch / f"rows_{b}.bin", dtype=id_dtype).astype(np.int64)
        nbrs = np.fromfile(scratch / f"nbrs_{b}.bin", dtype=id_dtype)
        if rows.shape[0] != size or nbrs.shape[0] != size:
            raise ValueError(f"'bucket {b}' expected {size} edges (got {rows.shape[0]}): 'perm' is inconsistent")
        rows -= lo
        cursor = new_indptr[lo:hi] - base
        out = np.empty(size, dtype=np.int64)
        kernels.csr_place(rows, nbrs, cursor, out)
        write(out)
        release_pages(new_indptr)
        (scratch / f"rows_{b}.bin").unlink()
        (scratch / f"nbrs_{b}.bin").unlink()
        if progress:
            progress("reorder: writing edges", int(new_indptr[hi]), e_total)
    return new_indptr, num_buckets


def _bucket_sizes(memory_mb: int, row_bytes: int) -> tuple[int, int]:
    """(rows per feature bucket, edges per CSR bucket) for a working-memory budget of ``memory_mb`` MiB.

    A feature bucket holds its rows twice (loaded + placed) plus an int64 key per row; a CSR bucket holds
    ~5 int64 per edge across both passes (slice, relabelled, key, grouped copies / loaded, placed)."""
    budget = memory_mb * (1 << 20)
    return max(1, budget // (2 * row_bytes + _ROW_OVERHEAD_BYTES)), max(1, budget // _EDGE_BYTES)


def _write_relabelled(builder: ArtifactBuilder, graph: GraphArrays, rc: ReorderConfig, scratch: Path,
                      progress: Progress | None, file_dtype: np.dtype | str = np.float32) -> dict[str, int]:
    """Write the graph in the order of the builder's ``perm.npy`` (already written).

    Memory: one O(N) array at a time besides ``inverse`` (int64, held from the CSR on, as neighbours are
    relabelled at random): the degrees (int32) while the new offsets are streamed to ``indptr.npy``, the
    labels (narrowed) while ``labels.npy`` is streamed; ``perm`` and the new offsets are read back from their
    files in chunks. At 100M nodes that is ~12 bytes per node (BENCHMARKS.md, "Stage memory")."""
    perm = np.load(builder.dir / "perm.npy", mmap_mode="r")
    inverse = inverse_of(perm)  # validates perm before anything else is written
    builder.save_array("inverse.npy", inverse)
    with builder.array_writer("indptr.npy", np.int64) as indptr_out:
        permuted_indptr(graph.indptr, perm, indptr_out.append)
    with builder.array_writer("labels.npy", graph.labels.dtype) as labels_out:
        permuted_labels(graph.labels, perm, labels_out.append)
    del perm
    new_indptr = np.load(builder.dir / "indptr.npy", mmap_mode="r")
    bucket_rows, bucket_edges = _bucket_sizes(rc.memory_mb, graph.row_bytes)

    indices_out = builder.array_writer("indices.npy", np.int64)
    try:
        _, csr_buckets = external_permute_csr(
            graph.indptr, graph.indices, None, inverse, indices_out.append, bucket_edges,
            min(bucket_edges, max(rc.chunk_rows * 16, 1)), scratch / "csr", progress, new_indptr=new_indptr)
    finally:
        indices_out.close()
    del new_indptr

    file_dtype = np.dtype(file_dtype)  # float16 files are permuted as 4-byte words and written back as float16
    columns = graph.row_bytes // file_dtype.itemsize
    features_out = builder.array_writer("features.npy", file_dtype, (columns,))
    try:
        feature_buckets = external_permute_rows(graph.features, inverse,
                                                lambda rows: features_out.append(rows.view(file_dtype)), bucket_rows,
                                                min(bucket_rows, rc.chunk_rows), scratch / "features", progress)
    finally:
        features_out.close()

    for name in ("train", "val", "test"):
        builder.save_array(f"{name}_idx.npy", np.sort(inverse[np.asarray(graph.split(name))]))
    return {"feature_buckets": feature_buckets, "csr_buckets": csr_buckets, "bucket_rows": bucket_rows,
            "bucket_edges": bucket_edges}


def run(store: ArtifactStore, cfg: PipelineConfig, *, ingest: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Write the ``reorder`` artifact: ``perm``/``inverse``, the relabelled graph and locality statistics."""
    rc = cfg.reorder

    def build(builder: ArtifactBuilder) -> None:
        arrays = load_graph(ingest)
        info: dict[str, Any] = {}
        t0 = time.perf_counter()
        builder.save_array("perm.npy", compute_order(arrays, rc.strategy, rc, cfg.partition, info))
        order_s = time.perf_counter() - t0
        release_pages(arrays.indices)  # orders that walk the CSR leave it resident; the rewrite streams it
        release_pages(arrays.indptr)
        scratch = builder.scratch_sibling()
        t1 = time.perf_counter()
        try:
            info.update(_write_relabelled(builder, arrays, rc, scratch, progress,
                                          ingest.array("features.npy").dtype))
            info.update(relabel_link_split(ingest, builder, np.load(builder.dir / "inverse.npy", mmap_mode="r")))
            if has_node_ids(ingest):  # keyed by the source's id, which perm.npy maps to: carried unchanged
                shutil.copyfile(ingest.file(NODE_IDS_FILE), builder.add_file(NODE_IDS_FILE))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        rewrite_s = time.perf_counter() - t1
        peak = stage_peak_rss_mb()  # before the measurements below, which sample the graphs at random
        new = load_graph_from_builder(builder)
        builder.timings.update({"order_s": round(order_s, 4), "rewrite_s": round(rewrite_s, 4)})
        builder.stats.update(
            {
                "strategy": rc.strategy,
                "num_nodes": arrays.num_nodes,
                "num_edges": arrays.num_edges,
                # the model's input width and the file's element type (a float16 file may hold a pad column)
                "feature_dim": int(ingest.stats.get("feature_dim", arrays.feature_dim)),
                "feature_dtype": str(ingest.array("features.npy").dtype),
                "order_s": round(order_s, 4),
                "rewrite_s": round(rewrite_s, 4),
                "time_s": round(order_s + rewrite_s, 4),
                "peak_rss_mb": round(peak, 1),
                **_locality(new, ""),
                **_locality(arrays, "_before"),
                **info,
            }
        )

    return materialize(store, cfg, "reorder", FORMAT_VERSION, {"ingest": ingest}, build)


def _locality(graph: GraphArrays, suffix: str) -> dict[str, float]:
    """Edge gap and pages per batch of ``graph``, dropping the CSR pages the random sampling made resident."""
    out = {f"avg_edge_gap{suffix}": average_edge_gap(graph), f"pages_per_batch{suffix}": pages_per_batch(graph)}
    release_pages(graph.indices)
    release_pages(graph.indptr)
    return out


def load_graph_from_builder(builder: ArtifactBuilder) -> GraphArrays:
    """The relabelled graph just written (memory-mapped from the builder's directory)."""
    names = ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx")
    return GraphArrays(*(np.load(builder.dir / f"{name}.npy", mmap_mode="r") for name in names))


def summary(artifact: Artifact) -> dict[str, Any]:
    """The strategy and its locality statistics (asset metadata)."""
    stats = {k: v for k, v in artifact.stats.items() if isinstance(v, (int, float, str))}
    return {"summary": markdown_table(stats)}
