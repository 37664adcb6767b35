"""Asset ``export``: ONNX + quantized WASM bundle, registered as a model version in MLflow.

Wraps :func:`pipelines.stages.export.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_TRAINING, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["export"]

_STATS = ("model_name", "model_version", "champion_version", "onnx_max_abs_diff", "onnx_opset", "val_acc")


def describe(result: Any) -> dict[str, Any]:
    """Registry outcome and ONNX verification."""
    s = result.artifact.stats
    return {"registry": dg.MetadataValue.md(markdown_table({k: s[k] for k in _STATS if k in s}))}


@dg.asset(
    name="export",
    deps=["model"],
    code_version="1",
    group_name=GROUP_TRAINING,
    kinds={"onnx", "mlflow"},
    description="ONNX model verified against PyTorch in onnxruntime, a quantized WASM-ready bundle, and "
    "the registered model version (the 'champion' alias moves only when validation improves).",
)
def export(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Export and register the model (``pipelines.stages.export.run``)."""
    return run_stage_asset(context, strata, reporter, "export", describe)
