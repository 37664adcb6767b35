"""Wrappers of the ``partition/`` kernels: the streaming partitioners FENNEL and GREM (``partition.c``) and
the multilevel scheme's coarsening, refinement and contracted-CSR merging (``multilevel.c``), each over one
streamed chunk of nodes at a time.
"""

from __future__ import annotations

import numpy as np

from storage_kernels.kernels._common import _index_array, _int64_array, _native, _optional_indexes


def _chunk(indptr, indices, nodes) -> dict[str, np.ndarray]:
    """The streamed chunk of a partitioning pass as keyword arguments of its kernel: ``nodes`` and their rows
    at the local offsets ``indptr`` into ``indices``."""
    return {
        "indptr": _index_array("indptr", indptr),
        "indices": _int64_array("indices", indices),
        "nodes": _index_array("nodes", nodes),
    }


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
