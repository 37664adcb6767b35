"""The Dagster schedules, both STOPPED until switched on (``dagster schedule start`` / the UI's Automation page):
``weekly_retrain`` (:data:`RETRAIN_CRON`) and ``weekly_gc`` (:data:`GC_CRON`, two hours later)."""

from __future__ import annotations

import dagster as dg

from pipelines.orchestration.jobs import artifact_gc_job, retrain_run_config
from pipelines.orchestration.ui_datasets import environment_config

__all__ = ["GC_CRON", "RETRAIN_CRON", "retrain_schedule", "weekly_gc"]

#: Weekly, Monday 03:00 (the schedule starts STOPPED; switch it on in the UI).
RETRAIN_CRON = "0 3 * * 1"
#: Weekly, Monday 05:00, two hours after the weekly retrain.
GC_CRON = "0 5 * * 1"


def retrain_schedule(job: dg.UnresolvedAssetJobDefinition, root: str | None) -> dg.ScheduleDefinition:
    """``weekly_retrain``: ``job`` (:func:`pipelines.orchestration.jobs.retrain_job`) of the UI's default dataset
    on the data root ``root``."""

    def tick_run_config(context: dg.ScheduleEvaluationContext) -> dict:
        """The dataset a tick retrains: the UI's default resolved now (the last run may have changed since
        load)."""
        return retrain_run_config(environment_config(), root=root)

    return dg.ScheduleDefinition(
        name="weekly_retrain",
        job=job,
        cron_schedule=RETRAIN_CRON,
        run_config_fn=tick_run_config,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Weekly retrain_job of the last dataset run, on the newest source snapshot, warm-started from "
                    "the champion; the registry's 'champion' alias moves only if validation improves.",
    )


weekly_gc = dg.ScheduleDefinition(
    name="weekly_gc", job=artifact_gc_job, cron_schedule=GC_CRON, default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly artifact_gc_job (keeps each stage's last version and anything used in the last 7 days), "
                "two hours after the weekly retrain.")
