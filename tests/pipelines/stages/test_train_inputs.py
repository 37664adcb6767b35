"""What real data brings to the train stage gets one clear line: a split left empty is named with the sizes; a
class without training nodes and tiny splits are warned about, and the run trains."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner


def _three_nodes(tmp_path: Path) -> list[str]:
    """A triangle whose seeded 60/20/20 random split leaves 'val' empty (1/0/1 of 3 labelled nodes)."""
    np.savetxt(tmp_path / "edges.csv", np.array([[0, 1], [1, 2], [2, 0]]), fmt="%d", delimiter=",")
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32))
    np.save(tmp_path / "y.npy", np.array([0, 1, 0]))
    return [f"ingest.options.features={tmp_path / 'x.npy'}", f"ingest.options.labels={tmp_path / 'y.npy'}"]


def test_an_empty_split_is_named_before_training(tmp_path: Path) -> None:
    cfg = PipelineConfig.load(overrides=[*_three_nodes(tmp_path), "sample.batch_size=2", "train.epochs=2"],
                              dataset=f"edgelist:{tmp_path / 'edges.csv'}")
    runner = StageRunner(cfg, StrataPaths.at(tmp_path / "root").store())
    with pytest.raises(ValueError, match=r"'val' split expected at least one labelled node for node classification "
                                         r"\(got 0; 3 nodes, 3 labelled, train/val/test 1/0/1\): give the source its "
                                         r"own split \(edgelist: --set ingest.options.val_idx=PATH.npy"):
        runner.result("train")
    assert runner.result("pack").artifact.path.exists()  # what came before stays, reusable


def test_the_source_s_own_split_trains(tmp_path: Path) -> None:
    sets = _three_nodes(tmp_path)
    for name, ids in (("train_idx", [0]), ("val_idx", [1]), ("test_idx", [2])):
        np.save(tmp_path / f"{name}.npy", np.array(ids))
        sets.append(f"ingest.options.{name}={tmp_path / f'{name}.npy'}")
    cfg = PipelineConfig.load(overrides=[*sets, "sample.batch_size=2", "train.epochs=2"],
                              dataset=f"edgelist:{tmp_path / 'edges.csv'}")
    result = StageRunner(cfg, StrataPaths.at(tmp_path / "root").store()).result("train")
    assert 0.0 <= result.artifact.stats["test_acc"] <= 1.0


def test_epochs_without_evaluation_are_null_in_the_history(tmp_path: Path) -> None:
    """``train.eval_every`` > 1 leaves epochs unevaluated: their validation accuracy is null in history.json
    (was NaN, which failed the artifact's JSON write after training had succeeded)."""
    cfg = PipelineConfig.load(overrides=["policy=in_memory", "train.eval_every=2", "train.epochs=3",
                                         "train.hidden_dim=8", "sample.epochs=1"], dataset="tiny")
    runner = StageRunner(cfg, StrataPaths.at(tmp_path / "root").store())
    runner.run_until("train")  # the model checks read the history too
    curve = runner.artifact("train").json("history.json")["val_acc"]
    assert curve[0] is None and isinstance(curve[1], float) and curve[2] is not None  # epochs 2 and 3 (the last)


def test_a_class_without_training_nodes_and_tiny_splits_are_warned_and_trained(tmp_path: Path) -> None:
    """Class 2 only in val and test: the run trains and says so (stats, MLflow tag, run summary), as it says
    which split is too small for its accuracy to mean much."""
    from pipelines.cli.summary import run_summary

    sets = _three_nodes(tmp_path)
    np.save(tmp_path / "y.npy", np.array([0, 1, 2]))
    for name, ids in (("train_idx", [0]), ("val_idx", [1]), ("test_idx", [2])):
        np.save(tmp_path / f"{name}.npy", np.array(ids))
        sets.append(f"ingest.options.{name}={tmp_path / f'{name}.npy'}")
    cfg = PipelineConfig.load(overrides=[*sets, "sample.batch_size=2", "train.epochs=2"],
                              dataset=f"edgelist:{tmp_path / 'edges.csv'}")
    paths = StrataPaths.at(tmp_path / "root")
    stats = StageRunner(cfg, paths.store()).result("train").artifact.stats
    assert stats["warnings"] == [
        "class 1 has no training node (val 1, test 0, train 0 of 1): the model cannot learn it; its nodes count as "
        "errors",
        "class 2 has no training node (val 0, test 1, train 0 of 1): the model cannot learn it; its nodes count as "
        "errors",
        "'train' split has 1 labelled node: its accuracy moves in steps of 1",
        "'val' split has 1 labelled node: its accuracy moves in steps of 1",
        "'test' split has 1 labelled node: its accuracy moves in steps of 1",
    ]
    assert run_summary(cfg, paths, [], {}, stats, {})["warnings"] == stats["warnings"]
    import mlflow

    run = mlflow.MlflowClient(paths.mlflow_tracking_uri).get_run(stats["mlflow_run_id"])
    assert run.data.tags["strata.warnings"].startswith("class 1 has no training node")
