"""Synthetic generator: determinism, chunk independence, heavy tails, learnable but noisy labels."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.sparse as sp

from pipelines.methods.sources.synthetic import (
    BLOCK_NODES,
    DEFAULT_FEATURE_NOISE,
    DEFAULT_LABEL_NOISE,
    SPLIT_FRACTIONS,
    SyntheticGraph,
    SyntheticParams,
    _Feistel,
    synthetic_params,
    synthetic_source,
)
from pipelines.methods.sources.validate import validate_source
from tests.pipelines.source_fixtures import collect_edges, collect_features

PARAMS = SyntheticParams(nodes=3 * BLOCK_NODES + 123, degree=10, dim=16, classes=5, seed=11)


def _sorted_edges(src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    order = np.lexsort((dst, src))
    return np.stack([src[order], dst[order]])


@pytest.fixture(scope="module")
def graph() -> SyntheticGraph:
    return SyntheticGraph(PARAMS)


@pytest.fixture(scope="module")
def source(graph: SyntheticGraph):
    return validate_source(graph.source(chunk_nodes=BLOCK_NODES))


@pytest.fixture(scope="module")
def edges(source) -> tuple[np.ndarray, np.ndarray]:
    return collect_edges(source)


def test_same_seed_gives_identical_chunks(source) -> None:
    again = SyntheticGraph(PARAMS).source(chunk_nodes=BLOCK_NODES)
    for (s1, d1), (s2, d2) in zip(source.edge_chunks(), again.edge_chunks(), strict=True):
        np.testing.assert_array_equal(s1, s2)
        np.testing.assert_array_equal(d1, d2)
    for f1, f2 in zip(source.feature_chunks(), again.feature_chunks(), strict=True):
        np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(source.labels, again.labels)
    np.testing.assert_array_equal(source.train_idx, again.train_idx)


def test_iterators_are_fresh_on_every_call(source) -> None:
    first = collect_edges(source)
    second = collect_edges(source)
    np.testing.assert_array_equal(first[0], second[0])
    assert collect_features(source).shape == (PARAMS.nodes, PARAMS.dim)


def test_other_seed_gives_another_graph(edges) -> None:
    other = synthetic_source(PARAMS.nodes, PARAMS.degree, PARAMS.dim, PARAMS.classes, seed=PARAMS.seed + 1)
    src, _ = collect_edges(other)
    assert len(src) != len(edges[0]) or not np.array_equal(src, edges[0])


def test_output_does_not_depend_on_chunk_size(graph: SyntheticGraph, source, edges) -> None:
    big = graph.source(chunk_nodes=10 * BLOCK_NODES)
    assert len(list(big.edge_chunks())) == 1
    np.testing.assert_array_equal(_sorted_edges(*collect_edges(big)), _sorted_edges(*edges))
    np.testing.assert_array_equal(collect_features(big), collect_features(source))


def test_any_block_regenerates_alone(graph: SyntheticGraph, source) -> None:
    features = collect_features(source)
    last = graph.num_blocks - 1
    start, stop = graph.block_range(last)
    np.testing.assert_array_equal(SyntheticGraph(PARAMS).features_block(last), features[start:stop])
    assert stop == PARAMS.nodes and stop - start == 123
    with pytest.raises(IndexError, match="'block' expected an index in \\[0, 4\\) \\(got 4\\)"):
        graph.block_range(4)


def test_edges_symmetric_loop_free_in_range(edges) -> None:
    src, dst = edges
    assert src.dtype == np.int64 and dst.dtype == np.int64
    assert not (src == dst).any()
    assert src.min() >= 0 and src.max() < PARAMS.nodes
    np.testing.assert_array_equal(_sorted_edges(src, dst), _sorted_edges(dst, src))


def test_degree_distribution_is_heavy_tailed(edges) -> None:
    degree = np.bincount(edges[0], minlength=PARAMS.nodes)
    assert abs(degree.mean() - PARAMS.degree) < 0.15 * PARAMS.degree
    assert degree.max() > 8 * degree.mean()
    # a power-law tail: the top 1% of nodes hold far more than 1% of the edge endpoints
    top = np.sort(degree)[-PARAMS.nodes // 100 :]
    assert top.sum() > 0.08 * degree.sum()


def test_communities_are_homophilous_and_hidden_in_ids(graph: SyntheticGraph, source, edges) -> None:
    src, dst = edges
    community = graph.labels_of(np.arange(PARAMS.nodes))
    same = (community[src] == community[dst]).mean()
    assert 0.7 < same < 0.95  # homophily 0.8 plus uniform picks that land in the own community
    assert len(np.unique(source.labels[:64])) == PARAMS.classes  # ids are not sorted by community
    assert np.bincount(source.labels).min() > 0.5 * PARAMS.nodes / PARAMS.classes


def _nearest_centroid_accuracy(
    x: np.ndarray, labels: np.ndarray, train: np.ndarray, test: np.ndarray
) -> float:
    classes = labels.max() + 1
    centroids = np.stack([x[train][labels[train] == c].mean(axis=0) for c in range(classes)])
    dist = ((x[test, None, :] - centroids[None]) ** 2).sum(-1)
    return float((dist.argmin(1) == labels[test]).mean())


@pytest.mark.parametrize(
    ("noise", "alone_range", "gain"),
    [
        ({}, (0.25, 0.4), 0.05),  # the defaults: features alone say little (0.30 when written), neighbours help
        ({"label_noise": 0.0, "feature_noise": 1.0}, (0.4, 0.95), 0.1),  # version 1: 0.62 alone, 0.84 smoothed
    ],
)
def test_labels_learnable_from_features_and_better_with_neighbours(noise: dict, alone_range: tuple[float, float],
                                                                   gain: float) -> None:
    source = SyntheticGraph(dataclasses.replace(PARAMS, **noise)).source()
    edges = collect_edges(source)
    x = collect_features(source)
    labels, train, test = source.labels, source.train_idx, source.test_idx
    assert 1.0 / PARAMS.classes < alone_range[0]  # chance
    alone = _nearest_centroid_accuracy(x, labels, train, test)
    assert alone_range[0] < alone < alone_range[1], alone
    adj = sp.csr_matrix((np.ones(len(edges[0]), np.float32), edges), shape=(PARAMS.nodes, PARAMS.nodes))
    degree = np.maximum(np.asarray(adj.sum(1)).ravel(), 1)
    smoothed = x + (adj @ x) / degree[:, None]  # one mean-aggregation step, as GraphSAGE would
    assert _nearest_centroid_accuracy(smoothed, labels, train, test) > alone + gain


def test_label_noise_redraws_a_fraction_of_labels_and_nothing_else(graph: SyntheticGraph, source) -> None:
    assert PARAMS.label_noise == DEFAULT_LABEL_NOISE > 0
    community = graph.labels_of(np.arange(PARAMS.nodes))
    changed = source.labels != community
    expected = PARAMS.label_noise * (1 - 1 / PARAMS.classes)  # a redraw may land on the community itself
    assert abs(changed.mean() - expected) < 4 * np.sqrt(expected / PARAMS.nodes)
    assert graph.description()["label_noise_ceiling"] == pytest.approx(1 - expected)
    # the redrawn labels are uniform, whatever the community: every (community, label) pair occurs
    pairs = np.bincount(community[changed] * PARAMS.classes + source.labels[changed], minlength=PARAMS.classes ** 2)
    assert (pairs.reshape(PARAMS.classes, -1)[~np.eye(PARAMS.classes, dtype=bool)] > 0).all()
    for block in range(graph.num_blocks):  # each block alone, from its own stream
        start, stop = graph.block_range(block)
        np.testing.assert_array_equal(SyntheticGraph(PARAMS).labels_block(block), source.labels[start:stop])
    clean = SyntheticGraph(dataclasses.replace(PARAMS, label_noise=0.0))
    np.testing.assert_array_equal(clean.labels(), community)
    np.testing.assert_array_equal(clean.edges_block(1)[1], graph.edges_block(1)[1])  # edges and features stay
    np.testing.assert_array_equal(clean.features_block(1), graph.features_block(1))
    heavier = SyntheticGraph(dataclasses.replace(PARAMS, label_noise=0.5)).labels()
    assert (heavier != community).mean() > 2 * changed.mean()


def test_feature_noise_is_the_noise_around_the_class_centroid(graph: SyntheticGraph) -> None:
    assert PARAMS.feature_noise == DEFAULT_FEATURE_NOISE
    community = graph.labels_of(np.arange(*graph.block_range(0)))
    residual = graph.features_block(0) - graph.centroids[community]
    assert abs(residual.std() - PARAMS.feature_noise) < 0.02 * PARAMS.feature_noise
    quiet = SyntheticGraph(dataclasses.replace(PARAMS, feature_noise=0.5))
    np.testing.assert_allclose(quiet.features_block(0) - graph.centroids[community], residual / 6, rtol=1e-5,
                               atol=1e-6)  # the same draws, scaled: the seed fixes the graph, the knob the noise
    np.testing.assert_array_equal(quiet.edges_block(0)[1], graph.edges_block(0)[1])
    np.testing.assert_array_equal(quiet.labels(), graph.labels())
    exact = SyntheticGraph(dataclasses.replace(PARAMS, feature_noise=0.0)).features_block(0)
    np.testing.assert_array_equal(exact, graph.centroids[community])


def test_splits_are_seeded_fractions(source) -> None:
    n = PARAMS.nodes
    for idx, fraction in zip(
        (source.train_idx, source.val_idx, source.test_idx), SPLIT_FRACTIONS, strict=True
    ):
        assert abs(len(idx) - fraction * n) < 4 * np.sqrt(n * fraction)
        assert np.all(np.diff(idx) > 0)
    assert source.description["params"]["seed"] == PARAMS.seed
    assert source.undirected and not source.deduplicated


@pytest.mark.parametrize("n", [2, 3, 17, 1000, 4097])
def test_feistel_is_a_bijection(n: int) -> None:
    perm = _Feistel(n, np.array([5, 6, 7, 8], dtype=np.uint64))
    ids = perm.forward(np.arange(n))
    np.testing.assert_array_equal(np.sort(ids), np.arange(n))
    np.testing.assert_array_equal(perm.inverse(ids), np.arange(n))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"nodes": 1}, "'synthetic.nodes' expected an integer >= 2 \\(got 1\\)"),
        (
            {"nodes": 100, "classes": 80},
            "'synthetic.classes' expected an integer in \\[1, nodes/2\\] \\(got 80\\)",
        ),
        ({"nodes": 100, "homophily": 1.5}, "'synthetic.homophily' expected a probability"),
        ({"nodes": 10, "degree": 40}, "'synthetic.degree' expected less than"),
        ({"nodes": 100, "dim": 0}, "'synthetic.dim' expected a positive integer \\(got 0\\)"),
        ({"nodes": 100, "label_noise": 1.5}, "'synthetic.label_noise' expected a fraction in \\[0, 1\\] \\(got 1.5\\)"),
        ({"nodes": 100, "feature_noise": -1.0},
         "'synthetic.feature_noise' expected a finite number >= 0 \\(got -1.0\\)"),
        ({"nodes": 100, "feature_noise": float("inf")}, "'synthetic.feature_noise' expected a finite number"),
    ],
)
def test_bad_params_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SyntheticParams(**kwargs)


def test_locality_puts_most_edges_near_their_source_position():
    from pipelines.methods.sources.synthetic import SyntheticGraph, SyntheticParams

    graph = SyntheticGraph(SyntheticParams(nodes=20000, degree=10, dim=4, classes=4, seed=2, locality=0.7,
                                           window=64))
    src, dst = graph.edges_block(0)
    gap = np.abs(graph.permutation.inverse(src) - graph.permutation.inverse(dst))
    assert np.mean(gap <= 64) > 0.6  # local edges land within the window of positions
    plain = SyntheticGraph(SyntheticParams(nodes=20000, degree=10, dim=4, classes=4, seed=2))
    psrc, pdst = plain.edges_block(0)
    assert np.mean(np.abs(plain.permutation.inverse(psrc) - plain.permutation.inverse(pdst)) <= 64) < 0.1


def test_labeled_scales_the_splits_and_leaves_default_specs_unchanged() -> None:
    few = SyntheticGraph(dataclasses.replace(PARAMS, labeled=0.04)).source()
    n = PARAMS.nodes
    for idx, fraction in zip((few.train_idx, few.val_idx, few.test_idx), (0.01, 0.01, 0.02), strict=True):
        assert abs(len(idx) - fraction * n) < 4 * np.sqrt(n * fraction) + 1
    default = SyntheticGraph(PARAMS).source()
    assert "labeled" not in default.description["params"]
    assert few.description["params"]["labeled"] == 0.04
    assert "labeled" in synthetic_params("nodes=10,labeled=0.5", "synthetic:nodes=10,labeled=0.5")
    spec = "synthetic:nodes=10,label_noise=0.25,feature_noise=2"
    assert synthetic_params(spec.partition(":")[2], spec) == {"nodes": 10, "label_noise": 0.25, "feature_noise": 2.0}
    with pytest.raises(ValueError, match="synthetic.labeled"):
        SyntheticParams(nodes=10, labeled=0.0)
