"""Warm start from the registered champion: the retrain job starts from the champion's weights (checked at the
first training step), tags the run, registers a gated new version, and retrains nothing on unchanged inputs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import dagster as dg
import pytest
import torch

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.orchestration.definitions import RETRAIN_JOB, STRATA_JOB, make_definitions
from pipelines.orchestration.resources import build_resources
from pipelines.tracking.warmstart import Champion, WarmStart, architecture_mismatch, shape_mismatch
from trainer.models import MODELS, GraphSAGE

pytestmark = pytest.mark.skipif(importlib.util.find_spec("storage_kernels._native") is None,
                                reason="the storage_kernels._native extension is not built")

_QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


class _SpySAGE(GraphSAGE):
    """GraphSAGE that records its weights at its first forward (the first training step)."""

    first_state: dict[str, torch.Tensor] | None = None

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if _SpySAGE.first_state is None:
            _SpySAGE.first_state = {k: v.detach().clone() for k, v in self.state_dict().items()}
        return super().forward(*args, **kwargs)


@pytest.fixture
def spy_model():
    MODELS.register("spy-sage", _SpySAGE)
    try:
        yield
    finally:
        MODELS.unregister("spy-sage")


def _run(root: Path, job: str, run_config: dict[str, Any] | None = None) -> dg.ExecuteInProcessResult:
    cfg = PipelineConfig.load(dataset="tiny", overrides=["sample.epochs=1", "train.epochs=2", "train.model=spy-sage",
                                                         "train.hidden_dim=16"])
    _SpySAGE.first_state = None
    definitions = make_definitions(build_resources(root=str(root), config=cfg))
    config = {**(run_config or {}), **_QUIET}
    if job == RETRAIN_JOB:  # the job's own config (warm start) plus quiet loggers
        from pipelines.orchestration.jobs import retrain_run_config

        config = {**retrain_run_config(root=str(root)), **_QUIET}
    result = definitions.resolve_job_def(job).execute_in_process(run_config=config, raise_on_error=False,
                                                                 instance=_INSTANCE)
    assert result.success, [e.step_failure_data.error.to_string() for e in result.get_step_failure_events()]
    return result


_INSTANCE = dg.DagsterInstance.ephemeral()


def _log_lines(result: dg.ExecuteInProcessResult) -> list[str]:
    """The run's log lines (context.log), from the instance's event log."""
    return [entry.user_message for entry in _INSTANCE.all_logs(result.run_id)]


def _materialization(result: dg.ExecuteInProcessResult, asset: str) -> dict[str, Any]:
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == asset]
    return {k: v.value for k, v in event.materialization.metadata.items()}


def test_retrain_warm_starts_from_the_champion(tmp_path: Path, spy_model: None) -> None:
    first = _run(tmp_path, STRATA_JOB)  # train.warm_start=none: registers version 1, the champion
    train1 = _materialization(first, "train")
    assert _materialization(first, "export")["champion_version"] == 1
    assert "warm_start_from" not in train1

    retrain = _run(tmp_path, RETRAIN_JOB)
    train2, export2 = _materialization(retrain, "train"), _materialization(retrain, "export")
    assert train2["version"] != train1["version"] and not train2["reused"]
    assert train2["warm_start_from"] == "1"
    assert "warm start from the champion strata-tiny version 1" in train2["warm_start"]
    # the weights at the first training step are the champion's
    champion_state = torch.load(Path(train1["path"]) / "state_dict.pt", weights_only=True)
    assert _SpySAGE.first_state is not None and champion_state.keys() == _SpySAGE.first_state.keys()
    for key, value in champion_state.items():
        assert torch.equal(value, _SpySAGE.first_state[key]), key
    # a fresh model version, tagged, and gated by the champion rule
    assert export2["model_version"] == 2 and export2["champion_version"] in (1, 2)
    from trainer.tracking import MlflowTracker

    paths = StrataPaths(tmp_path)
    client = MlflowTracker(paths.mlflow_tracking_uri, paths.mlflow_artifact_root, experiment="strata-tiny").client
    run = client.get_run(train2["mlflow_run_id"])
    assert run.data.tags["strata.warm_start_from"] == "1" and run.data.params["warm_start_from"] == "1"
    assert run.data.params["warm_start"] == "champion"
    assert any("warm start from the champion strata-tiny version 1" in m for m in _log_lines(retrain))

    # again on the same snapshot: a new run only if the champion moved (then from the new champion)
    again = _run(tmp_path, RETRAIN_JOB)
    train3 = _materialization(again, "train")
    if export2["champion_version"] == 1:
        assert train3["reused"] and train3["version"] == train2["version"]
        assert any("nothing retrained" in m for m in _log_lines(again))
    else:
        assert not train3["reused"] and train3["warm_start_from"] == "2"


def test_the_architecture_must_match() -> None:
    info = {"architecture": "graphsage", "model": "graphsage", "in_dim": 32, "hidden_dim": 16, "out_dim": 6,
            "num_layers": 2, "dropout": 0.5}
    assert architecture_mismatch(info, {**info, "dropout": 0.1}) is None  # dropout does not shape the weights
    assert "hidden_dim: 16 -> 32" in str(architecture_mismatch(info, {**info, "hidden_dim": 32}))
    small, large = GraphSAGE(32, 16, 6, 2), GraphSAGE(32, 16, 7, 2)
    assert shape_mismatch(small.state_dict(), small.state_dict()) is None
    assert "expected shape" in str(shape_mismatch(small.state_dict(), large.state_dict()))


def test_a_mismatching_champion_is_skipped_with_a_reason(tmp_path: Path) -> None:
    champion_net = GraphSAGE(32, 16, 6, 2)
    torch.save(champion_net.state_dict(), tmp_path / "state_dict.pt")
    info = {"architecture": "graphsage", "model": "graphsage", "in_dim": 32, "hidden_dim": 16, "out_dim": 6,
            "num_layers": 2, "dropout": 0.5}
    warm = WarmStart(Champion("m", 3, "run", "tiny", "abc"), info, tmp_path / "state_dict.pt")
    other = GraphSAGE(32, 16, 7, 2)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    warm(other, {**info, "out_dim": 7})
    assert not warm.applied and "out_dim: 6 -> 7" in warm.reason and warm.tag == "none"
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())
    same = GraphSAGE(32, 16, 6, 2)
    warm(same, info)
    assert warm.applied and warm.tag == "3"
    assert all(torch.equal(champion_net.state_dict()[k], v) for k, v in same.state_dict().items())


def test_champion_weights_come_from_its_mlflow_run_when_its_artifact_is_gone(tmp_path: Path, spy_model: None) -> None:
    from pipelines.tracking.warmstart import _weights_from_run, find_champion

    first = _run(tmp_path, STRATA_JOB)
    train1 = _materialization(first, "train")
    cfg = PipelineConfig.load(dataset="tiny", overrides=["sample.epochs=1", "train.epochs=2", "train.model=spy-sage",
                                                         "train.hidden_dim=16"])
    champion = find_champion(cfg, StrataPaths(tmp_path).store())
    assert champion is not None
    info, state_path = _weights_from_run(champion, StrataPaths(tmp_path).mlflow_tracking_uri, tmp_path / "dl")
    assert info == json.loads((Path(train1["path"]) / "model.json").read_text())
    expected = torch.load(Path(train1["path"]) / "state_dict.pt", weights_only=True)
    got = torch.load(state_path, weights_only=True)
    assert expected.keys() == got.keys() and all(torch.equal(expected[k], got[k]) for k in expected)
