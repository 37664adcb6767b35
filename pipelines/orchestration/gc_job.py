"""The Dagster side of ``strata gc``: ``artifact_gc_job`` and its weekly schedule (STOPPED until switched on).

The op removes superseded artifact versions under the resource's data root by the rules of
:mod:`storage_kernels.retention` (``strata gc --yes`` with the same options) and records what it removed as
output metadata. No ``from __future__ import annotations`` here: Dagster reads the op's annotations (its
config class and resource) at definition time.
"""

import dagster as dg
from pydantic import Field

from pipelines.orchestration.resources import StrataResource

__all__ = ["GC_CRON", "GC_JOB", "GcConfig", "artifact_gc_job", "remove_superseded_versions", "weekly_gc"]

GC_JOB = "artifact_gc_job"
#: Weekly, Monday 05:00, two hours after the weekly retrain.
GC_CRON = "0 5 * * 1"


class GcConfig(dg.Config):
    """``strata gc``'s options."""

    keep_last: int = Field(1, ge=0, description="Keep this many most recently used versions of each stage.")
    keep_within: str = Field("7d", description="Also keep every version used within this long (30m, 12h, 7d; 0: "
                                               "off).")
    dry_run: bool = Field(False, description="Only report what would be removed.")


@dg.op(description="Remove superseded artifact versions under the data root, as `strata gc --yes` does: each "
                   "stage keeps its most recently used version(s) and what they were built from, and the registered "
                   "champions' train versions stay; datasets with a run in progress and files a process has open "
                   "are left alone.")
def remove_superseded_versions(context: dg.OpExecutionContext, config: GcConfig,
                               strata: StrataResource) -> dict[str, int]:
    from pipelines.tracking.model_registry import champion_artifacts
    from storage_kernels.retention import gc_apply, gc_plan, parse_duration

    root = strata.paths().root
    gc = gc_plan(root, keep_last=config.keep_last, keep_within=parse_duration(config.keep_within, "keep_within"),
                 pinned=champion_artifacts(root))
    summary = {"versions": len(gc.decisions), "removable": len(gc.removable),
               "reclaimable_bytes": gc.reclaimable_bytes, "stale_catalog_rows": len(gc.stale),
               "removed": 0, "bytes_freed": 0, "skipped": 0}
    if not config.dry_run:
        done = gc_apply(gc)
        summary.update(removed=len(done.removed), bytes_freed=done.bytes_freed, skipped=len(done.skipped))
        for v, why in done.skipped:
            context.log.warning(f"left {'/'.join(v.key)}: {why}")
    context.log.info(", ".join(f"{k}={v}" for k, v in summary.items()))
    context.add_output_metadata({k: dg.MetadataValue.int(v) for k, v in summary.items()})
    return summary


@dg.job(name=GC_JOB, description="Remove superseded artifact versions (strata gc): a version stays while it is "
                                 "among its stage's most recent, used within keep_within, upstream of one that "
                                 "stays, or open.")
def artifact_gc_job() -> None:
    remove_superseded_versions()


weekly_gc = dg.ScheduleDefinition(
    name="weekly_gc", job=artifact_gc_job, cron_schedule=GC_CRON, default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly artifact_gc_job (keeps each stage's last version and anything used in the last 7 days), "
                "two hours after the weekly retrain.")
