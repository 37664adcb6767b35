"""``train.task=link`` through the stage graph (what ``strata run`` materializes) on sources that carry their own
split: the split travels through ingest and reorder (relabelled) into the link task, which trains on it as given
(held-out edges absent from the training and message-passing graph) and reports ``mrr``/``hits@10``, plus
``fixed_*`` against an OGB dataset's own negatives. A bad split file fails before anything is written and leaves
earlier artifacts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from tests.pipelines.link_fixtures import lattice_split, write_edge_dir, write_ogbl_dir
from trainer.link.split import EdgeSplit

N = 240
BASE = ["train.task=link", "policy=in_memory", "train.device=cpu", "sample.epochs=1", "sample.fanouts=[5,5]",
        "train.hidden_dim=16", "train.embedding_dim=32"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> StrataPaths:
    return StrataPaths.at(tmp_path_factory.mktemp("linksrc") / "root")  # one MLflow database for the file


def _pairs(edges: np.ndarray) -> set[tuple[int, int]]:
    return {(min(u, v), max(u, v)) for u, v in np.asarray(edges).tolist()}


def test_trains_on_the_edge_dir_split(tmp_path: Path, paths: StrataPaths) -> None:
    split = lattice_split(N)
    d = write_edge_dir(tmp_path / "lat", split)
    cfg = PipelineConfig.load(overrides=[*BASE, "train.link_encoder=embedding", "train.epochs=10",
                                         "reorder.strategy=random"], dataset=f"edgelist:{d}")
    runner = StageRunner(cfg, paths.store())
    runner.run_until("train")
    reorder, train = runner.artifact("reorder"), runner.artifact("train")
    s = train.stats
    assert 0.0 <= s["hits@10"] <= 1.0 and s["mrr"] > 0.3, s  # random over 240 nodes: ~0.03
    s = train.stats
    assert s["link_split"] == "source"
    assert (s["train_edges"], s["valid_edges"], s["test_edges"]) == tuple(len(split[k]) for k in split)
    # the stored split, mapped back through the reorder permutation, is the files' exactly (order, direction)
    stored = EdgeSplit.load(train.file("link_split.npz"))
    perm = np.asarray(reorder.array("perm.npy"))
    assert not np.array_equal(perm, np.arange(N))  # a real relabelling happened
    for name in ("train", "valid", "test"):
        np.testing.assert_array_equal(perm[getattr(stored, name)], split[name])
    # held-out edges are absent from the training topology, present in the full (known) graph
    indptr, indices = stored.train_csr()
    rows = np.repeat(np.arange(N), np.diff(indptr))
    assert _pairs(np.stack([rows, indices], 1)) == _pairs(stored.train)
    assert not _pairs(stored.train) & (_pairs(stored.valid) | _pairs(stored.test))
    full = np.repeat(np.arange(N), np.diff(reorder.array("indptr.npy")))
    assert _pairs(np.stack([full, reorder.array("indices.npy")], 1)) == \
        _pairs(stored.train) | _pairs(stored.valid) | _pairs(stored.test)


@pytest.mark.parametrize(("fmt", "negatives", "encoder"), [("pt", "edges", "embedding"), ("npz", "targets", "gnn")])
def test_ogbl_dataset_with_fixed_negatives(tmp_path: Path, paths: StrataPaths, fmt: str, negatives: str,
                                           encoder: str) -> None:
    split = lattice_split(N)
    d = write_ogbl_dir(tmp_path / "ogbl-lat", split, N, fmt=fmt, negatives=negatives, features=8)
    epochs = "10" if encoder == "embedding" else "2"
    cfg = PipelineConfig.load(overrides=[*BASE, f"train.link_encoder={encoder}", f"train.epochs={epochs}"],
                              dataset=f"ogb:{d}")
    runner = StageRunner(cfg, paths.store())
    runner.run_until("train")
    s = runner.artifact("train").stats
    assert s["link_split"] == "source" and runner.artifact("ingest").stats["link_negatives"] == negatives
    for key in ("mrr", "hits@10", "fixed_mrr", "fixed_hits@10", "val_fixed_mrr"):
        assert 0.0 <= s[key] <= 1.0, key
    if encoder == "embedding":
        assert s["fixed_mrr"] > 0.1, s  # random among 288 shared negatives: ~0.02
    assert s["train_edges"] == len(split["train"])


def test_out_of_core_embeddings_train_on_the_source_split(tmp_path: Path, paths: StrataPaths) -> None:
    split = lattice_split(N)
    d = write_ogbl_dir(tmp_path / "ogbl-ooc", split, N, negatives="targets")
    cfg = PipelineConfig.load(overrides=[*BASE, "policy=mariusgnn", "train.link_encoder=embedding", "train.epochs=4",
                                         "plan.num_partitions=4", "plan.buffer_partitions=2"], dataset=f"ogb:{d}")
    runner = StageRunner(cfg, paths.store())
    runner.run_until("train")
    s = runner.artifact("train").stats
    assert s["out_of_core"] is True and s["max_resident"] <= 2 and s["link_split"] == "source"
    assert s["train_edges"] == len(split["train"]) and 0.0 <= s["fixed_mrr"] <= 1.0
    assert s["fixed_mrr"] > 0.4, s  # random among 20 negatives per edge: ~0.17


def test_bad_split_file_fails_before_writing_and_keeps_artifacts(tmp_path: Path) -> None:
    split = lattice_split(N)
    d = write_edge_dir(tmp_path / "lat", split)
    store = StrataPaths.at(tmp_path / "root").store()
    overrides = [*BASE, "ingest.options.num_nodes=240"]
    cfg = PipelineConfig.load(overrides=overrides, dataset=f"edgelist:{d}")
    good = StageRunner(cfg, store)
    good.run_until("reorder")
    before = {stage: good.artifact(stage).version for stage in ("ingest", "reorder")}

    split["valid"][0] = [3, 240]  # out of range: line 2 (after the comment line)
    write_edge_dir(d, split)
    bad = StageRunner(PipelineConfig.load(overrides=overrides, dataset=f"edgelist:{d}"), store)
    with pytest.raises(ValueError, match=r"valid\.txt: line 2' expected a node id in \[0, 240\) \(got 240\)"):
        bad.run_until("reorder")
    for stage, version in before.items():
        kept = store.latest(cfg.dataset_name, stage)
        assert kept.version == version and kept.verify() > 0

    split["valid"][0] = [3, 9]  # a valid change to a split file gives a new ingest version
    write_edge_dir(d, split)
    fixed = StageRunner(PipelineConfig.load(overrides=overrides, dataset=f"edgelist:{d}"), store)
    fixed.run_until("ingest")
    assert fixed.artifact("ingest").version != before["ingest"]
