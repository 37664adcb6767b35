"""Asset ``partitioning``: node -> part labels and per-part node lists.

Wraps :func:`pipelines.stages.partition.run`.
"""

from typing import Any

import dagster as dg
import numpy as np

from pipelines.assets.common import GROUP_PREPROCESS, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["partitioning"]

_SHOWN_PARTS = 16


def describe(result: Any) -> dict[str, Any]:
    """Cut statistics and the sizes of the first parts."""
    sizes = np.diff(np.asarray(result.artifact.array("part_ptr.npy")))
    rows = [{"part": p, "nodes": int(n)} for p, n in enumerate(sizes[:_SHOWN_PARTS])]
    out: dict[str, Any] = {
        "part_sizes": dg.MetadataValue.md(markdown_table(rows, ["part", "nodes"])),
        "smallest_part": int(sizes.min()) if len(sizes) else 0,
        "largest_part": int(sizes.max()) if len(sizes) else 0,
    }
    return out


@dg.asset(
    name="partitioning",
    deps=["ordering"],
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy"},
    description="Partition label of every node, per-part node lists, edge cut and balance.",
)
def partitioning(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Partition the reordered graph (``pipelines.stages.partition.run``)."""
    return run_stage_asset(context, strata, reporter, "partitioning", describe)
