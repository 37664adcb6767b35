"""PipelineConfig.load: file, then ``--set`` overrides, then keywords; invalid input gives clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import PipelineConfig, dataset_slug
from pipelines.resources import build_resources


@pytest.fixture
def yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        "dataset: demo\n"
        "sample:\n"
        "  batch_size: 256\n"
        "  fanouts: [5, 5]\n"
        "train:\n"
        "  epochs: 2\n"
    )
    return path


def test_defaults() -> None:
    cfg = PipelineConfig.load()
    assert cfg.dataset == "tiny"
    assert cfg.sample.fanouts == [10, 10]
    assert cfg.policy == "diskgnn"


def test_yaml_file(yaml_file: Path) -> None:
    cfg = PipelineConfig.load(yaml_file)
    assert cfg.dataset == "demo"
    assert cfg.sample.batch_size == 256
    assert cfg.sample.fanouts == [5, 5]
    assert cfg.train.epochs == 2
    assert cfg.sample.epochs == 3  # untouched defaults stay


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"dataset": "tiny", "plan": {"cpu_cache_fraction": 0.25}}))
    assert PipelineConfig.load(path).plan.cpu_cache_fraction == 0.25


def test_overrides_after_file_and_keywords_last(yaml_file: Path) -> None:
    cfg = PipelineConfig.load(
        yaml_file,
        overrides=["sample.batch_size=512", "sample.fanouts=15,10,5", "train.device=cpu", "dataset=tiny"],
        dataset="synthetic:nodes=100,degree=4,dim=8,classes=2,seed=1",
    )
    assert cfg.sample.batch_size == 512
    assert cfg.sample.fanouts == [15, 10, 5]
    assert cfg.train.device == "cpu"
    assert cfg.train.epochs == 2  # from the file
    assert cfg.dataset.startswith("synthetic:")  # the keyword wins over file and --set


def test_override_values_are_typed() -> None:
    cfg = PipelineConfig.load(overrides=["plan.cpu_cache_bytes=1048576", "sample.fanouts=[4, 4]",
                                         "ingest.options.features=/data/x.npy"])
    assert cfg.plan.cpu_cache_bytes == 1048576
    assert cfg.sample.fanouts == [4, 4]
    assert cfg.ingest.options == {"features": "/data/x.npy"}


def test_frozen() -> None:
    cfg = PipelineConfig.load()
    with pytest.raises(ValueError):
        cfg.sample.batch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sample.batch_size", "'--set' expected key=value (got 'sample.batch_size')"),
        ("sampel.batch_size=3", "'--set sampel.batch_size' expected a key starting with one of"),
        ("sample.batch_sise=3", "batch_sise"),
        ("sample.batch_size=-1", "batch_size"),
        ("reorder.strategy=zigzag", "strategy"),
        ("train.dropout=abc", "dropout"),
    ],
)
def test_invalid_overrides(override: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        PipelineConfig.load(overrides=[override])
    assert message in str(info.value)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("sample:\n  batchsize: 3\n")
    with pytest.raises(ValueError, match="batchsize"):
        PipelineConfig.load(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'--config' expected an existing YAML or JSON file"):
        PipelineConfig.load(tmp_path / "nope.yaml")


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a mapping at the top level"):
        PipelineConfig.load(path)


def test_dataset_slug() -> None:
    assert dataset_slug("tiny") == "tiny"
    slug = dataset_slug("synthetic:nodes=100,degree=4")
    assert slug.startswith("synthetic-") and "/" not in slug and ":" not in slug
    assert dataset_slug("synthetic:nodes=100,degree=4") == slug  # deterministic


def test_resource_builds_the_same_config(yaml_file: Path, tmp_path: Path) -> None:
    loaded = PipelineConfig.load(yaml_file, ["sample.batch_size=64"], dataset="tiny")
    resource = build_resources(root=str(tmp_path / "root"), config=loaded)["strata"]
    cfg = resource.pipeline_config()
    assert cfg == PipelineConfig.load(yaml_file, ["sample.batch_size=64"], dataset="tiny")
    assert cfg.dataset == "tiny" and cfg.sample.batch_size == 64 and cfg.train.epochs == 2
