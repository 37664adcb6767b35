"""``fennel``: streaming FENNEL (Tsourakakis et al.) with OUTRE's changes, out of core.

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

Which of the two restreaming schedules wins depends on the graph (BENCHMARKS.md, "FENNEL restreaming
schedules"), so each level keeps the labels of the schedule with more internal edges.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.partitioners.base import PARTITIONERS, Partitioner, PartitionRun
from pipelines.methods.partitioners.partgraph import PartGraph, capacity, internal_weight, rows, split_shares
from storage_kernels import kernels
from storage_kernels.arrays import row_ranges

if TYPE_CHECKING:
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["FENNEL_GAMMA", "fennel"]

FENNEL_GAMMA = 1.5
FENNEL_BLOCK = 4096  # nodes per deterministic scoring block (kernel argument, fixed)
FENNEL_CONSTANT_RESTREAMS = 6  # exact counting: schedule 1, constant α, at most this many ReFENNEL passes ...
FENNEL_RESTREAMS = 24  # ... schedule 2 (tempered), at most this many (Bloom: a single pass, no restreams) ...
FENNEL_STOP_FRACTION = 0.002  # ... stopping once a pass at the full α moves at most this fraction of the level's nodes
# Tempered restreaming (Nishimura & Ugander 2013, "restreaming graph partitioning"): schedule 2's pass r uses
# α·min(1, FENNEL_ALPHA_START·FENNEL_ALPHA_GROWTH^r), so early passes are dominated by the neighbour term (the hard
# capacity keeps the balance) and α is full from pass 6. The greedy lands in different local optima under the
# two schedules and neither wins everywhere, so the level keeps the labels of the schedule with more internal
# edges (one O(N) int32 copy; a chunked counting pass per schedule).
FENNEL_ALPHA_START = 0.1
FENNEL_ALPHA_GROWTH = 1.5
_EDGE_CHUNK = 1 << 20  # CSR entries per chunk when counting internal edges


def fennel(graph: PartGraph, p: int, cfg: PartitionConfig, run: PartitionRun) -> np.ndarray:
    """Streaming FENNEL into ``p`` parts (two levels above ``two_level_threshold``); records ``counting``."""
    progress, num_threads, counting = run.progress, run.num_threads, run.counting
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
        run.info["counting"] = counting
        return labels
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
    run.info["counting"] = counting
    return labels


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


PARTITIONERS.register("fennel", Partitioner(
    "fennel", fennel,
    description="Streaming FENNEL, OUTRE's variant (training penalty, Bloom filters, two levels), multilevel.",
    reads=("chunk_nodes", "train_penalty", "bloom_bits", "two_level_threshold", "multilevel"),
    multilevel=True, train_balance=True, bloom_counting=True,
))
