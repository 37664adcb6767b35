"""Strata's Dagster assets and asset checks, derived from the stage graph (:data:`pipelines.graph.STAGES`).

Every stage becomes one asset of the same name -- a thin wrapper that resolves the stage's artifact with a
:class:`~pipelines.runner.StageRunner`, records its metrics in the catalog and returns Dagster metadata (the
stage's ``summary`` plus size, version, files and lineage) -- and every check of a stage becomes a blocking
asset check on it. Assets manage their own files (no IO managers); the data version Dagster records is the
artifact version, and ``code_version`` is the stage's ``FORMAT_VERSION``.

Upstream resolution: each step asks the run's resource for its runner (one per run and process, built from the
run's typed configuration), so a step finds the artifacts its upstream assets materialized by content address,
and the steps sharing a process resolve each stage once. Nothing is shared between processes, so the
multiprocess executor can run independent steps (the checks of one stage, say) in parallel. When a job selects
only some assets and an upstream artifact does not exist yet, the step builds it and logs a warning (run
``strata_job`` to record it in Dagster).
"""

import time
from collections.abc import Mapping
from typing import Any

import dagster as dg

from pipelines.checks import Finding, StageCheck, quarantine_failed, quarantined_copy
from pipelines.core.errors import describe
from pipelines.core.formatting import Markdown, Url, format_bytes, markdown_table
from pipelines.core.progress import Progress
from pipelines.graph import STAGES, Stage
from pipelines.orchestration.resources import RunReporter, StrataResource
from storage_kernels.catalog import artifact_metrics
from storage_kernels.locks import dataset_lock
from storage_kernels.store import Artifact, ArtifactStore

__all__ = ["ALL_ASSETS", "ALL_CHECKS", "asset_for", "checks_for"]

_PROGRESS_LOG_INTERVAL_S = 5.0


def _metadata_value(value: Any) -> Any:
    """Stage metadata as Dagster metadata (Markdown rendered, scalars kept, everything else as JSON)."""
    if isinstance(value, Markdown):
        return dg.MetadataValue.md(str(value))
    if isinstance(value, Url):
        return dg.MetadataValue.url(str(value))
    if isinstance(value, (bool, int, float, str, dg.MetadataValue)) or value is None:
        return value
    if isinstance(value, Mapping):
        return dg.MetadataValue.json(dict(value))
    if isinstance(value, (list, tuple)):
        return dg.MetadataValue.json(list(value))
    return dg.MetadataValue.text(str(value))


def _files_table(artifact: Artifact) -> Markdown:
    rows = [
        {"file": name, "dtype": info.dtype or "raw", "shape": info.shape or "", "size": format_bytes(info.bytes)}
        for name, info in sorted(artifact.files.items())
    ]
    return markdown_table(rows, ["file", "dtype", "shape", "size"])


def _progress_callback(context: dg.AssetExecutionContext, reporter: RunReporter, stage: str) -> Progress:
    """Forward stage progress to the reporter; log it to Dagster at most every few seconds."""
    last_log = [0.0]

    def progress(description: str, done: int, total: int) -> None:
        reporter.stage_progress(stage, description, done, total)
        now = time.monotonic()
        if (total > 0 and done >= total) or now - last_log[0] >= _PROGRESS_LOG_INTERVAL_S:
            last_log[0] = now
            context.log.info(f"{description}: {done}/{total}" if total > 0 else f"{description}: {done}")

    return progress


def _materialize(context: dg.AssetExecutionContext, strata: StrataResource, reporter: RunReporter,
                 stage: Stage) -> dg.MaterializeResult:
    """Resolve ``stage``'s artifact, record its metrics in the catalog, return Dagster metadata.

    Exceptions from the stage (or from building its runner: the run's settings) propagate unchanged: Dagster
    records the failure with the real message, after the same one line ``strata run`` prints for it
    (:func:`pipelines.core.errors.describe`), logged as an error.
    """
    reporter.stage_started(stage.name)
    start = time.perf_counter()
    try:
        runner = strata.runner(context.log)
        # a run launched elsewhere (the UI) waits for a CLI run on the same dataset; re-entrant for the CLI's own
        with dataset_lock(runner.store.root, runner.cfg.dataset_name, on_wait=context.log.info):
            result = runner.result(stage.name, progress=_progress_callback(context, reporter, stage.name))
    except BaseException as e:
        reporter.stage_failed(stage.name, e)
        if isinstance(e, Exception):
            context.log.error(f"error: {describe(e, where=f'stage {stage.name!r}')[0]}")
        raise
    seconds = time.perf_counter() - start
    artifact = result.artifact
    if not result.reused:  # a reused artifact's metrics were recorded when it was built
        metrics = artifact_metrics(artifact.stats, artifact.timings)  # what `catalog rebuild` restores
        strata.paths().catalog().record_metrics(artifact.dataset, stage.name, artifact.version, metrics)
    context.log.info(f"{stage.name} {artifact.version}: {'reused' if result.reused else 'built'} in "
                     f"{seconds:.2f} s ({artifact.path})")
    for note in result.notes:
        context.log.info(f"{stage.name} {artifact.version}: {note}")
    total_bytes = int(result.metadata.get("bytes", 0))
    metadata = {k: _metadata_value(v) for k, v in result.metadata.items() if k != "path"}
    metadata.update({
        "dataset": artifact.dataset,
        "version": artifact.version,
        "reused": result.reused,
        "path": dg.MetadataValue.path(str(artifact.path)),
        "bytes": total_bytes,
        "size": format_bytes(total_bytes),
        "asset_seconds": round(seconds, 4),
        "stage_function": stage.function,
        "upstream": dg.MetadataValue.json(artifact.upstream),
        "files": dg.MetadataValue.md(_files_table(artifact)),
    })
    metadata.update({k: _metadata_value(v) for k, v in stage.summary(artifact).items()})
    reporter.stage_finished(stage.name, artifact.version, result.reused, seconds)
    return dg.MaterializeResult(metadata=metadata, data_version=dg.DataVersion(artifact.version))


def asset_for(stage: Stage) -> dg.AssetsDefinition:
    """The Dagster asset of ``stage`` (same name, upstream assets as deps, the stage's group and description)."""

    @dg.asset(
        name=stage.name,
        deps=list(stage.upstream),
        code_version=str(stage.format_version),
        group_name=stage.group,
        kinds=set(stage.kinds),
        description=stage.description,
    )
    def _asset(context: dg.AssetExecutionContext, strata: StrataResource,
               reporter: dg.ResourceParam[RunReporter]) -> dg.MaterializeResult:
        return _materialize(context, strata, reporter, stage)

    return _asset


def _check_result(context: dg.AssetCheckExecutionContext, reporter: RunReporter, stage: Stage,
                  artifact: Artifact, check: StageCheck, finding: Finding, store: ArtifactStore
                  ) -> dg.AssetCheckResult:
    detail = finding.problems[0] if finding.problems else "ok"
    moved = None
    if not finding.passed and check.quarantine:  # a content check: the next run rebuilds it, as a bad checksum
        moved = quarantine_failed(artifact, store, check.name, detail)
        if moved is not None:
            detail += f" (quarantined to {moved}; the next run rebuilds it)"
        else:
            detail += " (quarantined by another check of it; the next run rebuilds it)"
    reporter.check_finished(stage.name, check.name, finding.passed, detail)
    if not finding.passed:
        context.log.error(f"{stage.name} {artifact.version}: check {check.name} failed: {detail}")
    facts = {k: v for k, v in finding.facts.items() if isinstance(v, (int, float, str, bool))}
    return dg.AssetCheckResult(
        passed=finding.passed,
        description=detail,
        metadata={"version": artifact.version, "path": dg.MetadataValue.path(str(artifact.path)),
                  "problem": detail, **facts, **({"quarantined_to": str(moved)} if moved is not None else {})},
    )


def _check_for(stage: Stage, check: StageCheck) -> dg.AssetChecksDefinition:
    @dg.asset_check(asset=stage.name, name=check.name, blocking=True, description=check.description)
    def _check(context: dg.AssetCheckExecutionContext, strata: StrataResource,
               reporter: dg.ResourceParam[RunReporter]) -> dg.AssetCheckResult:
        runner = strata.runner(context.log)
        artifact = runner.artifact(stage.name)
        # another check of this stage failed and quarantined it: check the same files where they went
        target = artifact if artifact.path.is_dir() else quarantined_copy(artifact, runner.store.root)
        if target is None:
            finding = Finding([f"'{artifact.path}' expected the artifact (got it moved away during the run)"])
        else:  # a reused artifact's pass on record stands (pipelines.checks.record)
            finding = runner.check_one(stage.name, check, target)
        return _check_result(context, reporter, stage, artifact, check, finding, runner.store)

    return _check


def checks_for(stage: Stage) -> list[dg.AssetChecksDefinition]:
    """One blocking asset check per check of ``stage``."""
    return [_check_for(stage, check) for check in stage.checks]


#: Every asset, in topological order (that of ``STAGES``).
ALL_ASSETS: list[dg.AssetsDefinition] = [asset_for(stage) for stage in STAGES]
#: Every asset check (all blocking).
ALL_CHECKS: list[dg.AssetChecksDefinition] = [check for stage in STAGES for check in checks_for(stage)]
