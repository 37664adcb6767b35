"""Reorder, partition, sample, plan and pack stages on a small random graph."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.graphio import load_graph
from pipelines.stages import pack, partition, plan, reorder, sample
from storage_kernels.packstore import store_budget_bytes
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import ArtifactStore
from tests.pipelines.stage_fixtures import make_graph_artifact


def _cfg(**overrides: str) -> PipelineConfig:
    sets = [f"{k.replace('__', '.')}={v}" for k, v in overrides.items()]
    base = [
        "policy=diskgnn",  # the pack layout these tests check
        "sample.fanouts=[4,3]",
        "sample.batch_size=64",
        "sample.epochs=2",
        "sample.eval_batch_size=100",
        "partition.num_parts=4",
    ]
    return PipelineConfig.load(overrides=base + sets, dataset="unit")


@pytest.fixture
def store(tmp_path):
    return ArtifactStore(tmp_path / "root")


def _edge_set(indptr: np.ndarray, indices: np.ndarray, relabel: np.ndarray | None = None) -> set:
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    src = np.asarray(indices)
    if relabel is not None:
        dst, src = relabel[dst], relabel[src]
    return set(zip(dst.tolist(), src.tolist(), strict=True))


@pytest.mark.parametrize("strategy", ["identity", "degree", "bfs"])
def test_reorder_rewrites_the_same_graph(store, strategy):
    graph = make_graph_artifact(store)
    result = reorder.run(store, _cfg(reorder__strategy=strategy, reorder__chunk_rows=97), ingest=graph)
    art = result.artifact
    perm, inverse = art.array("perm.npy"), art.array("inverse.npy")
    n = len(perm)
    assert np.array_equal(np.sort(perm), np.arange(n))
    assert np.array_equal(inverse[perm], np.arange(n))
    old, new = load_graph(graph), load_graph(art)
    # Same edges once new ids are mapped back to old ids.
    assert _edge_set(new.indptr, new.indices, relabel=perm) == _edge_set(old.indptr, old.indices)
    assert np.array_equal(new.features, old.features[perm])
    assert np.array_equal(new.labels, old.labels[perm])
    assert np.array_equal(np.sort(perm[new.train_idx]), old.train_idx)
    if strategy == "degree":
        assert np.all(np.diff(new.degrees()) <= 0)


def test_reorder_is_reused_when_unchanged(store):
    graph = make_graph_artifact(store)
    first = reorder.run(store, _cfg(), ingest=graph)
    second = reorder.run(store, _cfg(), ingest=graph)
    assert not first.reused and second.reused and first.version == second.version
    third = reorder.run(store, _cfg(reorder__strategy="bfs"), ingest=graph)
    assert third.version != first.version


def test_unknown_reorder_strategy_is_a_clear_error():
    with pytest.raises(ValueError, match="reorder"):
        _cfg(reorder__strategy="zigzag")


def test_range_partition_is_balanced_and_complete(store):
    graph = make_graph_artifact(store)
    ordering = reorder.run(store, _cfg(), ingest=graph).artifact
    art = partition.run(store, _cfg(), reorder=ordering).artifact
    parts, ptr, nodes = art.array("parts.npy"), art.array("part_ptr.npy"), art.array("part_nodes.npy")
    assert np.array_equal(np.sort(nodes), np.arange(len(parts)))
    for p in range(len(ptr) - 1):
        assert np.all(parts[nodes[ptr[p] : ptr[p + 1]]] == p)
    assert art.stats["balance"] <= 1.01
    assert 0.0 <= art.stats["edge_cut"] <= 1.0


def _pipeline(store, cfg):
    graph = make_graph_artifact(store)
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    samples = sample.run(store, cfg, reorder=ordering, partition=parting).artifact
    planned = plan.run(store, cfg, reorder=ordering, sample=samples).artifact
    packed = pack.run(store, cfg, reorder=ordering, sample=samples, plan=planned).artifact
    return ordering, samples, planned, packed


def test_sample_covers_every_split_and_is_deterministic(tmp_path):
    cfg = _cfg()
    a = _pipeline(ArtifactStore(tmp_path / "a"), cfg)[1]
    b = _pipeline(ArtifactStore(tmp_path / "b"), _cfg(sample__num_threads=1))[1]
    assert a.version == b.version  # thread count is not a parameter: the content is the same
    for name in ("nodes.npy", "indptr.npy", "cols.npy"):
        assert np.array_equal(a.array(name), b.array(name))
    s = SampleSet(a.path)
    graph = load_graph(_pipeline(ArtifactStore(tmp_path / "a"), cfg)[0])
    for epoch in range(2):
        seeds = np.concatenate([s.batch(i).seeds for i in s.batch_ids("train", epoch)])
        assert np.array_equal(np.sort(seeds), graph.train_idx)
    val = np.concatenate([s.batch(i).seeds for i in s.batch_ids("val")])
    assert np.array_equal(val, graph.val_idx)
    # Every sampled edge is a real edge of the graph.
    batch = s.batch(0)
    for hop in range(batch.num_layers):
        ip, cols = batch.indptrs[hop], batch.cols[hop]
        for d in range(len(ip) - 1):
            u = batch.nodes[d]
            nbrs = graph.indices[graph.indptr[u] : graph.indptr[u + 1]]
            assert set(batch.nodes[cols[ip[d] : ip[d + 1]]].tolist()) <= set(nbrs.tolist())


def test_plan_respects_budgets_and_assigns_every_sampled_node(store):
    cfg = _cfg(plan__cpu_cache_fraction=0.1, plan__gpu_cache_fraction=0.05)
    ordering, samples, planned, _ = _pipeline(store, cfg)
    graph = load_graph(ordering)
    tier = planned.array("tier.npy")
    accessed = np.unique(samples.array("nodes.npy"))
    assert np.all(tier[accessed] >= 0)
    s = SampleSet(samples.path)
    train_nodes = np.unique(np.concatenate([s.batch(b).nodes for b in s.batch_ids("train")]))
    assert np.all(tier[train_nodes] <= 2)  # what training reads is cached or packed
    assert np.all(np.isin(np.flatnonzero(tier == 3), train_nodes, invert=True))
    assert len(planned.array("cpu_nodes.npy")) * graph.row_bytes <= 0.1 * graph.num_nodes * graph.row_bytes
    assert len(planned.array("gpu_nodes.npy")) * graph.row_bytes <= 0.05 * graph.num_nodes * graph.row_bytes
    freq = planned.array("frequency.npy")
    cached = np.concatenate([planned.array("gpu_nodes.npy"), planned.array("cpu_nodes.npy")])
    packed_nodes = np.flatnonzero(tier == 2)
    if len(cached) and len(packed_nodes):
        assert freq[cached].min() >= freq[packed_nodes].max()
    stats = planned.stats
    assert stats["predicted_hit_rate"] == pytest.approx(freq[cached].sum() / freq.sum())


@pytest.mark.parametrize("budget", [3.0, None])  # segment disk caches needed / unlimited (--set ...=null)
def test_pack_addresses_reconstruct_every_batch_exactly(store, budget):
    cfg = _cfg(plan__cpu_cache_fraction=0.1, plan__gpu_cache_fraction=0.05, pack__memory_mb=1,
               pack__disk_budget="null" if budget is None else budget)
    ordering, samples, planned, packed = _pipeline(store, cfg)
    features = load_graph(ordering).features
    s = SampleSet(samples.path)
    offsets, rows = packed.array("chunk_offset.npy"), packed.array("chunk_rows.npy")
    assert np.all(offsets % 4096 == 0)
    eval_batches = s.batch_ids("val") + s.batch_ids("test")
    assert np.all(rows[eval_batches] == 0)  # evaluation batches are not packed: they read the feature file
    raw = np.fromfile(packed.file("packed.bin"), dtype=np.uint8)
    caches = [packed.array("gpu_cache.npy"), packed.array("cpu_cache.npy")]
    addr_tier, addr_slot = packed.array("addr_tier.npy"), packed.array("addr_slot.npy")
    disk = np.fromfile(packed.file("disk_cache.bin"), dtype=np.uint8)
    seg_offset, seg_rows = packed.array("segment_offset.npy"), packed.array("segment_rows.npy")
    batch_segment = packed.array("batch_segment.npy")
    dim = features.shape[1]
    for b in range(s.num_batches):
        start, stop = s.node_range(b)
        chunk = raw[offsets[b] : offsets[b] + rows[b] * dim * 4].view(np.float32).reshape(-1, dim)
        g = batch_segment[b]
        segment = (disk[seg_offset[g] : seg_offset[g] + seg_rows[g] * dim * 4].view(np.float32).reshape(-1, dim)
                   if g >= 0 else np.empty((0, dim), np.float32))
        tiers, slots = addr_tier[start:stop], addr_slot[start:stop]
        assembled = np.empty((stop - start, dim), dtype=np.float32)
        for t, source in ((0, caches[0]), (1, caches[1]), (2, chunk), (3, features), (4, segment)):
            assembled[tiers == t] = source[slots[tiers == t]]
        assert np.array_equal(assembled, features[s.batch(b).nodes])
    feature_bytes = features.nbytes
    if budget is None:  # unlimited: the fewest reads, which pure packing achieves
        assert packed.stats["disk_blowup"] > 3.0
    else:  # the budget forces segment disk caches
        assert np.count_nonzero(np.asarray(addr_tier) == 4) > 0 and packed.stats["segment_cache_rows"] > 0
        store_bytes = sum(packed.array(n).nbytes for n in ("gpu_cache.npy", "cpu_cache.npy")) + len(raw) + len(disk)
        assert store_bytes == packed.stats["store_bytes"] <= store_budget_bytes(budget, feature_bytes)


def test_partition_batching_covers_each_epoch_and_groups_by_partition(store):
    cfg = _cfg(sample__batching="partition", sample__macro_parts=1, partition__num_parts=8)
    graph = make_graph_artifact(store)
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    samples = sample.run(store, cfg, reorder=ordering, partition=parting).artifact
    s, parts = SampleSet(samples.path), parting.array("parts.npy")
    train = load_graph(ordering).train_idx
    for epoch in range(2):
        ids = s.batch_ids("train", epoch)
        seeds = np.concatenate([s.batch(i).seeds for i in ids])
        assert np.array_equal(np.sort(seeds), train)
        # one partition per macro batch: every batch's seeds come from a single partition
        assert all(len(np.unique(parts[s.batch(i).seeds])) == 1 for i in ids)
    random_cfg = _cfg(partition__num_parts=8)
    other = sample.run(store, random_cfg, reorder=ordering, partition=parting)
    assert other.version != samples.version
