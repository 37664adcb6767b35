"""Evaluation batches sized by their feature bytes (``sample.eval_memory_mb``), not only by seeds."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.graphio import GraphArrays
from pipelines.stages import partition, reorder, sample
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import ArtifactStore
from tests.pipelines.stage_fixtures import make_graph_artifact


def _graph(num_nodes: int, num_edges: int, dim: int) -> GraphArrays:
    """A graph of that shape whose feature matrix takes no memory (only its shape and dtype are read)."""
    indptr = np.zeros(num_nodes + 1, np.int64)
    indptr[-1] = num_edges
    empty = np.empty(0, np.int64)
    features = np.broadcast_to(np.float32(0), (num_nodes, dim))
    return GraphArrays(indptr, empty, features, empty, empty, empty, empty)


def _sample_cfg(*sets: str) -> PipelineConfig:
    return PipelineConfig.load(overrides=list(sets), dataset="unit")


def test_nodes_per_seed_counts_every_hop():
    assert sample.nodes_per_seed([10, 10], 3.0) == 111
    assert sample.nodes_per_seed([-1, 5], 4.0) == 1 + 4 + 20  # -1: every neighbour, the mean degree
    assert sample.nodes_per_seed([-1, -1], 4.0, 10.0) == 1 + 4 + 40  # then a neighbour's degree E[d^2]/E[d]


def test_every_neighbour_beyond_the_first_hop_counts_the_hubs():
    # a star: hub 0 with 999 leaves; mean degree 1.998, a neighbour's degree (999^2 + 999) / 1998 = 500
    indptr = np.concatenate([[0, 999], 999 + np.arange(1, 1000)]).astype(np.int64)
    graph = GraphArrays(indptr, np.empty(0, np.int64), np.broadcast_to(np.float32(0), (1000, 1_000_000)),
                        *[np.empty(0, np.int64)] * 4)  # 4 MB rows: 4 GB in all, above the 1 GiB limit
    sc = _sample_cfg("sample.fanouts=[-1,-1]", "sample.batch_size=1").sample
    limit = sc.eval_memory_mb << 20
    # by the mean degree a seed would sample 1 + 2 + 4 = 7 rows and 38 seeds would fit; with the hubs counted
    # it samples ~1,002 rows (the whole graph), so not even 2 seeds fit: the training batch size, 1
    assert limit // (sample.nodes_per_seed([-1, -1], 1.998) * 4_000_000) == 38
    assert sample.nodes_per_seed([-1, -1], 1.998, 500.0) == pytest.approx(1 + 1.998 + 1.998 * 500)
    assert sample.eval_batch_size(sc, graph) == 1


def test_wide_features_on_a_large_graph_lower_the_eval_batch_to_fit():
    sc = _sample_cfg().sample  # 16,384 seeds at most, 1 GiB, fanouts [10, 10]: 111 nodes a seed
    graph = _graph(1_000_000, 10_000_000, 1000)  # 4,000-byte rows
    seeds = sample.eval_batch_size(sc, graph)
    limit = sc.eval_memory_mb << 20
    assert seeds == limit // (111 * 4000) == 2418
    assert seeds * 111 * 4000 <= limit < (seeds + 1) * 111 * 4000


@pytest.mark.parametrize(("nodes", "dim"), [(2708, 1433), (200_000, 128)])
def test_graphs_whose_eval_batches_fit_keep_the_setting(nodes, dim):
    # Cora's shape (every node fits) and demo's (16,384 x 111 rows of 512 bytes: 931 MB)
    sc = _sample_cfg().sample
    assert sample.eval_batch_size(sc, _graph(nodes, nodes * 10, dim)) == sc.eval_batch_size == 16384


def test_the_training_batch_size_is_the_floor():
    graph = _graph(1_000_000, 10_000_000, 1000)
    sc = _sample_cfg("sample.eval_memory_mb=1").sample
    assert sample.eval_batch_size(sc, graph) == sc.batch_size == 1024
    sc = _sample_cfg("sample.eval_memory_mb=1", "sample.eval_batch_size=100").sample
    assert sample.eval_batch_size(sc, graph) == 100  # never above the setting either


def _sampled(store: ArtifactStore, *sets: str):
    cfg = PipelineConfig.load(overrides=["sample.fanouts=[4,3]", "sample.batch_size=64", "sample.epochs=1",
                                         "sample.eval_batch_size=1000", "partition.num_parts=4", *sets],
                              dataset="unit")
    graph = make_graph_artifact(store, n=3000, dim=128)  # 1.5 MB of features: more than 1 MiB
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    return sample.run(store, cfg, reorder=ordering, partition=parting)


def test_the_sample_stage_cuts_eval_batches_to_the_memory_and_keys_the_artifact_by_the_result(tmp_path):
    store = ArtifactStore(tmp_path / "root")
    cut = _sampled(store, "sample.eval_memory_mb=1")  # 1 + 4 + 12 = 17 nodes a seed: 1 MiB holds 120 seeds
    assert cut.artifact.stats["eval_batch_size"] == 1048576 // (17 * 512) == 120
    samples = SampleSet(cut.artifact.path)
    for split in ("val", "test"):
        seeds = [len(samples.batch(i).seeds) for i in samples.batch_ids(split)]
        assert max(seeds) == 120 and sum(seeds) == 750
        assert all(len(samples.batch(i).nodes) * 512 <= 1 << 20 for i in samples.batch_ids(split))

    whole = _sampled(store, "sample.eval_memory_mb=2")  # 3,000 rows of 512 bytes fit: the setting stands
    assert whole.artifact.stats["eval_batch_size"] == 1000 and whole.version != cut.version
    # the memory setting itself is not a parameter: another value that leaves 1,000 seeds reuses the artifact
    again = _sampled(store, "sample.eval_memory_mb=64")
    assert again.reused and again.version == whole.version
