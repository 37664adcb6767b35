"""After a kill: MLflow runs and Dagster runs whose owner process is gone are marked failed by the next run,
runs of live processes are left alone; the MLflow store is initialised once under concurrency and a model
artifact is registered once however often registration is asked for."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pipelines.core.paths import StrataPaths
from pipelines.ops.recovery import (
    DAGSTER_OWNER_PREFIX,
    MLFLOW_OWNER_PREFIX,
    Recovered,
    fail_orphan_dagster_runs,
    fail_orphan_mlflow_runs,
    recover,
)
from storage_kernels.owner import Owner
from tests import REPO
from trainer.tracking import ARTIFACT_VERSION_TAG, MlflowTracker


def _dead_owner() -> Owner:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return Owner(int(proc.stdout), None, Owner.me().host)


@pytest.fixture(scope="module")
def tracker(tmp_path_factory: pytest.TempPathFactory) -> MlflowTracker:
    paths = StrataPaths.at(tmp_path_factory.mktemp("root"))
    return MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root, experiment="strata-tiny")


def test_orphaned_mlflow_runs_are_failed_and_live_ones_kept(tracker: MlflowTracker) -> None:
    me = Owner.me()
    owners = {"dead": _dead_owner(), "reused pid": Owner(me.pid, (me.start or 0) + 1, me.host), "live": me,
              "other host": Owner(1, None, "elsewhere")}
    runs = {name: tracker.client.create_run(tracker.experiment_id, tags=o.tags(MLFLOW_OWNER_PREFIX)).info.run_id
            for name, o in owners.items()}
    untagged = tracker.client.create_run(tracker.experiment_id).info.run_id  # not ours to judge
    assert fail_orphan_mlflow_runs(tracker.tracking_uri) == 2
    status = {name: tracker.client.get_run(run_id).info.status for name, run_id in runs.items()}
    assert status == {"dead": "FAILED", "reused pid": "FAILED", "live": "RUNNING", "other host": "RUNNING"}
    assert tracker.client.get_run(untagged).info.status == "RUNNING"
    assert "is gone" in tracker.client.get_run(runs["dead"]).data.tags["strata.failure"]
    assert fail_orphan_mlflow_runs(tracker.tracking_uri) == 0  # idempotent


def test_register_is_idempotent_per_artifact_version(tracker: MlflowTracker, tmp_path: Path) -> None:
    weights = tmp_path / "state_dict.pt"
    weights.write_bytes(b"weights")
    name = f"strata-idem-{uuid.uuid4().hex[:6]}"
    with tracker.run("a") as run_id:
        tracker.log_model_files(state_dict_path=weights)
    first = tracker.register(run_id, name, "model", 0.5, artifact_version="aaaaaaaaaaaa")
    again = tracker.register(run_id, name, "model", 0.9, artifact_version="aaaaaaaaaaaa")
    assert again == first == (1, 1)
    other = tracker.register(run_id, name, "model", 0.7, artifact_version="bbbbbbbbbbbb")
    assert other == (2, 2)
    versions = tracker.client.search_model_versions(f"name = '{name}'")
    assert sorted((int(v.version), v.tags[ARTIFACT_VERSION_TAG]) for v in versions) == [
        (1, "aaaaaaaaaaaa"), (2, "bbbbbbbbbbbb")]


def test_orphaned_dagster_runs_are_failed(tmp_path: Path) -> None:
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.storage.dagster_run import DagsterRun

    with DagsterInstance.local_temp(str(tmp_path)) as instance:
        def add(owner: Owner | None) -> str:
            tags = owner.tags(DAGSTER_OWNER_PREFIX) if owner else {}
            run = DagsterRun(job_name="strata_job", run_id=str(uuid.uuid4()), status=DagsterRunStatus.STARTED,
                             tags=tags)
            return instance.add_run(run).run_id

        dead, live, foreign = add(_dead_owner()), add(Owner.me()), add(None)
        assert fail_orphan_dagster_runs(instance) == 1
        assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE
        assert instance.get_run_by_id(live).status == DagsterRunStatus.STARTED
        assert instance.get_run_by_id(foreign).status == DagsterRunStatus.STARTED
        assert any("is gone" in (e.message or "") for e in instance.all_logs(dead))


def test_recover_without_leftovers_reports_nothing(tmp_path: Path) -> None:
    assert recover(StrataPaths.at(tmp_path)) == Recovered()
    assert Recovered().message() is None
    assert Recovered(2, 1, 0).message() == ("recovered after a killed run: 2 stale temp dirs removed, 1 orphaned "
                                            "MLflow runs marked FAILED")


INIT = """
import sys, time
from trainer.tracking import MlflowTracker

from tests import REPO
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # both start at once
MlflowTracker(root=sys.argv[1], experiment="strata-race")
print("ok")
"""


@pytest.mark.slow  # two interpreters importing MLflow and creating its schema: tens of seconds on a loaded host
def test_two_processes_initialise_one_fresh_store(tmp_path: Path) -> None:
    import time

    start = str(time.time() + 4.0)
    procs = [subprocess.Popen([sys.executable, "-c", INIT, str(tmp_path), start], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    assert [out.strip() for out, _ in outs] == ["ok", "ok"]


def test_a_ui_launched_run_claims_itself_and_recovers(tmp_path: Path) -> None:
    # a run launched outside the CLI (UI, schedule, sensor) is tagged with its run worker's identity when its
    # resource starts, and fails the runs of dead owners then
    import dagster as dg
    from dagster import DagsterInstance, DagsterRunStatus
    from dagster._core.storage.dagster_run import DagsterRun

    from pipelines.orchestration.resources import RESOURCE_KEY, build_resources

    @dg.asset(required_resource_keys={RESOURCE_KEY})  # the resource starts with the run
    def probe() -> None:
        pass

    resources = build_resources(root=str(tmp_path / "root"))
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "dagster")) as instance:
        dead = instance.add_run(DagsterRun(job_name="strata_job", run_id=str(uuid.uuid4()),
                                           status=DagsterRunStatus.STARTED,
                                           tags=_dead_owner().tags(DAGSTER_OWNER_PREFIX))).run_id
        result = dg.materialize([probe], instance=instance, resources={RESOURCE_KEY: resources[RESOURCE_KEY]})
        assert result.success
        tags = instance.get_run_by_id(result.run_id).tags
        assert Owner.from_tags(dict(tags), DAGSTER_OWNER_PREFIX) == Owner.me()
        assert instance.get_run_by_id(dead).status == DagsterRunStatus.FAILURE


def test_recover_moves_a_damaged_catalog_aside_and_rebuilds_it(tmp_path: Path) -> None:
    paths = StrataPaths.at(tmp_path)
    store = paths.store()
    version = store.version_for("graph", 1, {}, {})
    with store.builder("ds", "graph", version, {}, {}, format_version=1) as b:
        b.add_file("blob.bin").write_bytes(b"x")
        b.publish()
    paths.catalog_path.write_bytes(b"")  # what a full disk or a careless `>` leaves
    message = recover(paths).message()
    assert message is not None and re.fullmatch(
        r"catalog \S+catalog\.duckdb was damaged \(an empty file \(0 bytes\)\): moved to "
        r"catalog\.duckdb\.damaged-\d{8}T\d{6}Z, rebuilt from 1 manifests", message), message
    assert [a["version"] for a in paths.catalog().list_artifacts()] == [version]
    assert recover(paths) == Recovered()  # repaired: nothing to say the next time
