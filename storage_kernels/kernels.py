"""The one boundary between Python and the native storage kernels (``storage_kernels._native``).

Each wrapper has the name and argument order of its C kernel (see docs/CONTRACTS.md), calls it with keyword
arguments (the parameter names of ``_native.pyi``), normalises what it safely can (small index arrays to
contiguous int64, ``num_threads=0`` = all cores) and leaves the checks that need the data (ranges, alignment,
sortedness) to the kernel, which raises ``ValueError`` / ``IndexError`` / ``OSError`` naming the offending
position. Output arrays are never converted: they must
already be writable, C-contiguous and of the right dtype, or the kernel refuses them.

Two drivers are built on the kernels: :func:`build_csr` (two-pass CSR construction with bounded memory)
and :func:`pack_batches` (DiskGNN batched packing of a feature file into per-batch aligned chunks).
The rest of Strata imports from here, never from ``_native``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from storage_kernels import _native

__all__ = [
    "DIRECT_ALIGN",
    "Changesets",
    "PrunedBlocks",
    "SampledBlocks",
    "aligned_empty",
    "belady_changesets",
    "window_schedule",
    "WindowSchedule",
    "rows_in_blocks",
    "window_split",
    "window_update",
    "bucket_rows",
    "build_csr",
    "cache_update",
    "close_fd",
    "count_blocks",
    "cluster_pass",
    "csr_aggregate",
    "csr_count",
    "csr_place",
    "csr_sum",
    "csr_sum_backward",
    "dropout",
    "dropout_backward",
    "fennel_pass",
    "filtered_ranks",
    "gat_attend",
    "gat_attend_backward",
    "gather_rows",
    "gather_rows_at",
    "gather_rows_at_into",
    "gather_rows_into",
    "grem_pass",
    "io_uring_available",
    "label_propagation",
    "minhash_signatures",
    "open_direct",
    "pack_batches",
    "pack_partition",
    "place_rows",
    "place_rows_at",
    "pread_ranges",
    "prune_blocks",
    "rabbit_order",
    "refine_pass",
    "relabel_ids",
    "sample_blocks",
    "sample_dense",
    "split_by_code",
    "blocks_for_rows",
    "TierGroups",
    "URING_QUEUE_DEPTH",
    "uring_read_ranges",
]

DIRECT_ALIGN = _native.DIRECT_ALIGN  # bytes; O_DIRECT offsets, lengths and addresses are multiples of it

EdgeChunks = Iterable[tuple[np.ndarray, np.ndarray]]


def _index_array(name: str, values) -> np.ndarray:
    """Small index arrays (seeds, ids, offsets): any integer dtype -> contiguous 1-D int64."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"'{name}' expected a 1-D integer array (got shape {arr.shape})")
    if arr.dtype.kind not in "iu":
        if arr.size:
            raise ValueError(f"'{name}' expected an integer array (got {arr.dtype})")
        arr = arr.astype(np.int64)
    return np.ascontiguousarray(arr, dtype=np.int64)


def _int64_array(name: str, values) -> np.ndarray:
    """Large read-only arrays (the CSR): must already be int64, so no hidden O(E) copy per call."""
    arr = np.asarray(values)
    if arr.dtype != np.int64 or arr.ndim != 1:
        raise ValueError(f"'{name}' expected a 1-D int64 array (got {arr.dtype} array of shape {arr.shape})")
    return np.ascontiguousarray(arr)


def _optional_indexes(**arrays) -> dict[str, np.ndarray | None]:
    """Optional index arrays (weights, visit orders) as keyword arguments of a kernel, each normalised like
    :func:`_index_array` and None kept: ``_native.f(..., **_optional_indexes(visit=visit))``."""
    return {name: None if values is None else _index_array(name, values) for name, values in arrays.items()}


def _chunk(indptr, indices, nodes) -> dict[str, np.ndarray]:
    """The streamed chunk of a partitioning pass as keyword arguments of its kernel: ``nodes`` and their rows
    at the local offsets ``indptr`` into ``indices``."""
    return {
        "indptr": _index_array("indptr", indptr),
        "indices": _int64_array("indices", indices),
        "nodes": _index_array("nodes", nodes),
    }


# ---- CSR construction -------------------------------------------------------------------------------------


def csr_count(src, counts: np.ndarray) -> None:
    """Pass 1 of CSR construction over one chunk of edges: ``counts[src[i]] += 1``.

    ``counts`` (int64, N) is updated in place. Raises IndexError naming the first out-of-range ``src[i]``;
    ``counts`` is then unchanged.
    """
    _native.csr_count(src=_index_array("src", src), counts=counts)


def csr_place(src, dst, cursor: np.ndarray, indices: np.ndarray) -> None:
    """Pass 2 over one chunk: ``indices[cursor[s]] = d; cursor[s] += 1`` for every edge ``(s, d)`` in order.

    ``cursor`` starts as ``indptr[:-1].copy()``; ``indices`` may be a writable memmap. Edges of one node keep
    their input order. On IndexError (bad ``src``, or a node receiving more edges than counted) ``cursor``
    is restored; entries of ``indices`` already written by this call are not.
    """
    _native.csr_place(src=_index_array("src", src), dst=_index_array("dst", dst), cursor=cursor, indices=indices)


def build_csr(
    edge_chunks_factory: Callable[[], EdgeChunks],
    num_nodes: int,
    indices_out: np.ndarray | Callable[[int], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Build ``(indptr, indices)`` from edge chunks with memory bounded by N plus one chunk.

    Parameters
    ----------
    edge_chunks_factory
        Called twice (count pass, place pass); each call returns a fresh iterator over ``(src, dst)`` int64
        chunk pairs, the same edges in the same order both times. Row ``v`` lists the ``dst`` of the edges
        with ``src == v`` in input order.
    num_nodes
        N; every ``src`` must lie in ``[0, N)``.
    indices_out
        Where to place ``indices``: a writable int64 array / ``np.memmap`` of shape ``(E,)``, a callable
        ``f(num_edges) -> array`` (when E is unknown before the count pass), or None for a new array.

    Examples
    --------
    >>> src, dst = np.array([1, 0, 1]), np.array([0, 1, 2])
    >>> build_csr(lambda: [(src, dst)], 3)
    (array([0, 1, 3, 3]), array([1, 0, 2]))
    """
    if num_nodes < 0:
        raise ValueError(f"'num_nodes' expected >= 0 (got {num_nodes})")
    counts = np.zeros(num_nodes, dtype=np.int64)
    for src, _dst in edge_chunks_factory():
        csr_count(src, counts)
    indptr = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    num_edges = int(indptr[-1])
    del counts

    if indices_out is None:
        indices = np.empty(num_edges, dtype=np.int64)
    elif callable(indices_out):
        indices = indices_out(num_edges)
    else:
        indices = indices_out
    if not isinstance(indices, np.ndarray) or indices.dtype != np.int64 or indices.shape != (num_edges,):
        got = f"{indices.dtype} array of shape {indices.shape}" if isinstance(indices, np.ndarray) else type(indices)
        raise ValueError(f"'indices_out' expected a writable int64 array of shape ({num_edges},) (got {got})")

    cursor = indptr[:-1].copy()
    for src, dst in edge_chunks_factory():
        csr_place(src, dst, cursor, indices)
    short = np.flatnonzero(cursor != indptr[1:])
    if short.size:
        v = int(short[0])
        raise ValueError(
            f"'edge_chunks_factory' expected the same edges on both passes "
            f"(got node {v}: {int(indptr[v + 1] - indptr[v])} edges counted, {int(cursor[v] - indptr[v])} placed)"
        )
    if isinstance(indices, np.memmap):
        indices.flush()
    return indptr, indices


# ---- sampling ---------------------------------------------------------------------------------------------


class SampledBlocks(NamedTuple):
    """Output of :func:`sample_blocks` (a tuple: ``nodes, hop_counts, indptrs, cols = ...`` works).

    Invariants: ``nodes[:hop_counts[0]]`` are the seeds in the given order; hop ``h`` is a CSR over the
    destinations ``nodes[:hop_counts[h]]`` (``indptrs[h]``, length ``hop_counts[h] + 1``) whose ``cols[h]``
    are positions into ``nodes``, all ``< hop_counts[h + 1]``.
    """

    nodes: np.ndarray  # int64 (hop_counts[-1],)
    hop_counts: np.ndarray  # int64 (L + 1,)
    indptrs: list[np.ndarray]  # L arrays, int64 (hop_counts[h] + 1,)
    cols: list[np.ndarray]  # L arrays, int64 (indptrs[h][-1],)


def sample_blocks(
    indptr: np.ndarray, indices: np.ndarray, seeds, fanouts: Sequence[int], seed: int, num_threads: int = 0
) -> SampledBlocks:
    """L-hop uniform neighbour sampling without replacement, relabelled into layered blocks.

    Hop ``h`` draws ``fanouts[h]`` distinct neighbours of every node known so far (all of them, in CSR order,
    when the degree is at most the fanout or the fanout is -1; sampled ones are also listed in CSR order).
    New nodes get positions in first-seen order. Node ``v`` at hop ``h`` uses its own counter-based random
    stream keyed by ``(seed, h, v)``, so the result does not depend on ``num_threads`` (0 = all cores).

    Raises ValueError on duplicate seeds, fanouts below -1 or a malformed ``indptr`` row; IndexError on
    out-of-range seeds or neighbour ids.

    Examples
    --------
    >>> indptr, indices = np.array([0, 2, 4, 7, 8]), np.array([1, 2, 0, 2, 0, 1, 3, 2])
    >>> out = sample_blocks(indptr, indices, [3], [-1, -1], seed=0)
    >>> out.nodes, out.hop_counts
    (array([3, 2, 0, 1]), array([1, 2, 4]))
    """
    return SampledBlocks(
        *_native.sample_blocks(**_sampler_args(indptr, indices, seeds, fanouts, seed, num_threads))
    )


def _sampler_args(indptr: np.ndarray, indices: np.ndarray, seeds, fanouts: Sequence[int], seed: int,
                  num_threads: int) -> dict[str, Any]:
    """The checked keyword arguments of the sampling kernels."""
    return {"indptr": _int64_array("indptr", indptr), "indices": _int64_array("indices", indices),
            "seeds": _index_array("seeds", seeds), "fanouts": _index_array("fanouts", fanouts), "seed": int(seed),
            "num_threads": num_threads}


def sample_dense(
    indptr: np.ndarray, indices: np.ndarray, seeds, fanouts: Sequence[int], seed: int, num_threads: int = 0
) -> SampledBlocks:
    """MariusGNN's DENSE sampling: one-hop samples reused across hops, in :class:`SampledBlocks`' layout.

    Hop ``h`` samples (like :func:`sample_blocks`, stream ``(seed, h, v)``) only the nodes first reached by hop
    ``h - 1`` (the seeds at hop 0) with ``fanouts[h]``; a node keeps that one neighbour sample at every later
    hop, so hop 0 equals :func:`sample_blocks`' hop 0 and later hops sample only the new nodes. The kernel
    builds ONE CSR over ``nodes[:hop_counts[L - 1]]``; hop ``h``'s block is its prefix, returned as read-only
    views ``indptrs[h] = indptr[:hop_counts[h] + 1]``, ``cols[h] = cols[:indptr[hop_counts[h]]]``.
    Raises like :func:`sample_blocks`.
    """
    nodes, hop_counts, indptr_all, cols_all = _native.sample_dense(
        **_sampler_args(indptr, indices, seeds, fanouts, seed, num_threads))
    indptr_all.flags.writeable = False  # the hops share it: writing one block would change the others
    cols_all.flags.writeable = False
    ends = hop_counts[:-1] + 1
    return SampledBlocks(nodes, hop_counts, [indptr_all[:e] for e in ends],
                         [cols_all[: indptr_all[e - 1]] for e in ends])


class PrunedBlocks(NamedTuple):
    """Output of :func:`prune_blocks`: ``state`` per old position (uint8: 0 dropped, 1 kept and read, 2 kept
    but never read) and the compacted blocks in :class:`SampledBlocks`' layout (kept nodes in order)."""

    state: np.ndarray  # uint8 (hop_counts[-1],)
    hop_counts: np.ndarray  # int64 (L + 1,)
    indptrs: list[np.ndarray]  # L arrays, int64 (hop_counts[h] + 1,)
    cols: list[np.ndarray]  # L arrays, int64 (indptrs[h][-1],)


def prune_blocks(hop_counts, indptrs: Sequence[np.ndarray], cols: Sequence[np.ndarray], pulled) -> PrunedBlocks:
    """OUTRE's subtree pruning of one sampled batch (``SampledBlocks`` layout, hop 0 = the last layer): the
    (L-1)-deep subtrees of the ``pulled`` last-layer sources (positions ``< hop_counts[1]``) are removed.

    Hop ``h >= 1`` keeps the in-edges of the destinations still needed at that hop; a node is kept when a
    layer reads it or it is a last-layer source (hop 0 is untouched); order is preserved, so destinations
    stay prefixes. In C without the GIL; ``pipelines.methods.policies.outre.trace.prune_batch_numpy`` is the
    reference. Raises ValueError on malformed blocks, IndexError on out-of-range positions.
    """
    hc = _int64_array("hop_counts", hop_counts)
    indptr = _int64_array("indptr", np.concatenate([np.asarray(p, dtype=np.int64) for p in indptrs])
                          if len(indptrs) else np.empty(0, np.int64))
    col = _int64_array("cols", np.concatenate([np.asarray(c, dtype=np.int64) for c in cols])
                       if len(cols) else np.empty(0, np.int64))
    if len(hc) != len(indptrs) + 1 or len(cols) != len(indptrs):
        raise ValueError(f"'hop_counts' expected {len(indptrs) + 1} entries for {len(indptrs)} hops "
                         f"(got {len(hc)}, and {len(cols)} cols arrays)")
    state = np.empty(int(hc[-1]) if len(hc) else 0, dtype=np.uint8)
    new_indptr, new_cols = np.empty_like(indptr), np.empty_like(col)
    new_hc, edge_counts = np.empty_like(hc), np.empty(max(len(hc) - 1, 0), dtype=np.int64)
    _native.prune_blocks(hop_counts=hc, indptr=indptr, cols=col, pulled=_index_array("pulled", pulled), state=state,
                         new_indptr=new_indptr, new_cols=new_cols, new_hop_counts=new_hc, edge_counts=edge_counts)
    ip_ends = np.cumsum(new_hc[:-1] + 1)
    col_ends = np.cumsum(edge_counts)
    return PrunedBlocks(state, new_hc, np.split(new_indptr[: ip_ends[-1]], ip_ends[:-1]),
                        np.split(new_cols[: col_ends[-1]], col_ends[:-1]))


# ---- link prediction: filtered ranking (rank.c) -----------------------------------------------------------


def filtered_ranks(scores: np.ndarray, targets, sources, indptr: np.ndarray, indices: np.ndarray,
                   num_threads: int = 0) -> np.ndarray:
    """Filtered rank of each query's target among all nodes (link prediction, ``trainer.link.metrics``).

    ``scores`` (Q, N) float32, C-contiguous and writable: row ``q`` scores the edge ``(sources[q], j)`` for
    every node ``j``; it is **overwritten** -- the source itself and its neighbours in the CSR
    ``indptr``/``indices`` (the known true edges) other than ``targets[q]`` are set to ``-inf``. Returns
    float64 (Q,): ``1 + #{j: s[j] > s[t]} + 0.5 * #{j != t: s[j] == s[t]}``. IndexError on an id outside
    ``[0, N)``, ValueError on a malformed CSR, both before anything is written.

    Examples
    --------
    >>> s = np.array([[0.1, 0.9, 0.5, 0.7]], dtype=np.float32)
    >>> filtered_ranks(s, [2], [0], np.array([0, 1, 1, 1, 1]), np.array([1]))  # node 1 is a known edge of 0
    array([2.])
    """
    targets = _index_array("targets", targets)
    sources = _index_array("sources", sources)
    out = np.empty(targets.shape[0], dtype=np.float64)
    _native.filtered_ranks(scores=scores, targets=targets, sources=sources, indptr=_int64_array("indptr", indptr),
                           indices=_int64_array("indices", indices), out=out, num_threads=num_threads)
    return out


# ---- gathers ----------------------------------------------------------------------------------------------


def gather_rows(src: np.ndarray, idx, out: np.ndarray | None = None, num_threads: int = 0) -> np.ndarray:
    """``out[k] = src[idx[k]]`` for a 2-D C-contiguous ``src`` of any dtype (e.g. a memmap'd feature file).

    ``out`` (``(len(idx), src.shape[1])``, same dtype) is allocated when None; returns ``out``. Raises
    IndexError naming ``k`` and the id before anything is copied.
    """
    if not (isinstance(src, np.ndarray) and src.ndim == 2 and src.flags.c_contiguous):
        src = np.ascontiguousarray(src)
    idx = _index_array("idx", idx)
    if out is None:
        out = np.empty((idx.shape[0], src.shape[1] if src.ndim == 2 else 0), dtype=src.dtype)
    _native.gather_rows(src=src, idx=idx, out=out, num_threads=num_threads)
    return out


# ---- direct I/O -------------------------------------------------------------------------------------------


def open_direct(path: str | os.PathLike, write: bool = False) -> tuple[int, bool]:
    """Open ``path`` with ``O_DIRECT`` (read-only unless ``write``, which creates without truncating).

    Returns ``(fd, direct)``; ``direct`` is False when the filesystem refused ``O_DIRECT`` and the file was
    reopened buffered. Close with :func:`close_fd`.
    """
    return _native.open_direct(path=os.fspath(path), write=bool(write))


def close_fd(fd: int) -> None:
    """Close a descriptor returned by :func:`open_direct`."""
    _native.close_fd(fd=fd)


def _range_args(offsets, lengths, out: np.ndarray, out_offsets, direct: bool) -> dict:
    """The keyword arguments :func:`pread_ranges` and :func:`uring_read_ranges` pass alike to the C function."""
    return {"offsets": _index_array("offsets", offsets), "lengths": _index_array("lengths", lengths), "out": out,
            "out_offsets": _index_array("out_offsets", out_offsets), "direct": bool(direct)}


def pread_ranges(fd: int, offsets, lengths, out: np.ndarray, out_offsets, direct: bool, num_threads: int = 0) -> int:
    """Read ``lengths[k]`` bytes at file offset ``offsets[k]`` into ``out[out_offsets[k]:]`` for every ``k``.

    ``out`` is a writable C-contiguous uint8 buffer (see :func:`aligned_empty`). When ``direct``, offsets,
    lengths and destination addresses must be multiples of :data:`DIRECT_ALIGN` (ValueError naming ``k``
    otherwise). Reads run on ``num_threads`` threads and are retried until complete; returns the bytes read.
    Raises OSError naming the fd and offset on a failed read or end of file inside a range.
    """
    return _native.pread_ranges(fd=fd, **_range_args(offsets, lengths, out, out_offsets, direct),
                                num_threads=num_threads)


#: io_uring requests in flight by default: the ring waits for a quarter of it per ``io_uring_enter``, so a deeper
#: ring makes fewer system calls (``train.io_queue_depth``'s default too).
URING_QUEUE_DEPTH = 256


def uring_read_ranges(fd: int, offsets, lengths, out: np.ndarray, out_offsets, direct: bool,
                      queue_depth: int = URING_QUEUE_DEPTH, merge: bool = True) -> tuple[int, int]:
    """:func:`pread_ranges` through an io_uring: the same reads, checks and errors, with up to ``queue_depth``
    requests in flight on one thread.

    With ``merge``, ranges are read in file order, a range inside the previous one read (the same pages) is
    copied from it instead of read again, and a range starting where the previous one ends joins its request
    (one READV scattering a contiguous file span); ``merge=False`` issues every range as given. Returns
    ``(bytes, reads)``: the bytes delivered (the sum of ``lengths``) and the reads issued after merging
    (``len(offsets)`` without it). Needs :func:`io_uring_available`; raises OSError otherwise.
    """
    return _native.uring_read_ranges(fd=fd, **_range_args(offsets, lengths, out, out_offsets, direct),
                                     queue_depth=int(queue_depth), merge=bool(merge))


#: Setting this environment variable to 1 makes :func:`io_uring_available` say no (forces the pread pool).
DISABLE_IO_URING_ENV = "STRATA_DISABLE_IO_URING"


def io_uring_available() -> tuple[bool, str]:
    """``(True, "")`` when io_uring works here (a ring is set up and completes a NOP; probed once per
    process), else ``(False, reason)``: no io_uring in the kernel (ENOSYS), refused by seccomp or
    ``/proc/sys/kernel/io_uring_disabled`` (EPERM), or ``STRATA_DISABLE_IO_URING=1``."""
    if os.environ.get(DISABLE_IO_URING_ENV, "") == "1":
        return False, f"io_uring disabled by {DISABLE_IO_URING_ENV}=1"
    return _native.io_uring_available()


def aligned_empty(nbytes: int, alignment: int = DIRECT_ALIGN) -> np.ndarray:
    """Uninitialised ``uint8[nbytes]`` whose data address is a multiple of ``alignment`` (a power of two)."""
    return _native.aligned_empty(nbytes=int(nbytes), alignment=int(alignment))


# ---- batched packing (DiskGNN) ----------------------------------------------------------------------------


def pack_partition(
    features: np.ndarray,
    row_start: int,
    ids: np.ndarray,
    batch_ptr: np.ndarray,
    cursor: np.ndarray,
    fd: int,
    chunk_offsets: np.ndarray,
    num_threads: int = 0,
) -> int:
    """Pack one partition ``features`` = rows ``[row_start, row_start + R)`` of the float32 feature file.

    For each batch ``b`` the ids ``ids[batch_ptr[b]:batch_ptr[b+1]]`` are sorted ascending and
    ``cursor[b]`` of them are already written; those falling in this partition are gathered and written
    with one ``pwrite`` at byte ``chunk_offsets[b] + cursor[b] * F * 4``, then ``cursor`` (int64, updated
    in place) advances. Partitions must be visited in ascending row order. Returns the bytes written.
    """
    features = np.asarray(features)
    if features.dtype != np.float32:
        raise ValueError(f"'features' expected float32 rows (got {features.dtype})")
    return _native.pack_partition(
        features=np.ascontiguousarray(features),
        row_start=int(row_start),
        ids=_index_array("ids", ids),
        batch_ptr=_index_array("batch_ptr", batch_ptr),
        cursor=cursor,
        fd=fd,
        chunk_offsets=_index_array("chunk_offsets", chunk_offsets),
        num_threads=num_threads,
    )


def pack_batches(
    feature_array: np.ndarray,
    batch_ids: Sequence[np.ndarray],
    path: str | os.PathLike,
    partition_rows: int,
    chunk_align: int = DIRECT_ALIGN,
    num_threads: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Write every batch's feature rows as one contiguous chunk of ``path``, in one pass over the features.

    Parameters
    ----------
    feature_array
        ``(N, F)`` float32, typically a read-only ``np.memmap`` of the feature file.
    batch_ids
        Per batch, the sorted unique int64 node ids whose rows the batch needs from this chunk.
    path
        Output file (created or truncated); its size is padded to a multiple of ``chunk_align`` so every
        chunk can be read with aligned direct reads.
    partition_rows
        Rows of ``feature_array`` read per step (memory bound of the pass: ``partition_rows * F * 4`` bytes
        of page cache plus one staging buffer per thread).
    chunk_align
        Chunks start at multiples of this many bytes (a power of two).

    Returns
    -------
    (chunk_offsets, chunk_rows)
        int64 ``(num_batches,)``: batch ``b``'s rows are at bytes
        ``[chunk_offsets[b], chunk_offsets[b] + chunk_rows[b] * F * 4)``, in ``batch_ids[b]`` order.
    """
    features = np.asarray(feature_array)  # a view of a memmap, no copy
    if features.dtype != np.float32 or features.ndim != 2:
        raise ValueError(
            f"'feature_array' expected a 2-D float32 array (got {features.dtype} array of shape {features.shape})"
        )
    if partition_rows < 1:
        raise ValueError(f"'partition_rows' expected >= 1 (got {partition_rows})")
    if chunk_align < 1 or chunk_align & (chunk_align - 1):
        raise ValueError(f"'chunk_align' expected a power of two (got {chunk_align})")
    num_rows, dim = features.shape
    row_bytes = dim * 4

    ids_list = []
    for b, ids in enumerate(batch_ids):
        ids = _index_array(f"batch_ids[{b}]", ids)
        if ids.size:
            if ids[0] < 0 or ids[-1] >= num_rows:
                bad = int(np.flatnonzero((ids < 0) | (ids >= num_rows))[0])
                raise IndexError(
                    f"'batch_ids[{b}]' expected row ids in [0, {num_rows}) (got batch_ids[{b}][{bad}]={ids[bad]})"
                )
            steps = np.flatnonzero(np.diff(ids) <= 0)
            if steps.size:
                i = int(steps[0]) + 1
                raise ValueError(
                    f"'batch_ids[{b}]' expected strictly ascending ids "
                    f"(got batch_ids[{b}][{i}]={ids[i]} after {ids[i - 1]})"
                )
        ids_list.append(ids)

    num_batches = len(ids_list)
    chunk_rows = np.array([ids.size for ids in ids_list], dtype=np.int64)
    padded = (chunk_rows * row_bytes + chunk_align - 1) // chunk_align * chunk_align
    chunk_offsets = np.zeros(num_batches, dtype=np.int64)
    np.cumsum(padded[:-1], out=chunk_offsets[1:])
    total_bytes = int(padded.sum())
    ids_all = np.concatenate(ids_list) if ids_list else np.empty(0, dtype=np.int64)
    batch_ptr = np.zeros(num_batches + 1, dtype=np.int64)
    np.cumsum(chunk_rows, out=batch_ptr[1:])
    cursor = np.zeros(num_batches, dtype=np.int64)
    wanted = np.unique(ids_all)  # to skip partitions no batch needs

    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.ftruncate(fd, total_bytes)
        for start in range(0, num_rows, partition_rows):
            stop = min(num_rows, start + partition_rows)
            if np.searchsorted(wanted, start) == np.searchsorted(wanted, stop):
                continue
            part = np.ascontiguousarray(features[start:stop])  # (R, F) view of the memmap, read sequentially
            _native.pack_partition(features=part, row_start=start, ids=ids_all, batch_ptr=batch_ptr, cursor=cursor,
                                   fd=fd, chunk_offsets=chunk_offsets, num_threads=num_threads)
    finally:
        os.close(fd)
    if not np.array_equal(cursor, chunk_rows):
        b = int(np.flatnonzero(cursor != chunk_rows)[0])
        raise ValueError(f"'batch_ids[{b}]' expected all {chunk_rows[b]} rows packed (got {cursor[b]})")
    return chunk_offsets, chunk_rows


# ---- rows at byte offsets: the block-aligned feature layout (rows_at.c) -----------------------------------


def place_rows_at(rows: np.ndarray, offsets, out: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """``out[offsets[k] : offsets[k] + row_bytes] = rows[k]`` (as bytes) for a flat writable uint8 ``out``.

    ``rows`` is 2-D (any dtype; made C-contiguous), ``row_bytes`` its ``shape[1] * itemsize``; the offsets must
    be ascending and the rows must not overlap (ValueError naming ``k``); IndexError naming ``k`` for a row
    outside ``out``, before anything is written. Returns ``out``.
    """
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.flags.c_contiguous):
        rows = np.ascontiguousarray(rows)
    _native.place_rows_at(rows=rows, offsets=_index_array("offsets", offsets), out=out, num_threads=num_threads)
    return out


def gather_rows_at(src: np.ndarray, offsets, out: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """``out[k] = the out.shape[1] * itemsize bytes at src[offsets[k]]`` for a flat uint8 ``src`` (e.g. blocks
    read with :func:`pread_ranges`) and a writable 2-D C-contiguous ``out`` of any dtype.

    Offsets may repeat and come in any order; IndexError naming ``k`` for a row outside ``src``, before
    anything is written. Returns ``out``.
    """
    _native.gather_rows_at(src=src, offsets=_index_array("offsets", offsets), out=out, num_threads=num_threads)
    return out


def gather_rows_into(src: np.ndarray, idx, out: np.ndarray, pos, num_threads: int = 0) -> np.ndarray:
    """``out[pos[k]] = src[idx[k]]`` for a 2-D C-contiguous ``src`` and a writable 2-D C-contiguous ``out`` of
    the same dtype and width (a batch's rows written straight to their node-order position).

    ``idx`` may repeat; ``pos`` must name distinct rows of ``out`` (ValueError naming ``k``). IndexError naming
    ``k`` for an id or a position out of range; every check runs before anything is written. Returns ``out``.
    """
    if not (isinstance(src, np.ndarray) and src.ndim == 2 and src.flags.c_contiguous):
        src = np.ascontiguousarray(src)
    _native.gather_rows_into(src=src, idx=_index_array("idx", idx), out=out, pos=_index_array("pos", pos),
                             num_threads=num_threads)
    return out


def gather_rows_at_into(src: np.ndarray, offsets, out: np.ndarray, pos, num_threads: int = 0) -> np.ndarray:
    """``out[pos[k]] = the out.shape[1] * itemsize bytes at src[offsets[k]]`` for a flat uint8 ``src`` (blocks
    read with :func:`pread_ranges`) and a writable 2-D C-contiguous ``out`` of any dtype.

    Offsets may repeat and come in any order; ``pos`` must name distinct rows of ``out`` (ValueError naming
    ``k``). IndexError naming ``k`` for a row outside ``src`` or a position outside ``out``; every check runs
    before anything is written. Returns ``out``.
    """
    _native.gather_rows_at_into(src=src, offsets=_index_array("offsets", offsets), out=out,
                                pos=_index_array("pos", pos), num_threads=num_threads)
    return out


def blocks_for_rows(rows, base: int, row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(blocks, at)``: the sorted distinct 4096-byte blocks holding ``rows`` of a file (row ``r`` at bytes
    ``base + r * row_bytes``), and where each row starts in a buffer of those blocks read back to back. In C
    over a dense table of the blocks' span; rows far apart (a span beyond 16 blocks a row) are sorted by NumPy
    instead. IndexError for a negative row."""
    from storage_kernels.arrays import blocks_of_rows

    rows = _index_array("rows", rows)
    out = _native.blocks_for_rows(rows=rows, base=int(base), row_bytes=int(row_bytes))
    if out is not None:
        return out
    blocks = blocks_of_rows(rows, int(row_bytes), int(base), DIRECT_ALIGN)  # far apart: a few rows, a cheap sort
    return blocks, rows_in_blocks(blocks, rows, base, row_bytes)


class TierGroups(NamedTuple):
    """A batch's nodes grouped by tier code (:func:`split_by_code`): code ``c``'s positions (ascending)
    ``order[ptr[c]:ptr[c + 1]]``, their slots ``slots[ptr[c]:ptr[c + 1]]``, and ``lo[c]`` / ``hi[c]`` the
    smallest and largest of those slots (0 and -1 for a code without nodes)."""

    order: np.ndarray
    slots: np.ndarray
    ptr: np.ndarray
    lo: np.ndarray
    hi: np.ndarray


def split_by_code(codes: np.ndarray, slots, num_codes: int) -> TierGroups:
    """Group positions ``0..n-1`` by ``codes`` (int8, each in ``[0, num_codes)``; a stable counting sort, one
    C pass to count and one to place). ValueError naming the first position with a code out of range."""
    codes = np.asarray(codes)
    if codes.dtype != np.int8 or codes.ndim != 1:
        raise ValueError(f"'codes' expected a 1-D int8 array (got {codes.dtype} array of shape {codes.shape})")
    codes = np.ascontiguousarray(codes)
    return TierGroups(*_native.split_by_code(codes=codes, slots=_index_array("slots", slots),
                                             num_codes=int(num_codes)))


# ---- segment disk caches (DiskGNN, diskcache.c) -----------------------------------------------------------


def minhash_signatures(items, set_ptr, num_items: int, k: int = 2, seed: int = 0, num_threads: int = 0
                       ) -> np.ndarray:
    """MinHash signatures of items over the sets containing them (DiskGNN Alg. 1), ``uint64 (num_items, k)``.

    Set ``s`` is ``items[set_ptr[s]:set_ptr[s + 1]]`` (item ids in ``[0, num_items)``); ``out[v, j]`` is the
    minimum over the sets containing ``v`` of hash ``j`` of ``s`` (``UINT64_MAX`` when none does). Items read by
    the same sets get equal or close signatures, so sorting by signature (lexicographically) places them side
    by side. The hash is in ``diskcache.c``; independent of ``num_threads``.
    """
    if k < 0 or num_items < 0:
        raise ValueError(f"'k' and 'num_items' expected >= 0 (got k={k}, num_items={num_items})")
    out = np.empty((int(num_items), int(k)), dtype=np.uint64)
    _native.minhash_signatures(items=_index_array("items", items), set_ptr=_index_array("set_ptr", set_ptr),
                               out=out, seed=int(seed) & ((1 << 64) - 1), num_threads=num_threads)
    return out


def count_blocks(slots, set_ptr, row_bytes: int, num_threads: int = 0) -> np.ndarray:
    """Distinct 4096-byte blocks each set's page-merged read of a block-aligned region fetches, ``int64 (S,)``.

    Set ``s`` reads rows ``slots[set_ptr[s]:set_ptr[s + 1]]`` of the region (row ``r`` at bytes
    ``[r * row_bytes, (r + 1) * row_bytes)``); negative slots are rows served elsewhere and are skipped
    (DiskGNN: a batch's reads of its segment disk cache, ``cache_blocks`` per batch).
    """
    ptr = _index_array("set_ptr", set_ptr)
    out = np.empty(max(len(ptr) - 1, 0), dtype=np.int64)
    _native.count_blocks(slots=_index_array("slots", slots), set_ptr=ptr, row_bytes=int(row_bytes), out=out,
                         num_threads=num_threads)
    return out


# ---- reordering: external permutation and community detection (permute.c, community.c) ------------------


def relabel_ids(ids, inverse: np.ndarray, out: np.ndarray | None = None, num_threads: int = 0) -> np.ndarray:
    """``out[k] = inverse[ids[k]]`` (old ids -> new ids); ``out`` is allocated when None; returns ``out``.

    Raises IndexError naming ``k`` and the id when ``ids[k]`` is outside ``[0, len(inverse))``.
    """
    ids = _index_array("ids", ids)
    inverse = _int64_array("inverse", inverse)
    if out is None:
        out = np.empty(ids.shape[0], dtype=np.int64)
    _native.relabel_ids(ids=ids, inverse=inverse, out=out, num_threads=num_threads)
    return out


def bucket_rows(rows: np.ndarray, keys, bounds, num_threads: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group the rows of a chunk by bucket, stably: bucket ``b`` holds keys in ``[bounds[b], bounds[b+1])``.

    ``rows`` is 2-D C-contiguous (any dtype), ``keys`` int64 ``(R,)`` (e.g. the rows' new ids), ``bounds``
    ascending int64 ``(NB+1,)``. Returns ``(out_rows, out_keys, bucket_ptr)``: bucket ``b``'s rows are
    ``out_rows[bucket_ptr[b]:bucket_ptr[b+1]]`` in input order. IndexError on a key outside the bounds.
    """
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.flags.c_contiguous):
        rows = np.ascontiguousarray(rows)
    keys = _index_array("keys", keys)
    bounds = _index_array("bounds", bounds)
    out_rows = np.empty_like(rows)
    out_keys = np.empty_like(keys)
    counts = np.zeros(max(bounds.shape[0] - 1, 0), dtype=np.int64)
    _native.bucket_rows(rows=rows, keys=keys, bounds=bounds, out_rows=out_rows, out_keys=out_keys, counts=counts,
                        num_threads=num_threads)
    bucket_ptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=bucket_ptr[1:])
    return out_rows, out_keys, bucket_ptr


def place_rows(rows: np.ndarray, pos, out: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """``out[pos[k]] = rows[k]`` for distinct positions (ValueError on a repeated one, IndexError out of range,
    both before anything is written). ``rows`` and ``out`` are 2-D C-contiguous of the same dtype and width."""
    if not (isinstance(rows, np.ndarray) and rows.ndim == 2 and rows.flags.c_contiguous):
        rows = np.ascontiguousarray(rows)
    _native.place_rows(rows=rows, pos=_index_array("pos", pos), out=out, num_threads=num_threads)
    return out


def label_propagation(indptr: np.ndarray, indices: np.ndarray, iterations: int, seed: int = 0,
                      num_threads: int = 0) -> tuple[np.ndarray, int]:
    """Synchronous label propagation over a CSR; returns ``(labels int64 (N,), rounds_that_changed)``.

    Labels start as node ids; each round every node takes the most frequent label among its neighbours
    (previous round's labels), keeping its own when it is among the most frequent and otherwise breaking ties
    by the smallest seeded hash of the label. Stops after ``iterations`` rounds or at a fixed point. The
    result does not depend on ``num_threads``.
    """
    labels, rounds = _native.label_propagation(
        indptr=_int64_array("indptr", indptr),
        indices=_int64_array("indices", indices),
        iterations=int(iterations),
        seed=int(seed) & (2**64 - 1),
        num_threads=num_threads,
    )
    return labels, int(rounds)


def rabbit_order(indptr: np.ndarray, indices: np.ndarray, skip: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Rabbit-Order-style community order of a CSR; returns ``(perm int64 (N,), num_communities)``.

    Vertices are visited by degree ascending and each merges, with the nodes already merged into it, into the
    neighbouring community of largest positive modularity gain (Louvain-style incremental aggregation, as in
    Rabbit Order); the dendrogram is then walked depth first, so every community and every sub-community is
    one contiguous range of new ids (``perm``: new id -> old id). Roots (communities) come by total degree
    descending. ``skip`` (bool/uint8 per node, optional): nodes left out of the aggregation -- never merged,
    never merged into, edges to them ignored -- each its own root. Single-threaded, deterministic; the exact
    rule is in ``rabbit.c``.
    """
    mask = None if skip is None else np.ascontiguousarray(skip, dtype=np.uint8)
    perm, num_communities = _native.rabbit_order(
        indptr=_int64_array("indptr", indptr), indices=_int64_array("indices", indices), skip=mask
    )
    return perm, int(num_communities)



# ---- partitioning kernels (partition.c) -------------------------------------------------------------------
# Streaming partitioners over one chunk of nodes at a time; the caller owns the per-node state.


def fennel_pass(
    indptr,
    indices,
    nodes,
    labels: np.ndarray,
    sizes: np.ndarray,
    train_sizes: np.ndarray,
    is_train,
    capacity,
    weight,
    label_base: int,
    alpha: float,
    gamma: float = 1.5,
    train_penalty: float = 0.0,
    train_norm: float = 1.0,
    bloom: np.ndarray | None = None,
    bloom_seed: int = 0,
    block_nodes: int = 4096,
    restream: bool = False,
    num_threads: int = 0,
    node_weight=None,
    edge_weight=None,
    train_weight=None,
) -> None:
    """One streaming FENNEL pass (OUTRE's variant) over a chunk of nodes, in ``nodes`` order.

    ``nodes`` (strictly ascending ids, all unassigned) have their CSR rows in ``indices`` at the local
    offsets ``indptr`` (len(nodes)+1). Part ``k`` is label ``label_base + k``; other labels are ignored.
    Each node goes to the part ``k`` with ``sizes[k] < capacity[k]`` maximising
    ``c_k - alpha*gamma*(weight[k]*sizes[k])**(gamma-1) - [train] train_penalty*weight[k]*train_sizes[k]/train_norm``
    (ties: lowest k), where ``c_k`` counts neighbours in part k: exactly from ``labels``, or, when ``bloom``
    (uint8, p filters of equal size, a multiple of 8 bytes each) is given, by probing each neighbour in the
    per-part Bloom filters of the parts' members (3 hashes); earlier nodes of the same block of
    ``block_nodes`` are always counted exactly. ``labels`` (int32), ``sizes``, ``train_sizes`` (int64) and
    ``bloom`` are updated in place. ``restream=True`` (exact counting only) re-scores nodes that are already
    in one of the parts (ReFENNEL): each leaves its part, then is scored against every neighbour's current
    label. The result never depends on ``num_threads``.

    Weights (coarse graphs of the multilevel scheme; each >= 1, training weights >= 0): ``node_weight``
    (per chunk node) is what a node adds to ``sizes`` (capacity check ``sizes[k] + w <= capacity[k]``, balance
    term times w), ``edge_weight`` (per entry of ``indices``) what a neighbour adds to ``c_k``, and
    ``train_weight`` (per chunk node) replaces ``is_train`` in ``train_sizes`` and the penalty (times t).
    Without them the result is that of the unweighted rule above.
    """
    _native.fennel_pass(
        **_chunk(indptr, indices, nodes),
        labels=labels,
        sizes=sizes,
        train_sizes=train_sizes,
        is_train=np.ascontiguousarray(is_train, dtype=np.uint8),
        capacity=_index_array("capacity", capacity),
        weight=np.ascontiguousarray(weight, dtype=np.float64),
        label_base=int(label_base),
        alpha=float(alpha),
        gamma=float(gamma),
        train_penalty=float(train_penalty),
        train_norm=float(train_norm),
        bloom=bloom,
        bloom_seed=int(bloom_seed),
        block_nodes=int(block_nodes),
        restream=bool(restream),
        num_threads=int(num_threads),
        **_optional_indexes(node_weight=node_weight, edge_weight=edge_weight, train_weight=train_weight),
    )


def grem_pass(indptr, indices, nodes, labels: np.ndarray, pref: np.ndarray, sizes: np.ndarray, capacity,
              label_a: int, label_b: int, node_weight=None, edge_weight=None) -> int:
    """One GREM bisection pass over a chunk of nodes (sequential, in ``nodes`` order).

    For node v: ``cur = n_b·(1 - sizes[1]/capacity[1]) - n_a·(1 - sizes[0]/capacity[0])`` (float32; n_x =
    neighbours labelled label_x, weighted LDG-style so a filling side attracts less); if v is already on
    a side, ``est = (pref[v] + cur) / 2`` (re-evaluation), else ``est = cur``. v goes to side b
    when ``est > 0``, a when ``est < 0``, else stays (or, unassigned, goes to the side with more room), unless
    that side is full (``sizes >= capacity``): then it stays / takes the other side. ``labels`` (int32),
    ``pref`` (float32, N) and ``sizes`` (int64[2]) are updated in place. Returns how many assigned nodes moved.
    With ``node_weight`` / ``edge_weight`` (each >= 1) n_x sums edge weights and a node adds its weight to its
    side (room check ``sizes + w <= capacity``).
    """
    return _native.grem_pass(
        **_chunk(indptr, indices, nodes),
        labels=labels,
        pref=pref,
        sizes=sizes,
        capacity=_index_array("capacity", capacity),
        label_a=int(label_a),
        label_b=int(label_b),
        **_optional_indexes(node_weight=node_weight, edge_weight=edge_weight),
    )


def cluster_pass(indptr, indices, nodes, clusters: np.ndarray, cluster_weight: np.ndarray, max_weight: int,
                 node_weight=None, edge_weight=None, visit=None) -> int:
    """One size-constrained label-propagation pass (multilevel coarsening) over a chunk of nodes.

    ``nodes`` (distinct ids) have their CSR rows in ``indices`` at the local offsets ``indptr``. Visiting
    the chunk positions listed in ``visit`` (distinct, in that order; default: all, as given), node v joins the
    neighbouring cluster c != ``clusters[v]`` of largest connection weight (sum of ``edge_weight`` of v's
    entries into c; self loops ignored) among those with ``cluster_weight[c] + w(v) <= max_weight``, if that
    weight is strictly above v's connection to its own cluster (ties: smallest c). ``clusters`` (int64, N;
    cluster ids are node ids) and ``cluster_weight`` (int64, N, indexed by cluster id) are updated in place.
    Weights default to 1 and must be >= 1. Sequential. Returns how many nodes changed cluster.
    """
    return _native.cluster_pass(
        **_chunk(indptr, indices, nodes),
        clusters=clusters,
        cluster_weight=cluster_weight,
        max_weight=int(max_weight),
        **_optional_indexes(node_weight=node_weight, edge_weight=edge_weight, visit=visit),
    )


def refine_pass(indptr, indices, nodes, parts: np.ndarray, sizes: np.ndarray, capacity, node_weight=None,
                edge_weight=None, train_weight=None, train_sizes: np.ndarray | None = None, train_capacity=None,
                visit=None) -> int:
    """One k-way label-propagation refinement pass over a chunk of nodes (multilevel uncoarsening).

    ``parts`` (int32, N) label every streamed node in ``[0, k)``, ``k = len(sizes)``. Visiting the chunk
    positions listed in ``visit`` (distinct, in that order; default: all), node v moves to the part
    c != ``parts[v]`` of largest connection weight among the parts with room (``sizes[c] + w(v) <=
    capacity[c]``; with training weights also ``train_sizes[c] + t(v) <= train_capacity[c]`` when t(v) > 0)
    if that weight is strictly above its connection to its own part, or whatever the gain when its own part
    is over capacity (ties: smallest c). Neighbours labelled outside ``[0, k)`` do not count. ``parts``,
    ``sizes`` (int64, k) and ``train_sizes`` are updated in place. Sequential. Returns how many nodes moved.
    """
    return _native.refine_pass(
        **_chunk(indptr, indices, nodes),
        parts=parts,
        sizes=sizes,
        capacity=_index_array("capacity", capacity),
        train_sizes=train_sizes,
        **_optional_indexes(node_weight=node_weight, edge_weight=edge_weight, train_weight=train_weight,
                            train_capacity=train_capacity, visit=visit),
    )


def csr_aggregate(indptr: np.ndarray, indices: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, int]:
    """Sort each CSR row by column and merge duplicate columns, summing ``weights``, in place.

    ``indices`` and ``weights`` (int64, writable) are compacted: the merged graph is ``(new_indptr,
    indices[:nnz], weights[:nnz])``. Returns ``(new_indptr, nnz)``.
    """
    new_indptr, nnz = _native.csr_aggregate(indptr=_int64_array("indptr", indptr), indices=indices, weights=weights)
    return new_indptr, int(nnz)



# ---- feature-cache changesets (Ginex) ----------------------------------------------------------------------


class Changesets(NamedTuple):
    """The Belady-optimal cache changesets of one superbatch (:func:`belady_changesets`), int64 arrays:
    ``init_ids`` the initial cache; per iteration ``i`` the entries ``update_ptr[i]:update_ptr[i+1]`` of
    ``in_ids`` / ``out_ids`` / ``in_positions`` (the slot of ``out_ids[k]`` receives the batch row at
    ``in_positions[k]``, node ``in_ids[k]``); ``hits[i]`` the batch's nodes found in the cache."""

    init_ids: np.ndarray
    update_ptr: np.ndarray
    in_ids: np.ndarray
    out_ids: np.ndarray
    in_positions: np.ndarray
    hits: np.ndarray


def belady_changesets(batch_ptr, ids, num_nodes: int, num_entries: int) -> Changesets:
    """Simulate a cache of ``num_entries`` nodes over one superbatch under Belady's rule (Ginex).

    Iteration ``i`` reads ``ids[batch_ptr[i]:batch_ptr[i+1]]`` (node ids < ``num_nodes``). The initial cache is
    the first ``num_entries`` distinct nodes in trace order; after each iteration the cache keeps the
    candidates (cached or just read) whose next access is soonest (ties: cached first, then smaller id).
    Single-threaded without the GIL (superbatches may run on several threads). Raises ValueError for a bad
    ``batch_ptr``, IndexError for an id out of range.
    """
    out = _native.belady_changesets(batch_ptr=_index_array("batch_ptr", batch_ptr), ids=_index_array("ids", ids),
                                    num_nodes=int(num_nodes), num_entries=int(num_entries))
    return Changesets(*out)


class WindowSchedule(NamedTuple):
    """The segment window's schedule over one segment disk cache (:func:`window_schedule`), int64 arrays: per
    iteration ``i`` the blocks to read ``read_blocks[read_ptr[i]:read_ptr[i+1]]`` (sorted, relative to the
    cache's start), the rows leaving the buffer ``out_rows[out_ptr[i]:out_ptr[i+1]]`` and those entering it
    ``in_rows[in_ptr[i]:in_ptr[i+1]]`` at buffer slots ``in_slots`` (applied after the iteration, outs first);
    ``hits[i]`` the iteration's rows served by the buffer."""

    read_ptr: np.ndarray
    read_blocks: np.ndarray
    in_ptr: np.ndarray
    in_rows: np.ndarray
    in_slots: np.ndarray
    out_ptr: np.ndarray
    out_rows: np.ndarray
    hits: np.ndarray


def window_schedule(batch_ptr, rows, num_rows: int, row_bytes: int, buffer_rows: int) -> WindowSchedule:
    """Schedule a buffer of ``buffer_rows`` rows over one segment disk cache of ``num_rows`` rows of ``row_bytes``
    bytes (a block-aligned region read in 4096-byte blocks).

    Iteration ``i`` needs ``rows[batch_ptr[i]:batch_ptr[i+1]]``: it reads the blocks of those not in the buffer;
    afterwards the buffer keeps, of its rows and the rows those blocks brought whole, the ``buffer_rows`` with
    the soonest next use (Belady; never-again rows dropped; ties: cached first, then row). Single-threaded
    without the GIL. ValueError for a bad ``batch_ptr`` or sizes, IndexError for a row out of range.
    """
    out = _native.window_schedule(batch_ptr=_index_array("batch_ptr", batch_ptr), rows=_index_array("rows", rows),
                                  num_rows=int(num_rows), row_bytes=int(row_bytes), buffer_rows=int(buffer_rows))
    return WindowSchedule(*out)


def window_split(slots, pos, row_slot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A batch's rows of a segment disk cache split by the window's table ``row_slot`` (row -> buffer slot, -1
    when not held): ``(held_slots, held_pos, unheld_rows, unheld_pos)``, each in the order of ``slots``, where
    ``pos`` are the rows' positions in the batch. IndexError naming ``k`` for a row outside the table."""
    return _native.window_split(slots=_index_array("slots", slots), pos=_index_array("pos", pos),
                                row_slot=_int64_array("row_slot", row_slot))


def rows_in_blocks(blocks, rows, base: int, row_bytes: int) -> np.ndarray | None:
    """Where rows start in a buffer holding ``blocks`` (sorted, distinct 4096-byte block numbers) back to back:
    row ``r`` spans file bytes ``[base + r * row_bytes, + row_bytes)``; ``None`` when some row has a block not
    in ``blocks``. ValueError for unsorted blocks, IndexError for a negative row."""
    return _native.rows_in_blocks(blocks=_index_array("blocks", blocks), rows=_index_array("rows", rows),
                                  base=int(base), row_bytes=int(row_bytes))


def window_update(row_slot: np.ndarray, slot_row: np.ndarray, out_rows, in_rows, in_slots) -> None:
    """The segment window's changes after a batch, in place on its tables ``row_slot`` (row -> slot) and
    ``slot_row`` (slot -> row), both writable int64 with -1 for none: every out row leaves; then in order
    ``in_rows[k]`` takes slot ``in_slots[k]``, evicting the slot's previous row and freeing any other slot the
    row held. Every index is checked first (IndexError naming the entry; nothing changed then)."""
    _native.window_update(row_slot=row_slot, slot_row=slot_row, out_rows=_index_array("out_rows", out_rows),
                          in_rows=_index_array("in_rows", in_rows), in_slots=_index_array("in_slots", in_slots))


def cache_update(cache: np.ndarray, address_table: np.ndarray, batch_rows: np.ndarray, in_ids, out_ids,
                 in_positions, num_threads: int = 0) -> None:
    """Ginex's in-place cache update: for every ``k`` the slot of ``out_ids[k]`` (``address_table``) receives
    ``batch_rows[in_positions[k]]``; ``address_table[in_ids[k]]`` becomes that slot and
    ``address_table[out_ids[k]]`` -1.

    ``cache`` (K, F) and ``address_table`` (N,) int64 are updated in place (writable, C-contiguous);
    ``batch_rows`` (n, F) has the cache's dtype. Everything is checked first (ValueError / IndexError naming
    the entry; nothing changed then).
    """
    if not (isinstance(batch_rows, np.ndarray) and batch_rows.ndim == 2 and batch_rows.flags.c_contiguous):
        batch_rows = np.ascontiguousarray(batch_rows)
    _native.cache_update(cache=cache, address_table=address_table, batch_rows=batch_rows,
                         in_ids=_index_array("in_ids", in_ids), out_ids=_index_array("out_ids", out_ids),
                         in_positions=_index_array("in_positions", in_positions), num_threads=num_threads)


# ---- training-time model operations (nn/) -------------------------------------------------------------------
# The CPU forms of a GNN layer's aggregation and of dropout (trainer/native_ops.py wraps them for autograd).


def csr_sum(indptr, cols, src: np.ndarray, out: np.ndarray | None = None, mean: bool = False,
            num_threads: int = 0) -> np.ndarray:
    """``out[d] = sum_{k in [indptr[d], indptr[d+1])} src[cols[k]]`` (divided by ``max(degree, 1)`` when
    ``mean``) for a float32 ``src`` (S, F) and ``out`` (D, F), D = ``len(indptr) - 1``.

    Edges are added in CSR order starting from 0 (the float operations of ``scatter_reduce(sum)`` over zeros,
    then a division); rows are split over threads, so the result does not depend on ``num_threads``.
    ``out`` is allocated when None. ValueError for shapes or a bad ``indptr``, IndexError naming the first
    ``cols[k] >= S``, before anything is written.
    """
    if out is None:
        out = np.empty((max(len(indptr) - 1, 0), src.shape[1]), dtype=np.float32)
    _native.csr_sum(indptr=_int64_array("indptr", indptr), cols=_index_array("cols", cols), src=src, out=out,
                    mean=bool(mean), num_threads=num_threads)
    return out


def csr_sum_backward(indptr, cols, grad_out: np.ndarray, grad_src: np.ndarray, mean: bool = False,
                     num_threads: int = 0) -> np.ndarray:
    """The gradient of :func:`csr_sum` with respect to ``src``, accumulated: ``grad_src[cols[k]] += grad_out[d]``
    (divided by ``max(degree, 1)`` when ``mean``) for every edge ``k`` of row ``d``, in CSR order.

    ``grad_out`` (D, F) and ``grad_src`` (S, F, writable) are float32; feature columns are split over threads
    (each walks every edge), so the result does not depend on ``num_threads``. Checks as :func:`csr_sum`.
    Returns ``grad_src``.
    """
    _native.csr_sum_backward(indptr=_int64_array("indptr", indptr), cols=_index_array("cols", cols),
                             grad_out=grad_out, grad_src=grad_src, mean=bool(mean), num_threads=num_threads)
    return grad_src


def dropout(x: np.ndarray, p: float, seed: int, out: np.ndarray | None = None, mask: np.ndarray | None = None,
            num_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Dropout of the float32 array ``x``: returns ``(out, mask)``, ``mask`` uint8 (1 = kept) and ``out`` =
    ``x / (1 - p)`` where kept, 0 elsewhere (``out`` may be ``x``).

    Element ``i`` (flat order) is kept when ``mix64(mix64(seed + G0) + (i + 1) * G0) >= p * 2**64``
    (``_native/nn/dropout.c``): a pure function of ``seed`` and ``i``, whatever ``num_threads``.
    ``seed`` is an unsigned 64-bit integer; ``p`` in [0, 1] (1 drops everything).
    """
    if out is None:
        out = np.empty_like(x, dtype=np.float32)
    if mask is None:
        mask = np.empty(x.shape, dtype=np.uint8)
    _native.dropout(x=x, out=out, mask=mask, p=float(p), seed=int(seed), num_threads=num_threads)
    return out, mask


def dropout_backward(grad: np.ndarray, mask: np.ndarray, p: float, out: np.ndarray | None = None,
                     num_threads: int = 0) -> np.ndarray:
    """The gradient of :func:`dropout` given its ``mask``: ``out = grad * mask / (1 - p)`` (float32; ``out``
    may be ``grad``). Returns ``out``."""
    if out is None:
        out = np.empty_like(grad, dtype=np.float32)
    _native.dropout_backward(grad=grad, mask=mask, p=float(p), out=out, num_threads=num_threads)
    return out


def gat_attend(z: np.ndarray, score_src: np.ndarray, score_dst: np.ndarray, indptr, cols, dst_pos,
               negative_slope: float = 0.2, p: float = 0.0, seed: int = 0, out: np.ndarray | None = None,
               alpha: np.ndarray | None = None, num_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """GAT's attention aggregation over a block (``_native/nn/attention.c``): returns ``(out, alpha)``.

    Destination ``d`` receives the block's edges ``k`` of its CSR row (sources ``cols[k]``) and its self loop
    from row ``dst_pos[d]``; per head ``h`` the softmax over them of ``LeakyReLU(score_src[j, h] +
    score_dst[d, h])`` (``alpha``, (E + D, H), edge rows first, then the loops), dropped out with probability
    ``p`` (:func:`dropout`'s mask for ``seed`` over ``alpha``'s elements), weights the rows ``z[j, h]``:
    ``out[d, h]`` (D, H, C). ``z`` (S, H, C), ``score_src`` (S, H), ``score_dst`` (D, H) float32.
    Destinations split over threads: the result does not depend on ``num_threads``.
    """
    num_dst = max(len(indptr) - 1, 0)
    if out is None:
        out = np.empty((num_dst, z.shape[1], z.shape[2]), dtype=np.float32)
    if alpha is None:
        alpha = np.empty((len(cols) + num_dst, z.shape[1]), dtype=np.float32)
    _native.gat_attend(z=z, score_src=score_src, score_dst=score_dst, indptr=_int64_array("indptr", indptr),
                       cols=_index_array("cols", cols), dst_pos=_index_array("dst_pos", dst_pos), out=out,
                       alpha=alpha, negative_slope=float(negative_slope), p=float(p), seed=int(seed),
                       num_threads=num_threads)
    return out, alpha


def gat_attend_backward(z: np.ndarray, score_src: np.ndarray, score_dst: np.ndarray, indptr, cols, dst_pos,
                        alpha: np.ndarray, grad_out: np.ndarray, grad_z: np.ndarray, grad_score_src: np.ndarray,
                        grad_score_dst: np.ndarray, negative_slope: float = 0.2, p: float = 0.0, seed: int = 0,
                        num_threads: int = 0) -> None:
    """The gradient of :func:`gat_attend` given its ``alpha`` and the same ``p`` and ``seed`` (the dropout mask
    is recomputed): accumulates into ``grad_z`` (S, H, C) and ``grad_score_src`` (S, H), writes
    ``grad_score_dst`` (D, H). Heads split over threads: the result does not depend on ``num_threads``."""
    _native.gat_attend_backward(z=z, score_src=score_src, score_dst=score_dst, indptr=_int64_array("indptr", indptr),
                                cols=_index_array("cols", cols), dst_pos=_index_array("dst_pos", dst_pos),
                                alpha=alpha, grad_out=grad_out, grad_z=grad_z, grad_score_src=grad_score_src,
                                grad_score_dst=grad_score_dst, negative_slope=float(negative_slope), p=float(p),
                                seed=int(seed), num_threads=num_threads)
