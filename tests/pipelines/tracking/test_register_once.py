"""``log_and_register`` is idempotent per train artifact: a second registration of the same artifact version
(a rerun after a kill, a concurrent run) logs no model, copies no export file and registers no version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pipelines.core.paths import StrataPaths
from pipelines.tracking.model_registry import log_and_register
from storage_kernels.store import Artifact, ArtifactStore
from trainer.export import export_onnx
from trainer.models import build_model
from trainer.tracking import ARTIFACT_VERSION_TAG, MlflowTracker

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning",
                                        "ignore:.*TracerWarning")

ARGS = {"in_dim": 6, "hidden_dim": 8, "out_dim": 3, "num_layers": 2, "dropout": 0.0}


def _train_artifact(store: ArtifactStore, seed: int, val_acc: float) -> tuple[Artifact, Path]:
    """A published ``train`` artifact (real weights of a small GraphSAGE) and its ONNX export."""
    torch.manual_seed(seed)
    net = build_model("graphsage", **ARGS).eval()
    version = store.version_for("train", 1, {"seed": seed}, {})
    with store.builder("unit", "train", version, {"seed": seed}, {}) as b:
        torch.save(net.state_dict(), b.add_file("state_dict.pt"))
        b.write_json("model.json", {"architecture": "graphsage", "model": "graphsage", **ARGS})
        b.stats.update({"val_acc": val_acc})
        artifact = b.publish()
    onnx_path = store.root / f"model-{seed}.onnx"
    export_onnx(net, onnx_path)
    return artifact, onnx_path


def _run_files(tracker: MlflowTracker, run_id: str) -> list[str]:
    return sorted(f.path for f in tracker.client.list_artifacts(run_id, "export"))


def _logged_models(tracker: MlflowTracker) -> list[str]:
    return [m.model_id for m in tracker.client.search_logged_models([tracker.experiment_id])]


def test_second_registration_of_an_artifact_logs_and_registers_nothing(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    paths = StrataPaths.at(tmp_path)
    tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root, experiment="strata-unit")
    train, onnx_path = _train_artifact(store, seed=1, val_acc=0.5)
    with tracker.run("train") as run_id:
        tracker.log_metrics({"val_acc": 0.5})

    first = log_and_register(tracker, run_id, "strata-unit", train, onnx_path)
    assert first["model_version"] == first["champion_version"] == 1
    models, files = _logged_models(tracker), _run_files(tracker, run_id)
    assert models == [first["mlflow_model_id"]] and files == [f"export/{onnx_path.name}"]

    again = log_and_register(tracker, run_id, "strata-unit", train, onnx_path)
    assert again == first  # same version, same logged model, same URI
    assert _logged_models(tracker) == models  # no second logged model
    assert _run_files(tracker, run_id) == files
    versions = tracker.client.search_model_versions("name = 'strata-unit'")
    assert [(int(v.version), v.tags[ARTIFACT_VERSION_TAG]) for v in versions] == [(1, train.version)]

    # another artifact version is a new model: logged and registered (and champion when it is better)
    other, other_onnx = _train_artifact(store, seed=2, val_acc=0.7)
    with tracker.run("train-2") as run_2:
        pass
    second = log_and_register(tracker, run_2, "strata-unit", other, other_onnx)
    assert second["model_version"] == second["champion_version"] == 2
    assert len(_logged_models(tracker)) == 2
    # re-registering the first artifact now reports the current champion, still without logging
    assert log_and_register(tracker, run_id, "strata-unit", train, onnx_path)["champion_version"] == 2
    assert len(_logged_models(tracker)) == 2
    assert json.loads(json.dumps(second))  # plain JSON stats (the export stage stores them)
