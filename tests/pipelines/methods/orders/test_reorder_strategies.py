"""Reorder strategies (bijections, same graph, consistent payload), the bounded-memory rewrite inside the
stage, scratch cleanup, stats, and locality on a planted-community graph."""

from __future__ import annotations

import numpy as np
import pytest

import pipelines.methods.partitioners as partition_stage
from pipelines.config import PipelineConfig
from pipelines.core.graphio import GraphArrays, load_graph
from pipelines.methods.orders.community import community_order, hubs_first
from pipelines.methods.orders.locality import average_edge_gap, pages_of_rows, pages_per_batch
from pipelines.stages import reorder
from storage_kernels.store import ArtifactStore
from tests.pipelines.stage_fixtures import make_graph_artifact

ALL = ["identity", "random", "degree", "bfs", "rcm", "community", "partition"]


def _cfg(**overrides: str) -> PipelineConfig:
    items = [f"{k.replace('__', '.')}={v}" for k, v in overrides.items()]
    return PipelineConfig.load(None, overrides=items + ["reorder.partition_method=range"], dataset="unit")


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(tmp_path / "store")


def _edges(indptr, indices, relabel=None) -> set:
    indptr, indices = np.asarray(indptr), np.asarray(indices)
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    src = indices
    if relabel is not None:
        dst, src = relabel[dst], relabel[src]
    return set(zip(dst.tolist(), src.tolist(), strict=True))


def planted_graph(num_communities: int = 400, size: int = 20, out_degree: int = 4, homophily: float = 0.9,
                  dim: int = 64, seed: int = 0) -> tuple[GraphArrays, np.ndarray]:
    """Communities of ``size`` nodes, ids shuffled; returns the graph (in memory) and each node's community."""
    rng = np.random.default_rng(seed)
    n = num_communities * size
    pos = np.repeat(np.arange(n), out_degree)
    comm = pos // size
    inside = rng.random(pos.size) < homophily
    target = np.where(inside, comm * size + rng.integers(0, size, pos.size), rng.integers(0, n, pos.size))
    keep = target != pos
    src, dst = pos[keep], target[keep]
    shuffle = rng.permutation(n)  # position -> id
    src, dst = shuffle[src], shuffle[dst]
    key = np.unique(np.concatenate([src * n + dst, dst * n + src]))
    s, d = key // n, key % n
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=n), out=indptr[1:])
    community = np.empty(n, dtype=np.int64)
    community[shuffle] = np.arange(n) // size
    features = rng.standard_normal((n, dim)).astype(np.float32)
    labels = community % 7
    train = np.sort(rng.choice(n, n // 2, replace=False))
    empty = np.empty(0, dtype=np.int64)
    return GraphArrays(indptr, d.astype(np.int64), features, labels, train, empty, empty), community


@pytest.mark.parametrize("strategy", ALL)
def test_every_strategy_rewrites_the_same_graph_consistently(store, strategy):
    graph = make_graph_artifact(store)
    art = reorder.run(store, _cfg(reorder__strategy=strategy, reorder__partition_parts="8"), ingest=graph).artifact
    perm, inverse = art.array("perm.npy"), art.array("inverse.npy")
    n = len(perm)
    assert np.array_equal(np.sort(perm), np.arange(n))
    assert np.array_equal(inverse[perm], np.arange(n))
    old, new = load_graph(graph), load_graph(art)
    assert _edges(new.indptr, new.indices, relabel=perm) == _edges(old.indptr, old.indices)
    assert np.array_equal(new.features, old.features[perm])
    assert np.array_equal(new.labels, old.labels[perm])
    for split in ("train", "val", "test"):
        assert np.array_equal(np.sort(perm[new.split(split)]), old.split(split))
        assert np.all(np.diff(new.split(split)) > 0)
    stats = art.stats
    assert stats["strategy"] == strategy
    for key in ("order_s", "rewrite_s", "time_s", "peak_rss_mb", "avg_edge_gap", "avg_edge_gap_before",
                "pages_per_batch", "pages_per_batch_before"):
        assert stats[key] >= 0, key
    assert art.manifest["format_version"] == 2
    # No scratch directory left beside the builder directories, nothing extra inside the artifact.
    assert not [p for p in store.root.rglob("*.scratch")]
    assert {f["name"] for f in art.manifest["files"]} == {
        "perm.npy", "inverse.npy", "indptr.npy", "indices.npy", "features.npy", "labels.npy",
        "train_idx.npy", "val_idx.npy", "test_idx.npy"}


def test_stage_rewrite_with_many_buckets_matches_in_memory(store, monkeypatch):
    monkeypatch.setattr(reorder, "_bucket_sizes", lambda memory_mb, row_bytes: (23, 57))
    graph = make_graph_artifact(store)
    art = reorder.run(store, _cfg(reorder__strategy="random", reorder__chunk_rows="31"), ingest=graph).artifact
    assert art.stats["feature_buckets"] == -(-600 // 23) and art.stats["csr_buckets"] > 20
    perm = art.array("perm.npy")
    old, new = load_graph(graph), load_graph(art)
    inverse = art.array("inverse.npy")
    expected = [inverse[old.indices[old.indptr[v]:old.indptr[v + 1]]] for v in perm]
    assert np.array_equal(new.indices, np.concatenate(expected))
    assert np.array_equal(new.features, old.features[perm])


def test_scratch_is_removed_on_error(store, monkeypatch):
    def boom(*args, **kwargs):
        scratch = args[5]
        assert scratch.parent.name.endswith(".scratch")
        assert scratch.parent.exists()
        raise OSError("disk full")

    monkeypatch.setattr(reorder, "external_permute_rows", boom)
    graph = make_graph_artifact(store)
    with pytest.raises(OSError, match="disk full"):
        reorder.run(store, _cfg(reorder__strategy="degree"), ingest=graph)
    assert not [p for p in store.root.rglob("*.scratch")]
    assert store.latest("unit", "reorder") is None


def test_params_select_the_version(store):
    graph = make_graph_artifact(store)
    a = reorder.run(store, _cfg(reorder__strategy="random", reorder__seed="1"), ingest=graph)
    b = reorder.run(store, _cfg(reorder__strategy="random", reorder__seed="1", reorder__memory_mb="3"), ingest=graph)
    c = reorder.run(store, _cfg(reorder__strategy="random", reorder__seed="2"), ingest=graph)
    assert b.reused and a.version == b.version and c.version != a.version
    assert not np.array_equal(a.artifact.array("perm.npy"), c.artifact.array("perm.npy"))


def test_orders_on_planted_graph():
    graph, community = planted_graph(num_communities=100, size=20)
    degrees = graph.degrees()
    for strategy in ALL[:-1]:
        perm = reorder.compute_order(graph, strategy)
        assert np.array_equal(np.sort(perm), np.arange(graph.num_nodes)), strategy
    assert np.all(np.diff(degrees[reorder.compute_order(graph, "degree")]) <= 0)
    # Both community methods recover most planted communities: each is mostly one run of the new order.
    for method in ("rabbit", "label_propagation"):
        info: dict = {}
        rc = _cfg(reorder__community_method=method, reorder__hub_fraction="0").reorder
        perm = reorder.compute_order(graph, "community", rc, info=info)
        assert info["community_method"] == method and info["hub_nodes"] == 0
        if method == "label_propagation":
            assert 50 <= info["num_communities"] <= 400
        runs = np.count_nonzero(np.diff(community[perm])) + 1
        assert runs < 300, (method, runs)  # random order: ~2000 runs


def test_community_order_puts_hubs_first():
    graph, _ = planted_graph(num_communities=100, size=20)
    degrees = graph.degrees()
    rc = _cfg(reorder__hub_fraction="0.05").reorder
    perm = reorder.compute_order(graph, "community", rc)
    hubs = int(round(0.05 * graph.num_nodes))
    assert np.array_equal(np.sort(perm), np.arange(graph.num_nodes))
    assert np.array_equal(perm[:hubs], np.argsort(-degrees, kind="stable")[:hubs])
    assert degrees[perm[:hubs]].min() >= degrees[perm[hubs:]].max()
    assert hubs_first(np.array([3, 1, 0, 2]), np.array([2, 1])).tolist() == [2, 1, 3, 0]


def test_community_order_ranks_by_size_then_degree():
    labels = np.array([5, 9, 5, 9, 9, 3])
    degrees = np.array([1, 2, 4, 2, 7, 0])
    perm, k = community_order(labels, degrees)
    assert k == 3
    assert perm.tolist() == [4, 1, 3, 2, 0, 5]


def test_partition_order_keeps_previous_relative_order(monkeypatch):
    graph, community = planted_graph(num_communities=50, size=20)
    parts = (community % 8).astype(np.int32)
    seen = {}

    def fake_partition_graph(g, method, num_parts, cfg, progress=None):
        seen.update(method=method, num_parts=num_parts)
        return parts

    monkeypatch.setattr(partition_stage, "partition_graph", fake_partition_graph, raising=False)
    rc = _cfg(reorder__partition_parts="8").reorder.model_copy(update={"partition_method": "fennel"})
    perm = reorder.compute_order(graph, "partition", rc)
    assert seen == {"method": "fennel", "num_parts": 8}
    assert np.all(np.diff(parts[perm]) >= 0)
    for p in range(8):
        block = perm[parts[perm] == p]
        assert np.all(np.diff(block) > 0)


def test_pages_of_rows_and_edge_gap():
    # 128-byte rows: 32 per page after the 4096-byte header; a 6000-byte row spans two or three pages.
    assert pages_of_rows(np.array([0, 31, 32, 100]), 128).tolist() == [1, 2, 4]
    assert pages_of_rows(np.array([0, 1]), 6000).tolist() == [1, 2, 3]
    g = GraphArrays(np.array([0, 1, 2]), np.array([1, 0]), np.zeros((2, 1), np.float32), np.zeros(2, np.int64),
                    np.array([0]), np.array([1]), np.array([], np.int64))
    assert average_edge_gap(g) == 1.0


def test_community_and_partition_touch_fewer_pages_than_random(monkeypatch):
    graph, community = planted_graph()
    kwargs = {"num_batches": 10, "batch_size": 16, "fanouts": (5, 5)}

    def pages(perm: np.ndarray) -> float:
        inverse = reorder.inverse_of(perm)
        new_indptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
        np.cumsum(graph.degrees()[perm], out=new_indptr[1:])
        rows = [inverse[graph.indices[graph.indptr[v]:graph.indptr[v + 1]]] for v in perm]
        new = GraphArrays(new_indptr, np.concatenate(rows), graph.features, graph.labels[perm],
                          np.sort(inverse[graph.train_idx]), graph.val_idx, graph.test_idx)
        return pages_per_batch(new, **kwargs)

    random_pages = pages(reorder.compute_order(graph, "random"))
    community_pages = pages(reorder.compute_order(graph, "community"))
    assert community_pages < 0.7 * random_pages, (community_pages, random_pages)

    # The partition strategy with an oracle partitioner (the planted communities): parts become contiguous.
    monkeypatch.setattr(partition_stage, "partition_graph",
                        lambda g, method, k, cfg, progress=None: community.astype(np.int32), raising=False)
    rc = _cfg(reorder__partition_parts="400").reorder.model_copy(update={"partition_method": "fennel"})
    partition_pages = pages(reorder.compute_order(graph, "partition", rc))
    assert partition_pages < 0.7 * random_pages, (partition_pages, random_pages)


def test_real_partitioner_order_beats_random():
    graph, _ = planted_graph(num_communities=100, size=20)
    rc = _cfg(reorder__partition_parts="100").reorder.model_copy(update={"partition_method": "fennel"})
    perm = reorder.compute_order(graph, "partition", rc)
    assert np.array_equal(np.sort(perm), np.arange(graph.num_nodes))
    gap = average_edge_gap
    inverse = reorder.inverse_of(perm)
    new_indptr = np.zeros(graph.num_nodes + 1, dtype=np.int64)
    np.cumsum(graph.degrees()[perm], out=new_indptr[1:])
    rows = [inverse[graph.indices[graph.indptr[v]:graph.indptr[v + 1]]] for v in perm]
    new = GraphArrays(new_indptr, np.concatenate(rows), graph.features, graph.labels, graph.train_idx,
                      graph.val_idx, graph.test_idx)
    assert gap(new) < gap(graph)
