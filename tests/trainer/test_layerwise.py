"""Layer-wise full-neighbourhood inference equals the model's forward on full-neighbourhood blocks (1e-5), for
every model, in small chunks with memmapped layer tables, from a float32 or a float16 feature file; and
``train.eval_mode=layerwise`` evaluates with it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.halfwords import encode_rows
from storage_kernels.sampleset import Block
from tests.trainer.synth import make_graph
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.layerwise import LayerwiseGraph, layerwise_accuracy, layerwise_logits
from trainer.models import TensorBlock, build_model
from trainer.train import train


def full_graph_logits(model, indptr, indices, x: np.ndarray) -> np.ndarray:
    """The model's own forward with every node a seed and every neighbour at every hop."""
    n = len(indptr) - 1
    out = kernels.sample_blocks(indptr, indices, np.arange(n), [-1] * model.num_layers, seed=0)
    assert np.array_equal(out.nodes, np.arange(n))  # all nodes are seeds: positions are node ids
    blocks = [TensorBlock.from_block(Block(n, n, out.indptrs[h], out.cols[h])) for h in reversed(range(len(out.cols)))]
    model.eval()
    with torch.no_grad():
        return model(torch.from_numpy(x), blocks).numpy()


@pytest.fixture(scope="module")
def graph_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("layerwise")
    indptr, indices, features, labels = make_graph(300, 11, 4, seed=5)  # odd width: a float16 pad column
    paths = {"float32": root / "f32.npy", "float16": root / "f16.npy"}
    save_array(paths["float32"], features.astype(np.float32))
    save_array(paths["float16"], encode_rows(features.astype(np.float32), "float16"))
    return indptr, indices, features.astype(np.float32), labels, paths, root


@pytest.mark.parametrize("model_name,layers", [("graphsage", 2), ("graphsage", 3), ("gcn", 2), ("gat", 3)])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_layerwise_equals_full_graph_forward(graph_files, model_name, layers, dtype):
    indptr, indices, features, labels, paths, root = graph_files
    torch.manual_seed(0)
    model = build_model(model_name, in_dim=11, hidden_dim=8, out_dim=4, num_layers=layers, dropout=0.5)
    model.train()
    x = features if dtype == "float32" else features.astype(np.float16).astype(np.float32)
    want = full_graph_logits(model, indptr, indices, x)
    model.train()
    graph = LayerwiseGraph(indptr, indices, paths[dtype], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=0)  # every table a memmap, many chunks
    got = layerwise_logits(model, graph, np.arange(300))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    some = np.array([299, 3, 150, 7])
    np.testing.assert_allclose(layerwise_logits(model, graph, some), want[some], rtol=0, atol=1e-5)
    assert model.training  # mode restored
    assert not list(root.glob("layerwise-*"))  # scratch tables removed


def test_layerwise_accuracy_and_train_eval_mode(graph_files, dataset):
    indptr, indices, features, labels, paths, root = graph_files
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, {"val": np.arange(0, 300, 3)}, root)
    acc = layerwise_accuracy(model, graph, "val")
    pred = full_graph_logits(model, indptr, indices, features).argmax(1)
    assert acc == pytest.approx(np.mean(pred[::3] == labels[::3]))
    with pytest.raises(ValueError, match="'splits' expected 'test'"):
        layerwise_accuracy(model, graph, "test")

    # train() on the shared dataset, evaluated layer-wise on its full graph
    ds = dataset
    full = LayerwiseGraph(ds.indptr, ds.indices, ds.features_path, ds.features.shape[1], ds.labels, ds.splits,
                          root)
    cfg = TrainConfig(hidden_dim=16, epochs=3, seed=7, eval_mode="layerwise")
    result = train(cfg, ds.samples, InMemoryFeatures(ds.features), ds.labels, layerwise=full)
    net = build_model(**result.model_args)
    net.load_state_dict(result.best_state_dict)
    assert result.test_acc == pytest.approx(layerwise_accuracy(net, full, "test"))
    assert result.val_acc > 1.5 / ds.num_classes
    with pytest.raises(ValueError, match="'train.eval_mode' layerwise expected the full graph"):
        train(cfg, ds.samples, InMemoryFeatures(ds.features), ds.labels)
    with pytest.raises(ValueError, match="'TrainConfig.eval_mode' expected"):
        dataclasses.replace(cfg, eval_mode="exact")
