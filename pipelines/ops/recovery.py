"""Clean up after runs that were killed: stale temp dirs, MLflow runs and Dagster runs left running; and repair a
damaged catalog.

A killed ``strata run`` cannot clean up after itself. Everything it leaves records its owner (pid, start time,
host: :class:`storage_kernels.owner.Owner`): builder temp dirs in their names, MLflow runs in the tags
``strata.owner.*`` (set by the train stage) and Dagster runs in the tags ``strata/owner.*`` (set by the CLI).
:func:`recover`, called at the start of every ``strata run``, removes the temp dirs of dead owners and marks
their MLflow runs ``FAILED`` and their Dagster runs failed (``DagsterInstance.report_run_failed``). Leftovers
of live processes (a concurrent run) and of other hosts are never touched.

The catalog is an index the manifests rebuild, so a run does not stop on a damaged one (0 bytes, other bytes, a
corrupt block): :func:`recover` moves it aside (``catalog.duckdb.damaged-<time>``, kept for inspection) and
rebuilds it as ``strata catalog rebuild`` does, under the catalog's lock (two runs that both find it damaged move
it once: :meth:`storage_kernels.catalog.Catalog.set_aside`), and says so in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from storage_kernels.owner import Owner

if TYPE_CHECKING:
    from pipelines.core.paths import StrataPaths

__all__ = ["DAGSTER_OWNER_PREFIX", "MLFLOW_OWNER_PREFIX", "Recovered", "fail_orphan_dagster_runs",
           "fail_orphan_mlflow_runs", "recover", "repair_catalog"]

MLFLOW_OWNER_PREFIX = "strata.owner."
DAGSTER_OWNER_PREFIX = "strata/owner."
_ORPHAN_NOTE = "owner process {pid} on {host} is gone (killed); marked failed by the next strata run"


@dataclass(frozen=True)
class Recovered:
    """What :func:`recover` cleaned up."""

    temp_dirs: int = 0
    mlflow_runs: int = 0
    dagster_runs: int = 0
    catalog: str = ""  # what was done to a damaged catalog, or ""

    def message(self) -> str | None:
        """One line for the user, or None when nothing was left over."""
        parts = [f"{n} {what}" for n, what in ((self.temp_dirs, "stale temp dirs removed"),
                                              (self.mlflow_runs, "orphaned MLflow runs marked FAILED"),
                                              (self.dagster_runs, "orphaned Dagster runs marked failed")) if n]
        said = ["recovered after a killed run: " + ", ".join(parts)] if parts else []
        return "; ".join([*said, *([self.catalog] if self.catalog else [])]) or None


def fail_orphan_mlflow_runs(tracking_uri: str) -> int:
    """Mark ``FAILED`` every ``RUNNING`` MLflow run whose owner (tags ``strata.owner.*``) is gone."""
    from trainer.tracking import _mlflow, store_lock

    mlflow = _mlflow()
    with store_lock(tracking_uri):
        client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri)
        ids = [e.experiment_id for e in client.search_experiments()]
        if not ids:
            return 0
        runs = client.search_runs(ids, filter_string="attributes.status = 'RUNNING'", max_results=1000)
        failed = 0
        for run in runs:
            owner = Owner.from_tags(run.data.tags, MLFLOW_OWNER_PREFIX)
            if owner is None or owner.alive():
                continue
            client.set_tag(run.info.run_id, "strata.failure", _ORPHAN_NOTE.format(pid=owner.pid, host=owner.host))
            client.set_terminated(run.info.run_id, status="FAILED")
            failed += 1
    return failed


def fail_orphan_dagster_runs(instance: Any) -> int:
    """Report failed every unfinished Dagster run whose owner (tags ``strata/owner.*``) is gone."""
    from dagster import DagsterRunStatus, RunsFilter

    unfinished = [DagsterRunStatus.STARTED, DagsterRunStatus.STARTING, DagsterRunStatus.NOT_STARTED,
                  DagsterRunStatus.CANCELING]
    failed = 0
    for run in instance.get_runs(filters=RunsFilter(statuses=unfinished)):
        owner = Owner.from_tags(dict(run.tags), DAGSTER_OWNER_PREFIX)
        if owner is None or owner.alive():
            continue
        instance.report_run_failed(run, message=_ORPHAN_NOTE.format(pid=owner.pid, host=owner.host))
        failed += 1
    return failed


def repair_catalog(paths: StrataPaths) -> str:
    """Move a damaged catalog aside and rebuild it from the manifests; one line saying so, or "" when it was fine."""
    catalog = paths.catalog()
    aside = catalog.set_aside()  # header, open, every table read: an index block a write reads is healed there
    if aside is None:
        return ""
    report = catalog.rebuild_report(paths.root)
    return (f"catalog {catalog.db_path} was damaged ({aside[1]}): moved to {aside[0].name}, rebuilt from "
            f"{report.indexed} manifests")


def recover(paths: StrataPaths, instance: Any = None) -> Recovered:
    """Remove stale temp dirs, fail orphaned MLflow (and, given an ``instance``, Dagster) runs, and repair a damaged
    catalog (:func:`repair_catalog`)."""
    temp = paths.store().cleanup_tmp()
    db = paths.mlflow_dir / "mlflow.db"
    mlflow_runs = fail_orphan_mlflow_runs(paths.mlflow_tracking_uri) if db.exists() else 0
    dagster_runs = fail_orphan_dagster_runs(instance) if instance is not None else 0
    return Recovered(temp, mlflow_runs, dagster_runs, repair_catalog(paths))
