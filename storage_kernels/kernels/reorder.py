"""Wrappers of the ``reorder/`` kernels: the external permutation of a graph's rows (``permute.c``: relabel
ids, bucket rows, place rows), the degree order (``degree.c``), synchronous label propagation
(``community.c``) and Rabbit-Order-style community ordering (``rabbit.c``).
"""

from __future__ import annotations

import numpy as np

from storage_kernels.kernels._common import _index_array, _int64_array, _native

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


def degree_order(indptr: np.ndarray) -> np.ndarray:
    """Node ids of the CSR ``indptr`` by degree descending, ties by id ascending (int64 ``(N,)``): the order of
    ``np.argsort(-np.diff(indptr), kind="stable")``, by a counting sort that streams ``indptr`` (a memory map
    is read sequentially, never copied) and allocates nothing O(N) but the result.

    Raises ValueError naming the first position where ``indptr`` decreases.
    """
    if not (isinstance(indptr, np.ndarray) and indptr.dtype == np.int64 and indptr.flags.c_contiguous):
        indptr = np.ascontiguousarray(indptr, dtype=np.int64)
    out = np.empty(max(indptr.shape[0] - 1, 0), dtype=np.int64)
    _native.degree_order(indptr=indptr, out=out)
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
