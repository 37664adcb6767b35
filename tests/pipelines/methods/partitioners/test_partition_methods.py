"""Partition methods (range, metis, fennel, grem): validity, balance, cut quality, stage outputs."""

from __future__ import annotations

import numpy as np
import pytest

import pipelines.methods.partitioners as partitioners
from pipelines.config import PartitionConfig, PipelineConfig
from pipelines.core.graphio import GraphArrays, load_graph
from pipelines.methods.partitioners import metis
from pipelines.stages import partition
from storage_kernels.store import ArtifactStore
from tests.pipelines.stage_fixtures import random_symmetric_csr

needs_metis = pytest.mark.skipif(not metis.available(), reason="pymetis not installed")


def planted_graph(n: int = 1200, k: int = 4, deg_in: int = 12, deg_out: float = 0.6, seed: int = 0) -> GraphArrays:
    """k dense communities with few cross edges; node ids shuffled so ranges do not follow communities."""
    rng = np.random.default_rng(seed)
    comm = rng.permutation(np.arange(n) % k)  # community of each (shuffled) id
    members = [np.flatnonzero(comm == c) for c in range(k)]
    src, dst = [], []
    for c in range(k):
        mc = members[c]
        m = len(mc) * deg_in // 2
        src.append(rng.choice(mc, m))
        dst.append(rng.choice(mc, m))
    m_out = int(n * deg_out / 2)
    src.append(rng.integers(0, n, m_out))
    dst.append(rng.integers(0, n, m_out))
    s, d = np.concatenate(src), np.concatenate(dst)
    keep = s != d
    pairs = np.unique(np.stack([np.concatenate([s[keep], d[keep]]), np.concatenate([d[keep], s[keep]])], 1), axis=0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=indptr[1:])
    order = rng.permutation(n)
    train = np.sort(order[: n // 2])
    return GraphArrays(indptr=indptr, indices=pairs[:, 1].astype(np.int64), features=np.zeros((n, 2), np.float32),
                       labels=comm.astype(np.int64), train_idx=train, val_idx=np.sort(order[n // 2 : 3 * n // 4]),
                       test_idx=np.sort(order[3 * n // 4 :]))


def cut_fraction(g: GraphArrays, labels: np.ndarray) -> float:
    rows = np.repeat(np.arange(g.num_nodes), np.diff(g.indptr))
    return float(np.mean(labels[rows] != labels[g.indices]))


def check_valid(labels: np.ndarray, n: int, p: int, imbalance: float) -> None:
    assert labels.dtype == np.int32 and labels.shape == (n,)
    assert labels.min() >= 0 and labels.max() < p
    sizes = np.bincount(labels, minlength=p)
    assert sizes.max() <= (1 + imbalance) * n / p + 1, sizes


@pytest.fixture(scope="module")
def planted() -> GraphArrays:
    return planted_graph()


@pytest.mark.parametrize("multilevel", [False, True])
@pytest.mark.parametrize("method", ["range", pytest.param("metis", marks=needs_metis), "fennel", "grem"])
@pytest.mark.parametrize("p", [1, 3, 4, 8])
def test_every_method_gives_a_valid_balanced_labelling(planted, method, p, multilevel):
    cfg = PartitionConfig(imbalance=0.05, chunk_nodes=300, grem_chunk_fraction=0.2, multilevel=multilevel)
    labels = partitioners.partition_graph(planted, method, p, cfg)
    check_valid(labels, planted.num_nodes, p, 0.05)


@pytest.mark.parametrize("multilevel", [False, True])
@pytest.mark.parametrize("method", [pytest.param("metis", marks=needs_metis), "fennel", "grem"])
def test_min_cut_methods_beat_range_and_random_on_planted_partitions(planted, method, multilevel):
    cfg = PartitionConfig(imbalance=0.05, chunk_nodes=500, grem_chunk_fraction=0.1, multilevel=multilevel)
    labels = partitioners.partition_graph(planted, method, 4, cfg)
    rng_labels = np.random.default_rng(0).integers(0, 4, planted.num_nodes).astype(np.int32)
    base = min(cut_fraction(planted, partitioners.range_parts(planted.num_nodes, 4)), cut_fraction(planted, rng_labels))
    got = cut_fraction(planted, labels)
    assert got < 0.4 * base, (got, base)


def test_fennel_bloom_path_is_valid_and_cuts_well(planted):
    cfg = PartitionConfig(imbalance=0.1, chunk_nodes=256, bloom_bits=1 << 14)
    labels = partitioners.partition_graph(planted, "fennel", 4, cfg, counting="bloom")
    check_valid(labels, planted.num_nodes, 4, 0.1)
    # single pass (a Bloom filter cannot forget a member, so no restreaming): weaker than exact, still a cut
    assert cut_fraction(planted, labels) < 0.6 * cut_fraction(planted, partitioners.range_parts(planted.num_nodes, 4))


@pytest.mark.parametrize("multilevel", [False, True])
@pytest.mark.parametrize("counting", ["exact", "bloom"])
def test_fennel_does_not_depend_on_thread_count_or_chunking(counting, multilevel):
    g = planted_graph(n=6000, k=6, seed=3)
    base = PartitionConfig(num_parts=6, chunk_nodes=1000, bloom_bits=1 << 12, multilevel=multilevel)
    one = partitioners.partition_graph(g, "fennel", 6, base, num_threads=1, counting=counting)
    many = partitioners.partition_graph(g, "fennel", 6, base, num_threads=4, counting=counting)
    assert np.array_equal(one, many)
    if counting == "exact" and not multilevel:  # the sequential algorithm: chunking does not matter either
        # (multilevel coarsening visits each chunk's nodes by degree, so there the chunk size is a parameter)
        other = partitioners.partition_graph(g, "fennel", 6, base.model_copy(update={"chunk_nodes": 777}),
                                          counting=counting)
        assert np.array_equal(one, other)


def test_fennel_two_level(planted):
    cfg = PartitionConfig(two_level_threshold=4, chunk_nodes=400)
    labels = partitioners.partition_graph(planted, "fennel", 10, cfg)  # 4 top parts with 3, 3, 2, 2 final parts
    check_valid(labels, planted.num_nodes, 10, cfg.imbalance)
    assert len(np.unique(labels)) == 10


def test_fennel_training_penalty_balances_training_nodes(planted):
    counts = []
    for penalty in (0.0, 50.0):
        cfg = PartitionConfig(train_penalty=penalty, imbalance=0.3)
        labels = partitioners.partition_graph(planted, "fennel", 4, cfg)
        counts.append(np.bincount(labels[planted.train_idx], minlength=4).max())
    assert counts[1] <= counts[0]


def test_grem_without_pymetis_uses_bfs_halving(planted, monkeypatch):
    monkeypatch.setattr(metis, "_pymetis", None)
    labels = partitioners.partition_graph(planted, "grem", 4, PartitionConfig(grem_chunk_fraction=0.2))
    check_valid(labels, planted.num_nodes, 4, 0.05)
    assert cut_fraction(planted, labels) < 0.5 * cut_fraction(planted, partitioners.range_parts(planted.num_nodes, 4))


def test_grem_is_deterministic(planted):
    cfg = PartitionConfig(grem_chunk_fraction=0.15)
    assert np.array_equal(partitioners.partition_graph(planted, "grem", 6, cfg),
                          partitioners.partition_graph(planted, "grem", 6, cfg))


@needs_metis
def test_metis_refuses_a_graph_over_the_memory_budget():
    indptr, indices = random_symmetric_csr(20000, 8, seed=1)
    n = len(indptr) - 1
    g = GraphArrays(indptr, indices, np.zeros((n, 1), np.float32), np.zeros(n, np.int64), np.arange(10),
                    np.arange(10, 20), np.arange(20, 30))
    need_mb = partitioners.metis_peak_bytes(g) / 2**20
    assert partitioners.metis_csr_bytes(g) > 1 << 20 and need_mb > 16
    with pytest.raises(ValueError, match=r"partition.memory_mb' expected >= \d+ MiB.*got a budget of 16 MiB"):
        partitioners.partition_graph(g, "metis", 4, PartitionConfig(memory_mb=16))
    labels = partitioners.partition_graph(g, "metis", 4, PartitionConfig(memory_mb=int(need_mb) + 1))
    check_valid(labels, n, 4, 0.05)


def test_unknown_method_is_refused(planted):
    with pytest.raises(ValueError, match="'partition.method' expected one of"):
        partitioners.partition_graph(planted, "spectral", 4, PartitionConfig())


# ---- the stage --------------------------------------------------------------------------------------------


def publish_graph(store: ArtifactStore, g: GraphArrays):
    version = store.version_for("ingest", 1, {"fixture": "planted"}, {})
    with store.builder("unit", "ingest", version, {"fixture": "planted"}, {}) as b:
        for name in ("indptr", "indices", "features", "labels", "train_idx", "val_idx", "test_idx"):
            b.save_array(f"{name}.npy", getattr(g, name))
        return b.publish()


@pytest.mark.parametrize("method", ["range", pytest.param("metis", marks=needs_metis), "fennel", "grem"])
def test_stage_writes_consistent_outputs(tmp_path, planted, method):
    store = ArtifactStore(tmp_path / "root")
    graph_art = publish_graph(store, planted)
    cfg = PipelineConfig.load(overrides=[f"partition.method={method}", "partition.num_parts=4"], dataset="unit")
    art = partition.run(store, cfg, reorder=graph_art).artifact
    g = load_graph(graph_art)
    n, p = g.num_nodes, 4
    parts = art.array("parts.npy")
    assert art.manifest["format_version"] == 2
    ptr, nodes = art.array("part_ptr.npy"), art.array("part_nodes.npy")
    assert np.array_equal(np.sort(nodes), np.arange(n))
    for k in range(p):
        assert np.all(parts[nodes[ptr[k] : ptr[k + 1]]] == k)
        assert np.all(np.diff(nodes[ptr[k] : ptr[k + 1]]) > 0)
    for split in ("train", "val", "test"):
        sptr, ids = art.array(f"part_{split}_ptr.npy"), art.array(f"part_{split}.npy")
        assert np.array_equal(np.sort(ids), g.split(split))
        for k in range(p):
            assert np.all(parts[ids[sptr[k] : sptr[k + 1]]] == k)
    rows = np.repeat(np.arange(n), np.diff(g.indptr))
    buckets = art.array("bucket_counts.npy")
    assert buckets.shape == (p, p) and buckets.sum() == g.num_edges
    want = np.zeros((p, p), dtype=np.int64)
    np.add.at(want, (parts[g.indices], parts[rows]), 1)
    assert np.array_equal(buckets, want)
    cross = art.array("cross_counts.npy")
    assert cross.dtype == np.int32
    assert np.array_equal(cross, np.bincount(rows[parts[rows] != parts[g.indices]], minlength=n))
    stats = art.stats
    assert stats["edge_cut"] == pytest.approx(cross.sum() / g.num_edges)
    assert stats["balance"] == pytest.approx(np.bincount(parts, minlength=p).max() / (n / p))
    for key in ("train_balance", "time_s", "peak_rss_mb", "method", "num_parts"):
        assert key in stats
    assert stats["method"] == method and stats["num_parts"] == p
    # unchanged inputs: reused
    assert partition.run(store, cfg, reorder=graph_art).reused


def test_stage_groups_nodes_in_chunks_like_a_stable_argsort(tmp_path, planted, monkeypatch):
    """part_nodes.npy is written by a counting sort over chunks of parts.npy: any chunk size gives the nodes of
    each part ascending, as a stable argsort of the whole labelling does."""
    store = ArtifactStore(tmp_path / "root")
    graph_art = publish_graph(store, planted)
    monkeypatch.setattr(partition, "_NODE_CHUNK", 7)
    cfg = PipelineConfig.load(overrides=["partition.method=fennel", "partition.num_parts=5"], dataset="unit")
    art = partition.run(store, cfg, reorder=graph_art).artifact
    parts = np.asarray(art.array("parts.npy"))
    assert len(np.unique(parts)) == 5 and np.any(np.diff(parts) < 0)  # not contiguous: the grouping matters
    np.testing.assert_array_equal(art.array("part_nodes.npy"), np.argsort(parts, kind="stable"))
    np.testing.assert_array_equal(art.array("part_ptr.npy"),
                                  np.concatenate([[0], np.cumsum(np.bincount(parts, minlength=5))]))


def test_range_parts_in_chunks(monkeypatch):
    from pipelines.methods.partitioners import base

    monkeypatch.setattr(base, "_RANGE_CHUNK", 3)
    ids = np.arange(20, dtype=np.int64)
    np.testing.assert_array_equal(base.range_parts(20, 6), (ids * 6 // 20).astype(np.int32))
    assert base.range_parts(0, 3).shape == (0,)
