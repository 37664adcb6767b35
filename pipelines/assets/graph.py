"""Asset ``graph``: ingest a source into a CSR graph with features, labels and splits.

Wraps :func:`pipelines.stages.ingest.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_PREPROCESS, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["graph"]

_STATS = ("num_nodes", "num_edges", "feature_dim", "num_classes", "max_degree", "mean_degree")


def describe(result: Any) -> dict[str, Any]:
    """Degree and size statistics as a Markdown table."""
    stats = result.artifact.stats
    return {"summary": dg.MetadataValue.md(markdown_table({k: stats[k] for k in _STATS if k in stats}))}


@dg.asset(
    name="graph",
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy"},
    description="CSR graph (symmetrised), float32 features, labels and train/val/test splits of the source.",
)
def graph(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Ingest the configured dataset (``pipelines.stages.ingest.run``)."""
    return run_stage_asset(context, strata, reporter, "graph", describe)
