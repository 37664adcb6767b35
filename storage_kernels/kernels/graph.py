"""Wrappers of the ``graph/`` kernels: two-pass CSR construction (``csr.c``, with the :func:`build_csr`
driver), multi-hop neighbour sampling into layered blocks (``sample.c``), OUTRE's subtree pruning
(``prune.c``) and the filtered ranking of link prediction (``rank.c``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np

from storage_kernels.kernels._common import _index_array, _int64_array, _native

EdgeChunks = Iterable[tuple[np.ndarray, np.ndarray]]


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


def csr_dedupe(indptr: np.ndarray, indices: np.ndarray, num_threads: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sort every row's neighbours and drop repeated ones, for a block of CSR rows, in place.

    ``indptr`` may start at any offset (a slice ``indptr[a:b+1]`` of a larger CSR, ``indices`` being the matching
    ``indices[indptr[a]:indptr[b]]``, a writable int64 array that is overwritten). Returns ``(new_indptr, cols)``:
    a fresh ``indptr`` from 0 and ``cols``, a view of the front of ``indices``. Parallel over rows; the result
    does not depend on ``num_threads``.
    """
    indptr = _int64_array("indptr", indptr)
    counts = np.empty(max(len(indptr) - 1, 0), dtype=np.int64)
    kept = _native.csr_dedupe(indptr=indptr, indices=indices, counts=counts, num_threads=num_threads)
    new_indptr = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=new_indptr[1:])
    return new_indptr, indices[:kept]


def feistel_walk(x, keys: np.ndarray, half: int, n: int, inverse: bool = False, num_threads: int = 0
                 ) -> np.ndarray:
    """The synthetic generator's keyed bijection of ``[0, n)`` (``pipelines.methods.sources.synthetic``): each
    ``x[i]`` through a Feistel network of ``len(keys)`` SplitMix64 rounds on ``2 * half`` bits (or back, with
    ``inverse``), cycle-walked into ``[0, n)``. int64 out; IndexError for an ``x[i]`` outside ``[0, n)``."""
    x = _index_array("x", x)
    out = np.empty_like(x)
    keys = np.ascontiguousarray(np.asarray(keys, dtype=np.uint64)).view(np.int64)
    _native.feistel_walk(x=x, keys=keys, half=int(half), n=int(n), inverse=bool(inverse), out=out,
                         num_threads=num_threads)
    return out


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


def prefetch_rows(indptr: np.ndarray, indices: np.ndarray, rows) -> int:
    """Ask the kernel to read CSR rows ``rows`` of a memory-mapped CSR ahead, asynchronously: ``madvise``
    (``MADV_WILLNEED``) on the pages holding their offsets in ``indptr``, then on those holding their entries
    in ``indices``, each run of consecutive pages in one call. Returns the pages advised.

    A sampler reading an out-of-core CSR otherwise waits for one 4 KiB page fault per row, a thread at a time;
    asked ahead, the reads of a whole frontier are in flight at once. Nothing changes but the page cache:
    arrays in anonymous memory make it a no-op. Raises IndexError on a row outside ``[0, N)``, ValueError on a
    malformed ``indptr`` row.

    Examples
    --------
    >>> indptr, indices = np.array([0, 2, 4, 7, 8]), np.array([1, 2, 0, 2, 0, 1, 3, 2])
    >>> prefetch_rows(indptr, indices, [3, 0]) >= 2  # in memory: advised, nothing to read
    True
    """
    indices = np.asarray(indices)
    if indices.ndim != 1 or not indices.flags.c_contiguous:
        raise ValueError(f"'indices' expected a contiguous 1-D array (got shape {indices.shape})")
    return int(_native.prefetch_rows(indptr=_int64_array("indptr", indptr), indices=indices,
                                     rows=_index_array("rows", rows)))


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
