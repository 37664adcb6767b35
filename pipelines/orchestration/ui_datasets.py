"""Which datasets the Dagster UI offers and which one it defaults to: those materialized under the data root,
the last one run first.

Every run records its dataset in ``<root>/last_run.json`` (:func:`record_last_run`, called when a run's stage
runner is built, so CLI and UI runs both count). The UI's default configuration (:func:`default_config`) takes,
in order: ``STRATA_DATASET``, a ``dataset`` set in ``STRATA_CONFIG``'s file, the last run's dataset (with its
ingest options), and the built-in default (``tiny``); a dataset named without ingest options gets those its
newest ``ingest`` artifact under the root was built with (:func:`built_options`). :func:`materialized_datasets`
lists every dataset with an ``ingest`` artifact under the root, read from the manifests (the catalog may be
locked by a running process); ``pipelines.orchestration.definitions`` offers one job per dataset
(``strata_job_<name>``) whose launchpad config selects it, and the schedule resolves the default again at every
tick (:func:`default_run_config`). :func:`environment_root` and :func:`environment_config` read the root and the
default from the environment.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pipelines.config import PipelineConfig
from pipelines.core.paths import resolve_root

__all__ = ["LAST_RUN_FILE", "MaterializedDataset", "built_options", "dataset_run_config", "default_config",
           "default_run_config",
           "environment_config", "environment_root", "job_name_for", "last_run", "materialized_datasets",
           "record_last_run"]

LAST_RUN_FILE = "last_run.json"
_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class MaterializedDataset:
    """A dataset with an ``ingest`` artifact under the root."""

    name: str  # directory name (``PipelineConfig.dataset_name``)
    spec: str  # what ``--dataset`` takes (built-in name or source spec)
    options: dict[str, str] = field(default_factory=dict)  # its ingest options
    created_at: str = ""  # newest ingest artifact, ISO-8601 UTC


def record_last_run(root: str | Path, cfg: PipelineConfig) -> None:
    """Write ``<root>/last_run.json`` (atomically) naming ``cfg``'s dataset and ingest options."""
    root = Path(root)
    record = {"dataset": cfg.dataset, "dataset_name": cfg.dataset_name, "ingest_options": dict(cfg.ingest.options),
              "recorded_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    root.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".last_run-", suffix=".json", dir=root)
    with os.fdopen(fd, "w", encoding="utf8") as f:
        json.dump(record, f)
    os.replace(tmp, root / LAST_RUN_FILE)


def last_run(root: str | Path) -> dict[str, Any] | None:
    """The record of the last run under ``root`` (None when there is none or it is unreadable, with a warning)."""
    path = Path(root) / LAST_RUN_FILE
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf8"))
    except (OSError, ValueError) as e:
        warnings.warn(f"'{path}' expected a JSON record of the last run (got {e}); ignoring it", stacklevel=2)
        return None
    if not isinstance(record, dict) or not isinstance(record.get("dataset"), str):
        warnings.warn(f"'{path}' expected a 'dataset' string (got {record!r}); ignoring it", stacklevel=2)
        return None
    return record


def materialized_datasets(root: str | Path) -> list[MaterializedDataset]:
    """Every dataset under ``root`` with an ``ingest`` manifest, by name (the newest ingest's spec and options)."""
    found: dict[str, MaterializedDataset] = {}
    root = Path(root)
    if not root.is_dir():
        return []
    for manifest in sorted(root.glob(f"*/ingest/*/{_MANIFEST}")):
        try:
            data = json.loads(manifest.read_text(encoding="utf8"))
        except (OSError, ValueError):
            continue  # a half-written or foreign file: not a dataset the UI can offer
        params = data.get("params") or {}
        spec, name = params.get("source"), data.get("dataset")
        if not isinstance(spec, str) or not isinstance(name, str):
            continue
        entry = MaterializedDataset(name, spec, dict(params.get("options") or {}), str(data.get("created_at", "")))
        if name not in found or entry.created_at > found[name].created_at:
            found[name] = entry
    return [found[n] for n in sorted(found)]


def default_config(root: str | Path, config_file: str | None = None, dataset: str | None = None) -> PipelineConfig:
    """The configuration UI-launched runs default to: ``dataset`` (``STRATA_DATASET``), else the file's own
    ``dataset``, else the last run's dataset and its ingest options, else the built-in default."""
    cfg = PipelineConfig.load(config_file or None, dataset=dataset or None)
    if dataset or "dataset" in cfg.model_fields_set:
        return built_options(cfg, root)
    record = last_run(root)
    if record is None:
        return cfg
    data = cfg.to_dict()
    data["dataset"] = record["dataset"]
    if not data["ingest"]["options"] and isinstance(record.get("ingest_options"), dict):
        data["ingest"]["options"] = record["ingest_options"]
    try:
        return PipelineConfig.validated(data)
    except ValueError as e:  # e.g. a dataset whose source was removed from the registry since
        warnings.warn(f"'{Path(root) / LAST_RUN_FILE}' names a dataset this configuration refuses ({e}); "
                      f"defaulting to {cfg.dataset!r}", stacklevel=2)
        return cfg


def built_options(cfg: PipelineConfig, root: str | Path) -> PipelineConfig:
    """``cfg`` with the ingest options its dataset was last built with under ``root`` (its newest ``ingest``
    artifact's), when it sets none itself: ``STRATA_DATASET="edgelist:..."`` without ``STRATA_CONFIG`` then runs
    and watches the source with the ``features``/``labels`` it was built with, instead of refusing it."""
    if cfg.ingest.options:
        return cfg
    found = next((d for d in materialized_datasets(root) if d.name == cfg.dataset_name and d.options), None)
    if found is None:
        return cfg
    data = cfg.to_dict()
    data["ingest"]["options"] = dict(found.options)
    try:
        return PipelineConfig.validated(data)
    except ValueError as e:  # options a newer Strata refuses: keep the configuration as given
        warnings.warn(f"'{cfg.dataset_name}' was built with ingest options this configuration refuses ({e}); "
                      "not using them", stacklevel=2)
        return cfg


def job_name_for(dataset: MaterializedDataset, taken: Collection[str] = ()) -> str:
    """``strata_job_<name>`` with every character Dagster refuses in a job name replaced by ``_`` (and a
    ``_2``, ``_3``, ... suffix when that name is in ``taken``: two names may differ only in those characters)."""
    base = "strata_job_" + re.sub(r"[^A-Za-z0-9_]", "_", dataset.name)
    name, n = base, 1
    while name in taken:
        n += 1
        name = f"{base}_{n}"
    return name


def dataset_run_config(spec: str, options: dict[str, str] | None = None) -> dict[str, Any]:
    """Run config selecting a dataset (and its ingest options) through the ``strata`` resource's settings."""
    settings: dict[str, Any] = {"dataset": spec}
    if options:
        settings["ingest"] = {"options": dict(options)}
    return {"resources": {"strata": {"config": {"settings": settings}}}}


def default_run_config(root: str | Path, config_file: str | None = None, dataset: str | None = None
                       ) -> dict[str, Any]:
    """:func:`dataset_run_config` of :func:`default_config` now (what a schedule tick should run on)."""
    cfg = default_config(root, config_file, dataset)
    return dataset_run_config(cfg.dataset, dict(cfg.ingest.options))


def environment_root() -> Path:
    """The data root the Dagster definitions serve: ``STRATA_HOME``, else the default root."""
    return resolve_root(os.environ.get("STRATA_HOME") or None)


def environment_config() -> PipelineConfig:
    """What UI-launched runs default to: ``STRATA_DATASET``, else ``STRATA_CONFIG``'s dataset, else the last
    dataset run under the root (:func:`default_config`)."""
    return default_config(environment_root(), os.environ.get("STRATA_CONFIG") or None,
                          os.environ.get("STRATA_DATASET") or None)
