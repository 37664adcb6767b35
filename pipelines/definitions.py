"""Dagster definitions: wiring only (assets, checks, jobs, schedule, sensor, resources, executor).

``dagster dev -w workspace.yaml`` (or ``strata ui``) loads :data:`defs`, whose resources take their defaults
from ``STRATA_HOME``, ``STRATA_DATASET`` and ``STRATA_CONFIG``. ``strata run`` builds the same definitions with
the configuration it parsed, through :func:`make_definitions`.

The executor runs in process unless a run's config picks ``execution: config: multiprocess``: the stages form a
chain that streams its own large files, and one process avoids re-importing torch per step. Steps share
nothing in memory (:mod:`pipelines.assets`), so the multiprocess executor runs independent steps in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

from pipelines.assets import ALL_ASSETS, ALL_CHECKS
from pipelines.config import PipelineConfig
from pipelines.partitioned import PARTITIONED_ASSETS, PARTITIONED_JOBS
from pipelines.resources import RESOURCE_KEY, build_resources
from pipelines.retrain import RETRAIN_JOB, retrain_run_config, source_sensor

__all__ = ["RETRAIN_CRON", "RETRAIN_JOB", "STRATA_JOB", "defs", "make_definitions"]

STRATA_JOB = "strata_job"
#: Weekly, Monday 03:00 (the schedule starts STOPPED; switch it on in the UI).
RETRAIN_CRON = "0 3 * * 1"

# In process unless a run's config says `execution: config: multiprocess: {}` (then independent steps run in
# parallel processes): one process avoids re-importing torch and the stages per step.
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
_STAGE_ASSETS = dg.AssetSelection.assets(*ALL_ASSETS)  # not the opt-in partitioned variant (pipelines.partitioned)
strata_job = dg.define_asset_job(
    STRATA_JOB,
    selection=_STAGE_ASSETS,
    description="Every stage of one dataset, ingest to export, with the blocking checks.",
    config=_IN_PROCESS,
)


def _retrain(root: str | None) -> tuple[dg.UnresolvedAssetJobDefinition, dg.ScheduleDefinition]:
    """``retrain_job`` (pipelines.retrain: what a retrain run does) and its weekly schedule; the job's config
    names the resource's data root, since a run config replacing the resource's config would drop it."""
    job = dg.define_asset_job(
        RETRAIN_JOB,
        selection=_STAGE_ASSETS,
        description="Retrain on the newest source snapshot (changed stages rebuilt, the rest reused), warm-started "
                    "from the registered champion (train.warm_start=champion), then export and register.",
        config=retrain_run_config(root=root),
    )
    schedule = dg.ScheduleDefinition(
        name="weekly_retrain",
        job=job,
        cron_schedule=RETRAIN_CRON,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Weekly retrain_job on the newest source snapshot, warm-started from the champion; the "
                    "registry's 'champion' alias moves only if validation improves.",
    )
    return job, schedule


def make_definitions(resources: Mapping[str, object]) -> dg.Definitions:
    """Strata's definitions bound to ``resources`` (from :func:`pipelines.resources.build_resources`)."""
    retrain_job, weekly_retrain = _retrain(getattr(resources.get(RESOURCE_KEY), "root", None))
    return dg.Definitions(
        assets=[*ALL_ASSETS, *PARTITIONED_ASSETS],
        asset_checks=ALL_CHECKS,
        jobs=[strata_job, retrain_job, *PARTITIONED_JOBS],
        schedules=[weekly_retrain],
        sensors=[source_sensor],
        resources=dict(resources),
        executor=dg.multi_or_in_process_executor,
    )


def _environment_config() -> PipelineConfig:
    """``STRATA_CONFIG`` (a file) with ``STRATA_DATASET`` on top: what UI-launched runs default to."""
    return PipelineConfig.load(os.environ.get("STRATA_CONFIG") or None,
                               dataset=os.environ.get("STRATA_DATASET") or None)


defs = make_definitions(build_resources(root=os.environ.get("STRATA_HOME") or None, config=_environment_config()))
