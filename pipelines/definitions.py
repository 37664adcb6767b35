"""Dagster definitions: wiring only (assets, checks, jobs, schedule, resources, executor).

``dagster dev -w workspace.yaml`` (or ``strata ui``) loads :data:`defs`, whose resources take their
defaults from ``STRATA_HOME``, ``STRATA_DATASET`` and ``STRATA_CONFIG``. ``strata run`` builds the same
definitions with its own flags through :func:`make_definitions`.

The executor is in-process: the stages form a chain, each streams its own large files, and one process lets
the assets and checks of a run share the resolved artifacts (see :mod:`pipelines.assets.common`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import dagster as dg

from pipelines.assets import ALL_ASSETS, GROUP_TRAINING
from pipelines.checks import ALL_CHECKS
from pipelines.resources import build_resources

__all__ = ["STRATA_JOB", "RETRAIN_JOB", "RETRAIN_CRON", "make_definitions", "defs"]

STRATA_JOB = "strata_job"
RETRAIN_JOB = "retrain_job"
#: Weekly, Monday 03:00 (the schedule starts STOPPED; switch it on in the UI).
RETRAIN_CRON = "0 3 * * 1"

strata_job = dg.define_asset_job(
    STRATA_JOB,
    selection=dg.AssetSelection.all(),
    description="Every stage of one dataset, graph to export, with the blocking checks.",
)
retrain_job = dg.define_asset_job(
    RETRAIN_JOB,
    selection=dg.AssetSelection.groups(GROUP_TRAINING),
    description="Retrain and re-export (model, export) on the current preprocessing artifacts.",
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
        executor=dg.in_process_executor,
    )


defs = make_definitions(
    build_resources(
        root=os.environ.get("STRATA_HOME") or None,
        dataset=os.environ.get("STRATA_DATASET") or None,
        config_file=os.environ.get("STRATA_CONFIG") or None,
    )
)
