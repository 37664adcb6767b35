"""Partition stage: split the (reordered) nodes into parts, and describe the parts for batch construction.

Methods (``partition.method``), all behind :func:`partition_graph` (int32 labels in ``[0, p)``):

``range``
    contiguous id ranges of near-equal size (good after a locality-preserving reorder).
``metis``
    pymetis on the whole graph, in memory: self loops dropped, adjacency symmetrised. Refused (ValueError)
    when the CSR it needs (int64 xadj + adjncy) times ``METIS_OVERHEAD`` (measured peak / CSR bytes)
    exceeds ``partition.memory_mb``.
``fennel``
    streaming FENNEL (Tsourakakis et al.) with OUTRE's changes, out-of-core: nodes are streamed in id order
    in chunks of ``chunk_nodes`` whose CSR rows are read from the memory-mapped indices; node v goes to the
    part maximising ``|N(v) ∩ P_i| - α·γ·|P_i|^(γ-1) - train_penalty·|T ∩ P_i|/(|T|/p)`` (last term only for
    training nodes T), γ = 1.5, α = sqrt(p)·m/n^1.5, among parts below ``ceil((1+imbalance)·n/p)``.
    ``|N(v) ∩ P_i|`` is exact (from the int32 labels array) unless the labels would not fit in half of
    ``memory_mb``: then each part keeps a Bloom filter of its members (``bloom_bits`` bits, 3 hashes) and
    v's neighbours are probed in every filter (``counting="bloom"`` forces it). With exact counting further
    streaming passes re-score every node against all current labels (ReFENNEL; up to ``FENNEL_RESTREAMS``,
    until a pass at the full α moves at most ``FENNEL_STOP_FRACTION`` of the nodes), twice from scratch: with
    the constant α (at most ``FENNEL_CONSTANT_RESTREAMS``) and tempered, α scaled by
    ``FENNEL_ALPHA_START·FENNEL_ALPHA_GROWTH^pass`` (at most 1), keeping the labels with the smaller cut of
    the level; Bloom filters cannot forget a member,
    so the Bloom path is single-pass. More than
    ``two_level_threshold`` parts: first ``ceil(sqrt(p))`` parts (capacities proportional to the number of
    final parts each gets), then each of them into its share, streaming each level. Scoring is parallel in
    C (storage_kernels.kernels.fennel_pass): a block of nodes is counted in parallel against the state at the
    block start and assigned sequentially with the block's own earlier assignments added, so the labels are
    those of the sequential algorithm for any thread count.
``grem``
    MariusGNN's GREM: recursive bisection (p = 2^k, other p split proportionally: ⌊q/2⌋ and ⌈q/2⌉ final
    parts); each bisection streams chunks of ``grem_chunk_fraction`` of the group's nodes. The first chunk is
    seeded by METIS on its induced subgraph (pymetis; without pymetis, a reverse Cuthill-McKee BFS order cut
    in proportion); each later node goes to the side holding more of its assigned neighbours (counts weighted
    by the side's free capacity, 1 - size/capacity, as in LDG) unless full; further streaming passes
    re-evaluate every node with the decaying estimate (stored + current) / 2, until a pass moves at most
    ``GREM_STOP_FRACTION`` of the nodes (at least two, at most ``GREM_REEVALUATIONS``).
    Side capacities are ``ceil((1+imbalance)·n/p·q)`` for a side that will hold q final parts, so no final
    part exceeds ``(1+imbalance)·n/p`` (+1 rounding).

``multilevel`` (``partition.multilevel``, default on; fennel and grem)
    :mod:`pipelines.stages.multilevel`: size-constrained label propagation coarsens the graph (the finest
    level streamed from disk in chunks), the method above partitions the coarsest weighted graph (a few
    thousand nodes: FENNEL with node, edge and training weights; GREM with weighted METIS seeds), and
    label-propagation refinement improves the labels level by level on the way back, the finest level
    streamed again. The streaming methods alone decide one node at a time and settle in local optima of
    fragments; multilevel moves whole clusters (1M nodes, p = 16, 90% local edges: FENNEL 0.165 -> 0.038,
    GREM 0.175 -> 0.040, METIS 0.042; see BENCHMARKS.md). Off, or when its O(N) state does not fit
    ``memory_mb`` (or FENNEL must count with Bloom filters), the single-level algorithm runs and the
    statistics say so (``multilevel``).

Streaming methods keep O(N) state (labels, flags, estimates) plus one chunk of edges in memory; single-level,
they stream nodes in the id order of their input ordering and their cut depends on it a lot (after
``reorder.strategy=community`` neighbours arrive together).

Artifact ``partitioning`` (FORMAT_VERSION 2):
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

import math
import time

import numpy as np

from pipelines.config import PartitionConfig, PipelineConfig
from pipelines.stages import multilevel
from pipelines.stages.common import Progress, StageResult, materialize, peak_rss_mb
from pipelines.stages.graphio import GraphArrays, load_graph
from pipelines.stages.partgraph import PartGraph, capacity, enforce_capacity, internal_weight, rows, split_shares
from storage_kernels import kernels
from storage_kernels.arrays import release_pages, row_ranges
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

try:  # optional: metis needs it; grem falls back to a BFS split of its first chunk
    import pymetis as _pymetis
except ImportError:  # pragma: no cover - depends on the environment
    _pymetis = None

__all__ = [
    "FORMAT_VERSION",
    "METHODS",
    "cut_statistics",
    "metis_csr_bytes",
    "metis_peak_bytes",
    "partition_graph",
    "range_parts",
    "run",
]

FORMAT_VERSION = 2
METHODS = ("range", "metis", "fennel", "grem")
_EDGE_CHUNK = 1 << 20  # CSR entries per chunk of the statistics pass
_DENSE_BUCKETS = 4096  # up to this many parts bucket_counts is (p, p); above, flattened (p*p,)
FENNEL_GAMMA = 1.5
METIS_OVERHEAD = 16  # metis peak RSS / int64 CSR bytes, measured: 508 MB for a 31 MB CSR (200k nodes, 3.7M edges)
FENNEL_BLOCK = 4096  # nodes per deterministic scoring block (kernel argument, fixed)
GREM_REEVALUATIONS = 48  # at most this many streaming passes re-evaluating every node after the first ...
GREM_STOP_FRACTION = 1e-4  # ... stopping once a pass moves at most this fraction of the group's nodes
FENNEL_CONSTANT_RESTREAMS = 6  # exact counting: schedule 1, constant α, at most this many ReFENNEL passes ...
FENNEL_RESTREAMS = 24  # ... schedule 2 (tempered), at most this many (Bloom: a single pass, no restreams) ...
FENNEL_STOP_FRACTION = 0.002  # ... stopping once a pass at the full α moves at most this fraction of the level's nodes
# Tempered restreaming (Nishimura & Ugander 2013, "restreaming graph partitioning"): schedule 2's pass r uses
# α·min(1, FENNEL_ALPHA_START·FENNEL_ALPHA_GROWTH^r), so early passes are dominated by the neighbour term (the hard
# capacity keeps the balance) and α is full from pass 6. The greedy lands in different local optima under the
# two schedules and neither wins everywhere (p=16, synthetic degree 20, cut constant / tempered: 1M nodes
# 0.340 / 0.281, 200k dim 16 0.307 / 0.218, 200k dim 8 0.219 / 0.258), so the level keeps the labels of the
# schedule with more internal edges (one O(N) int32 copy; a chunked counting pass per schedule).
FENNEL_ALPHA_START = 0.1
FENNEL_ALPHA_GROWTH = 1.5


def range_parts(num_nodes: int, num_parts: int) -> np.ndarray:
    """Part label of each node when ids are cut into ``num_parts`` contiguous, near-equal ranges."""
    if num_parts <= 0:
        raise ValueError(f"'partition.num_parts' expected > 0 (got {num_parts})")
    ids = np.arange(num_nodes, dtype=np.int64)
    return (ids * num_parts // max(num_nodes, 1)).astype(np.int32)


# ---- range / metis ----------------------------------------------------------------------------------------


def metis_csr_bytes(graph: GraphArrays) -> int:
    """Bytes of the int64 CSR (xadj + adjncy) handed to pymetis (estimate: the graph as stored)."""
    return 8 * (graph.num_nodes + 1) + 8 * graph.num_edges


def metis_peak_bytes(graph: GraphArrays) -> int:
    """Estimated peak memory of the metis method: the CSR times ``METIS_OVERHEAD`` (symmetrising + METIS)."""
    return METIS_OVERHEAD * metis_csr_bytes(graph)


def _metis(graph: GraphArrays, p: int, cfg: PartitionConfig, progress: Progress | None) -> np.ndarray:
    if _pymetis is None:
        raise ValueError("'partition.method' = 'metis' expected pymetis to be installed (got ImportError)")
    csr, need = metis_csr_bytes(graph), metis_peak_bytes(graph)
    budget = cfg.memory_mb * 1024 * 1024
    if need > budget:
        raise ValueError(
            f"'partition.memory_mb' expected >= {math.ceil(need / 2**20)} MiB for metis: the in-memory CSR of "
            f"{graph.num_nodes} nodes and {graph.num_edges} edges is {csr} bytes, about {METIS_OVERHEAD}x that "
            f"at peak (got a budget of {cfg.memory_mb} MiB); use method 'fennel' or 'grem' (streaming)"
        )
    n = graph.num_nodes
    if progress:
        progress("partition: metis", 0, 1)
    xadj, adjncy, _ = _symmetric_csr(PartGraph.of(graph), np.arange(n, dtype=np.int64))
    labels = _run_metis(xadj, adjncy, p, cfg.seed, cfg.imbalance)
    return enforce_capacity(labels, capacity(n, p, cfg.imbalance, [1] * p))


def _symmetric_csr(graph: PartGraph, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Induced subgraph on ascending ``nodes`` (local ids), self loops dropped, symmetrised, deduplicated.

    Returns ``(xadj, adjncy, edge weights)``; weights (summed over both directions and duplicates) only
    when the graph has edge weights, else None."""
    ptr, cols, ew = rows(graph, nodes)
    m = len(nodes)
    local = np.searchsorted(nodes, cols)
    local = np.minimum(local, max(m - 1, 0))
    src = np.repeat(np.arange(m, dtype=np.int64), np.diff(ptr))
    keep = (nodes[local] == cols) & (local != src) if m else np.zeros(0, bool)
    a, b = src[keep], local[keep]
    w = None if ew is None else ew[keep]
    del ptr, cols, local, src, keep
    pairs = np.concatenate([a * m + b, b * m + a])
    if w is None:
        keys, weights = np.unique(pairs), None
    else:
        keys, inverse = np.unique(pairs, return_inverse=True)
        weights = np.bincount(inverse, weights=np.concatenate([w, w]), minlength=len(keys)).astype(np.int64)
    src, dst = keys // max(m, 1), keys % max(m, 1)
    xadj = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=m), out=xadj[1:])
    return xadj, dst.astype(np.int64), weights


def _run_metis(xadj: np.ndarray, adjncy: np.ndarray, p: int, seed: int, imbalance: float,
               tpwgts: list[float] | None = None, vweights: np.ndarray | None = None,
               eweights: np.ndarray | None = None) -> np.ndarray:
    m = len(xadj) - 1
    if p == 1 or m == 0:
        return np.zeros(m, dtype=np.int32)
    if len(adjncy) == 0:
        return (np.arange(m) * p // m).astype(np.int32)
    opts = _pymetis.Options(seed=int(seed), ufactor=max(1, int(imbalance * 1000)))
    zdt = getattr(_pymetis, "zero_copy_dtype", None)
    dt = np.dtype(zdt() if callable(zdt) else (zdt or np.int64))  # pymetis's idx_t: no copy
    kwargs: dict = {"tpwgts": tpwgts} if tpwgts is not None else {}
    if vweights is not None:
        kwargs["vweights"] = np.asarray(vweights).astype(dt, copy=False)
    if eweights is not None:
        kwargs["eweights"] = np.asarray(eweights).astype(dt, copy=False)
    xadj, adjncy = xadj.astype(dt, copy=False), adjncy.astype(dt, copy=False)
    if hasattr(_pymetis, "CSRAdjacency"):  # pymetis >= 2025: xadj=/adjncy= keywords are deprecated
        _, membership = _pymetis.part_graph(p, _pymetis.CSRAdjacency(xadj, adjncy), options=opts, **kwargs)
    else:  # pragma: no cover - older pymetis
        _, membership = _pymetis.part_graph(p, xadj=xadj, adjncy=adjncy, options=opts, **kwargs)
    return np.asarray(membership, dtype=np.int32)


# ---- fennel -----------------------------------------------------------------------------------------------


def _fennel(graph: PartGraph, p: int, cfg: PartitionConfig, progress: Progress | None, num_threads: int,
            counting: str) -> tuple[np.ndarray, str]:
    n = graph.num_nodes
    budget = cfg.memory_mb * 1024 * 1024
    if counting == "auto":
        counting = "exact" if 4 * n <= budget // 2 else "bloom"
    if counting not in ("exact", "bloom"):
        raise ValueError(f"'counting' expected 'auto', 'exact' or 'bloom' (got {counting!r})")
    labels = np.full(n, -1, dtype=np.int32)
    total = graph.total_node_weight()
    m = graph.total_edge_weight() / 2
    if p <= cfg.two_level_threshold:
        _fennel_level(graph, np.arange(n, dtype=np.int64), labels, [1] * p, 0, total, p, cfg, progress,
                      num_threads, counting, m)
        return labels, counting
    top = math.ceil(math.sqrt(p))
    shares = split_shares(p, top)
    _fennel_level(graph, np.arange(n, dtype=np.int64), labels, shares, 0, total, p, cfg, progress,
                  num_threads, counting, m)
    internal = _internal_edges(graph, labels, top)
    order = np.argsort(labels, kind="stable")
    ptr = np.zeros(top + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=top), out=ptr[1:])
    base = top
    for t in range(top):
        _fennel_level(graph, order[ptr[t] : ptr[t + 1]].astype(np.int64), labels, [1] * shares[t],
                      base, total, p, cfg, progress, num_threads, counting, internal[t] / 2)
        base += shares[t]
    labels -= top
    return labels, counting


def _internal_edges(graph: PartGraph, labels: np.ndarray, k: int) -> np.ndarray:
    """Weight of the CSR entries with both endpoints in the same part, per part (chunked)."""
    out = np.zeros(k, dtype=np.int64)
    bounds = row_ranges(graph.indptr, _EDGE_CHUNK)
    for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        ptr, cols, ew = rows(graph, np.arange(s, e, dtype=np.int64))
        rows_l = np.repeat(labels[s:e], np.diff(ptr))
        same = rows_l == labels[cols]
        out += np.bincount(rows_l[same], weights=None if ew is None else ew[same], minlength=k).astype(np.int64)
    return out


def _fennel_level(graph: PartGraph, nodes, labels, shares, base, total_weight, p_total, cfg, progress,
                  num_threads, counting, m_level) -> None:
    """Stream ``nodes`` (ascending) into ``len(shares)`` parts labelled ``base + k``."""
    k = len(shares)
    n_level = graph.weight_of(nodes)
    if len(nodes) == 0:
        return
    if k == 1:
        labels[nodes] = base
        return
    alpha = math.sqrt(k) * m_level / n_level**1.5
    mean_share = sum(shares) / k
    weight = np.array([mean_share / q for q in shares], dtype=np.float64)
    cap = capacity(total_weight, p_total, cfg.imbalance, shares)
    sizes = np.zeros(k, dtype=np.int64)
    train_sizes = np.zeros(k, dtype=np.int64)
    train_norm = max(1.0, float(graph.train_weight[nodes].sum()) / k)
    bloom = None
    if counting == "bloom":
        words = max(1, cfg.bloom_bits // 64)
        bloom = np.zeros(k * words * 8, dtype=np.uint8)
    if bloom is not None:  # Bloom filters cannot forget a member: one pass at the full α
        schedules = [(1.0, 1.0, 0)]
    else:  # (α start factor, growth per pass, restreams): constant-α ReFENNEL, then the tempered schedule
        schedules = [(1.0, 1.0, FENNEL_CONSTANT_RESTREAMS), (FENNEL_ALPHA_START, FENNEL_ALPHA_GROWTH, FENNEL_RESTREAMS)]
    initial = labels[nodes]
    best = None  # (internal CSR weight, labels[nodes], sizes, train_sizes) of the best schedule so far
    n_nodes = len(nodes)
    done, total = 0, sum(1 + r for _, _, r in schedules) * n_nodes
    for start, growth, restreams in schedules:
        if best is not None:  # start over from the level's initial state
            labels[nodes] = initial
            sizes[:] = 0
            train_sizes[:] = 0
        for rs in range(1 + restreams):
            temper = min(1.0, start * growth**rs)
            moved = 0
            for s in range(0, n_nodes, cfg.chunk_nodes):
                chunk = nodes[s : s + cfg.chunk_nodes]
                ptr, cols, ew = rows(graph, chunk)
                before = labels[chunk] if rs > 0 else None
                kernels.fennel_pass(ptr, cols, chunk, labels, sizes, train_sizes, graph.train_flags_of(chunk), cap,
                                    weight, base, alpha * temper, FENNEL_GAMMA, cfg.train_penalty, train_norm,
                                    bloom=bloom, bloom_seed=cfg.seed, block_nodes=FENNEL_BLOCK, restream=rs > 0,
                                    num_threads=num_threads, node_weight=graph.node_weights_of(chunk),
                                    edge_weight=ew, train_weight=graph.train_weights_of(chunk))
                if before is not None:
                    moved += int(np.count_nonzero(before != labels[chunk]))
                if progress:
                    progress("partition: fennel", done + rs * n_nodes + s + len(chunk), total)
            if rs > 0 and temper == 1.0 and moved <= FENNEL_STOP_FRACTION * n_nodes:
                break
        done += (1 + restreams) * n_nodes
        if len(schedules) > 1:
            internal = internal_weight(graph, nodes, labels, cfg.chunk_nodes)
            if best is None or internal > best[0]:
                best = (internal, labels[nodes], sizes.copy(), train_sizes.copy())
    if best is not None and not np.array_equal(labels[nodes], best[1]):
        labels[nodes] = best[1]
        sizes[:] = best[2]
        train_sizes[:] = best[3]


# ---- grem -------------------------------------------------------------------------------------------------


def _grem(graph: PartGraph, p: int, cfg: PartitionConfig, progress: Progress | None) -> np.ndarray:
    n = graph.num_nodes
    total = graph.total_node_weight()
    labels = np.zeros(n, dtype=np.int32)  # tree labels; root 0
    pref = np.zeros(n, dtype=np.float32)
    leaf = {}  # tree label -> final part
    frontier = [(0, p, 0)]  # (tree label, final parts below it, first final part)
    next_label = 1
    while frontier:
        order = np.argsort(labels, kind="stable")
        counts = np.bincount(labels, minlength=next_label)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        nxt = []
        for lab, q, off in frontier:
            if q == 1:
                leaf[lab] = off
                continue
            qa, qb = q // 2, q - q // 2
            a, b = next_label, next_label + 1
            next_label += 2
            nodes = np.sort(order[starts[lab] : starts[lab] + counts[lab]]).astype(np.int64)
            cap = capacity(total, p, cfg.imbalance, [qa, qb])
            _grem_bisect(graph, nodes, labels, pref, a, b, cap, qa / q, cfg, progress)
            nxt += [(a, qa, off), (b, qb, off + qa)]
        frontier = nxt
    lut = np.zeros(next_label, dtype=np.int32)
    for lab, part in leaf.items():
        lut[lab] = part
    return lut[labels]


def _grem_bisect(graph: PartGraph, nodes, labels, pref, a, b, cap, frac_a, cfg, progress) -> None:
    m = len(nodes)
    if m == 0:
        return
    csize = max(1, math.ceil(cfg.grem_chunk_fraction * m))
    chunks = [(s, min(m, s + csize)) for s in range(0, m, csize)]
    pref[nodes] = 0
    # first chunk: METIS (or BFS-halving) on its induced subgraph
    first = nodes[: chunks[0][1]]
    first_weight = graph.node_weights_of(first)
    xadj, adjncy, ew = _symmetric_csr(graph, first)
    if _pymetis is not None and len(adjncy):
        side = _run_metis(xadj, adjncy, 2, cfg.seed, cfg.imbalance, tpwgts=[frac_a, 1.0 - frac_a],
                          vweights=first_weight, eweights=ew)
    else:
        side = _bfs_halving(xadj, adjncy, frac_a)
    side = enforce_capacity(side.astype(np.int32), cap.copy(), first_weight)
    labels[first] = np.where(side == 1, b, a).astype(np.int32)
    sizes = np.bincount(side, weights=first_weight, minlength=2).astype(np.int64)
    src = np.repeat(np.arange(len(first)), np.diff(xadj))
    signs = np.where(side[adjncy] == 1, 1.0, -1.0)
    pref[first] = np.bincount(src, weights=signs if ew is None else signs * ew, minlength=len(first))
    del xadj, adjncy, src, ew
    total = m * (1 + GREM_REEVALUATIONS) - len(first)
    done = 0
    # stream the chunks, then re-evaluate every node in further streaming passes until (almost) nothing moves
    for r, pass_chunks in enumerate((chunks[1:], *[chunks] * GREM_REEVALUATIONS)):
        moved = 0
        for s, e in pass_chunks:
            chunk = nodes[s:e]
            ptr, cols, ew = rows(graph, chunk)
            moved += kernels.grem_pass(ptr, cols, chunk, labels, pref, sizes, cap, a, b,
                                       node_weight=graph.node_weights_of(chunk), edge_weight=ew)
            done += e - s
            if progress:
                progress("partition: grem", done, total)
        if r >= 2 and moved <= GREM_STOP_FRACTION * m:
            break


def _bfs_halving(xadj: np.ndarray, adjncy: np.ndarray, frac_a: float) -> np.ndarray:
    """Fallback seed without pymetis: reverse Cuthill-McKee (BFS) order, first ``frac_a`` to side 0."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    m = len(xadj) - 1
    mat = csr_matrix((np.ones(len(adjncy), dtype=np.int8), adjncy, xadj), shape=(m, m))
    order = reverse_cuthill_mckee(mat, symmetric_mode=True)
    side = np.ones(m, dtype=np.int32)
    side[order[: round(frac_a * m)]] = 0
    return side


# ---- the function other stages call -----------------------------------------------------------------------


def partition_graph(graph: GraphArrays, method: str, num_parts: int, cfg: PartitionConfig,
                    progress: Progress | None = None, *, num_threads: int = 0, counting: str = "auto"
                    ) -> np.ndarray:
    """Part label (int32, in ``[0, num_parts)``) of every node of ``graph`` by ``method``.

    ``cfg`` supplies the method's knobs (imbalance, seed, chunk_nodes, multilevel, ...); ``method`` and
    ``num_parts`` override its own. ``counting`` (fennel only): ``auto``, ``exact`` or ``bloom``.
    ``num_threads`` (fennel scoring) never changes the result.
    """
    return _partition(graph, method, num_parts, cfg, progress, num_threads, counting)[0]


def _partition(graph, method, num_parts, cfg, progress, num_threads=0, counting="auto") -> tuple[np.ndarray, dict]:
    if method not in METHODS:
        raise ValueError(f"'partition.method' expected one of {', '.join(METHODS)} (got {method!r})")
    if num_parts <= 0:
        raise ValueError(f"'partition.num_parts' expected > 0 (got {num_parts})")
    n = graph.num_nodes
    p = min(num_parts, max(n, 1))
    info: dict = {}
    if method == "range" or p == 1:
        labels = range_parts(n, p)
    elif method == "metis":
        labels = _metis(graph, p, cfg, progress)
    else:
        fine = PartGraph.of(graph)

        def initial(g: PartGraph, count: str) -> np.ndarray:
            if method == "fennel":
                labels, info["counting"] = _fennel(g, p, cfg, progress, num_threads, count)
                return labels
            return _grem(g, p, cfg, progress)

        labels = None
        if cfg.multilevel:
            reason = multilevel.unavailable(fine, p, cfg, counting if method == "fennel" else "exact")
            if reason is None:
                labels, ml_info = multilevel.partition(fine, p, cfg, lambda g: initial(g, "exact"),
                                                       train_balance=method == "fennel", progress=progress)
                info.update(ml_info)
            else:
                info["multilevel"] = f"skipped: {reason}"
        else:
            info["multilevel"] = "off"
        if labels is None:
            labels = initial(fine, counting)
    return np.ascontiguousarray(labels, dtype=np.int32), info


# ---- statistics and outputs -------------------------------------------------------------------------------


def cut_statistics(graph: GraphArrays, parts: np.ndarray, num_parts: int, progress: Progress | None = None,
                   ) -> tuple[dict[str, float], np.ndarray, np.ndarray]:
    """Cut statistics, edge-bucket counts (p, p) and per-node cross-part neighbour counts, over edge chunks."""
    n, e = graph.num_nodes, graph.num_edges
    p = num_parts
    cross = np.zeros(n, dtype=np.int32)
    buckets = np.zeros(p * p, dtype=np.int64)
    cut = 0
    bounds = row_ranges(graph.indptr, _EDGE_CHUNK)
    for s, t in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        ptr = np.asarray(graph.indptr[s : t + 1], dtype=np.int64)
        deg = np.diff(ptr)
        row_part = np.repeat(parts[s:t], deg)
        col_part = parts[np.asarray(graph.indices[ptr[0] : ptr[-1]])]
        differs = row_part != col_part
        local_rows = np.repeat(np.arange(t - s), deg)
        cross[s:t] = np.bincount(local_rows[differs], minlength=t - s)
        cut += int(np.count_nonzero(differs))
        keys = col_part.astype(np.int64) * p + row_part
        if p * p <= 1 << 22:
            buckets += np.bincount(keys, minlength=p * p)
        else:
            uk, uc = np.unique(keys, return_counts=True)
            buckets[uk] += uc
        release_pages(graph.indices)  # streamed once: do not let the whole file pile up in the RSS
        if progress:
            progress("partition: measuring cut", int(ptr[-1]), e)
    sizes = np.bincount(parts, minlength=p)
    train_parts = np.bincount(parts[np.asarray(graph.train_idx)], minlength=p)
    n_train = len(graph.train_idx)
    stats = {
        "edge_cut": cut / e if e else 0.0,
        "balance": float(sizes.max() / (n / p)) if n and p else 1.0,
        "train_balance": float(train_parts.max() / (n_train / p)) if n_train and p else 1.0,
        "min_part_size": int(sizes.min()) if p else 0,
        "max_part_size": int(sizes.max()) if p else 0,
        "max_train_per_part": int(train_parts.max()) if p else 0,
    }
    return stats, (buckets.reshape(p, p) if p <= _DENSE_BUCKETS else buckets), cross


def _grouped(ids: np.ndarray, parts: np.ndarray, p: int) -> tuple[np.ndarray, np.ndarray]:
    """(ptr (p+1), ids grouped by part, ascending within a part) for ascending ``ids``."""
    ids = np.asarray(ids, dtype=np.int64)
    of = parts[ids]
    ptr = np.zeros(p + 1, dtype=np.int64)
    np.cumsum(np.bincount(of, minlength=p), out=ptr[1:])
    return ptr, ids[np.argsort(of, kind="stable")]


def run(store: ArtifactStore, cfg: PipelineConfig, *, ordering: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Write the ``partitioning`` artifact: labels, per-part node/split lists, edge buckets and statistics."""
    params = cfg.partition.model_dump()

    def build(builder: ArtifactBuilder) -> None:
        start = time.perf_counter()
        graph = load_graph(ordering)
        num_parts = min(cfg.partition.num_parts, max(graph.num_nodes, 1))
        parts, info = _partition(graph, cfg.partition.method, num_parts, cfg.partition, progress)
        builder.save_array("parts.npy", parts)
        ptr, nodes = _grouped(np.arange(graph.num_nodes), parts, num_parts)
        builder.save_array("part_ptr.npy", ptr)
        builder.save_array("part_nodes.npy", nodes)
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
             "time_s": round(time.perf_counter() - start, 4), "peak_rss_mb": round(peak_rss_mb(), 1)}
        )

    return materialize(store, cfg.dataset_name, "partitioning", FORMAT_VERSION, params,
                       {"ordering": ordering}, build)
