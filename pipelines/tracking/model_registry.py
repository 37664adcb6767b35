"""The export stage's MLflow side: log the trained model as an MLflow model and register it.

:func:`log_and_register` attaches to the training run, logs an MLflow 3 logged model named ``model``
(``trainer.mlflow_model``: a pyfunc over ``state_dict.pt`` and the ONNX flavor of ``model.onnx``, with a
signature and an input example), copies the export files under the run's ``export/`` artifacts, and registers
the logged model as a new version of the registered model, so that
``mlflow.pyfunc.load_model("models:/NAME@champion")`` and ``mlflow.onnx.load_model(...)`` load it. The
``champion`` alias moves only when validation accuracy improves (``MlflowTracker.register``). The new version
carries the digest of every file logged (:mod:`pipelines.tracking.registry_digests`), which ``strata verify`` and
``strata models export`` check.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pipelines.tracking.registry_digests import digests_tag, tree_digests
from storage_kernels.arrays import file_checksum
from storage_kernels.store import Artifact

__all__ = ["EXPORT_DIR", "MODEL_ARTIFACT", "champion_artifacts", "log_and_register", "model_name_for", "model_uri",
           "node_id_config"]


def model_name_for(cfg: Any) -> str:
    """The registered model name of a run: ``export.model_name``, by default ``strata-<dataset>``."""
    return cfg.export.model_name or f"strata-{cfg.dataset_name}"

#: Name of the logged model inside a run (and of its artifact directory).
MODEL_ARTIFACT = "model"
#: Where the export files are copied among the training run's artifacts.
EXPORT_DIR = "export"


def champion_artifacts(root: str | Path) -> dict[str, str]:
    """The store versions the champions of ``root``'s MLflow registry were trained as (a version's tag
    ``strata.artifact_version``), each with why it is kept: what ``strata gc`` pins. Empty when the root has
    no registry; a registry that cannot be read raises (gc must not guess what production uses)."""
    from pipelines.core.paths import StrataPaths

    paths = StrataPaths(Path(root))
    if not (paths.mlflow_dir / "mlflow.db").is_file():
        return {}
    from trainer.model_versions import list_versions, registry_client
    from trainer.tracking import ARTIFACT_VERSION_TAG, CHAMPION

    return {v.tags[ARTIFACT_VERSION_TAG]: f"trained the champion ({v.name} version {v.version})"
            for v in list_versions(registry_client(paths.mlflow_tracking_uri))
            if CHAMPION in v.aliases and v.tags.get(ARTIFACT_VERSION_TAG)}


def model_uri(name: str, version: int | str) -> str:
    """``models:/NAME/VERSION`` (``version`` may also be ``@alias``: ``models:/NAME@champion``)."""
    version = str(version)
    return f"models:/{name}{version}" if version.startswith("@") else f"models:/{name}/{version}"


def node_id_config(train: Artifact) -> dict[str, str]:
    """The pyfunc's model config for predictions by node id: the data root (``<root>/<dataset>/train/<version>``
    is the train artifact's path), the dataset and the train version (:mod:`trainer.node_predictions`)."""
    return {"strata_root": str(Path(train.path).parents[2]), "strata_dataset": train.dataset,
            "strata_train_version": train.version}


def log_and_register(tracker: Any, run_id: str, model_name: str, train: Artifact, onnx_path: Path,
                     extra_files: Iterable[Path] = ()) -> dict[str, Any]:
    """Log the MLflow model of ``train`` (+ ``onnx_path``) into ``run_id``, register it; returns export stats
    (``model_version``, ``champion_version``, ``mlflow_model_id``, ``mlflow_model_uri``).

    The digest of every file logged (the model directory and the run's ``export/`` files) is recorded on the new
    version (:mod:`pipelines.tracking.registry_digests`). Idempotent per train artifact: when a version of
    ``model_name`` is already registered from ``train.version``, nothing is logged or registered and that
    version (and its logged model) is returned.
    """
    from trainer.mlflow_model import save_mlflow_model

    val_acc = float(train.stats["val_acc"])
    metadata = {"strata_dataset": train.dataset, "strata_train_version": train.version, "val_acc": val_acc}
    files = [onnx_path, *extra_files]
    source_digests: dict[str, str] = {}

    def save(path: Path, model: Any) -> None:
        save_mlflow_model(path, model_json=train.file("model.json"), state_dict=train.file("state_dict.pt"),
                          onnx_path=onnx_path, mlflow_model=model, metadata=metadata,
                          model_config=node_id_config(train))
        source_digests.update(tree_digests(path))  # the files uploaded, as written

    # The store's lock (re-entrant) spans check, log and register: a second registration of the same train
    # artifact -- a rerun after a kill, or a concurrent run -- logs nothing and registers nothing.
    from trainer.tracking import store_lock

    with store_lock(tracker.tracking_uri):
        known = tracker.registered_model_version(model_name, train.version)
        if known is not None:
            version, model_id = known
            current = tracker.champion(model_name)
            champion = current[0] if current is not None else version
        else:
            with tracker.attach(run_id):  # the finished training run gains its model and the export files
                model_id = tracker.log_model_dir(save, name=MODEL_ARTIFACT,
                                                 tags={"strata.train_version": train.version})
                run_digests = {f"{EXPORT_DIR}/{path.name}": file_checksum(path) for path in files}
                for path in files:
                    tracker.log_artifact(path, EXPORT_DIR)
            version, champion = tracker.register(run_id, model_name, None, val_acc, model_id=model_id,
                                                 artifact_version=train.version,
                                                 tags=digests_tag(source_digests, run_digests))
    return {"model_version": version, "champion_version": champion, "mlflow_model_id": model_id,
            "mlflow_model_uri": model_uri(model_name, version)}
