"""Export stage: ONNX (checked in onnxruntime), its fp16 and int8 variants and the browser app, registered
in MLflow.

The ``export`` artifact is a deployable web folder (:mod:`pipelines.web.app`): ``model.onnx`` (fp32, verified
against PyTorch), ``model.fp16.onnx``, ``model.int8.onnx`` (QDQ), a sample ``subgraph.json`` + ``subgraph.bin``
of validation nodes, ``web.json`` and the page (``index.html``, ``app.mjs``, ``strata.mjs``), which runs the
models in onnxruntime-web. Each variant's size and validation-accuracy delta (vs fp32, onnxruntime on every
validation batch) are in the stats. The training run gains an MLflow model (pyfunc + ONNX flavor,
:mod:`pipelines.tracking.model_registry`) that becomes a new version of the registered model; the ``champion`` alias
moves only when validation accuracy improves.
"""

from __future__ import annotations

from typing import Any

from pipelines.config import PipelineConfig
from pipelines.core.formatting import markdown_table
from pipelines.core.paths import StrataPaths
from pipelines.core.progress import Progress
from pipelines.stages.common import StageResult, materialize
from pipelines.stages.train import load_model
from pipelines.tracking.links import mlflow_model_version_url, mlflow_run_url
from pipelines.tracking.model_registry import log_and_register, model_name_for
from storage_kernels.store import Artifact, ArtifactBuilder, ArtifactStore

__all__ = ["FORMAT_VERSION", "ONNX_TOLERANCE", "model_name_for", "run", "summary"]

FORMAT_VERSION = 2  # 2: the web folder and model variants replace the model.json + weights.bin bundle
ONNX_TOLERANCE = 1e-4  # max |onnxruntime - torch| on a random subgraph before the export is refused


def run(store: ArtifactStore, cfg: PipelineConfig, *, reorder: Artifact, sample: Artifact, train: Artifact,
        progress: Progress | None = None) -> StageResult:
    """Export the trained model, verify it, write its variants and the web app, and register it."""
    from pipelines.web.app import build_web
    from trainer.export import export_onnx, random_subgraph, verify_onnx
    from trainer.export_batches import message_widths
    from trainer.tracking import MlflowTracker

    paths = StrataPaths(store.root)
    if train.stats.get("task") == "link":  # a link predictor: pipelines/stages/train_link.py
        from pipelines.stages import train_link as link

        return link.export(store, cfg, upstream={"reorder": reorder, "sample": sample, "train": train},
                           format_version=FORMAT_VERSION, progress=progress)

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
        about = {"dataset": cfg.dataset_name, "model_name": model_name_for(cfg), "architecture": cfg.train.model}
        builder.stats.update(build_web(builder, onnx_path, reorder=reorder, sample=sample,
                                       web_seeds=cfg.export.web_seeds,
                                       calibration_batches=cfg.export.calibration_batches, about=about,
                                       memory_bytes=cfg.export.memory_mb << 20,
                                       message_widths=message_widths(net)))
        if progress:
            progress("export: variants and web app written", 2, 3)

        tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root,
                                experiment=f"strata-{cfg.dataset_name}")
        run_id = train.stats["mlflow_run_id"]
        name = model_name_for(cfg)
        variants = [builder.dir / f for f in ("model.fp16.onnx", "model.int8.onnx") if (builder.dir / f).exists()]
        registered = log_and_register(tracker, run_id, name, train, onnx_path, variants)
        if progress:
            progress("export: registered", 3, 3)
        builder.stats.update(
            {
                "model_name": name,
                **registered,
                "onnx_max_abs_diff": diff,
                "onnx_opset": cfg.export.opset,
                "onnx_bytes": onnx_path.stat().st_size,
                "mlflow_run_id": run_id,
                "val_acc": float(train.stats["val_acc"]),
            }
        )

    return materialize(store, cfg, "export", FORMAT_VERSION, {"reorder": reorder, "sample": sample, "train": train},
                       build,
                       derived={"model_name": model_name_for(cfg)})


_REGISTRY_STATS = ("model_name", "model_version", "champion_version", "mlflow_model_uri", "onnx_max_abs_diff",
                   "onnx_opset", "val_acc")


def summary(artifact: Artifact) -> dict[str, Any]:
    """Registry outcome, ONNX verification and the variants' sizes and accuracy deltas (asset metadata)."""
    from trainer.export_variants import VARIANTS

    s = artifact.stats
    out: dict[str, Any] = {"registry": markdown_table({k: s[k] for k in _REGISTRY_STATS if k in s})}
    rows = {name: f"{s[f'{name}_bytes']} bytes, val acc {s[f'{name}_val_acc']:.4f} "
                  f"(delta {s[f'{name}_val_acc_delta']:+.4f})"
            for name in VARIANTS if f"{name}_bytes" in s}
    if rows:
        out["variants"] = markdown_table(rows)
    if "model_name" in s and "model_version" in s:
        out["mlflow_model_version"] = mlflow_model_version_url(s["model_name"], s["model_version"])
    if "mlflow_run_id" in s:
        out["mlflow_run"] = mlflow_run_url(s["mlflow_run_id"])
    return out
