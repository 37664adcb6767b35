"""Ranking metrics of link prediction: MRR and Hits@k, against sampled negatives or filtered over all nodes.

A query is a held-out edge ``(u, v)`` asked as "which node completes ``(u, ?)``"; both directions of every
undirected held-out edge are asked. Its rank is ``1 + #{candidates scored above v} + 0.5 * #{candidates tied
with v}`` (ties count half, so a constant scorer gets the middle rank rather than the best one).

``sampled``
    the candidates are ``eval_negatives`` nodes drawn uniformly, shared by each chunk of queries (MariusGNN's
    evaluation); not filtered, so a drawn negative may be a true edge;
``filtered``
    the candidates are all nodes, except ``u`` itself and the known true edges of ``u`` (train, valid and
    test) other than ``v`` -- the standard filtered setting, on graphs small enough to score every node
    (``storage_kernels.kernels.filtered_ranks``, C, GIL released).

``MRR`` is the mean of ``1 / rank``; ``Hits@k`` the fraction of ranks ``<= k``.
"""

from __future__ import annotations

import numpy as np

from storage_kernels import kernels

__all__ = ["HITS_AT", "filtered_ranks", "random_mrr", "rank_metrics", "ranks_against"]

#: The k of the Hits@k reported.
HITS_AT = (1, 3, 10)


def ranks_against(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``(Q,)`` float64 ranks of ``pos`` (Q,) among ``neg`` (Q, M): ``1 + #greater + 0.5 * #equal``."""
    pos = np.asarray(pos, dtype=np.float32)[:, None]
    neg = np.asarray(neg, dtype=np.float32)
    return 1.0 + (neg > pos).sum(axis=1) + 0.5 * (neg == pos).sum(axis=1)


def filtered_ranks(scores: np.ndarray, targets: np.ndarray, sources: np.ndarray, indptr: np.ndarray,
                   indices: np.ndarray, num_threads: int = 0) -> np.ndarray:
    """Filtered ranks of ``targets`` in ``scores`` (Q, N), known edges from the CSR ``indptr``/``indices``
    (``scores`` is overwritten, see :func:`storage_kernels.kernels.filtered_ranks`)."""
    scores = np.ascontiguousarray(scores, dtype=np.float32)
    if not np.isfinite(scores).all():
        raise ValueError("'scores' expected finite link scores (got nan or inf: the model diverged)")
    return kernels.filtered_ranks(scores, targets, sources, indptr, indices, num_threads)


def rank_metrics(ranks: np.ndarray, prefix: str = "") -> dict[str, float]:
    """``{prefix + "mrr": ..., prefix + "hits@1": ..., ...}`` of the ranks (nan when there are none)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.size == 0:
        return {f"{prefix}mrr": float("nan"), **{f"{prefix}hits@{k}": float("nan") for k in HITS_AT}}
    return {f"{prefix}mrr": float(np.mean(1.0 / ranks)),
            **{f"{prefix}hits@{k}": float(np.mean(ranks <= k)) for k in HITS_AT}}


def random_mrr(num_candidates: int) -> float:
    """The expected MRR of a random scorer ranking the target among ``num_candidates`` others:
    ``H_{M+1} / (M + 1)``."""
    m = int(num_candidates) + 1
    return float(np.sum(1.0 / np.arange(1, m + 1)) / m)
