"""The Dagster jobs: ``strata_job``, one job per dataset materialized under the root, ``retrain_job`` (with its run
configuration) and ``artifact_gc_job`` (with its op).

- ``strata_job``: every stage of one dataset, ingest to export and predict, with the blocking checks (the stage
  assets of :mod:`pipelines.orchestration.assets`, not the opt-in partitioned variants of
  :mod:`pipelines.orchestration.partitions`); ``strata run`` selects ingest .. export of it, ``--until predict``
  adds predict; ``strata_job_<name>`` (:func:`dataset_job`): the same for one
  dataset found under the data root, whose launchpad config selects it.
- ``retrain_job`` (:func:`retrain_job`) resolves every stage but predict on the newest source snapshot: ingest's version
  carries the source files' sizes and mtimes, so a changed source is re-ingested and everything downstream
  rebuilt, while unchanged stages are lookups. Its runs set ``train.warm_start=champion``
  (:mod:`pipelines.tracking.warmstart`): training starts from the registered champion when the architecture
  matches, a fresh model version is registered, and the ``champion`` alias moves only if validation improves. On
  an unchanged snapshot with an unchanged champion the train artifact is reused and the log says that nothing was
  retrained (training is deterministic: it would reproduce the same weights and register a duplicate version).
  Its triggers are the ``weekly_retrain`` schedule (:mod:`pipelines.orchestration.schedules`) and the
  ``source_sensor`` (:mod:`pipelines.orchestration.sensors`).
- ``artifact_gc_job``: its op removes superseded artifact versions under the resource's data root by the rules of
  :mod:`storage_kernels.retention` (``strata gc --yes`` with the same options) and records what it removed as
  output metadata; ``weekly_gc`` (:mod:`pipelines.orchestration.schedules`) runs it.

The executor runs in process unless a run's config picks ``execution: config: multiprocess``. No ``from __future__
import annotations`` here: Dagster reads the op's annotations (its config class and resource) at definition time
(hence the quoted ``dg.UnresolvedAssetJobDefinition``, a name dagster exports to type checkers only).
"""

from collections.abc import Sequence
from typing import Any

import dagster as dg
from pydantic import Field

from pipelines.config import PipelineConfig
from pipelines.graph import RUN_STAGE_NAMES
from pipelines.orchestration.assets import ALL_ASSETS
from pipelines.orchestration.resources import RESOURCE_KEY, StrataResource
from pipelines.orchestration.ui_datasets import MaterializedDataset, dataset_run_config, job_name_for

__all__ = ["GC_JOB", "RETRAIN_JOB", "STRATA_JOB", "GcConfig", "artifact_gc_job", "dataset_job",
           "remove_superseded_versions", "retrain_job", "retrain_run_config", "strata_job"]

STRATA_JOB = "strata_job"
RETRAIN_JOB = "retrain_job"
GC_JOB = "artifact_gc_job"

# In process unless a run's config says `execution: config: multiprocess: {}` (then independent steps run in
# parallel processes): one process avoids re-importing torch and the stages per step.
_IN_PROCESS = {"execution": {"config": {"in_process": {}}}}
# not the opt-in partitioned variant (pipelines.orchestration.partitions)
_STAGE_ASSETS = dg.AssetSelection.assets(*ALL_ASSETS)
# what a retrain rebuilds: not predict (a full extra pass over the graph, run when asked)
_RUN_ASSETS = dg.AssetSelection.assets(*(a for a in ALL_ASSETS if a.key.to_user_string() in RUN_STAGE_NAMES))
strata_job = dg.define_asset_job(
    STRATA_JOB,
    selection=_STAGE_ASSETS,
    description="Every stage of one dataset, ingest to export, then predict (every node scored), with the blocking "
                "checks; select assets to run fewer (`strata run` stops at export).",
    config=_IN_PROCESS,
)


def dataset_job(dataset: MaterializedDataset, taken: Sequence[str] = ()) -> "dg.UnresolvedAssetJobDefinition":
    """``strata_job_<name>``: every stage of one dataset materialized under the root (its launchpad config
    selects it); ``taken``: job names already defined."""
    return dg.define_asset_job(
        job_name_for(dataset, taken),
        selection=_STAGE_ASSETS,
        description=f"Every stage of dataset {dataset.spec!r} (materialized under the data root).",
        config={**_IN_PROCESS, **dataset_run_config(dataset.spec, dataset.options)},
    )


def retrain_run_config(cfg: PipelineConfig | None = None, root: str | None = None) -> dict[str, Any]:
    """Run config of a retrain run: in process, warm start from the champion; with ``cfg``, its dataset and
    source options (the other settings keep the resource's defaults). A run config replaces the resource's
    configuration, so ``root`` (the resource's data root; None: ``$STRATA_HOME``) travels with it."""
    settings: dict[str, Any] = {"train": {"warm_start": "champion"}}
    if cfg is not None:
        settings.update({"dataset": cfg.dataset, "ingest": {"options": dict(cfg.ingest.options)}})
    resource: dict[str, Any] = {"settings": settings, **({"root": root} if root is not None else {})}
    return {"execution": {"config": {"in_process": {}}}, "resources": {RESOURCE_KEY: {"config": resource}}}


def retrain_job(root: str | None) -> "dg.UnresolvedAssetJobDefinition":
    """``retrain_job``: what a retrain run does; its config names the resource's data root ``root``, since a run
    config replacing the resource's config would drop it."""
    return dg.define_asset_job(
        RETRAIN_JOB,
        selection=_RUN_ASSETS,
        description="Retrain on the newest source snapshot (changed stages rebuilt, the rest reused), warm-started "
                    "from the registered champion (train.warm_start=champion), then export and register.",
        config=retrain_run_config(root=root),
    )


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
