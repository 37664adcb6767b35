"""Retraining: the job, its run configuration, and the sensor that watches the source data.

``retrain_job`` resolves every stage on the newest source snapshot: ingest's version carries the source files'
sizes and mtimes, so a changed source is re-ingested and everything downstream rebuilt, while unchanged stages
are lookups. Its runs set ``train.warm_start=champion`` (:mod:`pipelines.warmstart`): training starts from the
registered champion when the architecture matches, a fresh model version is registered, and the ``champion``
alias moves only if validation improves. On an unchanged snapshot with an unchanged champion the train artifact
is reused and the log says that nothing was retrained (training is deterministic: it would reproduce the same
weights and register a duplicate version).

Two triggers, both STOPPED until switched on (``dagster sensor start`` / the UI's Automation page):

- ``weekly_retrain``, a schedule (:mod:`pipelines.definitions`);
- ``source_sensor``, which fingerprints the configured dataset's source files (:mod:`pipelines.source_watch`)
  and requests one ``retrain_job`` run per change of their content. Its cursor (JSON) holds the last snapshot;
  the first evaluation records a baseline and requests nothing.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from pipelines.config import PipelineConfig
from pipelines.resources import RESOURCE_KEY, StrataResource
from pipelines.source_watch import fingerprint, source_files, source_key, take_snapshot

__all__ = ["RETRAIN_JOB", "SENSOR_INTERVAL_S", "evaluate_sources", "retrain_run_config", "source_sensor"]

RETRAIN_JOB = "retrain_job"
#: Seconds between sensor evaluations (a source of many files costs one stat per file per evaluation).
SENSOR_INTERVAL_S = 60
_CURSOR_FORMAT = 1


def retrain_run_config(cfg: PipelineConfig | None = None, root: str | None = None) -> dict[str, Any]:
    """Run config of a retrain run: in process, warm start from the champion; with ``cfg``, its dataset and
    source options (the other settings keep the resource's defaults). A run config replaces the resource's
    configuration, so ``root`` (the resource's data root; None: ``$STRATA_HOME``) travels with it."""
    settings: dict[str, Any] = {"train": {"warm_start": "champion"}}
    if cfg is not None:
        settings.update({"dataset": cfg.dataset, "ingest": {"options": dict(cfg.ingest.options)}})
    resource: dict[str, Any] = {"settings": settings, **({"root": root} if root is not None else {})}
    return {"execution": {"config": {"in_process": {}}}, "resources": {RESOURCE_KEY: {"config": resource}}}


def _load_cursor(cursor: str | None) -> dict[str, Any]:
    if not cursor:
        return {}
    try:
        state = json.loads(cursor)
    except json.JSONDecodeError:
        return {}  # an unreadable cursor (hand-edited): start over with a baseline
    return state.get("sources", {}) if isinstance(state, dict) and state.get("format") == _CURSOR_FORMAT else {}


def evaluate_sources(configs: list[PipelineConfig], cursor: str | None, root: str | None = None
                     ) -> tuple[list[dg.RunRequest], str, list[str]]:
    """One sensor evaluation: (run requests, new cursor, one line per dataset saying what was seen); the
    requested runs use the data root ``root``.

    A dataset gets a run request when its fingerprint differs from the cursor's; the run key carries the
    dataset, the new fingerprint and the change count, so Dagster launches each change once, and a source
    changed back to an earlier content (a revert) is still a new change.
    """
    previous = _load_cursor(cursor)
    sources: dict[str, Any] = {}
    requests: list[dg.RunRequest] = []
    lines: list[str] = []
    for cfg in configs:
        name, key = cfg.dataset_name, source_key(cfg)
        old = previous.get(name) if previous.get(name, {}).get("key") == key else None
        try:
            paths = old["paths"] if old is not None else source_files(cfg)
        except (OSError, ValueError) as e:
            lines.append(f"{name}: source not readable ({e})")
            continue
        if not paths:
            lines.append(f"{name}: a synthetic source, no files to watch")
            continue
        snapshot = take_snapshot(paths, old["files"] if old is not None else None)
        fp = fingerprint(snapshot)
        changes = int(old["changes"]) if old is not None else 0
        if old is None:
            lines.append(f"{name}: baseline {fp[:12]} recorded ({len(snapshot)} files)")
        elif fp == old["fingerprint"]:
            touched = sum(1 for p, e in snapshot.items() if old["files"].get(p, {}).get("mtime_ns") != e["mtime_ns"])
            lines.append(f"{name}: unchanged {fp[:12]}" + (f" ({touched} files touched, same content)"
                                                          if touched else ""))
        else:
            changes += 1
            requests.append(dg.RunRequest(
                run_key=f"{name}:{fp}:{changes}",
                run_config=retrain_run_config(cfg, root),
                tags={"strata/dataset": name, "strata/source_fingerprint": fp,
                      "strata/previous_fingerprint": old["fingerprint"]},
            ))
            lines.append(f"{name}: changed {old['fingerprint'][:12]} -> {fp[:12]}: retrain requested")
        sources[name] = {"key": key, "paths": paths, "files": snapshot, "fingerprint": fp, "changes": changes}
    for name, state in previous.items():  # datasets no longer configured keep their baseline
        sources.setdefault(name, state)
    return requests, json.dumps({"format": _CURSOR_FORMAT, "sources": sources}, sort_keys=True), lines


@dg.sensor(
    name="source_sensor",
    job_name=RETRAIN_JOB,
    minimum_interval_seconds=SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.STOPPED,
    description="Fingerprints the configured dataset's source files (size+mtime, SHA-256 when they change) and "
                "requests one retrain_job run per change of their content (re-ingest, retrain warm-started from "
                "the champion, export, register).",
)
def source_sensor(context: dg.SensorEvaluationContext, strata: StrataResource) -> dg.SensorResult:
    """Watch the source of the ``strata`` resource's dataset (``STRATA_DATASET`` / ``STRATA_CONFIG``)."""
    requests, cursor, lines = evaluate_sources([strata.pipeline_config()], context.cursor, strata.root)
    for line in lines:
        context.log.info(line)
    return dg.SensorResult(run_requests=requests, cursor=cursor,
                           skip_reason=None if requests else "; ".join(lines) or "nothing to watch")
