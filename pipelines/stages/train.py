"""Train stage: GraphSAGE on the offline samples, features from the packed store, tracked in MLflow.

The ``model`` artifact holds the best-validation weights (``state_dict.pt``, a plain tensor dict loaded with
``weights_only=True``), the architecture (``model.json``) and the run's metrics; the MLflow run gets the
same files, the flat configuration and per-epoch metrics.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from pipelines.config import PipelineConfig
from pipelines.settings import StrataPaths
from pipelines.stages.common import Progress, StageResult, materialize
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "resolve_device", "open_feature_source", "run"]

FORMAT_VERSION = 1


def resolve_device(requested: str) -> str:
    """``auto`` picks CUDA when available; an explicit ``cuda`` without a GPU is a clear error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"'train.device' expected cpu or auto on a machine without CUDA (got {requested!r})")
    return requested


def open_feature_source(kind: str, ordering: Artifact, packed: Artifact, sample_set: SampleSet, device: str
                        ) -> Any:
    """The trainer's feature source for ``kind``: packed store, RAM, or per-row direct reads."""
    from trainer.features import InMemoryFeatures, NaiveDiskFeatures, PackedFeatures

    if kind == "packed":
        # Evaluation batches are not packed: their uncached rows come from the ordered feature file.
        return PackedFeatures(packed.path, sample_set, device=device, features_path=ordering.file("features.npy"))
    if kind == "in_memory":
        return InMemoryFeatures(np.load(ordering.file("features.npy")), device=device)
    if kind == "naive":
        return NaiveDiskFeatures(ordering.file("features.npy"), device=device)
    raise ValueError(f"'train.feature_path' expected packed, in_memory or naive (got {kind!r})")


def trainer_config(cfg: PipelineConfig, device: str) -> Any:
    from trainer.config import TrainConfig

    t = cfg.train
    return TrainConfig(hidden_dim=t.hidden_dim, dropout=t.dropout, lr=t.lr, weight_decay=t.weight_decay,
                       epochs=t.epochs, seed=t.seed, prefetch=t.prefetch, device=device)


def run(store: ArtifactStore, cfg: PipelineConfig, *, ordering: Artifact, samples: Artifact, plan: Artifact,
        packed: Artifact, paths: StrataPaths, progress: Progress | None = None) -> StageResult:
    """Train, log to MLflow and write the ``model`` artifact."""
    from trainer.tracking import MlflowTracker
    from trainer.train import train

    device = resolve_device(cfg.train.device)
    params = cfg.train.model_dump(mode="json")
    params["device"] = device  # CPU and GPU runs are different artifacts

    def build(builder: ArtifactBuilder) -> None:
        sample_set = SampleSet(samples.path)
        labels = np.asarray(ordering.array("labels.npy"), dtype=np.int64)
        tcfg = trainer_config(cfg, device)
        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        source = open_feature_source(cfg.train.feature_path, ordering, packed, sample_set, device)

        def on_epoch(epoch: int, metrics: dict[str, float]) -> None:
            if progress:
                progress("train: epochs", epoch + 1, tcfg.epochs)

        tags = {"strata.dataset": cfg.dataset_name, "strata.model_version": builder.version,
                **{f"strata.upstream.{k}": v.version for k, v in
                   {"ordering": ordering, "samples": samples, "plan": plan, "packed": packed}.items()}}
        try:
            with tracker.run(run_name=f"{cfg.dataset_name}-{builder.version}", tags=tags) as run_id:
                result = train(tcfg, sample_set, source, labels, tracker=tracker, progress=on_epoch)
                state_path = builder.add_file("state_dict.pt")
                torch.save(result.best_state_dict, state_path)
                model_info = {"architecture": "graphsage", "aggregation": "mean", **result.model_args}
                builder.write_json("model.json", model_info)
                tracker.log_model_files(state_dict_path=state_path, artifact_path="model")
                tracker.log_artifact(builder.dir / "model.json", "model")
                summary = _summary(result, source)
                tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, float)})
        finally:
            source.close()
        builder.write_json("history.json", {"loss": result.losses, "train_acc": result.train_acc,
                                            "val_acc": result.val_accs, "epoch_s": result.epoch_s,
                                            "timers": result.timers})
        builder.stats.update(summary)
        builder.stats.update({"mlflow_run_id": run_id, "mlflow_tracking_uri": paths.mlflow_tracking_uri,
                              "device": device, "feature_path": cfg.train.feature_path})

    return materialize(store, cfg.dataset_name, "model", FORMAT_VERSION, params,
                       {"ordering": ordering, "samples": samples, "plan": plan, "packed": packed}, build)


def _summary(result: Any, source: Any) -> dict[str, Any]:
    """Headline metrics: steady-state epoch time skips the first epoch when there are several."""
    epochs = result.epoch_s[1:] if len(result.epoch_s) > 1 else result.epoch_s
    return {
        "val_acc": float(result.val_acc),
        "test_acc": float(result.test_acc),
        "best_epoch": int(result.best_epoch),
        "final_loss": float(result.losses[-1]),
        "epoch_s": float(np.mean(epochs)),
        "bytes_read": int(result.bytes_read),
        "bytes_read_per_epoch": int(result.bytes_read) / max(len(result.epoch_s), 1),
        "cache_hit_rate": float(result.cache_hit_rate),
        "direct_io": bool(getattr(source, "direct_io", False)),
    }


def load_model(model: Artifact) -> torch.nn.Module:
    """Rebuild the trained GraphSAGE from a ``model`` artifact (weights only, never unpickled objects)."""
    from trainer.models import GraphSAGE

    info = model.json("model.json")
    net = GraphSAGE(info["in_dim"], info["hidden_dim"], info["out_dim"], info["num_layers"], info.get("dropout", 0.0))
    state = torch.load(Path(model.file("state_dict.pt")), map_location="cpu", weights_only=True)
    net.load_state_dict(state)
    return net.eval()
