"""What the UI defaults to and offers: the last run's dataset, the environment's and the config file's choices
first; every dataset with an ingest manifest under the root (the end-to-end path: test_mlflow_registry.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import PipelineConfig
from pipelines.orchestration.ui_datasets import (
    LAST_RUN_FILE,
    MaterializedDataset,
    dataset_run_config,
    default_config,
    default_run_config,
    job_name_for,
    last_run,
    materialized_datasets,
    record_last_run,
)


def _ingest_manifest(root: Path, name: str, spec: str, version: str, created_at: str, **options: str) -> None:
    path = root / name / "ingest" / version
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({
        "dataset": name, "stage": "ingest", "version": version, "files": [], "upstream": {},
        "params": {"source": spec, "options": options}, "created_at": created_at}))


def test_default_is_the_last_run_unless_the_environment_or_file_says(tmp_path: Path) -> None:
    assert default_config(tmp_path).dataset == "tiny"  # nothing run yet: the built-in default
    spec = "edgelist:/data/g.csv"
    record_last_run(tmp_path, PipelineConfig.load(overrides=["ingest.options.features=/data/x.npy"], dataset=spec))
    assert last_run(tmp_path)["dataset"] == spec
    cfg = default_config(tmp_path)
    assert cfg.dataset == spec and cfg.ingest.options == {"features": "/data/x.npy"}  # with its options
    assert default_config(tmp_path, dataset="demo").dataset == "demo"  # STRATA_DATASET / --dataset
    with_dataset = tmp_path / "with.yaml"
    with_dataset.write_text("dataset: demo\n")
    assert default_config(tmp_path, str(with_dataset)).dataset == "demo"  # the file's own choice
    without = tmp_path / "without.yaml"
    without.write_text("train: {epochs: 3}\n")
    cfg = default_config(tmp_path, str(without))
    assert cfg.dataset == spec and cfg.train.epochs == 3  # the file's settings, the last run's dataset
    assert default_run_config(tmp_path) == {"resources": {"strata": {"config": {"settings": {
        "dataset": spec, "ingest": {"options": {"features": "/data/x.npy"}}}}}}}


def test_unreadable_last_run_is_ignored_with_a_warning(tmp_path: Path) -> None:
    (tmp_path / LAST_RUN_FILE).write_text("{not json")
    with pytest.warns(UserWarning, match=r"last_run.json' expected a JSON record of the last run"):
        assert default_config(tmp_path).dataset == "tiny"
    (tmp_path / LAST_RUN_FILE).write_text(json.dumps({"dataset": 3}))
    with pytest.warns(UserWarning, match="expected a 'dataset' string"):
        assert last_run(tmp_path) is None


def test_materialized_datasets_read_the_newest_ingest_manifests(tmp_path: Path) -> None:
    assert materialized_datasets(tmp_path / "missing") == []
    _ingest_manifest(tmp_path, "tiny", "tiny", "aaa", "2026-01-01T00:00:00+00:00")
    _ingest_manifest(tmp_path, "g", "edgelist:/old.csv", "bbb", "2026-01-01T00:00:00+00:00")
    _ingest_manifest(tmp_path, "g", "edgelist:/g.csv", "ccc", "2026-02-01T00:00:00+00:00", features="/x.npy")
    broken = tmp_path / "broken" / "ingest" / "ddd"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text("{half-written")
    (tmp_path / "tiny" / "sample" / "eee").mkdir(parents=True)  # other stages are not datasets
    assert materialized_datasets(tmp_path) == [
        MaterializedDataset("g", "edgelist:/g.csv", {"features": "/x.npy"}, "2026-02-01T00:00:00+00:00"),
        MaterializedDataset("tiny", "tiny", {}, "2026-01-01T00:00:00+00:00"),
    ]


def test_job_names_are_valid_and_distinct() -> None:
    first = job_name_for(MaterializedDataset("synthetic-n=1000", "synthetic:n=1000"))
    assert first == "strata_job_synthetic_n_1000"
    assert job_name_for(MaterializedDataset("synthetic_n_1000", "x"), [first]) == f"{first}_2"
    assert dataset_run_config("tiny") == {"resources": {"strata": {"config": {"settings": {"dataset": "tiny"}}}}}
