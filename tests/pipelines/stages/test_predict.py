"""The predict stage and ``strata predict``: every node's class, probability and embedding in Parquet, equal to
the trained model's in-memory full-neighbourhood forward (1e-5), in one interval or in several under a tiny
memory budget; the schema; a lookup by node id through the catalog; the exit-2 paths of the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from pipelines.cli import app
from pipelines.config import PipelineConfig
from pipelines.core.graphio import feature_values
from pipelines.core.paths import StrataPaths
from pipelines.graph import RUN_STAGE_NAMES, STAGE_NAMES, until
from pipelines.runner import StageRunner
from pipelines.stages import predict
from pipelines.stages.train import load_model
from storage_kernels import kernels
from storage_kernels.sampleset import Block
from storage_kernels.store import Artifact
from trainer.models import TensorBlock

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

SETS = ["train.epochs=3", "sample.epochs=1"]
cli = CliRunner()


def full_forward(model: Any, reorder: Artifact) -> tuple[np.ndarray, np.ndarray]:
    """The model's own forward with every node a seed and every neighbour at every hop, in Strata's order: the
    logits and the last layer's input (ReLU'd hidden rows)."""
    indptr, indices = np.asarray(reorder.array("indptr.npy")), np.asarray(reorder.array("indices.npy"))
    n = len(indptr) - 1
    out = kernels.sample_blocks(indptr, indices, np.arange(n), [-1] * model.num_layers, seed=0)
    assert np.array_equal(out.nodes, np.arange(n))
    blocks = [TensorBlock.from_block(Block(n, n, out.indptrs[h], out.cols[h])) for h in reversed(range(len(out.cols)))]
    x = torch.from_numpy(np.ascontiguousarray(feature_values(reorder), dtype=np.float32))
    model.eval()
    with torch.no_grad():
        return model(x, blocks).numpy(), model.forward_lower(x, blocks[:-1]).numpy()


def softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("predict")
    cfg = PipelineConfig.load(overrides=SETS, dataset="tiny")
    runner = StageRunner(cfg, StrataPaths.at(root).store())
    runner.run_until("train", checks=False)
    return {"root": root, "runner": runner, "reorder": runner.artifact("reorder"), "train": runner.artifact("train")}


def predict_with(trained: dict[str, Any], *sets: str) -> Artifact:
    cfg = PipelineConfig.load(overrides=[*SETS, *sets], dataset="tiny")
    return trained["runner"].derive(cfg).result("predict").artifact


@pytest.mark.parametrize("memory_mb", [1, 256])
def test_predictions_equal_the_full_forward(trained: dict[str, Any], memory_mb: int, tmp_path: Path) -> None:
    # the file itself, not the artifact: memory does not change the artifact, so the second would be reused
    cfg = PipelineConfig.load(overrides=[*SETS, f"predict.memory_mb={memory_mb}", "predict.chunk_nodes=64",
                                         "predict.row_group_rows=700"], dataset="tiny")
    reorder, path = trained["reorder"], tmp_path / "p.parquet"
    stats = predict.write_predictions(path, reorder, trained["train"], cfg, tmp_path / "scratch", {"dataset": "t"})
    logits, _ = full_forward(load_model(trained["train"]), reorder)
    table = pq.read_table(path)
    n = len(logits)
    assert table.num_rows == n == stats["rows"]
    # row i is Strata's node i; node_id is the id the source gave it
    np.testing.assert_array_equal(table["node_id"].to_numpy(), np.asarray(reorder.array("perm.npy")))
    np.testing.assert_allclose(np.stack(table["embedding"].to_numpy(zero_copy_only=False)), logits, rtol=0, atol=1e-5)
    np.testing.assert_array_equal(table["predicted_class"].to_numpy(), logits.argmax(axis=1))
    np.testing.assert_allclose(table["probability"].to_numpy(), softmax(logits).max(axis=1), rtol=0, atol=1e-5)
    # a tiny budget: layers in several intervals (the last one's few rows fit one); else one interval a layer
    assert (max(stats["layer_intervals"]) > 1) == (memory_mb == 1)
    # several intervals: their sources listed to a scratch file, staged when that moves fewer bytes (here not)
    assert (stats["bytes_staged"] > 0) == (memory_mb == 1)
    assert len(stats["layer_groups"]) == len(stats["layer_intervals"]) == len(stats["layer_staged"])
    assert set(stats["layer_staged"]) <= {"rows", "messages"}
    assert pq.ParquetFile(path).metadata.num_row_groups == -(-n // 700)
    assert stats["predicted_class_counts"] == np.bincount(logits.argmax(axis=1), minlength=6).tolist()
    assert not list((tmp_path / "scratch").iterdir())  # scratch tables removed


def test_the_parquet_schema_says_what_the_embedding_is(trained: dict[str, Any]) -> None:
    art = predict_with(trained)
    schema = pq.read_schema(art.file(predict.PREDICTIONS_FILE))
    assert schema.names == ["node_id", "predicted_class", "probability", "embedding"]
    assert [str(t) for t in schema.types[:3]] == ["int64", "int32", "float"]
    assert str(schema.field("embedding").type) == "fixed_size_list<element: float>[6]"
    meta = {k.decode(): v.decode() for k, v in schema.metadata.items()}
    assert meta["strata.embedding"] == "logits" and "no separate classifier head" in meta["strata.embedding_meaning"]
    assert meta["strata.train_version"] == trained["train"].version
    assert meta["strata.reorder_version"] == trained["reorder"].version and meta["strata.num_classes"] == "6"

    hidden = predict_with(trained, "predict.embedding=hidden")
    assert hidden.version != art.version  # the embedding is part of the artifact
    _, want = full_forward(load_model(trained["train"]), trained["reorder"])
    table = pq.read_table(hidden.file(predict.PREDICTIONS_FILE))
    np.testing.assert_allclose(np.stack(table["embedding"].to_numpy(zero_copy_only=False)), want, rtol=0, atol=1e-5)
    assert pq.read_schema(hidden.file(predict.PREDICTIONS_FILE)).metadata[b"strata.embedding"] == b"hidden"

    bare = predict_with(trained, "predict.embedding=none")
    assert pq.read_schema(bare.file(predict.PREDICTIONS_FILE)).names == ["node_id", "predicted_class", "probability"]


def test_a_node_id_lookup_through_the_catalog_returns_its_row(trained: dict[str, Any]) -> None:
    art = predict_with(trained)
    catalog = StrataPaths.at(trained["root"]).catalog()
    path = predict.catalogued_predictions(catalog, "tiny", art.version[:6])
    assert path == art.file(predict.PREDICTIONS_FILE)
    table = pq.read_table(path)
    ids = table["node_id"].to_numpy()
    asked = [int(ids[17]), int(ids[3]), 10**9]
    got = predict.lookup(path, asked).to_pylist()
    assert [r["node_id"] for r in got] == asked[:2]  # in the order asked; an unknown id has no row
    assert got[0] == table.slice(17, 1).to_pylist()[0]
    with pytest.raises(LookupError, match="predict artifact of tiny in the catalog"):
        predict.catalogued_predictions(catalog, "tiny", "ffffff")
    with pytest.raises(ValueError, match="expected an original_id column"):
        predict.lookup(path, ["alice"])

    shown = cli.invoke(app, ["catalog", "predictions", str(asked[0]), "--dataset", "tiny", "--root",
                             str(trained["root"]), "--version", art.version, "--json"])
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout.splitlines()[0])["predicted_class"] == got[0]["predicted_class"]
    none = cli.invoke(app, ["catalog", "predictions", "123456789", "--dataset", "tiny", "--root", str(trained["root"])])
    assert none.exit_code == 2 and "expected nodes of tiny" in none.output


def test_run_does_not_predict_unless_asked() -> None:
    assert "predict" in STAGE_NAMES and "predict" not in RUN_STAGE_NAMES and RUN_STAGE_NAMES[-1] == "export"
    assert [s.name for s in until("predict")] == ["ingest", "reorder", "partition", "sample", "plan", "pack",
                                                   "train", "predict"]


def test_strata_predict_without_a_trained_model_exits_2_and_builds_nothing(tmp_path: Path) -> None:
    result = cli.invoke(app, ["predict", "--dataset", "tiny", "--root", str(tmp_path / "r"), "--out",
                              str(tmp_path / "p.parquet")])
    assert result.exit_code == 2
    assert "'train' artifact of tiny expected" in result.output and "strata run --until train" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "tiny").exists() and not (tmp_path / "p.parquet").exists()


@pytest.mark.parametrize("where,message", [("missing/p.parquet", "expected an existing directory"),
                                           ("adir", "expected a Parquet file path (got a directory")])
def test_strata_predict_refuses_a_bad_out_before_running(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "adir").mkdir()
    result = cli.invoke(app, ["predict", "--dataset", "tiny", "--root", str(tmp_path / "r"), "--out",
                              str(tmp_path / where)])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "r" / "tiny").exists()


def test_strata_predict_writes_out_and_reuses_the_trained_model(trained: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "scores.parquet"
    sets = [arg for s in SETS for arg in ("--set", s)]
    result = cli.invoke(app, ["predict", "--dataset", "tiny", "--root", str(trained["root"]), "--out", str(out),
                              "--json", "--set", "predict.memory_mb=2", *sets])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    by_stage = {a["stage"]: a for a in summary["artifacts"]}
    assert by_stage["train"]["reused"] and by_stage["train"]["version"] == trained["train"].version
    assert summary["predictions"]["out"] == str(out) and summary["predictions"]["rows"] == 2500
    assert out.read_bytes() == Path(summary["predictions"]["artifact_file"]).read_bytes()
    assert not list(tmp_path.glob(".scores.parquet.tmp-*"))
    catalogued = StrataPaths.at(trained["root"]).catalog().versions("tiny", "predict")
    assert by_stage["predict"]["version"] in catalogued


@pytest.mark.slow
def test_predict_on_demo_equals_the_full_forward_under_a_small_budget(tmp_path: Path) -> None:
    cfg = PipelineConfig.load(overrides=["train.epochs=2", "sample.epochs=1", "predict.memory_mb=8",
                                         "predict.chunk_nodes=1024"],
                              dataset="demo")
    runner = StageRunner(cfg, StrataPaths.at(tmp_path).store())
    runner.run_until("train", checks=False)
    art = runner.result("predict").artifact
    logits, _ = full_forward(load_model(runner.artifact("train")), runner.artifact("reorder"))
    table = pq.read_table(art.file(predict.PREDICTIONS_FILE))
    assert table.num_rows == len(logits) and art.stats["intervals"] > 1  # the last layer streamed in parts
    np.testing.assert_allclose(np.stack(table["embedding"].to_numpy(zero_copy_only=False)), logits, rtol=0,
                               atol=1e-4)
    agree = np.mean(table["predicted_class"].to_numpy() == logits.argmax(axis=1))
    assert agree > 0.9999  # ties within float rounding aside


def test_the_mlflow_pyfunc_predicts_by_node_id_from_the_store(trained: dict[str, Any], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The registered pyfunc, loaded back with MLflow: a frame of node ids answers from the store, the same rows
    as ``strata predict`` writes; the subgraph input still works; a wrong root is named."""
    import mlflow
    import pandas as pd

    from pipelines.tracking.model_registry import node_id_config
    from trainer.export import export_onnx, onnx_feed, random_subgraph
    from trainer.mlflow_model import save_mlflow_model

    train = trained["train"]
    net = load_model(train)
    export_onnx(net, tmp_path / "model.onnx")
    path = save_mlflow_model(tmp_path / "model", model_json=train.file("model.json"),
                             state_dict=train.file("state_dict.pt"), onnx_path=tmp_path / "model.onnx",
                             model_config=node_id_config(train))
    monkeypatch.delenv("STRATA_HOME", raising=False)
    pyfunc = mlflow.pyfunc.load_model(str(path))
    table = pq.read_table(predict_with(trained).file(predict.PREDICTIONS_FILE))
    rows = [42, 7, 2499]
    asked = [int(table["node_id"][i].as_py()) for i in rows]
    got = pyfunc.predict(pd.DataFrame({"node_id": asked}))  # the root the model was registered from
    assert got["node_id"].tolist() == asked
    assert got["predicted_class"].tolist() == [table["predicted_class"][i].as_py() for i in rows]
    np.testing.assert_allclose(np.stack(got["embedding"]), np.stack([table["embedding"][i].as_py() for i in rows]),
                               rtol=0, atol=1e-5)
    np.testing.assert_allclose(got["probability"], [table["probability"][i].as_py() for i in rows], atol=1e-5)

    feed = onnx_feed(*random_subgraph(net.in_dim, net.num_layers, num_seeds=5, fanout=3, seed=2))
    assert pyfunc.predict(feed)["logits"].shape == (5, 6)  # the subgraph input is unchanged

    with pytest.raises(FileNotFoundError, match="expected the train artifact of tiny"):
        pyfunc.predict(pd.DataFrame({"node_id": asked}), params={"root": str(tmp_path / "elsewhere")})
    monkeypatch.setenv("STRATA_HOME", str(tmp_path / "elsewhere"))  # the environment over the model config
    with pytest.raises(FileNotFoundError, match="set STRATA_HOME"):
        pyfunc.predict(pd.DataFrame({"node_id": asked}))
    again = pyfunc.predict({"node_id": np.array(asked[:1])}, params={"root": str(trained["root"])})
    assert again["predicted_class"].tolist() == got["predicted_class"].tolist()[:1]
    with pytest.raises(KeyError, match=r"expected ids in \[0, 2500\) \(got 2500\)"):
        pyfunc.predict(pd.DataFrame({"node_id": [2500]}), params={"root": str(trained["root"])})


def test_a_graph_with_named_nodes_is_predicted_and_looked_up_by_name(tmp_path: Path) -> None:
    """``node_id`` is the node's row in the node list and ``original_id`` its name, through the reorder; a lookup
    and the pyfunc's node-id path take the names."""
    from tests.pipelines.methods.sources.test_sources_named import _write
    from trainer.node_predictions import predict_nodes

    data = tmp_path / "data"
    data.mkdir()
    _write(data, n=60, seed=1)
    cfg = PipelineConfig.load(dataset=f"edgelist:{data / 'edges.csv'}", overrides=[
        f"ingest.options.nodes={data / 'nodes.txt'}", f"ingest.options.features={data / 'x.npy'}",
        f"ingest.options.labels={data / 'y.npy'}", "sample.epochs=1", "train.epochs=1", "train.hidden_dim=8",
        "sample.batch_size=16"])
    runner = StageRunner(cfg, StrataPaths.at(tmp_path / "root").store())
    runner.run_until("train", checks=False)
    art, reorder, train = runner.result("predict").artifact, runner.artifact("reorder"), runner.artifact("train")
    table = pq.read_table(art.file(predict.PREDICTIONS_FILE))
    perm = np.asarray(reorder.array("perm.npy"))
    names = (data / "nodes.txt").read_text().splitlines()
    assert table.column_names[:2] == ["node_id", "original_id"] and art.stats["named_nodes"]
    np.testing.assert_array_equal(table["node_id"].to_numpy(), perm)
    assert table["original_id"].to_pylist() == [names[i] for i in perm]

    asked = [names[5], names[0]]
    got = predict.lookup(art.file(predict.PREDICTIONS_FILE), asked).to_pylist()
    assert [r["original_id"] for r in got] == asked and [r["node_id"] for r in got] == [5, 0]
    frame = predict_nodes(load_model(train), tmp_path / "root", cfg.dataset_name, train.version, asked)
    assert frame["predicted_class"].tolist() == [r["predicted_class"] for r in got]
    np.testing.assert_allclose(frame["probability"], [r["probability"] for r in got], atol=1e-5)
    with pytest.raises(KeyError, match="expected names of"):
        predict_nodes(load_model(train), tmp_path / "root", cfg.dataset_name, train.version, ["nobody"])
