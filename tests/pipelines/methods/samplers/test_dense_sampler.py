"""``sample.sampler=dense`` end to end: the sample stage writes blocks in the trainer's format (the sample
checks pass, each hop a prefix of the next, hop 0 equal to per-layer sampling's), and on Cora it trains to the
accuracy of per-layer sampling."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.checks import check_sample_blocks
from pipelines.config import PipelineConfig
from pipelines.stages import ingest, partition, reorder, sample
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import ArtifactStore
from tests import REPO
from tests.pipelines.stage_fixtures import make_graph_artifact
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.train import train

PLANETOID = REPO.parent / "shared" / "datasets" / "planetoid"
UNIT = ["sample.fanouts=[4,3,3]", "sample.batch_size=64", "sample.epochs=2", "sample.eval_batch_size=100",
        "partition.num_parts=4"]


def _samples(store, cfg, graph):
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    return ordering, sample.run(store, cfg, reorder=ordering, partition=parting).artifact


def test_dense_sample_set_is_valid_and_trains(tmp_path):
    store = ArtifactStore(tmp_path / "root")
    graph = make_graph_artifact(store)
    dense_cfg = PipelineConfig.load(overrides=[*UNIT, "sample.sampler=dense"], dataset="unit")
    ordering, dense = _samples(store, dense_cfg, graph)
    _, layered = _samples(store, PipelineConfig.load(overrides=UNIT, dataset="unit"), graph)
    assert dense.version != layered.version  # the sampler is part of the artifact

    table = dense.parquet("batches.parquet")
    finding = check_sample_blocks(
        dense.array("cols.npy"), dense.array("indptr.npy"), len(dense.array("nodes.npy")),
        table.column("node_offset").to_numpy(), table.column("indptr_offset").to_numpy(),
        table.column("cols_offset").to_numpy(), np.asarray(table.column("hop_counts").to_pylist()),
        np.asarray(table.column("edge_counts").to_pylist()))
    assert finding.passed, finding.problems

    d, u = SampleSet(dense.path), SampleSet(layered.path)
    assert d.num_batches == u.num_batches and d.num_layers == 3
    fewer = 0
    for i in range(d.num_batches):
        a, b = d.batch(i), u.batch(i)
        np.testing.assert_array_equal(a.seeds, b.seeds)
        np.testing.assert_array_equal(a.cols[0], b.cols[0])  # hop 0 is the same sample
        for h in range(2):  # every hop's block is the prefix of the next: one sample per node, reused
            np.testing.assert_array_equal(a.indptrs[h + 1][: len(a.indptrs[h])], a.indptrs[h])
            np.testing.assert_array_equal(a.cols[h + 1][: len(a.cols[h])], a.cols[h])
        fewer += len(a.cols[-1]) < sum(len(c) for c in b.cols)  # edges sampled: the last hop's CSR holds all
    assert fewer == d.num_batches

    features = np.asarray(ordering.array("features.npy"))
    labels = np.asarray(ordering.array("labels.npy"), dtype=np.int64)
    result = train(TrainConfig(hidden_dim=16, epochs=3, seed=0), d, InMemoryFeatures(features), labels)
    assert result.losses[-1] < result.losses[0] and result.val_acc > 1.5 / 4


CORA = ["sample.fanouts=[10,10]", "sample.batch_size=140", "sample.epochs=20", "sample.eval_batch_size=1000",
        "reorder.strategy=identity", "train.hidden_dim=64", "train.lr=0.01", "train.weight_decay=5e-4",
        "train.dropout=0.5", "train.epochs=50", "train.device=cpu", "train.num_threads=1"]


@pytest.mark.skipif(not (PLANETOID / "ind.cora.x").is_file(), reason=f"Planetoid Cora files absent under {PLANETOID}")
def test_dense_matches_per_layer_accuracy_on_cora(tmp_path):
    store = ArtifactStore(tmp_path / "root")
    accs = {}
    for name in ("uniform", "dense"):
        cfg = PipelineConfig.load(overrides=[*CORA, f"sample.sampler={name}"],
                                  dataset=f"planetoid:{PLANETOID / 'cora'}")
        graph = ingest.run(store, cfg).artifact
        ordering, samples = _samples(store, cfg, graph)
        features = np.asarray(ordering.array("features.npy"))
        labels = np.asarray(ordering.array("labels.npy"), dtype=np.int64)
        accs[name] = train(cfg.train, SampleSet(samples.path), InMemoryFeatures(features), labels).test_acc
    # measured over 4 seeds: mean 0.7975 per-layer, 0.7953 DENSE (2 layers); the same seed differs by <= 0.002
    # (hop 0 is the same sample). MariusGNN reports a 0.3-0.55 point cost from sample reuse.
    assert accs["dense"] >= 0.77, accs
    assert abs(accs["dense"] - accs["uniform"]) <= 0.02, accs
