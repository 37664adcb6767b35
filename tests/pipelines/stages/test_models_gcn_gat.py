"""GCN and GAT through the pipeline: ``train.heads`` counts only for the model that reads it, and both models
train, pass every stage's checks and export to ONNX with its fp16 and int8 variants and the browser app on ``tiny``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipelines.config import PipelineConfig, artifact_params, describe_settings
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner


def _train_params(*overrides: str) -> dict:
    return artifact_params(PipelineConfig.load(overrides=list(overrides)), "train", ("policy",))


def test_heads_enters_the_train_version_only_for_gat() -> None:
    assert "heads" not in _train_params() and "heads" not in _train_params("train.model=gcn", "train.heads=8")
    assert _train_params("train.heads=8") == _train_params()  # graphsage ignores it
    assert _train_params("train.model=gat")["heads"] == 4
    assert _train_params("train.model=gat", "train.heads=2") != _train_params("train.model=gat")
    row = next(r for r in describe_settings(PipelineConfig.load()) if r["key"] == "train.heads")
    assert row["artifact"] == "selected" and row["default"] == 4 and "gat" in row["description"]
    with pytest.raises(ValueError, match=r"'train.heads' expected a value in range \(got 0\)"):  # the setting's name
        PipelineConfig.load(overrides=["train.model=gat", "train.heads=0"])


def test_gcn_and_gat_run_through_export(tmp_path: Path) -> None:
    store = StrataPaths.at(tmp_path).store()
    base = ["train.epochs=2", "sample.epochs=1", "train.device=cpu", "train.hidden_dim=16"]
    for model, extra in (("gcn", {}), ("gat", {"heads": 2})):
        cfg = PipelineConfig.load(dataset="tiny", overrides=[*base, f"train.model={model}", "train.heads=2"])
        results = {r.artifact.stage: r.artifact for r in StageRunner(cfg, store).run_until("export")}  # checks pass
        info = results["train"].json("model.json")
        assert info["architecture"] == info["model"] == model and {k: info[k] for k in extra} == extra
        assert ("heads" in info) == (model == "gat")
        assert 0.0 <= results["train"].stats["test_acc"] <= 1.0
        exported = results["export"]
        assert exported.stats["onnx_max_abs_diff"] < 1e-4 and exported.stats["onnx_opset"] == 18
        assert exported.stats["fp16_agreement"] >= 0.95 and exported.stats["int8_agreement"] >= 0.9
        assert {"model.onnx", "index.html", "subgraph.json"} <= {p.name for p in exported.path.iterdir()}
