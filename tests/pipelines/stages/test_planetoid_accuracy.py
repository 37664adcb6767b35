"""Acceptance: GraphSAGE on Cora (standard Planetoid split) through the out-of-core path reaches >= 0.77.

Features come from the packed store with a CPU cache of 10% of the feature bytes; reads are direct where the
filesystem allows. Skips cleanly when the Planetoid files are absent.
"""

from __future__ import annotations

import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.stages import ingest, pack, partition, plan, reorder, sample, train
from tests import REPO

PLANETOID = REPO.parent / "shared" / "datasets" / "planetoid"

CORA_SETTINGS = [
    "sample.fanouts=[10,10]",
    "sample.batch_size=140",
    "sample.epochs=20",
    "sample.eval_batch_size=1000",
    "plan.cpu_cache_fraction=0.1",
    "train.hidden_dim=64",
    "train.lr=0.01",
    "train.weight_decay=5e-4",
    "train.dropout=0.5",
    "train.epochs=60",
    "policy=diskgnn",
    "train.device=cpu",
]


@pytest.mark.skipif(not (PLANETOID / "ind.cora.x").is_file(), reason=f"Planetoid Cora files absent under {PLANETOID}")
def test_cora_out_of_core_accuracy(tmp_path):
    cfg = PipelineConfig.load(overrides=CORA_SETTINGS, dataset=f"planetoid:{PLANETOID / 'cora'}")
    paths = StrataPaths.at(tmp_path / "root")
    store = paths.store()
    graph = ingest.run(store, cfg).artifact
    assert graph.stats["num_nodes"] == 2708 and graph.stats["num_edges"] == 10556
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parts = partition.run(store, cfg, reorder=ordering).artifact
    samples = sample.run(store, cfg, reorder=ordering, partition=parts).artifact
    planned = plan.run(store, cfg, reorder=ordering, sample=samples).artifact
    assert planned.stats["cpu_cache_bytes"] <= 0.1 * planned.stats["feature_bytes"]
    packed = pack.run(store, cfg, reorder=ordering, sample=samples, plan=planned).artifact
    model = train.run(store, cfg, reorder=ordering, sample=samples, plan=planned, pack=packed)
    stats = model.artifact.stats
    assert stats["bytes_read"] > 0  # features really came from disk
    assert stats["cache_hit_rate"] < 1.0
    assert stats["test_acc"] >= 0.77, stats
