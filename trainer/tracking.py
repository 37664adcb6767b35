"""MLflow tracking and model registry for Strata runs, through ``MlflowClient`` (no fluent global state).

Defaults: a SQLite tracking store ``sqlite:///<root>/mlflow/mlflow.db`` and a local artifact root
``<root>/mlflow/artifacts``; telemetry off (``MLFLOW_DISABLE_TELEMETRY=true``, ``DO_NOT_TRACK=1`` are set
before mlflow is imported, and mlflow is imported lazily, only when a tracker is built).

Experiments are created with the tag ``mlflow.experimentKind=custom_model_development`` so that MLflow 3's UI
opens them as machine-learning experiments (runs, metrics, models), not in its GenAI view.

Models are MLflow 3 logged models (:meth:`MlflowTracker.log_model_dir`: a directory written by
``trainer.mlflow_model``, a models-from-code pyfunc over a ``state_dict`` read with
``torch.load(weights_only=True)`` plus the ONNX flavor), never ``mlflow.pytorch``, which pickles whole modules.
Each training run registers one model version; the ``champion`` alias moves to it only when its validation
accuracy (stored as the version tag ``val_acc``) beats the current champion's.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["ARTIFACT_VERSION_TAG", "CHAMPION", "MlflowTracker", "default_uris", "store_lock"]

CHAMPION = "champion"
VAL_ACC_TAG = "val_acc"
#: Experiment tag MLflow 3's UI reads to pick the experiment's view; the value selects classic ML / deep learning.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND_ML = "custom_model_development"
#: Model-version tag naming the artifact a version was registered from (registration is idempotent on it).
ARTIFACT_VERSION_TAG = "strata.artifact_version"
#: Model-version tag naming the logged model a version was registered from (the registry does not keep it).
MODEL_ID_TAG = "strata.model_id"


def _mlflow() -> Any:
    """Import mlflow with telemetry off (the variables must be set before the first import)."""
    os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
    os.environ["DO_NOT_TRACK"] = "1"
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no tqdm bars on stderr per copy
    import mlflow

    return mlflow


def store_lock(tracking_uri: str) -> contextlib.AbstractContextManager[Any]:
    """An inter-process lock for a local SQLite store (``<db>.lock``): its first use creates the schema
    (alembic migrations), which two processes must not run at once; a no-op for other stores."""
    prefix = "sqlite:///"
    if not tracking_uri.startswith(prefix):
        return contextlib.nullcontext()
    from storage_kernels.locks import file_lock

    db = Path(tracking_uri[len(prefix):])
    return file_lock(db.with_name(db.name + ".lock"))


def default_uris(root: str | Path) -> tuple[str, str]:
    """``(tracking_uri, artifact_root)`` under ``<root>/mlflow/``: a SQLite store and a local directory."""
    base = Path(root).resolve() / "mlflow"
    base.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{base / 'mlflow.db'}", (base / "artifacts").as_uri()


class MlflowTracker:
    """Log one run at a time to an experiment, and register its model.

    >>> tracker = MlflowTracker(root="/data/strata", experiment="cora")
    >>> with tracker.run("sage-packed") as run_id:
    ...     result = train(cfg, samples, source, labels, tracker=tracker)
    ...     model_id = tracker.log_model_dir(lambda path, model: save_mlflow_model(path, ..., mlflow_model=model))
    >>> version, champion = tracker.register(run_id, "cora-sage", None, result.val_acc, model_id=model_id)
    """

    def __init__(self, tracking_uri: str | None = None, artifact_root: str | None = None,
                 experiment: str = "strata", *, root: str | Path | None = None) -> None:
        if tracking_uri is None:
            if root is None:
                raise ValueError("'MlflowTracker' expected tracking_uri or root (got neither)")
            tracking_uri, default_artifacts = default_uris(root)
            artifact_root = artifact_root or default_artifacts
        mlflow = _mlflow()
        from mlflow.tracking import MlflowClient

        self._mlflow = mlflow
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root
        with store_lock(tracking_uri):  # one process creates the schema and the experiment; the others wait
            self.client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
            found = self.client.get_experiment_by_name(experiment)
            if found is None:
                location = f"{artifact_root.rstrip('/')}/{experiment}" if artifact_root else None
                self.experiment_id = self.client.create_experiment(experiment, artifact_location=location,
                                                                   tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND_ML})
            else:
                self.experiment_id = found.experiment_id
                if EXPERIMENT_KIND_TAG not in found.tags:  # created before the tag: open it as ML too
                    self.client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_ML)
        self.experiment = experiment
        self.run_id: str | None = None
        self._monitor: Any = None

    # ---------------------------------------------------------------------------------------------- runs
    def start_run(self, run_name: str | None = None, tags: dict[str, str] | None = None,
                  system_metrics: bool = False, sampling_interval_s: float = 10.0) -> str:
        """Create a run and make it the one ``log_*`` write to; returns its id.

        ``system_metrics`` samples CPU, memory, disk, network (and NVIDIA GPUs when pynvml works) every
        ``sampling_interval_s`` into ``system/*`` metrics until :meth:`end_run` (MLflow's monitor thread).
        """
        if self.run_id is not None:
            raise RuntimeError(f"'MlflowTracker' expected no active run (got {self.run_id})")
        run = self.client.create_run(self.experiment_id, run_name=run_name, tags=tags or {})
        self.run_id = run.info.run_id
        if system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self._monitor = SystemMetricsMonitor(self.run_id, sampling_interval=sampling_interval_s,
                                                 tracking_uri=self.tracking_uri)
            self._monitor.start()
        return self.run_id

    def end_run(self, status: str = "FINISHED") -> None:
        """Mark the active run terminated (``FINISHED``, ``FAILED`` or ``KILLED``)."""
        if self._monitor is not None:
            self._monitor.finish()  # flushes the last samples
            self._monitor = None
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status=status)
            self.run_id = None

    @contextlib.contextmanager
    def run(self, run_name: str | None = None, tags: dict[str, str] | None = None,
            system_metrics: bool = False, sampling_interval_s: float = 10.0) -> Iterator[str]:
        """``start_run`` ... ``end_run``; the run is marked ``FAILED`` if the block raises."""
        run_id = self.start_run(run_name, tags, system_metrics, sampling_interval_s)
        try:
            yield run_id
        except BaseException:
            self.end_run("FAILED")
            raise
        self.end_run("FINISHED")

    @contextlib.contextmanager
    def attach(self, run_id: str) -> Iterator[str]:
        """Log into an existing run (e.g. a finished training run gaining export files) for the block,
        leaving its status as it is."""
        if self.run_id is not None:
            raise RuntimeError(f"'MlflowTracker' expected no active run (got {self.run_id})")
        self.client.get_run(run_id)  # raises MlflowException naming the id when it does not exist
        self.run_id = run_id
        try:
            yield run_id
        finally:
            self.run_id = None

    def _active(self) -> str:
        if self.run_id is None:
            raise RuntimeError("'MlflowTracker' expected an active run (got none: call start_run first)")
        return self.run_id

    # ---------------------------------------------------------------------------------------------- logging
    def log_params(self, params: dict[str, Any]) -> None:
        """Log a flat dict of parameters (values as strings, as MLflow stores them)."""
        from mlflow.entities import Param

        self.client.log_batch(self._active(), params=[Param(str(k), str(v)) for k, v in params.items()])

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        """Log finite metrics at ``step`` (NaN / inf values are skipped)."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        batch = [Metric(str(k), float(v), now, int(step or 0)) for k, v in metrics.items()
                 if math.isfinite(float(v))]
        if batch:
            self.client.log_batch(self._active(), metrics=batch)

    def set_tags(self, tags: dict[str, Any]) -> None:
        for k, v in tags.items():
            self.client.set_tag(self._active(), str(k), str(v))

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Copy a file or a whole directory into the run's artifacts under ``artifact_path``."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"'artifact' expected a file or directory at {path} (got no such path)")
        if path.is_dir():
            self.client.log_artifacts(self._active(), str(path), artifact_path)
        else:
            self.client.log_artifact(self._active(), str(path), artifact_path)

    def log_model_files(self, state_dict_path: str | Path | None = None, onnx_path: str | Path | None = None,
                        bundle_dir: str | Path | None = None, artifact_path: str = "model") -> str:
        """Log the model as files under ``artifact_path`` (state_dict, ONNX, ``bundle/``); returns the
        artifact URI of that directory (the registry's model-version source)."""
        for path in (state_dict_path, onnx_path):
            if path is not None:
                self.log_artifact(path, artifact_path)
        if bundle_dir is not None:
            self.log_artifact(bundle_dir, f"{artifact_path}/bundle")
        return self.artifact_uri(self._active(), artifact_path)

    def log_model_dir(self, save: Callable[[Path, Any], None], name: str = "model", step: int = 0,
                      tags: dict[str, str] | None = None) -> str:
        """Log an MLflow model as an MLflow 3 logged model of the active run; returns its ``model_id``.

        ``save(path, mlflow_model)`` writes the model directory at ``path`` filling ``mlflow_model`` (an
        ``mlflow.models.Model`` carrying the logged model's id and run, e.g. through
        ``trainer.mlflow_model.save_mlflow_model``). The model is linked to the run as an output at ``step``
        and finalized ``READY`` (``FAILED`` if ``save`` raises).
        """
        from mlflow.entities import LoggedModelOutput
        from mlflow.models import Model

        run_id = self._active()
        params = dict(self.client.get_run(run_id).data.params)  # as mlflow's log_model does: the run's params
        logged = self.client.create_logged_model(self.experiment_id, name=name, source_run_id=run_id,
                                                 tags=tags, params=params)
        try:
            self.client.log_outputs(run_id, models=[LoggedModelOutput(logged.model_id, step=step)])
            model = Model(artifact_path=logged.artifact_location, model_uuid=logged.model_id, run_id=run_id,
                          model_id=logged.model_id)
            with tempfile.TemporaryDirectory(prefix="strata-mlflow-model-") as tmp:
                local = Path(tmp) / name
                save(local, model)
                self.client.log_model_artifacts(logged.model_id, str(local))
        except BaseException:
            self.client.finalize_logged_model(logged.model_id, "FAILED")
            raise
        self.client.finalize_logged_model(logged.model_id, "READY")
        return logged.model_id

    def artifact_uri(self, run_id: str, artifact_path: str) -> str:
        """URI of ``artifact_path`` inside the run's artifact directory."""
        return f"{self.client.get_run(run_id).info.artifact_uri.rstrip('/')}/{artifact_path}"

    # ---------------------------------------------------------------------------------------------- registry
    def champion(self, model_name: str) -> tuple[int, float] | None:
        """``(version, val_acc)`` of the version holding the ``champion`` alias, or None."""
        from mlflow.exceptions import MlflowException

        try:
            mv = self.client.get_model_version_by_alias(model_name, CHAMPION)
        except MlflowException as e:
            if e.error_code in ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE"):
                return None
            raise
        return int(mv.version), float(mv.tags.get(VAL_ACC_TAG, "-inf"))

    def register(self, run_id: str, model_name: str, artifact_path: str | None, val_acc: float,
                 model_id: str | None = None, artifact_version: str | None = None,
                 tags: dict[str, str] | None = None) -> tuple[int, int]:
        """Register a new version of ``model_name`` (created if missing), tag it with ``val_acc``, and move
        ``champion`` to it only if it beats the current champion.

        The version's source is the logged model ``model_id`` (from :meth:`log_model_dir`: what
        ``mlflow.pyfunc.load_model("models:/NAME@champion")`` loads) or, without one, the run's
        ``artifact_path`` directory. With ``artifact_version`` (the Strata artifact the model comes from)
        registration is idempotent: a version already registered from that artifact (tag
        ``strata.artifact_version``) is returned as is. ``tags`` are more version tags, set in the call that creates
        the version (the export stage's file digests). The whole registration holds the store's lock, so two
        processes never register the same artifact.

        Returns ``(version, champion_version)``.
        """
        with store_lock(self.tracking_uri):
            if artifact_version is not None:
                known = self.registered_version(model_name, artifact_version)
                if known is not None:
                    current = self.champion(model_name)
                    return known, current[0] if current is not None else known
            return self._register(run_id, model_name, artifact_path, val_acc, model_id, artifact_version, tags)

    def registered_version(self, model_name: str, artifact_version: str) -> int | None:
        """The version of ``model_name`` registered from ``artifact_version`` (the lowest), or None."""
        known = self.registered_model_version(model_name, artifact_version)
        return known[0] if known is not None else None

    def registered_model_version(self, model_name: str, artifact_version: str) -> tuple[int, str | None] | None:
        """``(version, model_id)`` of the version of ``model_name`` registered from ``artifact_version`` (the
        lowest), or None; ``model_id`` is its logged model's id (None for a version made from run files)."""
        from mlflow.exceptions import MlflowException

        try:
            quoted = model_name.replace("'", "\\'")
            found = self.client.search_model_versions(f"name = '{quoted}'")
        except MlflowException as e:
            if e.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise
        versions = [int(mv.version) for mv in found if mv.tags.get(ARTIFACT_VERSION_TAG) == artifact_version]
        if not versions:
            return None
        mv = self.client.get_model_version(model_name, str(min(versions)))
        return int(mv.version), mv.tags.get(MODEL_ID_TAG) or self._logged_model_at(mv.source)

    def _logged_model_at(self, source: str) -> str | None:
        """The id of this experiment's logged model stored at ``source`` (versions registered before the
        ``strata.model_id`` tag; a SQLite registry does not keep a version's model id)."""
        for model in self.client.search_logged_models([self.experiment_id]):
            if model.artifact_location == source:
                return model.model_id
        return None

    def _register(self, run_id: str, model_name: str, artifact_path: str | None, val_acc: float,
                  model_id: str | None, artifact_version: str | None,
                  tags: dict[str, str] | None = None) -> tuple[int, int]:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(model_name)
        except MlflowException as e:
            if e.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise
            self.client.create_registered_model(model_name, tags={"framework": "strata"})
        if model_id is not None:  # the logged model's own location (a models:/ source needs global state)
            source = self.client.get_logged_model(model_id).artifact_location
        elif artifact_path is not None:
            source = self.artifact_uri(run_id, artifact_path)
        else:
            raise ValueError("'register' expected a model_id or an artifact_path (got neither)")
        mv = self.client.create_model_version(
            model_name, source=source, run_id=run_id, model_id=model_id,
            tags={VAL_ACC_TAG: repr(float(val_acc)),
                  **({ARTIFACT_VERSION_TAG: artifact_version} if artifact_version is not None else {}),
                  **({MODEL_ID_TAG: model_id} if model_id is not None else {}), **(tags or {})},
        )
        version = int(mv.version)
        current = self.champion(model_name)
        if current is None or float(val_acc) > current[1]:
            self.client.set_registered_model_alias(model_name, CHAMPION, str(version))
            return version, version
        return version, current[0]
