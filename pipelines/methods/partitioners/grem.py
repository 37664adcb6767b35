"""``grem``: MariusGNN's streaming recursive bisection with re-evaluation.

MariusGNN's GREM: recursive bisection (p = 2^k, other p split proportionally: ⌊q/2⌋ and ⌈q/2⌉ final
parts); each bisection streams chunks of ``grem_chunk_fraction`` of the group's nodes. The first chunk is
seeded by METIS on its induced subgraph (pymetis; without pymetis, a reverse Cuthill-McKee BFS order cut
in proportion); each later node goes to the side holding more of its assigned neighbours (counts weighted
by the side's free capacity, 1 - size/capacity, as in LDG) unless full; further streaming passes
re-evaluate every node with the decaying estimate (stored + current) / 2, until a pass moves at most
``GREM_STOP_FRACTION`` of the nodes (at least two, at most ``GREM_REEVALUATIONS``).
Side capacities are ``ceil((1+imbalance)·n/p·q)`` for a side that will hold q final parts, so no final
part exceeds ``(1+imbalance)·n/p`` (+1 rounding).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from pipelines.methods.partitioners.base import PARTITIONERS, Partitioner, PartitionRun
from pipelines.methods.partitioners.metis import available, run_metis, symmetric_csr
from pipelines.methods.partitioners.partgraph import PartGraph, capacity, enforce_capacity, rows
from storage_kernels import kernels

if TYPE_CHECKING:
    from pipelines.methods.partitioners.settings import PartitionConfig

__all__ = ["grem"]

GREM_REEVALUATIONS = 48  # at most this many streaming passes re-evaluating every node after the first ...
GREM_STOP_FRACTION = 1e-4  # ... stopping once a pass moves at most this fraction of the group's nodes


def grem(graph: PartGraph, p: int, cfg: PartitionConfig, run: PartitionRun) -> np.ndarray:
    """GREM's recursive bisection into ``p`` parts (any ``p``: sides hold ⌊q/2⌋ and ⌈q/2⌉ final parts)."""
    progress = run.progress
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
    xadj, adjncy, ew = symmetric_csr(graph, first)
    if available() and len(adjncy):
        side = run_metis(xadj, adjncy, 2, cfg.seed, cfg.imbalance, tpwgts=[frac_a, 1.0 - frac_a],
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


PARTITIONERS.register("grem", Partitioner(
    "grem", grem, description="MariusGNN's streaming recursive bisection with re-evaluation, multilevel.",
    reads=("chunk_nodes", "grem_chunk_fraction", "multilevel"), multilevel=True,
))
