"""The summary a pipeline run returns and prints (``strata run``, in one process or under torchrun)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipelines.config import PipelineConfig
    from pipelines.core.paths import StrataPaths

__all__ = ["run_summary"]


def run_summary(cfg: PipelineConfig, paths: StrataPaths, artifacts: list[dict[str, Any]], metrics: dict[str, Any],
                model: Mapping[str, Any], export: Mapping[str, Any]) -> dict[str, Any]:
    """``dataset``, ``root``, ``artifacts`` (one entry per stage), ``metrics`` (plus export's
    ``onnx_max_abs_diff``), ``warnings`` (what the train stage noticed in the input) and ``mlflow`` (from the train
    and export artifacts' stats ``model`` and ``export``); the caller adds how the run was launched."""
    if "onnx_max_abs_diff" in export:
        metrics["onnx_max_abs_diff"] = export["onnx_max_abs_diff"]
    return {
        "dataset": cfg.dataset_name,
        "root": str(paths.root),
        "artifacts": artifacts,
        "metrics": metrics,
        "warnings": list(model.get("warnings") or []),  # the train stage's input_warnings
        "mlflow": {
            "tracking_uri": model.get("mlflow_tracking_uri", paths.mlflow_tracking_uri),
            "run_id": model.get("mlflow_run_id"),
            "model_name": export.get("model_name"),
            "model_version": export.get("model_version"),
            "champion_version": export.get("champion_version"),
        },
    }
