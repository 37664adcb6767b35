"""``train.eval_mode=layerwise`` through the train stage: the reported accuracies are the full-neighbourhood
layer-wise ones of the saved weights, and no layer table is left behind."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.runner import StageRunner
from pipelines.stages.train import full_graph, load_model
from storage_kernels.store import ArtifactStore
from trainer.layerwise import layerwise_accuracy


def test_layerwise_eval_in_the_train_stage(tmp_path):
    cfg = PipelineConfig.load(overrides=[
        "sample.fanouts=[5,5]", "sample.batch_size=256", "sample.epochs=1", "train.epochs=3", "train.hidden_dim=16",
        "train.device=cpu", "train.eval_mode=layerwise", "train.layerwise_memory_mb=0", "policy=in_memory",
        "ingest.feature_dtype=float16"], dataset="tiny")
    store = ArtifactStore(tmp_path / "root")
    runner = StageRunner(cfg, store)
    runner.run_until("train")
    trained, reorder = runner.artifact("train"), runner.artifact("reorder")
    net = load_model(trained)
    labels = np.asarray(reorder.array("labels.npy"), dtype=np.int64)
    graph = full_graph(cfg, reorder, labels, store.tmp_dir)
    assert graph is not None and graph.feature_dim == 32
    assert trained.stats["test_acc"] == pytest.approx(layerwise_accuracy(net, graph, "test"))
    assert trained.stats["test_acc"] > 2 / 6  # well above chance (6 classes)
    assert not list(store.tmp_dir.glob("layerwise-*"))
    assert full_graph(PipelineConfig.load(dataset="tiny"), reorder, labels, store.tmp_dir) is None
