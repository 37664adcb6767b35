"""``train.task=link`` through the stage graph: split, train, metrics in the artifact and MLflow, checks, ONNX
export verified in onnxruntime and registered -- for the learned-embedding and the GNN encoder. The MRR must
beat a random scorer by a clear margin (a graph with local structure, where links are predictable)."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig, artifact_params
from pipelines.core.paths import StrataPaths
from pipelines.runner import StageRunner
from trainer.config import LINK_FIELDS
from trainer.link.split import EdgeSplit, split_edges

SPEC = "synthetic:nodes=800,degree=8,dim=16,classes=4,seed=0,locality=0.9,window=4"
BASE = ["train.task=link", "policy=in_memory", "train.device=cpu", "sample.epochs=1", "sample.fanouts=[5,5]",
        "train.hidden_dim=32", "train.embedding_dim=32"]


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> StrataPaths:
    return StrataPaths.at(tmp_path_factory.mktemp("link") / "root")


def _run(paths: StrataPaths, *overrides: str) -> StageRunner:
    cfg = PipelineConfig.load(overrides=[*BASE, *overrides], dataset=SPEC)
    runner = StageRunner(cfg, paths.store())
    runner.run_until("export")  # every stage's checks run and must pass
    return runner


def test_embedding_encoder_end_to_end(paths: StrataPaths) -> None:
    runner = _run(paths, "train.link_encoder=embedding", "train.epochs=12")
    train = runner.artifact("train")
    s = train.stats
    assert s["task"] == "link" and s["filtered"] == 1.0  # 800 nodes: filtered ranking over all nodes
    for key in ("mrr", "hits@1", "hits@3", "hits@10", "sampled_mrr", "filtered_mrr", "val_mrr"):
        assert 0.0 <= s[key] <= 1.0, key
    assert s["mrr"] == s["filtered_mrr"]
    assert s["sampled_mrr"] > 5 * s["random_mrr"], s  # random: 1000 sampled negatives -> ~0.0075
    assert s["mrr"] > 0.1, s  # random over ~800 candidates: ~0.009
    # the split stored is the deterministic one, and disjoint from training
    split = EdgeSplit.load(train.file("link_split.npz"))
    assert len(split.valid) == s["valid_edges"] and len(split.train) == s["train_edges"]
    assert np.load(train.file("embeddings.npy")).shape == (800, 32)
    export = runner.artifact("export")
    assert export.stats["model_name"].endswith("-link") and export.stats["model_version"] >= 1
    assert export.stats["onnx_max_scaled_diff"] <= 1e-4
    # MLflow has the headline metrics under MLflow-safe names
    from mlflow.tracking import MlflowClient

    metrics = MlflowClient(paths.mlflow_tracking_uri).get_run(s["mlflow_run_id"]).data.metrics
    assert metrics["mrr"] == pytest.approx(s["mrr"]) and metrics["hits_at_10"] == pytest.approx(s["hits@10"])


def test_gnn_encoder_end_to_end(paths: StrataPaths) -> None:
    runner = _run(paths, "train.epochs=4", "train.decoder=dot", "train.negative_sampler=degree")
    s = runner.artifact("train").stats
    assert s["link_encoder"] == "gnn" and s["decoder"] == "dot"
    assert s["sampled_mrr"] > 3 * s["random_mrr"], s
    assert runner.artifact("export").stats["onnx_max_scaled_diff"] <= 1e-4


def test_link_settings_leave_node_classification_versions_alone() -> None:
    node = artifact_params(PipelineConfig.load(), "train", ("policy",))
    assert not (LINK_FIELDS & set(node))
    link = artifact_params(PipelineConfig.load(overrides=["train.task=link"]), "train", ("policy",))
    assert LINK_FIELDS <= set(link)
    with pytest.raises(ValueError, match="negative_chunk"):
        PipelineConfig.load(overrides=["train.task=link", "train.negative_chunk=0"])


def test_mariusgnn_trains_embeddings_out_of_core(paths: StrataPaths) -> None:
    runner = _run(paths, "policy=mariusgnn", "train.link_encoder=embedding", "train.epochs=4",
                  "plan.partition_order=comet", "plan.num_partitions=6", "plan.buffer_partitions=2")
    s = runner.artifact("train").stats
    assert s["out_of_core"] is True and s["partition_order"] == "comet"
    assert s["max_resident"] <= 2 < s["num_partitions"]
    assert s["bytes_read"] > 0 and s["bytes_written"] > 0 and s["writebacks"] > 0
    # the prefetch thread (plan.prefetch_partitions=1): one spare slot, some loads read ahead
    assert s["prefetch_partitions"] == 1 and 0 < s["partitions_prefetched"] < s["partition_loads"]
    assert s["max_slots_used"] <= 3 and s["buffer_bytes"] % 3 == 0 and s["load_wait_s"] >= 0
    assert s["sampled_mrr"] > 3 * s["random_mrr"], s
    assert np.load(runner.artifact("train").file("embeddings.npy")).shape == (800, 32)
    # the stored split is the deterministic one as split (training holds only the bucket-grouped edge list)
    reorder = runner.artifact("reorder")
    want = split_edges(reorder.array("indptr.npy"), reorder.array("indices.npy"), 0.05, 0.05, 0)
    got = EdgeSplit.load(runner.artifact("train").file("link_split.npz"))
    for name in ("train", "valid", "test"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    # the default order (alg7, node classification's) pairs no partitions: a link task uses BETA instead
    beta = _run(paths, "policy=mariusgnn", "train.link_encoder=embedding", "train.epochs=1",
                "plan.num_partitions=6", "plan.buffer_partitions=2").artifact("train").stats
    assert beta["partition_order"] == "beta" and beta["out_of_core"] is True


def test_out_of_core_never_allocates_the_whole_table(paths: StrataPaths, monkeypatch: pytest.MonkeyPatch) -> None:
    import trainer.link.run as link_run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("an in-memory embedding table was allocated under policy=mariusgnn")

    monkeypatch.setattr(link_run, "InMemoryEmbeddings", refuse)
    # learned embeddings with uniform negatives read no training CSR: it is never built (its memory is not spent)
    monkeypatch.setattr(EdgeSplit, "train_csr", refuse)
    import trainer.link.outofcore as ooc

    files: list = []
    init = ooc.PartitionedEmbeddings.__init__
    monkeypatch.setattr(ooc.PartitionedEmbeddings, "__init__",
                        lambda self, path, *a, **k: (files.append(path), init(self, path, *a, **k))[-1])
    s = _run(paths, "policy=mariusgnn", "train.link_encoder=embedding", "train.epochs=1", "train.seed=7",
             "plan.num_partitions=4", "plan.buffer_partitions=2").artifact("train").stats
    assert s["out_of_core"] is True and s["max_resident"] <= 2
    # the node file is the build's own scratch file (two runs of one version never share one), removed after
    # the run, and removed by the store's cleanup when a killed run leaves it behind
    (node_file,) = files
    store = paths.store()
    assert node_file.parent == store.tmp_dir and not node_file.exists()
    pid = node_file.name.split(".", 1)[0].split("-", 1)[0]
    orphan = node_file.with_name(node_file.name.replace(pid, "999999999", 1))  # a pid no process has
    orphan.write_bytes(b"left by a killed run")
    assert store.cleanup_tmp() >= 1 and not orphan.exists()


def test_automatic_buffer_leaves_the_prefetch_slot_in_the_budget() -> None:
    from pipelines.stages.train_link import PREFETCH_RESERVE, _partitioning

    part = 100 * 2 * 32 * 4  # 1000 nodes in 10 partitions of 100 rows, [embedding | state] of dim 32
    for depth in (0, 1, 3):  # the depth is speed only: c does not depend on it
        cfg = PipelineConfig.load(overrides=[*BASE, "policy=mariusgnn", "train.link_encoder=embedding",
                                             "plan.num_partitions=10", f"plan.cpu_cache_bytes={6 * part}",
                                             f"plan.prefetch_partitions={depth}"])
        assert _partitioning(cfg, 1000) == (10, 6 - PREFETCH_RESERVE, "beta")
