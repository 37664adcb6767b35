"""``strata`` under torchrun (pipelines/cli/distributed.py), as one rank of a world of one, in process."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch.distributed as dist
from typer.testing import CliRunner

from pipelines.cli import app

runner = CliRunner()


@pytest.fixture
def torchrun_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The environment torchrun gives its only worker."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for key, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)}.items():
        monkeypatch.setenv(key, value)


def test_a_stage_before_train_is_refused_under_torchrun(tmp_path: Path, torchrun_env: None) -> None:
    result = runner.invoke(app, ["sample", "--dataset", "tiny", "--root", str(tmp_path)])
    assert result.exit_code == 2  # bad usage, as every bad input
    assert "'--until' expected train or a later stage under torchrun (got 'sample'" in result.stderr
    assert not (tmp_path / "tiny").exists()  # refused before any stage ran


def test_train_under_torchrun_builds_the_stages_and_the_model(tmp_path: Path, torchrun_env: None) -> None:
    dataset = "synthetic:nodes=600,degree=6,dim=8,classes=4,seed=1"
    args = ["train", "--dataset", dataset, "--root", str(tmp_path), "--json", "--set", "train.epochs=1",
            "--set", "train.hidden_dim=16", "--set", "sample.batch_size=128", "--set", "train.num_threads=1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [a["stage"] for a in summary["artifacts"]][-1] == "train"
    assert summary["world_size"] == 1 and summary["dagster_run_id"] is None
    assert 0.0 <= summary["metrics"]["val_acc"] <= 1.0 and summary["mlflow"]["run_id"]
    assert not dist.is_initialized()  # the run's process group is gone
    again = json.loads(runner.invoke(app, args).stdout)
    assert all(a["reused"] for a in again["artifacts"])
