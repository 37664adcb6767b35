"""OUTRE's offline analysis of the training trace: saved-I/O profiles, the Eq. 5 memory split, the staleness
FSM and subtree pruning. One batch at a time; pruning runs in C (:func:`prune_batch`, with a vectorised NumPy
reference), the rest is vectorised NumPy over the batch's nodes and edges (one Python iteration per batch and
hop, never per node).

Batch layout (``storage_kernels.sampleset``): ``nodes[:hop_counts[h]]`` are the destinations of hop ``h``;
hop 0 is the model's last layer (destinations = seeds, sources = ``nodes[:hop_counts[1]]``, whose inputs are
the historical embeddings h^{L-1}).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from storage_kernels import kernels
from storage_kernels.alignedstore import select_hotset

__all__ = ["ID_BYTES", "PAPER_STALENESS", "AlphaSplit", "PrunedBlocks", "StalenessFSM", "alpha_sweep",
           "effective_staleness", "exclusive_subtrees", "prune_batch", "prune_batch_numpy", "top_ranked"]

#: Bytes of one neighbour id of a batch's topology (int64 ``cols``): the unit of ``saved_IO_hist_sample``.
ID_BYTES = 8


def _edge_dst(indptr: np.ndarray) -> np.ndarray:
    """Destination row of every CSR edge, (E,) int64."""
    return np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))


# ------------------------------------------------------------------------------------------ profiling
def exclusive_subtrees(hop_counts: np.ndarray, indptrs: list[np.ndarray], cols: list[np.ndarray]
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Per last-layer source ``v`` (positions ``< hop_counts[1]``): the rows and the edges only its
    (L-1)-deep subtree reaches -- what skipping ``v``'s subtree would save in this batch (OUTRE's
    ``saved_IO_hist_gather`` and ``saved_IO_hist_sample`` contributions).

    Every deeper node gets an owner: the last-layer source all of its referencing destinations (at the hop
    that discovered it) descend from, or none (-1) when they descend from several. Returns ``(rows, edges)``,
    both ``(hop_counts[1],)`` int64.
    """
    hc = np.asarray(hop_counts, dtype=np.int64)
    n, top = int(hc[-1]), int(hc[1])
    owner = np.full(n, -1, dtype=np.int64)
    owner[:top] = np.arange(top)
    edges = np.zeros(top, dtype=np.int64)
    for h in range(1, len(indptrs)):
        dst, col = _edge_dst(indptrs[h]), np.asarray(cols[h], dtype=np.int64)
        own = owner[dst]  # (E,) owner of each edge's destination
        mine = own >= 0
        edges += np.bincount(own[mine], minlength=top)
        new = col >= hc[h]  # edges that reach a node this hop discovered
        lo = np.full(n, n, dtype=np.int64)
        hi = np.full(n, -2, dtype=np.int64)
        np.minimum.at(lo, col[new], own[new])
        np.maximum.at(hi, col[new], own[new])
        span = slice(int(hc[h]), int(hc[h + 1]))
        owner[span] = np.where(lo[span] == hi[span], lo[span], -1)
    deep = owner[top:]
    rows = np.bincount(deep[deep >= 0], minlength=top)
    return rows.astype(np.int64), edges


def top_ranked(score: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` highest positive ``score`` entries' ids, sorted by id (ties by lower id): the hotset rule
    (:func:`storage_kernels.alignedstore.select_hotset`, a partition at the k-th score, not a full sort)."""
    return select_hotset(score, k)


def _descending_prefix(saved: np.ndarray) -> np.ndarray:
    """float64 (k+1,): 0, then the prefix sums of the positive entries of ``saved``, largest first."""
    positive = saved[saved > 0]
    positive.sort()
    out = np.zeros(len(positive) + 1, dtype=np.float64)
    np.cumsum(positive[::-1], dtype=np.float64, out=out[1:])
    return out


@dataclass(frozen=True)
class AlphaSplit:
    """The Eq. 5 split of budget ``B``: ``alpha`` to the historical cache, ``1 - alpha`` to features."""

    alpha: float
    feature_rows: int
    history_rows: int
    saved_feat: float  # predicted bytes the feature cache saves over the trace
    saved_hist: float  # predicted bytes the historical cache saves over the trace
    benefits: np.ndarray  # (101,) benefit at alpha = 0, 0.01, ..., 1


def alpha_sweep(saved_feat: np.ndarray, saved_hist: np.ndarray, budget: int, feature_row_bytes: int,
                history_row_bytes: int, table_feat: int = 0, table_hist: int = 0) -> AlphaSplit:
    """OUTRE's Eq. 5: benefit(alpha) = top-k_f of ``saved_feat`` + top-k_h of ``saved_hist`` with
    ``k_f = (B(1-alpha) - table_feat) // feature_row_bytes`` and ``k_h = (B alpha - table_hist) //
    history_row_bytes``, alpha from 0 to 1 in steps of 0.01 with prefix sums (O(1) per step); the argmax
    (the smallest alpha on ties). Entries <= 0 are never cached."""
    if feature_row_bytes <= 0 or history_row_bytes <= 0:
        raise ValueError(f"'alpha_sweep' expected positive row sizes (got {feature_row_bytes}, "
                         f"{history_row_bytes})")
    pf, ph = _descending_prefix(saved_feat), _descending_prefix(saved_hist)
    alphas = np.arange(101, dtype=np.int64)  # percent: exact steps of 0.01
    kf = np.clip((int(budget) * (100 - alphas) // 100 - table_feat) // feature_row_bytes, 0, len(pf) - 1)
    kh = np.clip((int(budget) * alphas // 100 - table_hist) // history_row_bytes, 0, len(ph) - 1)
    benefits = pf[kf] + ph[kh]
    best = int(np.argmax(benefits))
    return AlphaSplit(alpha=best / 100, feature_rows=int(kf[best]), history_rows=int(kh[best]),
                      saved_feat=float(pf[kf[best]]), saved_hist=float(ph[kh[best]]), benefits=benefits)


# ------------------------------------------------------------------------------------------ staleness FSM
#: OUTRE's default staleness bound (iterations), the paper's.
PAPER_STALENESS = 100


def effective_staleness(setting: int, batches_per_epoch: int) -> int:
    """``plan.staleness`` as the FSM runs it: a value >= 1 as given; 0 (auto) is OUTRE's 100 iterations, but at
    most one epoch of training batches, so that a history is recomputed at least once an epoch. (The paper's
    100 is a twelfth of a papers100M epoch; on a graph of one batch an epoch it would reuse an embedding
    computed by the first epoch's weights for 100 epochs: Cora lost 1.2 points of accuracy at 10.)"""
    if setting < 0:
        raise ValueError(f"'plan.staleness' expected >= 0 (got {setting})")
    return int(setting) if setting >= 1 else max(1, min(PAPER_STALENESS, int(batches_per_epoch)))


class StalenessFSM:
    """The historical cache's state, predicted from iteration counts: a candidate pushed at iteration ``t``
    is pulled through ``t + staleness - 1``, then recomputed and pushed again (``staleness = 1``: never
    pulled). ``step`` advances one training iteration."""

    def __init__(self, num_candidates: int, staleness: int) -> None:
        if staleness < 1:
            raise ValueError(f"'plan.staleness' expected >= 1 (got {staleness})")
        self.staleness = int(staleness)
        self.pushed_at = np.full(num_candidates, -1, dtype=np.int64)
        self.iteration = 0

    def fresh(self, slots: np.ndarray) -> np.ndarray:
        """Which of ``slots`` hold an entry young enough to pull at the current iteration (bool mask)."""
        stamp = self.pushed_at[slots]
        return (stamp >= 0) & (self.iteration - stamp < self.staleness)

    def step(self, slots: np.ndarray) -> np.ndarray:
        """One iteration whose last layer reads candidates ``slots`` (distinct): the mask of pulls; the
        others are pushed now."""
        slots = np.asarray(slots, dtype=np.int64)
        pull = self.fresh(slots)
        self.pushed_at[slots[~pull]] = self.iteration
        self.iteration += 1
        return pull


# ------------------------------------------------------------------------------------------ pruning
@dataclass(frozen=True)
class PrunedBlocks:
    """A batch with pulled candidates' subtrees removed: ``keep`` (old positions of the kept nodes, in order),
    the new ``hop_counts``, ``indptrs`` and ``cols`` (same layout as a sampled batch), ``skip`` (new positions
    of kept nodes whose input row no layer reads: the pulled candidates themselves) and ``new_pos`` (old ->
    new position, -1 for dropped nodes)."""

    keep: np.ndarray
    hop_counts: np.ndarray
    indptrs: list[np.ndarray]
    cols: list[np.ndarray]
    skip: np.ndarray
    new_pos: np.ndarray


def prune_batch(hop_counts: np.ndarray, indptrs: list[np.ndarray], cols: list[np.ndarray], pulled: np.ndarray
                ) -> PrunedBlocks:
    """:func:`prune_batch_numpy` in C without the GIL (``storage_kernels.kernels.prune_blocks``)."""
    out = kernels.prune_blocks(hop_counts, indptrs, cols, pulled)
    kept = out.state > 0
    new_pos = np.cumsum(kept, dtype=np.int64) - 1
    new_pos[~kept] = -1
    return PrunedBlocks(keep=np.flatnonzero(kept), hop_counts=out.hop_counts, indptrs=out.indptrs, cols=out.cols,
                        skip=new_pos[out.state == 2], new_pos=new_pos)


def prune_batch_numpy(hop_counts: np.ndarray, indptrs: list[np.ndarray], cols: list[np.ndarray], pulled: np.ndarray
                      ) -> PrunedBlocks:
    """Remove the (L-1)-deep subtrees of the ``pulled`` positions (last-layer sources, ``< hop_counts[1]``);
    the vectorised reference of :func:`prune_batch`.

    ``need`` starts as the last layer's sources minus the pulled ones (rows whose h^{L-1} must be computed);
    hop ``h >= 1`` keeps the in-edges of needed destinations only, and its inputs (needed destinations and
    the sources of their kept edges) are needed one layer down. Kept: every node a layer still reads, plus
    the last layer's sources (hop 0 is untouched); ``skip`` are those no lower layer reads. Order is
    preserved, so every hop's destinations stay a prefix of the node list.
    """
    hc = np.asarray(hop_counts, dtype=np.int64)
    num_hops = len(indptrs)
    n, top = int(hc[-1]), int(hc[1])
    pulled = np.asarray(pulled, dtype=np.int64)
    if len(pulled) and (int(pulled.min()) < 0 or int(pulled.max()) >= top):
        raise ValueError(f"'pulled' expected positions < hop_counts[1] = {top} (got {pulled.min()}..{pulled.max()})")
    need = np.zeros(n, dtype=bool)
    need[:top] = True
    need[pulled] = False
    edge_keep = [np.ones(len(cols[0]), dtype=bool)]
    for h in range(1, num_hops):
        ek = need[_edge_dst(indptrs[h])]  # (E,) in-edges of needed destinations
        edge_keep.append(ek)
        need[np.asarray(cols[h])[ek]] = True  # their sources; needed destinations stay needed (self rows)
    kept = need.copy()
    kept[:top] = True
    new_pos = np.cumsum(kept, dtype=np.int64) - 1
    new_pos[~kept] = -1
    new_counts = np.concatenate([[0], np.cumsum(kept, dtype=np.int64)])[hc]  # kept nodes in each prefix
    out_indptrs, out_cols = [], []
    for h in range(num_hops):
        ek = edge_keep[h]
        dst = new_pos[_edge_dst(indptrs[h])[ek]]
        counts = np.bincount(dst, minlength=int(new_counts[h]))
        out_indptrs.append(np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
        out_cols.append(new_pos[np.asarray(cols[h], dtype=np.int64)[ek]])
    skip = new_pos[np.flatnonzero(kept & ~need)]
    return PrunedBlocks(keep=np.flatnonzero(kept), hop_counts=new_counts, indptrs=out_indptrs, cols=out_cols,
                        skip=skip, new_pos=new_pos)
