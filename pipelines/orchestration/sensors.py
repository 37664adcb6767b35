"""The Dagster sensor: ``source_sensor`` requests a ``retrain_job`` run when a dataset's source data changes.

It fingerprints the source files (:mod:`pipelines.orchestration.source_watch`) of the configured dataset and of
every other dataset materialized under the data root (:func:`watched_configs`), and requests one ``retrain_job``
run (:mod:`pipelines.orchestration.jobs`) per change of a dataset's content, for that dataset. Its cursor (JSON)
holds the last snapshots; the first evaluation of a dataset records its baseline and requests nothing. It starts
STOPPED (``dagster sensor start`` / the UI's Automation page).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import dagster as dg

from pipelines.config import PipelineConfig
from pipelines.orchestration.jobs import RETRAIN_JOB, retrain_run_config
from pipelines.orchestration.resources import StrataResource
from pipelines.orchestration.source_watch import fingerprint, source_files, source_key, take_snapshot
from pipelines.orchestration.ui_datasets import built_options, materialized_datasets

__all__ = ["SENSOR_INTERVAL_S", "evaluate_sources", "source_sensor", "watched_configs"]

#: Seconds between sensor evaluations (a source of many files costs one stat per file per evaluation).
SENSOR_INTERVAL_S = 60
_CURSOR_FORMAT = 1


def watched_configs(base: PipelineConfig, root: str | Path) -> tuple[list[PipelineConfig], list[str]]:
    """(configurations to watch, one line per dataset skipped): ``base`` first (with the ingest options its dataset
    was built with when it sets none: ``built_options``), then every other dataset with an ``ingest`` artifact
    under ``root`` (its newest ingest's spec and source options, ``base``'s other settings).

    A materialized dataset whose spec this configuration refuses (e.g. its source type was removed) is skipped
    with a line saying why; two specs that name the same dataset directory are watched once.
    """
    base = built_options(base, root)  # a dataset named without its options: those it was built with
    configs, seen, skipped = [base], {base.dataset_name}, []
    for found in materialized_datasets(root):
        if found.name in seen:
            continue
        data = base.to_dict()
        data["dataset"] = found.spec
        data["ingest"]["options"] = dict(found.options)
        try:
            cfg = PipelineConfig.validated(data)
        except ValueError as e:
            skipped.append(f"{found.name}: not watched ({e})")
            continue
        if cfg.dataset_name not in seen:
            seen.add(cfg.dataset_name)
            configs.append(cfg)
    return configs, skipped


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
    description="Fingerprints the source files of the configured dataset and of every dataset materialized under "
                "the data root (size+mtime, SHA-256 when they change) and requests one retrain_job run per change "
                "of a dataset's content (re-ingest, retrain warm-started from the champion, export, register).",
)
def source_sensor(context: dg.SensorEvaluationContext, strata: StrataResource) -> dg.SensorResult:
    """Watch the sources of the ``strata`` resource's dataset (``STRATA_DATASET`` / ``STRATA_CONFIG``) and of
    every other dataset materialized under its data root."""
    configs, skipped = watched_configs(strata.pipeline_config(), strata.paths().root)
    requests, cursor, lines = evaluate_sources(configs, context.cursor, strata.root)
    lines += skipped
    for line in lines:
        context.log.info(line)
    return dg.SensorResult(run_requests=requests, cursor=cursor,
                           skip_reason=None if requests else "; ".join(lines) or "nothing to watch")
