"""Ranking against a dataset's own fixed negatives (OGB's protocols), beside the sampled/filtered metrics.

A source may ship negatives for its held-out edges (``pipelines.methods.sources.linksplit``):

``targets`` ``(Q, K)``
    each held-out edge ``(u, v)`` is asked once, ``u -> ?``, against its own ``K`` negative destinations
    (OGB citation2's MRR protocol);
``edges`` ``(M, 2)``
    every held-out edge's score is ranked among the scores of all ``M`` negative pairs, shared by the split
    (OGB collab/ddi/ppa, whose Hits@K counts positives scoring above the K-th best negative).

Ranks follow :mod:`trainer.link.metrics` (ties count half). The metrics are ``fixed_mrr`` and ``fixed_hits@k``
(``rank_metrics`` with the prefix ``fixed_``); the headline ``mrr``/``hits@k`` keep Strata's protocol.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from trainer.link.decoders import Decoder
from trainer.link.metrics import rank_metrics, ranks_against
from trainer.link.train import batch_seed, embed_nodes

__all__ = ["PAIRS_PER_BATCH", "evaluate_fixed", "pair_scores", "ranks_among_shared"]

PAIRS_PER_BATCH = 8192  # pairs (or queries x negatives / 64) encoded per batch


def pair_scores(encoder: Any, decoder: Decoder, pairs: np.ndarray, seed: int) -> np.ndarray:
    """``(P,)`` float32 decoder scores of the pairs ``(P, 2)``, encoded in batches of distinct nodes."""
    out = np.empty(len(pairs), dtype=np.float32)
    for lo in range(0, len(pairs), PAIRS_PER_BATCH):
        part = pairs[lo: lo + PAIRS_PER_BATCH]
        nodes, pos = np.unique(part.ravel(), return_inverse=True)
        h = embed_nodes(encoder, nodes, seed + lo)
        index = torch.from_numpy(pos.reshape(-1, 2)).to(h.device)
        out[lo: lo + len(part)] = decoder(h[index[:, 0]], h[index[:, 1]]).float().cpu().numpy()
    return out


def ranks_among_shared(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """``(Q,)`` ranks of each score of ``pos`` among all of ``neg`` (shared): ``1 + #greater + 0.5 * #equal``,
    by binary search in the sorted negatives (no ``Q x M`` matrix)."""
    ordered = np.sort(np.asarray(neg, dtype=np.float32))
    pos = np.asarray(pos, dtype=np.float32)
    right = np.searchsorted(ordered, pos, side="right")
    left = np.searchsorted(ordered, pos, side="left")
    return 1.0 + (len(ordered) - right) + 0.5 * (right - left)


def _target_ranks(encoder: Any, decoder: Decoder, edges: np.ndarray, negatives: np.ndarray, seed: int) -> np.ndarray:
    ranks = np.empty(len(edges))
    step = max(1, PAIRS_PER_BATCH * 64 // max(negatives.shape[1] + 2, 1))
    for lo in range(0, len(edges), step):
        e, n = edges[lo: lo + step], negatives[lo: lo + step]
        nodes, pos = np.unique(np.concatenate([e.ravel(), n.ravel()]), return_inverse=True)
        h = embed_nodes(encoder, nodes, seed + lo)
        index = torch.from_numpy(pos).to(h.device)
        h_src, h_dst = h[index[0: 2 * len(e): 2]], h[index[1: 2 * len(e): 2]]
        h_neg = h[index[2 * len(e):]].view(len(e), n.shape[1], -1)
        positive = decoder(h_src, h_dst).float().cpu().numpy()
        negative = torch.bmm(h_neg, decoder.query(h_src)[:, :, None])[:, :, 0].float().cpu().numpy()
        ranks[lo: lo + len(e)] = ranks_against(positive, negative)
    return ranks


@torch.no_grad()
def evaluate_fixed(encoder: Any, decoder: Decoder, edges: np.ndarray, negatives: np.ndarray, kind: str, cfg: Any,
                   split_id: int) -> dict[str, float]:
    """``fixed_mrr``/``fixed_hits@k`` of the held-out ``edges`` against their fixed ``negatives`` of ``kind``
    (``targets`` or ``edges``, see the module docstring)."""
    edges = np.asarray(edges, dtype=np.int64)
    negatives = np.asarray(negatives, dtype=np.int64)
    seed = batch_seed(cfg.seed, 1 << 21, split_id)
    was = decoder.training
    decoder.eval()
    try:
        if kind == "targets":
            ranks = _target_ranks(encoder, decoder, edges, negatives, seed)
        elif kind == "edges":
            ranks = ranks_among_shared(pair_scores(encoder, decoder, edges, seed),
                                       pair_scores(encoder, decoder, negatives, seed + (1 << 30)))
        else:
            raise ValueError(f"'negatives' expected the kind targets or edges (got {kind!r})")
    finally:
        decoder.train(was)
    return rank_metrics(ranks, "fixed_")
