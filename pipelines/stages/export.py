"""Export stage: ONNX (checked in onnxruntime) plus a quantized WASM-ready bundle, registered in MLflow.

Every model exports to ONNX; the bundle only for models that describe their layers to its runtime
(``trainer.export.supports_bundle``: graphsage). For the others (gcn, gat) the stage records why it skipped
the bundle under the stat ``bundle``.

The ``export`` artifact holds ``model.onnx``, the bundle (``model.json`` descriptor + ``weights.bin``) and
the registry outcome. The training run gains an MLflow model (pyfunc + ONNX flavor,
:mod:`pipelines.model_registry`) that becomes a new version of the registered model; the ``champion`` alias
moves only when validation accuracy improves.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from pipelines.config import PipelineConfig
from pipelines.formatting import markdown_table
from pipelines.links import mlflow_model_version_url, mlflow_run_url
from pipelines.model_registry import log_and_register
from pipelines.settings import StrataPaths
from pipelines.stages.common import Progress, StageResult, materialize
from pipelines.stages.train import load_model
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "ONNX_TOLERANCE", "model_name_for", "run", "summary"]

FORMAT_VERSION = 1
ONNX_TOLERANCE = 1e-4  # max |onnxruntime - torch| on a random subgraph before the export is refused


def model_name_for(cfg: PipelineConfig) -> str:
    return cfg.export.model_name or f"strata-{cfg.dataset_name}"


def run(store: ArtifactStore, cfg: PipelineConfig, *, train: Artifact, progress: Progress | None = None
        ) -> StageResult:
    """Export the trained model, verify it, and register it."""
    from trainer.export import export_bundle, export_onnx, random_subgraph, supports_bundle, verify_onnx
    from trainer.tracking import MlflowTracker

    paths = StrataPaths(store.root)

    def build(builder: ArtifactBuilder) -> None:
        net = load_model(train)
        onnx_path = builder.add_file("model.onnx")
        export_onnx(net, onnx_path, opset=cfg.export.opset)
        example = random_subgraph(net.in_dim, net.num_layers, num_seeds=16, fanout=5, seed=7)
        diff = verify_onnx(onnx_path, net, example)
        if diff > ONNX_TOLERANCE:
            raise ValueError(f"'{onnx_path}' expected onnxruntime logits within {ONNX_TOLERANCE} of PyTorch "
                             f"(got max |diff| {diff:.3g})")
        if progress:
            progress("export: onnx verified", 1, 3)
        if supports_bundle(net):
            with tempfile.TemporaryDirectory(dir=builder.dir.parent) as tmp:
                export_bundle(net, tmp, quantization=cfg.export.quantize, opset=cfg.export.opset,
                              onnx_file="model.onnx")
                for f in sorted(Path(tmp).iterdir()):
                    shutil.copyfile(f, builder.add_file(f.name))
            bundle_note = "export: bundle written"
        else:  # the bundle's runtime only knows the layers it describes; the ONNX model is the export then
            builder.stats["bundle"] = (f"skipped: model {cfg.train.model!r} has no bundle_descriptor (the WASM "
                                       "bundle's runtime knows graphsage layers only); exported as ONNX only")
            bundle_note = f"export: bundle skipped ({cfg.train.model} is exported as ONNX only)"
        if progress:
            progress(bundle_note, 2, 3)

        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        run_id = train.stats["mlflow_run_id"]
        name = model_name_for(cfg)
        bundle = [builder.dir / f for f in ("model.json", "weights.bin") if (builder.dir / f).exists()]
        registered = log_and_register(tracker, run_id, name, train, onnx_path, bundle)
        if progress:
            progress("export: registered", 3, 3)
        builder.stats.update(
            {
                "model_name": name,
                **registered,
                "onnx_max_abs_diff": diff,
                "onnx_opset": cfg.export.opset,
                "onnx_bytes": onnx_path.stat().st_size,
                "bundle_bytes": sum(p.stat().st_size for p in builder.dir.iterdir() if p.name != "model.onnx"),
                "mlflow_run_id": run_id,
                "val_acc": float(train.stats["val_acc"]),
            }
        )

    return materialize(store, cfg, "export", FORMAT_VERSION, {"train": train}, build,
                       derived={"model_name": model_name_for(cfg)})


_REGISTRY_STATS = ("model_name", "model_version", "champion_version", "mlflow_model_uri", "onnx_max_abs_diff",
                   "onnx_opset", "val_acc", "bundle")


def summary(artifact: Artifact) -> dict[str, Any]:
    """Registry outcome and ONNX verification (asset metadata)."""
    s = artifact.stats
    out: dict[str, Any] = {"registry": markdown_table({k: s[k] for k in _REGISTRY_STATS if k in s})}
    if "model_name" in s and "model_version" in s:
        out["mlflow_model_version"] = mlflow_model_version_url(s["model_name"], s["model_version"])
    if "mlflow_run_id" in s:
        out["mlflow_run"] = mlflow_run_url(s["mlflow_run_id"])
    return out
