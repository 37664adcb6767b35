"""Dagster definitions: wiring only (assets, checks, jobs, schedule, resources, executor).

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
from pipelines.graph import GROUP_TRAINING
from pipelines.resources import build_resources

__all__ = ["RETRAIN_CRON", "RETRAIN_JOB", "STRATA_JOB", "defs", "make_definitions"]

STRATA_JOB = "strata_job"
RETRAIN_JOB = "retrain_job"
#: Weekly, Monday 03:00 (the schedule starts STOPPED; switch it on in the UI).
RETRAIN_CRON = "0 3 * * 1"

# In process unless a run's config says `execution: config: multiprocess: {}` (then independent steps run in
# parallel processes): one process avoids re-importing torch and the stages per step.
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
strata_job = dg.define_asset_job(
    STRATA_JOB,
    selection=dg.AssetSelection.all(),
    description="Every stage of one dataset, ingest to export, with the blocking checks.",
    config=_IN_PROCESS,
)
retrain_job = dg.define_asset_job(
    RETRAIN_JOB,
    selection=dg.AssetSelection.groups(GROUP_TRAINING),
    description="Retrain and re-export (train, export) on the current preprocessing artifacts.",
    config=_IN_PROCESS,
)
weekly_retrain = dg.ScheduleDefinition(
    name="weekly_retrain",
    job=retrain_job,
    cron_schedule=RETRAIN_CRON,
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Weekly retrain + export; the registry's 'champion' alias moves only if validation improves.",
)


def make_definitions(resources: Mapping[str, object]) -> dg.Definitions:
    """Strata's definitions bound to ``resources`` (from :func:`pipelines.resources.build_resources`)."""
    return dg.Definitions(
        assets=ALL_ASSETS,
        asset_checks=ALL_CHECKS,
        jobs=[strata_job, retrain_job],
        schedules=[weekly_retrain],
        resources=dict(resources),
        executor=dg.multi_or_in_process_executor,
    )


def _environment_config() -> PipelineConfig:
    """``STRATA_CONFIG`` (a file) with ``STRATA_DATASET`` on top: what UI-launched runs default to."""
    return PipelineConfig.load(os.environ.get("STRATA_CONFIG") or None,
                               dataset=os.environ.get("STRATA_DATASET") or None)


defs = make_definitions(build_resources(root=os.environ.get("STRATA_HOME") or None, config=_environment_config()))
