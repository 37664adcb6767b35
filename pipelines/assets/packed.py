"""Asset ``packed``: cache blocks, per-batch packed chunks and address tables.

Wraps :func:`pipelines.stages.pack.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_PREPROCESS, format_bytes, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["packed"]


def describe(result: Any) -> dict[str, Any]:
    """Packed-store size, disk blow-up and bytes one training epoch reads."""
    s = result.artifact.stats
    summary = {
        "batches": s.get("num_batches", ""),
        "packed rows": s.get("packed_rows", ""),
        "packed.bin": format_bytes(s.get("packed_bytes", 0)),
        "disk blow-up (x features)": s.get("disk_blowup", ""),
        "bytes read per training epoch": format_bytes(s.get("epoch_read_bytes", 0)),
        "feature partitions while packing": s.get("partitions", ""),
    }
    return {"summary": dg.MetadataValue.md(markdown_table(summary))}


@dg.asset(
    name="packed",
    deps=["ordering", "samples", "plan"],
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy"},
    description="GPU/CPU cache blocks in plan order, packed.bin with each batch's disk rows in one "
    "4096-aligned chunk, and per-node address tables aligned with the samples.",
)
def packed(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Pack the features (``pipelines.stages.pack.run``)."""
    return run_stage_asset(context, strata, reporter, "packed", describe)
