"""Asset ``model``: GraphSAGE trained on the offline samples, tracked in MLflow.

Wraps :func:`pipelines.stages.train.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_TRAINING, format_bytes, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["model", "HEADLINE_METRICS"]

#: The metrics ``strata run`` reports (from the model artifact's stats).
HEADLINE_METRICS = ("test_acc", "val_acc", "epoch_s", "bytes_read", "cache_hit_rate")


def describe(result: Any) -> dict[str, Any]:
    """Accuracies, epoch time, I/O and the MLflow run."""
    s = result.artifact.stats
    rows = {k: s[k] for k in HEADLINE_METRICS if k in s}
    if "bytes_read" in rows:
        rows["bytes_read"] = f"{rows['bytes_read']} ({format_bytes(rows['bytes_read'])})"
    out: dict[str, Any] = {"metrics": dg.MetadataValue.md(markdown_table(rows))}
    if "mlflow_run_id" in s:
        out["mlflow_run_id"] = s["mlflow_run_id"]
    return out


@dg.asset(
    name="model",
    deps=["ordering", "samples", "plan", "packed"],
    code_version="1",
    group_name=GROUP_TRAINING,
    kinds={"pytorch", "mlflow"},
    description="Best-validation GraphSAGE weights (state_dict), architecture and training history; the "
    "MLflow run holds the same files, parameters and per-epoch metrics.",
)
def model(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Train the model (``pipelines.stages.train.run``)."""
    return run_stage_asset(context, strata, reporter, "model", describe)
