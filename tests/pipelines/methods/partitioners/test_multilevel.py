"""Multilevel partitioning (coarsen, partition the coarsest graph, refine): contraction against a dense
quotient graph, clustering and refinement invariants, and the quality it buys over single-level streaming."""

from __future__ import annotations

import numpy as np
import pytest

import pipelines.methods.partitioners as partition
from pipelines.config import PartitionConfig
from pipelines.core.graphio import GraphArrays
from pipelines.methods.partitioners import metis, multilevel
from pipelines.methods.partitioners.partgraph import PartGraph, capacity
from tests.pipelines.stage_fixtures import random_symmetric_csr


def chain_classes(n: int = 24000, k: int = 8, window: int = 6, deg: int = 12, local: float = 0.85,
                  same_class: float = 0.12, seed: int = 0) -> GraphArrays:
    """k classes, each a chain: a ``local`` share of the edges join nodes within ``window`` positions of the
    same class, ``same_class`` a random node of the class, the rest a random node of any class. Ids are
    scrambled, so streaming them in id order sees no structure -- the case where one-node-at-a-time
    partitioners fall into fragment optima."""
    rng = np.random.default_rng(seed)
    pos = np.arange(n)
    cls = pos * k // n
    lo = np.searchsorted(cls, np.arange(k))
    hi = np.append(lo[1:], n)
    m = n * deg // 2
    src = rng.integers(0, n, m)
    u = rng.random(m)
    step = rng.integers(-window, window + 1, m)
    near = np.clip(src + step, lo[cls[src]], hi[cls[src]] - 1)
    in_class = lo[cls[src]] + (rng.random(m) * (hi - lo)[cls[src]]).astype(np.int64)
    anywhere = rng.integers(0, n, m)
    dst = np.where(u < local, near, np.where(u < local + same_class, in_class, anywhere))
    ids = rng.permutation(n)  # position -> id
    s, d = ids[src], ids[dst]
    keep = s != d
    pairs = np.unique(np.stack([np.concatenate([s[keep], d[keep]]), np.concatenate([d[keep], s[keep]])], 1), axis=0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=indptr[1:])
    labels = np.empty(n, dtype=np.int64)
    labels[ids] = cls
    train = np.sort(rng.choice(n, n // 10, replace=False))
    return GraphArrays(indptr, pairs[:, 1].astype(np.int64), np.zeros((n, 1), np.float32), labels, train,
                       np.zeros(0, np.int64), np.zeros(0, np.int64))


def cut_fraction(g: GraphArrays, labels: np.ndarray) -> float:
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return float(np.mean(labels[rows] != labels[g.indices]))


@pytest.fixture(scope="module")
def chains() -> GraphArrays:
    return chain_classes()


def weighted_graph(n: int, seed: int) -> PartGraph:
    rng = np.random.default_rng(seed)
    indptr, indices = random_symmetric_csr(n, 6, seed)
    return PartGraph(indptr, indices, rng.integers(0, 3, n).astype(np.int64), rng.integers(1, 5, n).astype(np.int64),
                     rng.integers(1, 4, len(indices)).astype(np.int64))


# ---- contraction ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("chunk", [37, 10_000])
def test_contract_is_the_quotient_graph(weighted, chunk):
    g = weighted_graph(300, seed=1)
    if not weighted:
        g = PartGraph(g.indptr, g.indices, (g.train_weight > 0).astype(np.uint8))
    clusters = np.random.default_rng(2).integers(0, 300, 300) // 7 * 7  # cluster ids are node ids
    coarse, cmap = multilevel.contract(g, clusters, chunk)
    c = len(np.unique(clusters))
    assert coarse.num_nodes == c and cmap.dtype == np.int32
    assert np.array_equal(np.unique(clusters, return_inverse=True)[1], cmap)  # ids ranked by cluster id
    nw = np.ones(300, np.int64) if g.node_weight is None else g.node_weight
    ew = np.ones(len(g.indices), np.int64) if g.edge_weight is None else g.edge_weight
    assert np.array_equal(coarse.node_weight, np.bincount(cmap, weights=nw, minlength=c))
    assert np.array_equal(coarse.train_weight, np.bincount(cmap, weights=g.train_weight, minlength=c))
    dense = np.zeros((c, c), dtype=np.int64)
    rows = np.repeat(np.arange(300), np.diff(g.indptr))
    np.add.at(dense, (cmap[rows], cmap[g.indices]), ew)
    np.fill_diagonal(dense, 0)
    got = np.zeros((c, c), dtype=np.int64)
    crow = np.repeat(np.arange(c), np.diff(coarse.indptr))
    assert np.all(np.diff(coarse.indices)[np.diff(crow) == 0] > 0)  # rows sorted, no duplicate columns
    got[crow, coarse.indices] = coarse.edge_weight
    assert np.array_equal(got, dense)


def test_contract_refuses_a_coarse_graph_over_its_budget():
    g = weighted_graph(200, seed=3)
    with pytest.raises(multilevel._TooLarge, match="CSR entries"):
        multilevel.contract(g, np.arange(200), 50, max_bytes=100)


# ---- clustering and refinement ----------------------------------------------------------------------------


def test_cluster_keeps_weights_under_the_bound_and_shrinks_the_graph(chains):
    g = PartGraph.of(chains)
    clusters = multilevel.cluster(g, 40, 5000)
    sizes = np.bincount(clusters, minlength=g.num_nodes)
    assert sizes.max() <= 40
    assert len(np.unique(clusters)) < g.num_nodes / 8  # chains cluster well
    coarse, cmap = multilevel.contract(g, clusters, 5000)
    # most entries end inside clusters: the coarse graph keeps a small share of the weight
    assert coarse.edge_weight.sum() < 0.4 * g.num_entries
    assert np.all(np.bincount(cmap, minlength=coarse.num_nodes) == coarse.node_weight)


def test_refine_never_raises_the_cut_or_breaks_capacity(chains):
    g = PartGraph.of(chains)
    labels = partition.range_parts(g.num_nodes, 8)  # ids are scrambled: a poor start
    cap = capacity(g.num_nodes, 8, 0.05, [1] * 8)
    before = cut_fraction(chains, labels)
    moved = multilevel.refine(g, labels, cap, None, 7000)
    assert moved > 0
    assert cut_fraction(chains, labels) < before
    assert np.bincount(labels, minlength=8).max() <= cap[0]


def test_refine_drains_an_overloaded_part():
    indptr, indices = random_symmetric_csr(400, 8, seed=4)
    g = PartGraph(indptr, indices, np.zeros(400, np.uint8))
    labels = np.zeros(400, dtype=np.int32)
    labels[:40] = 1  # part 0 holds 360 nodes, capacity 220
    cap = capacity(400, 2, 0.1, [1, 1])
    multilevel.refine(g, labels, cap, None, 1000)
    assert np.bincount(labels, minlength=2).max() <= cap[0]


# ---- the whole scheme -------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["fennel", "grem"])
def test_multilevel_beats_single_level_on_local_structure(chains, method):
    p = 8
    single = partition.partition_graph(chains, method, p, PartitionConfig(multilevel=False, chunk_nodes=5000))
    multi, info = partition.partition_graph_info(chains, method, p, PartitionConfig(chunk_nodes=5000), None)
    for labels in (single, multi):
        assert np.bincount(labels, minlength=p).max() <= capacity(chains.num_nodes, p, 0.05, [1] * p)[0]
    assert info["multilevel"] == "on" and info["ml_levels"] >= 1
    assert info["ml_coarse_nodes"] <= max(multilevel.COARSE_NODES, multilevel.COARSE_PER_PART * p)
    cut_single, cut_multi = cut_fraction(chains, single), cut_fraction(chains, multi)
    assert cut_multi < 0.6 * cut_single, (cut_multi, cut_single)
    # classes are recovered: each part is dominated by one class
    purity = sum(np.bincount(chains.labels[multi == k]).max() for k in range(p)) / chains.num_nodes
    assert purity > 0.8, purity


@pytest.mark.skipif(not metis.available(), reason="pymetis not installed")
@pytest.mark.parametrize("method", ["fennel", "grem"])
def test_multilevel_comes_close_to_metis(chains, method):
    metis = cut_fraction(chains, partition.partition_graph(chains, "metis", 8, PartitionConfig()))
    multi = cut_fraction(chains, partition.partition_graph(chains, method, 8, PartitionConfig(chunk_nodes=5000)))
    assert multi <= 1.3 * metis, (multi, metis)


def test_multilevel_is_deterministic_and_thread_independent(chains):
    cfg = PartitionConfig(chunk_nodes=5000)
    one = partition.partition_graph(chains, "fennel", 8, cfg, num_threads=1)
    two = partition.partition_graph(chains, "fennel", 8, cfg, num_threads=2)
    assert np.array_equal(one, two)


def test_multilevel_fennel_keeps_training_nodes_balanced(chains):
    labels = partition.partition_graph(chains, "fennel", 8, PartitionConfig(chunk_nodes=5000, train_penalty=1.0))
    per_part = np.bincount(labels[chains.train_idx], minlength=8)
    assert per_part.max() <= capacity(len(chains.train_idx), 8, 0.05, [1] * 8)[0] * 1.05


def test_multilevel_steps_aside_when_memory_is_short(chains, monkeypatch):
    monkeypatch.setattr(multilevel, "STATE_BYTES_PER_NODE", 100)  # 24k nodes: labels fit 1 MiB / 2, state does not
    labels, info = partition.partition_graph_info(chains, "grem", 4, PartitionConfig(memory_mb=1), None)
    assert info["multilevel"].startswith("skipped:") and "bytes per node" in info["multilevel"]
    assert np.bincount(labels, minlength=4).max() <= capacity(chains.num_nodes, 4, 0.05, [1] * 4)[0]
    _, info = partition.partition_graph_info(chains, "fennel", 4, PartitionConfig(), None, counting="bloom")
    assert info["multilevel"].startswith("skipped: bloom")


def test_multilevel_stops_coarsening_when_the_first_coarse_graph_is_too_big(chains, monkeypatch):
    monkeypatch.setattr(multilevel, "COARSE_BYTES_PER_ENTRY", 10**9)
    labels, info = partition.partition_graph_info(chains, "grem", 4, PartitionConfig(chunk_nodes=5000), None)
    assert info["ml_levels"] == 0 and "over half of partition.memory_mb" in info["ml_stopped"]
    assert np.bincount(labels, minlength=4).max() <= capacity(chains.num_nodes, 4, 0.05, [1] * 4)[0]


def test_many_parts_raise_the_cluster_bound_to_reach_the_coarsening_target(chains):
    assert multilevel.cluster_max_weight(1_000_000, 16) == 977  # 64 clusters per part
    assert multilevel.cluster_max_weight(10_000_000, 7824) == 80  # else >= 500k coarse nodes: 16 per part
    p = 300
    labels, info = partition.partition_graph_info(chains, "fennel", p, PartitionConfig(chunk_nodes=5000), None)
    assert info["ml_cluster_max_weight"] == multilevel.cluster_max_weight(chains.num_nodes, p)
    assert info["ml_coarse_nodes"] < chains.num_nodes / 3
    assert len(np.unique(labels)) == p
    assert np.bincount(labels, minlength=p).max() <= capacity(chains.num_nodes, p, 0.05, [1] * p)[0]
