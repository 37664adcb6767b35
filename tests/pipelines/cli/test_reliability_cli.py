"""The real ``strata run`` in subprocesses: two concurrent runs on one root, and kill -9 during training.

Slow (minutes: several full CLI runs, each paying for importing torch, Dagster and MLflow): run with
``pytest -m slow tests/pipelines/cli/test_reliability_cli.py``; ``STRATA_RELIABILITY_TRIALS=N`` repeats each test N
times (the kill lands at a different moment of training in each trial).

- Two runs on one root both succeed: the second waits for the first's dataset lock (saying so), then reuses
  its artifacts; the model artifact is registered once; the catalog has no duplicate metric rows.
- A run killed (SIGKILL) while training leaves a checkpoint in its resume dir; the next run removes the dead
  run's temp dirs, marks its MLflow run FAILED and its Dagster run failed, resumes training from the
  checkpoint and ends with exactly the weights and metrics of an uninterrupted run (CPU, fixed seed).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests import REPO

pytestmark = pytest.mark.slow
TRIALS = range(int(os.environ.get("STRATA_RELIABILITY_TRIALS", "1")))

FAST = ["--set", "train.epochs=1", "--set", "sample.epochs=1", "--set", "train.device=cpu"]
# 12 epochs of small batches (several seconds of training), checkpointed every 4 steps; no early stopping
RESUMABLE = ["--set", "train.epochs=12", "--set", "sample.epochs=1", "--set", "sample.batch_size=64",
             "--set", "train.checkpoint_every=4", "--set", "train.patience=0", "--set", "train.device=cpu",
             "--set", "train.num_threads=1"]


def _strata(root: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "pipelines.cli", "run", "--dataset", "tiny", "--root", str(root),
                             "--json", *args], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _finish(proc: subprocess.Popen, timeout: float = 540) -> dict:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out.strip().splitlines()[-1])
    summary["stderr"] = err
    return summary


def _mlflow(root: Path):
    from trainer.tracking import MlflowTracker

    return MlflowTracker(f"sqlite:///{root / 'mlflow' / 'mlflow.db'}", experiment="strata-tiny")


def _versions(summary: dict) -> dict[str, str]:
    return {a["stage"]: a["version"] for a in summary["artifacts"]}


@pytest.mark.parametrize("trial", TRIALS)
def test_two_runs_on_one_root_both_succeed_and_register_once(tmp_path: Path, trial: int) -> None:
    first = _strata(tmp_path, *FAST)
    time.sleep(1.0)
    second = _strata(tmp_path, *FAST)
    a, b = _finish(first), _finish(second)
    assert _versions(a) == _versions(b)
    waited = [s for s in (a, b) if "waiting for run" in s["stderr"]]
    assert len(waited) == 1 and "on dataset tiny" in waited[0]["stderr"]
    assert all(x["reused"] for x in waited[0]["artifacts"])  # the second reused what the first built

    tracker = _mlflow(tmp_path)
    registered = tracker.client.search_model_versions("name = 'strata-tiny'")
    train_version = _versions(a)["train"]
    assert [v.tags.get("strata.artifact_version") for v in registered] == [train_version]

    import duckdb

    con = duckdb.connect(str(tmp_path / "catalog.duckdb"), read_only=True)
    try:
        dupes = con.execute("SELECT dataset, stage, version, key, step, count(*) FROM metrics "
                            "GROUP BY ALL HAVING count(*) > 1").fetchall()
        total = con.execute("SELECT count(*) FROM metrics").fetchone()
    finally:
        con.close()
    assert dupes == [] and total is not None and total[0] > 0


def _wait_for_step(root: Path, proc: subprocess.Popen, step: int, timeout: float = 400) -> Path:
    """The resume checkpoint once it holds at least ``step`` optimizer steps (the run still training)."""
    from trainer.checkpoint import load_checkpoint

    deadline, seen = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        for path in (root / ".tmp" / "resume").glob("tiny-train-*/checkpoint.pt"):
            try:
                stamp = path.stat().st_mtime_ns
                if stamp != seen:
                    seen = stamp
                    if load_checkpoint(path)["step"] >= step:
                        return path
            except (OSError, ValueError):  # replaced or removed meanwhile: look again
                pass
        time.sleep(0.01)
    raise AssertionError(f"no checkpoint at step >= {step} appeared while training")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("full")
    return root, _finish(_strata(root, *RESUMABLE))


@pytest.mark.parametrize("trial", TRIALS)
def test_kill_during_training_then_rerun_resumes_to_the_same_weights(
        tmp_path: Path, uninterrupted: tuple[Path, dict], trial: int) -> None:
    full_root, full = uninterrupted
    root = tmp_path / "killed"
    victim = _strata(root, *RESUMABLE)
    # somewhere in training (12 epochs of at least 8 steps): after a checkpoint at a step chosen per trial
    checkpoint = _wait_for_step(root, victim, 4 * random.Random(trial).randint(1, 15))
    os.killpg(victim.pid, signal.SIGKILL)
    victim.communicate()
    assert checkpoint.is_file(), "training had finished before the kill: raise train.epochs"
    from trainer.checkpoint import load_checkpoint

    position = load_checkpoint(checkpoint)
    assert position["step"] >= 4  # at least the first mid-epoch checkpoint
    assert [p for p in (root / ".tmp").iterdir() if p.name != "resume"]  # the dead run's builder dirs
    tracker = _mlflow(root)
    [orphan] = tracker.client.search_runs([tracker.experiment_id], "attributes.status = 'RUNNING'")

    resumed = _finish(_strata(root, *RESUMABLE))
    assert "recovered after a killed run" in resumed["stderr"]
    assert tracker.client.get_run(orphan.info.run_id).info.status == "FAILED"
    assert tracker.client.search_runs([tracker.experiment_id], "attributes.status = 'RUNNING'") == []
    new_run = tracker.client.get_run(resumed["mlflow"]["run_id"])
    assert new_run.data.tags.get("strata.resumed_from") == str(checkpoint)
    assert [p.name for p in (root / ".tmp").iterdir()] in ([], ["resume"])  # temp space reclaimed
    assert not checkpoint.parent.exists()  # published: the checkpoint is gone

    assert _versions(resumed) == _versions(full)
    for key in ("test_acc", "val_acc", "final_loss", "best_epoch", "stopped_epoch"):
        assert resumed["metrics"][key] == full["metrics"][key], key
    version = _versions(full)["train"]
    want = torch.load(full_root / "tiny" / "train" / version / "state_dict.pt", weights_only=True)
    got = torch.load(root / "tiny" / "train" / version / "state_dict.pt", weights_only=True)
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want)

    from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

    os.environ["DAGSTER_HOME"] = str(root / "dagster_home")
    try:
        with DagsterInstance.get() as instance:
            statuses = [r.status for r in instance.get_runs(RunsFilter())]
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    assert sorted(s.value for s in statuses) == sorted([DagsterRunStatus.FAILURE.value,
                                                        DagsterRunStatus.SUCCESS.value])
