"""Link prediction parts (trainer/link): decoders and metrics against NumPy, the edge split, negatives, Adagrad
embeddings, the loss, and the ONNX export of both scorers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainer.link.decoders import DistMult, Dot, build_decoder
from trainer.link.embeddings import InMemoryEmbeddings, adagrad_rows, initial_rows
from trainer.link.metrics import filtered_ranks, random_mrr, rank_metrics, ranks_against
from trainer.link.negatives import NegativeSampler, chunk_bounds
from trainer.link.split import split_edges, undirected_edges
from trainer.link.train import LinkBatch, chunk_scores, link_step


def ring_csr(n: int, hops: tuple[int, ...] = (1, 2)) -> tuple[np.ndarray, np.ndarray]:
    """A symmetric circulant graph: i ~ i +- h for h in hops."""
    rows = [sorted({(i + s * h) % n for h in hops for s in (1, -1)}) for i in range(n)]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(r) for r in rows], out=indptr[1:])
    return indptr, np.concatenate(rows).astype(np.int64)


# ---------------------------------------------------------------------------------------------- decoders
def test_decoders_match_numpy() -> None:
    rng = np.random.default_rng(0)
    hu, hv, hc = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(7, 4))
    dot = Dot(4)
    dm = DistMult(4).double()
    r = rng.normal(size=4)
    with torch.no_grad():
        dm.relation.copy_(torch.from_numpy(r))
    t = lambda a: torch.from_numpy(a)  # noqa: E731
    np.testing.assert_allclose(dot(t(hu), t(hv)).numpy(), (hu * hv).sum(1), rtol=1e-12)
    np.testing.assert_allclose(dm(t(hu), t(hv)).detach().numpy(), (hu * r * hv).sum(1), rtol=1e-12)
    np.testing.assert_allclose(dm.score_candidates(t(hu), t(hc)).detach().numpy(), (hu * r) @ hc.T, rtol=1e-12)
    np.testing.assert_allclose(dot.score_candidates(t(hu), t(hc)).numpy(), hu @ hc.T, rtol=1e-12)
    with pytest.raises(ValueError, match="train.decoder"):
        build_decoder("transe", 4)


def test_chunk_scores_pair_each_positive_with_its_chunk() -> None:
    rng = np.random.default_rng(1)
    hs, hn = torch.from_numpy(rng.normal(size=(7, 3))), torch.from_numpy(rng.normal(size=(3, 5, 3)))
    got = chunk_scores(Dot(3), hs, hn, chunk=3).numpy()  # chunks of 3, 3, 1 positives
    want = np.stack([hs[b].numpy() @ hn[b // 3].numpy().T for b in range(7)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_loss_is_softmax_cross_entropy_over_positive_and_negatives() -> None:
    class Table:  # a fixed encoder: row v of a table
        training = True

        def __init__(self, h: np.ndarray) -> None:
            self.h = torch.from_numpy(h)

        def encode(self, nodes: np.ndarray, seed: int) -> torch.Tensor:
            return self.h[torch.from_numpy(nodes)]

    rng = np.random.default_rng(2)
    h = rng.normal(size=(10, 4))
    batch = LinkBatch(np.array([[0, 1], [2, 3], [4, 5]]), np.array([[6, 7], [8, 9]]))
    loss = float(link_step(Table(h), Dot(4), batch, chunk=2, seed=0))
    want = []
    for b, (u, v) in enumerate(batch.edges):
        logits = np.array([h[u] @ h[v], *[h[u] @ h[n] for n in batch.negatives[b // 2]]])
        want.append(-logits[0] + np.log(np.exp(logits).sum()))
    assert loss == pytest.approx(np.mean(want), rel=1e-10)


# ---------------------------------------------------------------------------------------------- metrics
def test_ranks_and_metrics_by_hand() -> None:
    pos = np.array([0.5, 0.5, 0.1])
    neg = np.array([[0.1, 0.2, 0.3], [0.9, 0.5, 0.1], [0.2, 0.3, 0.4]])
    ranks = ranks_against(pos, neg)
    assert ranks.tolist() == [1.0, 2.5, 4.0]
    m = rank_metrics(ranks)
    assert m["mrr"] == pytest.approx((1 + 1 / 2.5 + 1 / 4) / 3)
    assert (m["hits@1"], m["hits@3"], m["hits@10"]) == (pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0)
    assert random_mrr(1) == pytest.approx((1 + 1 / 2) / 2)
    # a constant scorer gets the middle rank, not the best
    assert ranks_against(np.zeros(1), np.zeros((1, 9))).tolist() == [5.5]


def test_filtered_ranks_reject_non_finite_scores() -> None:
    with pytest.raises(ValueError, match="finite"):
        filtered_ranks(np.array([[np.nan, 1.0]], np.float32), [0], [1], np.zeros(3, np.int64), np.zeros(0, np.int64))


# ---------------------------------------------------------------------------------------------- split
def test_split_is_deterministic_disjoint_and_complete() -> None:
    indptr, indices = ring_csr(200)
    a = split_edges(indptr, indices, 0.1, 0.1, seed=3)
    b = split_edges(indptr, indices, 0.1, 0.1, seed=3)
    c = split_edges(indptr, indices, 0.1, 0.1, seed=4)
    for name in ("train", "valid", "test"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.test, c.test)
    edges = undirected_edges(indptr, indices)
    assert len(edges) == 400 and (edges[:, 0] < edges[:, 1]).all()
    assert (len(a.valid), len(a.test), len(a.train)) == (40, 40, 320)
    keys = [set(map(tuple, s.tolist())) for s in (a.train, a.valid, a.test)]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    assert keys[0] | keys[1] | keys[2] == set(map(tuple, edges.tolist()))
    # the training topology: both directions of every training edge, no held-out edge
    tp, ti = a.train_csr()
    src = np.repeat(np.arange(200), np.diff(tp))
    seen = set(zip(src.tolist(), ti.tolist(), strict=True))
    assert len(seen) == 640 and all((v, u) in seen for u, v in seen)
    assert not any((u, v) in seen or (v, u) in seen for u, v in a.valid.tolist() + a.test.tolist())


def test_split_refuses_empty_splits() -> None:
    indptr, indices = ring_csr(5, (1,))
    with pytest.raises(ValueError, match="link_valid_fraction"):
        split_edges(indptr, indices, 0.01, 0.01, seed=0)


# ---------------------------------------------------------------------------------------------- negatives
def test_negatives_shapes_and_distributions() -> None:
    indptr, indices = ring_csr(50, (1,))
    # node 0 gets extra edges: a hub
    hub = np.concatenate([indices, np.zeros(50, np.int64)])
    rng = np.random.default_rng(0)
    uni = NegativeSampler("uniform", 50).sample(4, 5000, rng)
    assert uni.shape == (4, 5000) and uni.min() >= 0 and uni.max() < 50
    freq = np.bincount(uni.ravel(), minlength=50) / uni.size
    assert np.abs(freq - 1 / 50).max() < 0.006
    deg = NegativeSampler("degree", 51, hub)  # node 50 has no training edge
    draws = deg.sample(10, 4000, rng).ravel()
    freq = np.bincount(draws, minlength=51) / draws.size
    assert freq[50] == 0.0
    np.testing.assert_allclose(freq, deg.probabilities(), atol=0.006)
    assert deg.probabilities()[0] == pytest.approx(52 / 150)  # degree 2 + 50 extra, of 150 entries
    assert chunk_bounds(7, 3).tolist() == [0, 3, 6, 7]
    with pytest.raises(ValueError, match="negative_sampler"):
        NegativeSampler("zipf", 5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------- embeddings
def test_initial_rows_are_a_function_of_the_node() -> None:
    full = initial_rows(5, 3, 0, 70_000)
    np.testing.assert_array_equal(initial_rows(5, 3, 65_530, 65_540), full[65_530:65_540])
    assert not np.array_equal(initial_rows(6, 3, 0, 10), full[:10])


def test_adagrad_update_by_hand() -> None:
    rows, state = np.ones((2, 2), np.float32), np.full((2, 2), 3.0, np.float32)
    grad = np.array([[1.0, 0.0], [2.0, -1.0]], np.float32)
    adagrad_rows(rows, state, grad, lr=0.5)
    np.testing.assert_allclose(state, [[4, 3], [7, 4]])
    np.testing.assert_allclose(rows, [[1 - 0.5 / 2, 1], [1 - 0.5 * 2 / np.sqrt(7), 1 + 0.5 / 2]], rtol=1e-6)
    emb = InMemoryEmbeddings(10, 2, seed=0)
    before = emb.table.copy()
    emb.update(np.array([3, 7]), grad, 0.5)
    changed = np.flatnonzero((emb.table != before).any(axis=1))
    assert changed.tolist() == [3, 7]


# ---------------------------------------------------------------------------------------------- export
@pytest.mark.parametrize("encoder", ["gnn", "embedding"])
def test_onnx_scores_equal_pytorch(tmp_path, encoder: str) -> None:
    from trainer.link.export import EmbeddingScorer, GNNScorer, export_link_onnx, link_example, verify_link_onnx
    from trainer.models import build_model

    torch.manual_seed(0)
    dm = DistMult(8)
    with torch.no_grad():
        dm.relation.normal_()
    if encoder == "gnn":
        scorer = GNNScorer(build_model("graphsage", in_dim=5, hidden_dim=6, out_dim=8, num_layers=2, dropout=0.0), dm)
    else:
        scorer = EmbeddingScorer(torch.randn(20, 8), dm)
    path = export_link_onnx(scorer.eval(), tmp_path / "link.onnx")
    for seed in (3, 4):  # inputs of other sizes than the export's example: the axes are dynamic
        feed = link_example(scorer, num_pairs=5 + seed, seed=seed)
        assert verify_link_onnx(path, scorer, feed)[1] <= 1e-5
    # a different model is told apart (the comparison can fail)
    other = EmbeddingScorer(torch.randn(20, 8), dm) if encoder == "embedding" else GNNScorer(
        build_model("graphsage", in_dim=5, hidden_dim=6, out_dim=8, num_layers=2, dropout=0.0), dm)
    assert verify_link_onnx(path, other.eval(), link_example(scorer, seed=3))[0] > 1e-3


def test_filtered_evaluation_matches_brute_force() -> None:
    from pipelines.config import PipelineConfig
    from trainer.link.encoders import EmbeddingEncoder
    from trainer.link.train import LinkGraph, evaluate_split, use_filtered

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.eval_negatives=7", "train.negative_chunk=4"]).train
    indptr, indices = ring_csr(30, (1, 2))
    graph = LinkGraph.build(split_edges(indptr, indices, 0.2, 0.2, seed=1), indptr, indices)
    store = InMemoryEmbeddings(30, 4, seed=2)
    got = evaluate_split(EmbeddingEncoder(store, 0.1), Dot(4), graph, graph.split.test, cfg, 2, filtered=True)
    h = store.table.astype(np.float64)
    ranks = []
    for u, v in np.concatenate([graph.split.test, graph.split.test[:, ::-1]]).tolist():
        s = h[u] @ h.T
        known = set(indices[indptr[u]: indptr[u + 1]].tolist()) | {u}
        cand = np.array([s[j] for j in range(30) if j not in known - {v} and j != v])
        ranks.append(1 + np.sum(cand > s[v]) + 0.5 * np.sum(cand == s[v]))
    assert got["filtered_mrr"] == pytest.approx(np.mean(1 / np.array(ranks)), rel=1e-5)
    assert got["filtered_hits@1"] == pytest.approx(np.mean(np.array(ranks) <= 1))
    assert use_filtered(cfg, 30) and not use_filtered(cfg, cfg.filtered_max_nodes + 1)


def test_sampled_evaluation_in_groups_equals_one_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    # a large graph is evaluated a group of chunks at a time (bounded memory): the ranks must not change
    import trainer.link.train as link_train
    from pipelines.config import PipelineConfig
    from trainer.link.encoders import EmbeddingEncoder
    from trainer.link.train import LinkGraph, evaluate_split

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.eval_negatives=9", "train.negative_chunk=5"]).train
    indptr, indices = ring_csr(200, (1, 2, 3))
    graph = LinkGraph.build(split_edges(indptr, indices, 0.2, 0.2, seed=3), indptr, indices)
    encoder = EmbeddingEncoder(InMemoryEmbeddings(200, 8, seed=4), 0.1)
    whole = evaluate_split(encoder, DistMult(8), graph, graph.split.test, cfg, 2, filtered=False)
    monkeypatch.setattr(link_train, "_EVAL_GROUP_QUERIES", 12)  # groups of 2 chunks, the last one shorter
    grouped = evaluate_split(encoder, DistMult(8), graph, graph.split.test, cfg, 2, filtered=False)
    assert len(graph.split.test) * 2 > 5 * 12 and grouped == whole
