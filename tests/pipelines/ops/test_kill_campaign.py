"""The kill campaign (``benchmarks/kill_campaign.py``): its checks catch what they are meant to catch, on a real
artifact store; and (slow) two real trials, each killing ``strata run`` with SIGKILL and rerunning it, pass."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from storage_kernels.store import ArtifactStore
from tests import REPO
from tests.pipelines.stage_fixtures import make_graph_artifact


def _campaign() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kill_campaign", REPO / "benchmarks" / "kill_campaign.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["kill_campaign"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


def test_checks_see_half_written_corrupt_uncatalogued_and_leftover_state(tmp_path: Path) -> None:
    kc = _campaign()
    store = ArtifactStore(tmp_path)
    art = make_graph_artifact(store, dataset="unit", n=300)
    assert kc.published(tmp_path, "unit") == {"ingest": {art.version}}
    assert kc.half_written(tmp_path, "unit") == []
    assert store.catalog is not None
    [problem] = kc.catalog_problems(tmp_path, "unit")  # the fixture records no metrics, as a kill would
    assert problem.startswith("catalogued without their metric rows: [('ingest'")
    store.catalog.ensure_artifact(art.manifest, art.path)
    assert kc.catalog_problems(tmp_path, "unit") == []
    assert kc.tmp_leftovers(tmp_path) == []

    half = tmp_path / "unit" / "reorder" / "0123456789ab"  # a directory visible without its manifest
    half.mkdir(parents=True)
    (half / "features.npy").write_bytes(b"partial")
    assert kc.half_written(tmp_path, "unit") == [str(half)]
    shutil.rmtree(half)
    (tmp_path / ".tmp" / "123.456-abc-host").mkdir(parents=True)  # a builder dir of a dead run
    (tmp_path / ".tmp" / "resume" / "unit-train-x").mkdir(parents=True)  # a checkpoint never published
    assert sorted(kc.tmp_leftovers(tmp_path)) == ["123.456-abc-host", "resume/unit-train-x"]

    data = art.path / "indices.npy"
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0x01  # one flipped bit in a published file
    data.write_bytes(bytes(raw))
    [bad] = kc.half_written(tmp_path, "unit")
    assert str(art.path) in bad and "BAD" in bad

    store.catalog.forget_artifact("unit", "ingest", art.version)  # published, but the catalog lost it
    problems = kc.catalog_problems(tmp_path, "unit")
    assert len(problems) == 2 and "only on disk [('ingest'" in problems[0]


@pytest.mark.slow
def test_two_kill_trials_on_tiny_pass(tmp_path: Path) -> None:
    kc = _campaign()
    out = tmp_path / "result.json"
    code = kc.main(["--trials", "2", "--workers", "1", "--datasets", "tiny", "--minutes", "15",
                    "--work", str(tmp_path / "work"), "--out", str(out)])
    result = json.loads(out.read_text())
    assert code == 0, [t["problems"] for t in result["trials"]]
    assert result["trials_run"] == 2 and result["killed"] >= 1


def test_orphan_check_wants_the_victims_running_runs_failed(tmp_path: Path) -> None:
    from pipelines.core.paths import StrataPaths
    from pipelines.ops.recovery import MLFLOW_OWNER_PREFIX, fail_orphan_mlflow_runs
    from storage_kernels.owner import Owner
    from trainer.tracking import MlflowTracker

    kc = _campaign()
    paths = StrataPaths.at(tmp_path)
    tracker = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root, experiment="strata-unit")
    victim = Owner(2**22 + 7, None, Owner.me().host)  # above the default pid_max: never a live process
    left = tracker.client.create_run(tracker.experiment_id, tags=victim.tags(MLFLOW_OWNER_PREFIX)).info.run_id
    done = tracker.client.create_run(tracker.experiment_id, tags=victim.tags(MLFLOW_OWNER_PREFIX)).info.run_id
    tracker.client.set_terminated(done, "FINISHED")  # ended before the kill: stays as it is
    at_kill = (kc.mlflow_state(tmp_path, "unit", victim.pid)[0], kc.dagster_state(tmp_path, victim.pid)[0])
    assert at_kill[0] == {left: "RUNNING", done: "FINISHED"}
    problems = kc.orphan_problems(at_kill, tmp_path, "unit", victim.pid)
    assert problems == [f"MLflow run {left} left RUNNING",
                        f"victim's MLflow run {left} was RUNNING at the kill, is RUNNING after the rerun"]
    assert fail_orphan_mlflow_runs(tracker.tracking_uri) == 1  # what the next strata run does
    assert kc.orphan_problems(at_kill, tmp_path, "unit", victim.pid) == []
