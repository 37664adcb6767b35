"""Ranking against a dataset's own negatives (``trainer.link.fixed_negatives``) equals a brute-force reference:
per-edge negative targets (OGB citation2) and negative pairs shared by the split (OGB collab/ddi)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from trainer.link.decoders import build_decoder
from trainer.link.embeddings import InMemoryEmbeddings
from trainer.link.encoders import EmbeddingEncoder
from trainer.link.fixed_negatives import PAIRS_PER_BATCH, evaluate_fixed, ranks_among_shared
from trainer.link.metrics import rank_metrics, ranks_against

N, D = 50, 8


def _model(decoder: str):  # noqa: ANN202 - (table, encoder, decoder)
    table = InMemoryEmbeddings(N, D, seed=3)
    dec = build_decoder(decoder, D)
    if decoder == "distmult":
        dec.relation.data.uniform_(0.5, 1.5)
    return table.table, EmbeddingEncoder(table, 0.1), dec


def _score(table: np.ndarray, relation: np.ndarray, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.einsum("...d,d,...d->...", table[u], relation, table[v]).astype(np.float32)


def test_shared_ranks_equal_the_pairwise_reference() -> None:
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 5, 300).astype(np.float32)  # ties on purpose
    neg = rng.integers(0, 5, 70).astype(np.float32)
    np.testing.assert_array_equal(ranks_among_shared(pos, neg), ranks_against(pos, np.tile(neg, (300, 1))))


@pytest.mark.parametrize("decoder", ["dot", "distmult"])
@pytest.mark.parametrize("kind", ["targets", "edges"])
def test_fixed_metrics_equal_brute_force(decoder: str, kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainer.link.fixed_negatives as fixed

    monkeypatch.setattr(fixed, "PAIRS_PER_BATCH", 3)  # several batches, a ragged last one
    assert PAIRS_PER_BATCH > 3
    table, encoder, dec = _model(decoder)
    relation = dec.relation.detach().numpy() if decoder == "distmult" else np.ones(D, np.float32)
    rng = np.random.default_rng(1)
    edges = rng.integers(0, N, size=(40, 2))
    negatives = rng.integers(0, N, size=(40, 9) if kind == "targets" else (25, 2))
    got = evaluate_fixed(encoder, dec, edges, negatives, kind, SimpleNamespace(seed=0), 2)
    pos = _score(table, relation, edges[:, 0], edges[:, 1])
    if kind == "targets":
        neg = _score(table, relation, edges[:, :1].repeat(9, 1), negatives)
    else:
        neg = np.tile(_score(table, relation, negatives[:, 0], negatives[:, 1]), (40, 1))
    want = rank_metrics(ranks_against(pos, neg), "fixed_")
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-6), key
    with pytest.raises(ValueError, match="expected the kind targets or edges"):
        evaluate_fixed(encoder, dec, edges, negatives, "pairs", SimpleNamespace(seed=0), 2)
