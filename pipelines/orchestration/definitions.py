"""Dagster definitions: wiring only (assets, checks, jobs, schedule, sensor, resources, executor).

``dagster dev -w workspace.yaml`` (or ``strata ui``) loads :data:`defs`, whose resources take their defaults
from ``STRATA_HOME``, ``STRATA_DATASET`` and ``STRATA_CONFIG`` -- and, without a dataset there, from the last
dataset run under the root; every dataset materialized under the root gets its own job
(:mod:`pipelines.orchestration.ui_datasets`). ``strata run`` builds the same definitions with
the configuration it parsed, through :func:`make_definitions`.

The executor runs in process unless a run's config picks ``execution: config: multiprocess``: the stages form a
chain that streams its own large files, and one process avoids re-importing torch per step. Steps share
nothing in memory (:mod:`pipelines.orchestration.assets`), so the multiprocess executor runs independent steps in
parallel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg

from pipelines.config import PipelineConfig
from pipelines.core.paths import resolve_root
from pipelines.orchestration.assets import ALL_ASSETS, ALL_CHECKS
from pipelines.orchestration.gc_job import GC_CRON, GC_JOB, artifact_gc_job, weekly_gc
from pipelines.orchestration.partitions import PARTITIONED_ASSETS, PARTITIONED_JOBS
from pipelines.orchestration.resources import RESOURCE_KEY, build_resources
from pipelines.orchestration.retrain import RETRAIN_JOB, retrain_run_config, source_sensor
from pipelines.orchestration.ui_datasets import (
    MaterializedDataset,
    dataset_run_config,
    default_config,
    job_name_for,
    materialized_datasets,
)

__all__ = ["GC_CRON", "GC_JOB", "RETRAIN_CRON", "RETRAIN_JOB", "STRATA_JOB", "dataset_job", "defs", "make_definitions"]

STRATA_JOB = "strata_job"
#: Weekly, Monday 03:00 (the schedule starts STOPPED; switch it on in the UI).
RETRAIN_CRON = "0 3 * * 1"

# In process unless a run's config says `execution: config: multiprocess: {}` (then independent steps run in
# parallel processes): one process avoids re-importing torch and the stages per step.
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
# not the opt-in partitioned variant (pipelines.orchestration.partitions)
_STAGE_ASSETS = dg.AssetSelection.assets(*ALL_ASSETS)
strata_job = dg.define_asset_job(
    STRATA_JOB,
    selection=_STAGE_ASSETS,
    description="Every stage of one dataset, ingest to export, with the blocking checks.",
    config=_IN_PROCESS,
)


def _root() -> Path:
    return resolve_root(os.environ.get("STRATA_HOME") or None)


def _environment_config() -> PipelineConfig:
    """What UI-launched runs default to: ``STRATA_DATASET``, else ``STRATA_CONFIG``'s dataset, else the last
    dataset run under the root (:func:`pipelines.orchestration.ui_datasets.default_config`)."""
    return default_config(_root(), os.environ.get("STRATA_CONFIG") or None, os.environ.get("STRATA_DATASET") or None)


def _retrain(root: str | None) -> tuple[dg.UnresolvedAssetJobDefinition, dg.ScheduleDefinition]:
    """``retrain_job`` (pipelines.orchestration.retrain: what a retrain run does) and its weekly schedule; the job's
    config
    names the resource's data root, since a run config replacing the resource's config would drop it."""
    job = dg.define_asset_job(
        RETRAIN_JOB,
        selection=_STAGE_ASSETS,
        description="Retrain on the newest source snapshot (changed stages rebuilt, the rest reused), warm-started "
                    "from the registered champion (train.warm_start=champion), then export and register.",
        config=retrain_run_config(root=root),
    )

    def tick_run_config(context: dg.ScheduleEvaluationContext) -> dict:
        """The dataset a tick retrains: the UI's default resolved now (the last run may have changed since
        load)."""
        return retrain_run_config(_environment_config(), root=root)

    schedule = dg.ScheduleDefinition(
        name="weekly_retrain",
        job=job,
        cron_schedule=RETRAIN_CRON,
        run_config_fn=tick_run_config,
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Weekly retrain_job of the last dataset run, on the newest source snapshot, warm-started from "
                    "the champion; the registry's 'champion' alias moves only if validation improves.",
    )
    return job, schedule


def dataset_job(dataset: MaterializedDataset, taken: Sequence[str] = ()) -> dg.UnresolvedAssetJobDefinition:
    """``strata_job_<name>``: every stage of one dataset materialized under the root (its launchpad config
    selects it); ``taken``: job names already defined."""
    return dg.define_asset_job(
        job_name_for(dataset, taken),
        selection=_STAGE_ASSETS,
        description=f"Every stage of dataset {dataset.spec!r} (materialized under the data root).",
        config={**_IN_PROCESS, **dataset_run_config(dataset.spec, dataset.options)},
    )


def make_definitions(resources: Mapping[str, object], datasets: Sequence[MaterializedDataset] = ()
                     ) -> dg.Definitions:
    """Strata's definitions bound to ``resources`` (from :func:`pipelines.orchestration.resources.build_resources`),
    with a
    job per dataset of ``datasets`` (:func:`pipelines.orchestration.ui_datasets.materialized_datasets`)."""
    retrain_job, weekly_retrain = _retrain(getattr(resources.get(RESOURCE_KEY), "root", None))
    jobs = [strata_job, retrain_job, artifact_gc_job, *PARTITIONED_JOBS]
    for dataset in datasets:
        jobs.append(dataset_job(dataset, [j.name for j in jobs]))
    return dg.Definitions(
        assets=[*ALL_ASSETS, *PARTITIONED_ASSETS],
        asset_checks=ALL_CHECKS,
        jobs=jobs,
        schedules=[weekly_retrain, weekly_gc],
        sensors=[source_sensor],
        resources=dict(resources),
        executor=dg.multi_or_in_process_executor,
    )


defs = make_definitions(build_resources(root=os.environ.get("STRATA_HOME") or None, config=_environment_config()),
                        datasets=materialized_datasets(_root()))
