"""MlflowTracker against a temporary SQLite store: params, metrics, model files, registry and champion alias.

One store per module: creating an MLflow SQLite database runs its migrations (seconds).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from trainer.config import TrainConfig
from trainer.export import export_onnx
from trainer.export_variants import to_fp16
from trainer.features import InMemoryFeatures
from trainer.models import build_model
from trainer.tracking import CHAMPION, EXPERIMENT_KIND_ML, EXPERIMENT_KIND_TAG, MlflowTracker
from trainer.train import train

from .test_mlflow_model import torch_logits, trained_files

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
    resolved = {"num_layers": dataset.samples.num_layers, "num_classes": dataset.num_classes}  # not the 0s
    assert resolved["num_layers"] == 2 and cfg.num_layers == 0 and cfg.num_classes == 0
    assert run.data.params == {k: str(v) for k, v in {**cfg.to_dict(), **resolved}.items()}
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


def test_experiments_open_as_machine_learning(tracker: MlflowTracker) -> None:
    tags = tracker.client.get_experiment(tracker.experiment_id).tags
    assert tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND_ML == "custom_model_development"
    # an experiment created without the tag (an older Strata, or by hand) gains it when a tracker opens it
    old = tracker.client.create_experiment("made-elsewhere")
    assert EXPERIMENT_KIND_TAG not in tracker.client.get_experiment(old).tags
    MlflowTracker(tracker.tracking_uri, tracker.artifact_root, experiment="made-elsewhere")
    assert tracker.client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == EXPERIMENT_KIND_ML


def test_log_model_dir_creates_a_logged_model_of_the_run(tracker: MlflowTracker) -> None:
    def save(path: Path, model: Any) -> None:  # a minimal MLflow model directory: what save_model writes
        path.mkdir()
        (path / "weights.bin").write_bytes(b"w")
        model.save(str(path / "MLmodel"))

    with tracker.run("logged-model") as run_id:
        tracker.log_params({"lr": 0.01})
        model_id = tracker.log_model_dir(save, name="model")
    logged = tracker.client.get_logged_model(model_id)
    assert logged.params == {"lr": "0.01"}
    assert str(logged.status) == "READY"
    assert logged.source_run_id == run_id and logged.name == "model"
    run = tracker.client.get_run(run_id)
    assert [o.model_id for o in run.outputs.model_outputs] == [model_id]
    assert {f.path for f in tracker.client.list_logged_model_artifacts(model_id)} == {"MLmodel", "weights.bin"}
    version, champion = tracker.register(run_id, "logged-model-test", None, 0.5, model_id=model_id)
    assert (version, champion) == (1, 1)
    assert tracker.client.get_model_version("logged-model-test", "1").source == logged.artifact_location

    def broken(path: Path, model: Any) -> None:
        raise OSError("disk full")

    with tracker.run("broken-model"), pytest.raises(OSError, match="disk full"):
        tracker.log_model_dir(broken)
    models = tracker.client.search_logged_models([tracker.experiment_id], filter_string="name = 'model'")
    assert sorted(str(m.status) for m in models) == ["FAILED", "READY"]
    with pytest.raises(ValueError, match="expected a model_id or an artifact_path"):
        tracker.register(run_id, "logged-model-test", None, 0.5)


def test_registered_champion_loads_through_models_uri(tracker: MlflowTracker, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    from trainer.mlflow_model import input_example, save_mlflow_model

    files = trained_files(tmp_path / "train", "graphsage")
    net = files.pop("net")
    with tracker.run("trained") as run_id:
        model_id = tracker.log_model_dir(lambda path, model: save_mlflow_model(path, mlflow_model=model, **files))
    assert tracker.register(run_id, "strata-test", None, 0.75, model_id=model_id) == (1, 1)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracker.tracking_uri)  # what a user sets to load from the registry
    feed = input_example(6, 2, num_seeds=5, seed=9)
    pyfunc = mlflow.pyfunc.load_model("models:/strata-test@champion")
    np.testing.assert_allclose(pyfunc.predict(feed)["logits"], torch_logits(net, feed), rtol=0, atol=1e-6)
    assert pyfunc.metadata.model_id == model_id and pyfunc.metadata.run_id == run_id
    proto = mlflow.onnx.load_model("models:/strata-test@champion")
    assert [i.name for i in proto.graph.input][:2] == ["x", "edge_src_0"]
