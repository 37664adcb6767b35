"""``strata run --dataset tiny --json`` end to end: every asset through Dagster, then a no-op re-run.

Skips with the reason when a stage module, the native extension or a training dependency is missing. Most
of its time is fixed cost (importing torch and MLflow, creating the MLflow SQLite schema), so it runs one
training epoch over one sampled epoch.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.graph import RUN_STAGE_NAMES


def _missing() -> str | None:
    for module in ("storage_kernels._native", "torch", "mlflow", "onnx", "onnxruntime"):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not importable"
    return None


pytestmark = pytest.mark.skipif(_missing() is not None, reason=str(_missing()))

FAST = ["--set", "train.epochs=1", "--set", "sample.epochs=1"]


def _run(root: Path) -> dict:
    result = CliRunner().invoke(app, ["run", "--dataset", "tiny", "--root", str(root), "--json", *FAST])
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, f"stdout must hold exactly one JSON object (got {len(lines)} lines)"
    return json.loads(lines[0])


def test_run_tiny_json_then_reuse(tmp_path: Path) -> None:
    first = _run(tmp_path)
    assert first["dataset"] == "tiny" and first["root"] == str(tmp_path.resolve())
    assert [a["stage"] for a in first["artifacts"]] == list(RUN_STAGE_NAMES)  # not predict: only when asked
    assert not any(a["reused"] for a in first["artifacts"])
    metrics = first["metrics"]
    for key in ("test_acc", "val_acc", "epoch_s", "bytes_read", "cache_hit_rate"):
        assert isinstance(metrics[key], (int, float)), key
    assert 0.0 <= metrics["test_acc"] <= 1.0 and 0.0 <= metrics["cache_hit_rate"] <= 1.0
    mlflow = first["mlflow"]
    assert mlflow["tracking_uri"].startswith("sqlite:///") and mlflow["run_id"]
    assert mlflow["model_name"] == "strata-tiny" and mlflow["model_version"] is not None
    assert mlflow["champion_version"] is not None
    assert (tmp_path / "dagster_home" / "history").exists()  # the run is recorded for `strata ui`

    second = _run(tmp_path)
    assert all(a["reused"] for a in second["artifacts"])
    assert [a["version"] for a in second["artifacts"]] == [a["version"] for a in first["artifacts"]]

    listed = CliRunner().invoke(app, ["catalog", "ls", "--root", str(tmp_path), "--json"])
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert {r["stage"] for r in rows} == set(RUN_STAGE_NAMES)
    model_version = next(a["version"] for a in first["artifacts"] if a["stage"] == "train")
    shown = CliRunner().invoke(app, ["catalog", "show", model_version, "--root", str(tmp_path), "--json"])
    record = json.loads(shown.stdout)
    assert record["lineage"]["pack"] and any(m["key"] == "test_acc" for m in record["metrics"])
