"""MlflowTracker against a temporary SQLite store: params, metrics, model files, registry and champion alias.

One store per module: creating an MLflow SQLite database runs its migrations (seconds).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from trainer.config import TrainConfig
from trainer.export import export_onnx
from trainer.export_variants import to_fp16
from trainer.features import InMemoryFeatures
from trainer.models import build_model
from trainer.tracking import CHAMPION, MlflowTracker
from trainer.train import train

pytestmark = pytest.mark.filterwarnings("ignore:The ``noload`` loader strategy:DeprecationWarning")


@pytest.fixture(scope="module")
def tracker(tmp_path_factory: pytest.TempPathFactory) -> MlflowTracker:
    return MlflowTracker(root=tmp_path_factory.mktemp("strata-root"), experiment="trainer-tests")


def test_defaults_are_local_sqlite_and_telemetry_off(tracker: MlflowTracker) -> None:
    assert tracker.tracking_uri.startswith("sqlite:///") and tracker.tracking_uri.endswith("/mlflow/mlflow.db")
    assert tracker.artifact_root.startswith("file:///")
    assert os.environ["MLFLOW_DISABLE_TELEMETRY"] == "true" and os.environ["DO_NOT_TRACK"] == "1"
    with pytest.raises(ValueError, match="expected tracking_uri or root"):
        MlflowTracker()


def test_run_logs_params_metrics_and_model_files(tracker: MlflowTracker, dataset, tmp_path: Path) -> None:
    cfg = TrainConfig(hidden_dim=8, epochs=2, seed=1)
    with tracker.run("logged", tags={"strata.dataset": "synthetic"}) as run_id:
        result = train(cfg, dataset.samples, InMemoryFeatures(dataset.features), dataset.labels, tracker=tracker)
        torch.save(result.best_state_dict, tmp_path / "state_dict.pt")
        model = build_model(**result.model_args)
        model.load_state_dict(result.best_state_dict)
        onnx_path = export_onnx(model, tmp_path / "model.onnx", model.in_dim, model.num_layers)
        (tmp_path / "bundle").mkdir()
        to_fp16(onnx_path, tmp_path / "bundle" / "model.fp16.onnx")
        uri = tracker.log_model_files(tmp_path / "state_dict.pt", onnx_path, tmp_path / "bundle")
    run = tracker.client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["strata.dataset"] == "synthetic"
    assert run.data.params == {k: str(v) for k, v in cfg.to_dict().items()}
    history = tracker.client.get_metric_history(run_id, "loss")
    assert [m.step for m in history] == [0, 1] and [m.value for m in history] == result.losses
    for key in ("val_acc", "train_acc", "epoch_s", "bytes_read", "cache_hit_rate"):
        assert key in run.data.metrics
    files = {f.path for f in tracker.client.list_artifacts(run_id, "model")}
    assert files == {"model/state_dict.pt", "model/model.onnx", "model/bundle"}
    assert uri.endswith("/artifacts/model")
    local = tracker.client.download_artifacts(run_id, "model/state_dict.pt", str(tmp_path / "dl"))
    state = torch.load(local, weights_only=True)  # weights only: nothing unpickled
    assert all(torch.equal(state[k], v) for k, v in result.best_state_dict.items())
    assert "mlflow.pytorch" not in sys.modules


def test_failed_block_marks_the_run_failed(tracker: MlflowTracker) -> None:
    with pytest.raises(RuntimeError, match="boom"), tracker.run("fails") as run_id:
        raise RuntimeError("boom")
    assert tracker.client.get_run(run_id).info.status == "FAILED"
    assert tracker.run_id is None
    with pytest.raises(RuntimeError, match="expected an active run"):
        tracker.log_metrics({"x": 1.0})


def test_register_moves_champion_only_on_improvement(tracker: MlflowTracker, tmp_path: Path) -> None:
    (tmp_path / "state_dict.pt").write_bytes(b"weights")
    got = []
    for val_acc in (0.50, 0.40, 0.50, 0.65):
        with tracker.run(f"val-{val_acc}") as run_id:
            tracker.log_model_files(state_dict_path=tmp_path / "state_dict.pt")
        got.append(tracker.register(run_id, "sage-synthetic", "model", val_acc))
    assert got == [(1, 1), (2, 1), (3, 1), (4, 4)]  # a tie does not move the alias either
    champion = tracker.client.get_model_version_by_alias("sage-synthetic", CHAMPION)
    assert int(champion.version) == 4 and float(champion.tags["val_acc"]) == 0.65
    v2 = tracker.client.get_model_version("sage-synthetic", "2")
    assert float(v2.tags["val_acc"]) == 0.40 and v2.source.endswith("/artifacts/model")
    assert tracker.champion("sage-synthetic") == (4, 0.65)
    assert tracker.champion("no-such-model") is None


def test_attach_logs_into_a_finished_run(tracker: MlflowTracker, tmp_path: Path) -> None:
    with tracker.run("finished") as run_id:
        pass
    (tmp_path / "model.onnx").write_bytes(b"onnx")
    with tracker.attach(run_id):
        tracker.log_artifact(tmp_path / "model.onnx", "model")
    assert tracker.run_id is None
    assert tracker.client.get_run(run_id).info.status == "FINISHED"
    assert [f.path for f in tracker.client.list_artifacts(run_id, "model")] == ["model/model.onnx"]


def test_system_metrics_are_sampled(tracker: MlflowTracker) -> None:
    with tracker.run("system", system_metrics=True, sampling_interval_s=0.2) as run_id:
        time.sleep(0.5)
    keys = set(tracker.client.get_run(run_id).data.metrics)
    assert any(k.startswith("system/cpu_utilization") for k in keys), keys


def test_second_tracker_reuses_experiment(tracker: MlflowTracker) -> None:
    again = MlflowTracker(tracker.tracking_uri, tracker.artifact_root, experiment="trainer-tests")
    assert again.experiment_id == tracker.experiment_id
    assert dataclasses.is_dataclass(TrainConfig)
