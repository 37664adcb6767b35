"""Asset ``plan``: the storage tier of every node, chosen from the sampled access trace.

Wraps :func:`pipelines.stages.plan.run`.
"""

from typing import Any

import dagster as dg

from pipelines.assets.common import GROUP_PREPROCESS, format_bytes, markdown_table, run_stage_asset
from pipelines.resources import RunReporter, StrataResource

__all__ = ["plan"]


def describe(result: Any) -> dict[str, Any]:
    """Budgets, cache sizes and predicted hit rates per tier."""
    s = result.artifact.stats
    rows = [
        {
            "tier": tier,
            "rows": s.get(f"{tier}_cache_rows", ""),
            "bytes": format_bytes(s.get(f"{tier}_cache_bytes", 0)),
            "budget": format_bytes(s.get(f"{tier}_budget_bytes", 0)),
            "predicted hit rate": s.get(f"predicted_hit_rate_{tier}", ""),
        }
        for tier in ("gpu", "cpu")
    ]
    miss = 1.0 - float(s.get("predicted_hit_rate", 0.0))
    rows.append({"tier": "packed (disk)", "rows": "", "bytes": "", "budget": "", "predicted hit rate": miss})
    rows.append({"tier": "feature file (eval only)", "rows": s.get("eval_only_nodes", ""), "bytes": "",
                 "budget": "", "predicted hit rate": ""})
    return {"tiers": dg.MetadataValue.md(markdown_table(rows))}


@dg.asset(
    name="plan",
    deps=["ordering", "samples"],
    code_version="1",
    group_name=GROUP_PREPROCESS,
    kinds={"numpy"},
    description="Tier (GPU cache, CPU cache, packed, never read) and slot of every node within the cache "
    "budgets, with predicted hit rates (exact for the sampled trace).",
)
def plan(
    context: dg.AssetExecutionContext, strata: StrataResource, reporter: dg.ResourceParam[RunReporter]
) -> dg.MaterializeResult:
    """Plan the feature tiers (``pipelines.stages.plan.run``)."""
    return run_stage_asset(context, strata, reporter, "plan", describe)
