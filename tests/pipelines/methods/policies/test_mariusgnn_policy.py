"""``policy=mariusgnn`` through the stage runner on the tiny graph: the static node-classification set (zero
swaps) and a BETA order (swaps = Eq. 5.2), per-set batches sampled inside the resident partitions, the buffer
serving exactly the feature rows, end-to-end training with every check."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.methods.policies import POLICIES
from pipelines.methods.policies.mariusgnn.policy import physical_layout
from pipelines.methods.policies.mariusgnn.subgraph import resident_mask, resident_subgraph
from pipelines.runner import StageRunner
from storage_kernels.sampleset import SampleSet
from trainer.features.partition_buffer import PartitionBufferSource
from trainer.partition_orders import beta_swaps

BASE = ["policy=mariusgnn", "sample.epochs=2", "train.epochs=2", "sample.batch_size=128", "partition.num_parts=4",
        "train.hidden_dim=16", "train.device=cpu"]
STATIC = [*BASE, "plan.num_partitions=10", "plan.buffer_partitions=4"]  # tiny: 500 training nodes -> k = 2
BETA = [*BASE, "plan.num_partitions=8", "plan.buffer_partitions=3", "plan.partition_order=beta",
        "plan.train_first=false"]


@pytest.fixture(scope="module")
def runners(tmp_path_factory: pytest.TempPathFactory) -> dict[str, StageRunner]:
    store = StrataPaths.at(tmp_path_factory.mktemp("marius")).store()
    static = StageRunner(PipelineConfig.load(overrides=STATIC, dataset="tiny"), store)
    static.run_until("train")  # every stage's checks included
    beta = static.derive(PipelineConfig.load(overrides=BETA, dataset="tiny"))
    beta.run_until("train")
    return {"static": static, "beta": beta}


def _source(runner: StageRunner) -> PartitionBufferSource:
    return POLICIES.get("mariusgnn")().features(_inputs(runner))  # type: ignore[return-value]


def _inputs(runner: StageRunner):  # noqa: ANN202
    from pipelines.methods.policies import FeatureInputs

    return FeatureInputs(runner.artifact("reorder"), runner.artifact("pack"), SampleSet(runner.artifact("sample").path),
                         "cpu", runner.cfg)


def test_static_set_holds_the_training_partitions_and_never_swaps(runners: dict[str, StageRunner]) -> None:
    r = runners["static"]
    plan, pack, train = r.artifact("plan").stats, r.artifact("pack").stats, r.artifact("train").stats
    part = np.asarray(r.artifact("plan").array("phys_part.npy"))
    train_idx = np.asarray(r.artifact("reorder").array("train_idx.npy"))
    k = -(-len(train_idx) // -(-len(part) // 10))
    assert plan["mode"] == "static" and plan["num_partitions"] == 10 and plan["buffer_partitions"] == 4
    assert plan["train_partitions"] == k < 4 and plan["num_partitions_from"] == "config"
    assert pack["sets_per_epoch"] == 1 and pack["swaps_per_epoch"] == 0 and pack["max_resident_partitions"] == 4
    assert part[train_idx].max() == k - 1  # training nodes fill the first k partitions
    # 2 epochs: 4 partitions the first, the re-drawn others the second (the k training ones stay resident)
    assert 0 < train["bytes_read"] <= 2 * pack["epoch_read_bytes"] and np.isfinite(train["test_acc"])
    assert train["test_acc"] > 0.3


def test_beta_swaps_equal_eq_5_2_and_batches_stay_inside_their_set(runners: dict[str, StageRunner]) -> None:
    r = runners["beta"]
    plan, pack = r.artifact("plan").stats, r.artifact("pack").stats
    assert plan["mode"] == "beta" and pack["swaps_per_epoch"] == beta_swaps(8, 3) == plan["beta_swaps_eq52"]
    # greedy: every training node goes to the first set holding its partition, so the sets after the last
    # one with training nodes are never loaded: fewer reads than the order's swaps
    assert pack["max_resident_partitions"] == 3 and 8 <= pack["partition_reads_per_epoch"] <= 3 + beta_swaps(8, 3)
    sets = SampleSet(r.artifact("pack").path)
    p_dir = r.artifact("pack").path
    node_part, batch_set = np.load(p_dir / "node_part.npy"), np.load(p_dir / "batch_set.npy")
    set_ptr, set_parts = np.load(p_dir / "set_ptr.npy"), np.load(p_dir / "set_parts.npy")
    train_idx = np.asarray(r.artifact("reorder").array("train_idx.npy"))
    for e in range(2):
        ids = sets.batch_ids("train", e)
        seeds = np.concatenate([sets.batch(b).seeds for b in ids])
        assert np.array_equal(np.sort(seeds), np.sort(train_idx))  # every training node once per epoch
        for b in ids:
            members = set_parts[set_ptr[batch_set[b]] : set_ptr[batch_set[b] + 1]]
            assert np.isin(node_part[sets.batch(b).nodes], members).all()
    assert 0 < pack["resident_edge_fraction"] < 1 and pack["input_nodes_vs_full_graph"] < 1
    assert 0 < pack["edge_permutation_bias"] <= 1


def test_the_source_serves_exact_rows_from_at_most_c_partitions(runners: dict[str, StageRunner]) -> None:
    r = runners["beta"]
    features = np.asarray(r.artifact("reorder").array("features.npy"))
    source = _source(r)
    try:
        hook = source.train_hook
        ids = hook.batch_ids(0)
        for b in ids:
            batch = hook.samples.batch(b)
            np.testing.assert_array_equal(source.load(batch).numpy(), features[batch.nodes])
        s = source.stats()
        assert s["max_resident_partitions"] <= 3 and 8 <= s["partitions_loaded"] <= 3 + beta_swaps(8, 3)
        assert s["staging_partitions"] == 1  # BETA brings one partition in per swap
        assert source.bytes_read == r.artifact("pack").stats["epoch_read_bytes"]
        assert source.read_requests >= s["partitions_loaded"] and s["rows_packed"] > 0
        val = SampleSet(r.artifact("sample").path)
        vb = val.batch(val.batch_ids("val")[0])  # evaluation: full-graph samples, rows from the feature file
        np.testing.assert_array_equal(source.load(vb).numpy(), features[vb.nodes])
        assert source.stats()["rows_file"] == len(vb.nodes)
    finally:
        source.close()
    assert r.artifact("train").stats["bytes_read"] > 0


def _reference_layout(num_nodes, p, labels, train_idx):
    """The lexsort of (first, label, id) cut into ranges, ids ascending per range (the original definition)."""
    ids = np.arange(num_nodes, dtype=np.int64)
    first = np.zeros(num_nodes, dtype=np.int8)
    if train_idx is not None:
        first[train_idx] = -1
    order = np.lexsort((ids, labels if labels is not None else np.zeros(num_nodes, np.int32), first))
    size = -(-num_nodes // p)
    part = np.empty(num_nodes, dtype=np.int32)
    part[order] = (np.arange(num_nodes) // size).astype(np.int32)
    return part, ids[np.argsort(part, kind="stable")]


def _reference_restricted(indptr, indices, resident):
    """The whole CSR restricted to resident neighbours (O(E) in memory)."""
    keep = resident[indices]
    cs = np.concatenate([[0], np.cumsum(keep)])
    return cs[indptr], indices[keep]


def test_layout_and_restriction_helpers(tmp_path) -> None:
    layout = physical_layout(10, 3, np.array([2, 2, 1, 1, 0, 0, 2, 1, 0, 2]), np.array([3, 9]))
    assert layout.k == 1 and layout.part[[3, 9]].tolist() == [0, 0]  # training first, then label, then id
    indptr, indices = np.array([0, 2, 3, 4]), np.array([1, 2, 0, 0])
    sub = resident_subgraph(indptr, indices, np.array([True, True, False]), tmp_path / "s", 2)
    assert sub.indptr.tolist() == [0, 1, 2, 2] and sub.indices.tolist() == [1, 0]  # row 2 is not resident


@pytest.mark.parametrize("labels_max", [0, 7, 40_000])  # no labels; 16-bit keys; wider keys
@pytest.mark.parametrize("train", [False, True])
def test_physical_layout_matches_the_lexsort_reference(labels_max, train) -> None:
    rng = np.random.default_rng(labels_max + train)
    n, p = 5003, 7
    labels = rng.integers(0, labels_max + 1, n).astype(np.int32) if labels_max else None
    train_idx = np.sort(rng.choice(n, 300, replace=False)) if train else None
    layout = physical_layout(n, p, labels, train_idx)
    part, nodes = _reference_layout(n, p, labels, train_idx)
    np.testing.assert_array_equal(layout.part, part)
    np.testing.assert_array_equal(layout.nodes, nodes)
    assert layout.nodes.dtype == np.int64 and layout.part.dtype == np.int32
    np.testing.assert_array_equal(layout.ptr, np.concatenate([[0], np.cumsum(np.bincount(part, minlength=p))]))


@pytest.mark.parametrize("max_entries", [1, 7, 1000, 10**9])
def test_resident_subgraph_matches_the_reference_on_resident_rows(tmp_path, max_entries) -> None:
    rng = np.random.default_rng(max_entries)
    n = 700
    deg = rng.integers(0, 12, n)
    indptr = np.concatenate([[0], np.cumsum(deg)]).astype(np.int64)
    indices = rng.integers(0, n, int(indptr[-1])).astype(np.int64)
    part = (np.arange(n) * 5 // n).astype(np.int32)
    rng.shuffle(part)
    resident = resident_mask(part, np.array([1, 3]), 5)
    np.testing.assert_array_equal(resident, np.isin(part, [1, 3]))
    sub = resident_subgraph(indptr, indices, resident, tmp_path / "s", max_entries)
    ref_ptr, ref_idx = _reference_restricted(indptr, indices, resident)
    for v in range(n):
        got = sub.indices[sub.indptr[v] : sub.indptr[v + 1]]
        want = ref_idx[ref_ptr[v] : ref_ptr[v + 1]] if resident[v] else np.empty(0, np.int64)
        np.testing.assert_array_equal(got, want)
