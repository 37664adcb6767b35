"""Dagster definitions: wiring only (assets, checks, jobs, schedules, sensor, resources, executor).

``dagster dev -w workspace.yaml`` (or ``strata ui``) loads :data:`defs`, whose resources take their defaults
from ``STRATA_HOME``, ``STRATA_DATASET`` and ``STRATA_CONFIG`` -- and, without a dataset there, from the last
dataset run under the root; every dataset materialized under the root gets its own job
(:mod:`pipelines.orchestration.ui_datasets`). ``strata run`` builds the same definitions with
the configuration it parsed, through :func:`make_definitions`.

Where each part is defined: :mod:`~pipelines.orchestration.assets` (the stage assets and their blocking checks),
:mod:`~pipelines.orchestration.partitions` (the partitioned sample and pack assets and their jobs),
:mod:`~pipelines.orchestration.jobs`, :mod:`~pipelines.orchestration.schedules`,
:mod:`~pipelines.orchestration.sensors` and :mod:`~pipelines.orchestration.resources`.

The executor runs in process unless a run's config picks ``execution: config: multiprocess``: the stages form a
chain that streams its own large files, and one process avoids re-importing torch per step. Steps share
nothing in memory (:mod:`pipelines.orchestration.assets`), so the multiprocess executor runs independent steps in
parallel.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import dagster as dg

from pipelines.orchestration.assets import ALL_ASSETS, ALL_CHECKS
from pipelines.orchestration.jobs import (
    GC_JOB,
    RETRAIN_JOB,
    STRATA_JOB,
    artifact_gc_job,
    dataset_job,
    retrain_job,
    strata_job,
)
from pipelines.orchestration.partitions import PARTITIONED_ASSETS, PARTITIONED_JOBS
from pipelines.orchestration.resources import RESOURCE_KEY, build_resources
from pipelines.orchestration.schedules import GC_CRON, RETRAIN_CRON, retrain_schedule, weekly_gc
from pipelines.orchestration.sensors import source_sensor
from pipelines.orchestration.ui_datasets import (
    MaterializedDataset,
    environment_config,
    environment_root,
    materialized_datasets,
)

__all__ = ["GC_CRON", "GC_JOB", "RETRAIN_CRON", "RETRAIN_JOB", "STRATA_JOB", "dataset_job", "defs", "make_definitions"]


def make_definitions(resources: Mapping[str, object], datasets: Sequence[MaterializedDataset] = ()
                     ) -> dg.Definitions:
    """Strata's definitions bound to ``resources`` (from :func:`pipelines.orchestration.resources.build_resources`),
    with a job per dataset of ``datasets`` (:func:`pipelines.orchestration.ui_datasets.materialized_datasets`)."""
    root = getattr(resources.get(RESOURCE_KEY), "root", None)
    retrain = retrain_job(root)
    jobs = [strata_job, retrain, artifact_gc_job, *PARTITIONED_JOBS]
    for dataset in datasets:
        jobs.append(dataset_job(dataset, [j.name for j in jobs]))
    return dg.Definitions(
        assets=[*ALL_ASSETS, *PARTITIONED_ASSETS],
        asset_checks=ALL_CHECKS,
        jobs=jobs,
        schedules=[retrain_schedule(retrain, root), weekly_gc],
        sensors=[source_sensor],
        resources=dict(resources),
        executor=dg.multi_or_in_process_executor,
    )


defs = make_definitions(build_resources(root=os.environ.get("STRATA_HOME") or None, config=environment_config()),
                        datasets=materialized_datasets(environment_root()))
