"""Asset ``ordering``: a vertex permutation and the graph relabelled and rewritten in that order.

Wraps :func:`pipelines.stages.reorder.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_PREPROCESS, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["ordering"]


def describe(result: Any) -> dict[str, Any]:
    """The strategy and its locality statistics."""
    stats = {k: v for k, v in result.artifact.stats.items() if isinstance(v, (int, float, str))}
    return {"summary": dg.MetadataValue.md(markdown_table(stats))}


@dg.asset(
    name="ordering",
    deps=["graph"],
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy"},
    description="Permutation (perm/inverse) plus the CSR, features, labels and splits relabelled in the "
    "new order, so hot or nearby nodes sit together on disk.",
)
def ordering(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Reorder the graph (``pipelines.stages.reorder.run``)."""
    return run_stage_asset(context, strata, reporter, "ordering", describe)
