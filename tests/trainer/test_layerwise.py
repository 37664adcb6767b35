"""Streamed layer-wise full-neighbourhood inference equals the model's forward on full-neighbourhood blocks
(1e-5), for every model, in many small intervals and windows with layer tables on disk or in one interval with
everything in RAM, from a float32 or a float16 feature file; it reads only the frontier of the asked nodes, and
each input row once per layer when one interval holds the layer; and ``train.eval_mode=layerwise`` evaluates
with it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import trainer.layerwise
from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.halfwords import encode_rows
from storage_kernels.sampleset import Block
from tests.trainer.synth import make_graph
from trainer.config import TrainConfig
from trainer.features import InMemoryFeatures
from trainer.layerwise import LayerwiseGraph, layerwise_accuracies, layerwise_accuracy, layerwise_logits
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


@pytest.mark.parametrize("model_name,layers,hidden", [("graphsage", 2, 8), ("graphsage", 3, 16), ("gcn", 2, 8),
                                                      ("gcn", 3, 16), ("gat", 3, 8)])
@pytest.mark.parametrize("dtype,memory", [("float32", 0), ("float16", 0), ("float32", 1 << 30)])
def test_layerwise_equals_full_graph_forward(graph_files, model_name, layers, hidden, dtype, memory):
    indptr, indices, features, labels, paths, root = graph_files
    torch.manual_seed(0)
    # hidden 16 > in 11: SAGE's hidden layers aggregate the inputs, not their projections
    model = build_model(model_name, in_dim=11, hidden_dim=hidden, out_dim=4, num_layers=layers, dropout=0.5)
    model.train()
    x = features if dtype == "float32" else features.astype(np.float16).astype(np.float32)
    want = full_graph_logits(model, indptr, indices, x)
    model.train()
    # memory 0: intervals and windows of 37 nodes, every table a scratch file; 1 GiB: one interval, all in RAM
    graph = LayerwiseGraph(indptr, indices, paths[dtype], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=memory)
    got = layerwise_logits(model, graph, np.arange(300))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    some = np.array([299, 3, 150, 7])
    np.testing.assert_allclose(layerwise_logits(model, graph, some), want[some], rtol=0, atol=1e-5)
    assert model.training  # mode restored
    assert not list(root.glob("*layerwise*"))  # scratch tables removed


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


def test_layerwise_splits_share_one_pass(graph_files, dataset, monkeypatch):
    indptr, indices, features, labels, paths, root = graph_files
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    unlabelled = labels.copy()
    unlabelled[250:] = -1
    splits = {"val": np.arange(0, 200, 3), "test": np.arange(100, 300, 2), "none": np.arange(260, 280)}
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, unlabelled, splits, root)
    passes: list[int] = []

    def counted(model, graph, nodes, device="cpu", report=None):
        passes.append(len(nodes))
        return layerwise_logits(model, graph, nodes, device, report)

    monkeypatch.setattr(trainer.layerwise, "layerwise_logits", counted)
    accs = layerwise_accuracies(model, graph, ["val", "test", "none"])
    labelled = np.union1d(splits["val"], splits["test"][splits["test"] < 250])
    assert passes == [len(labelled)]  # one pass over the union of the labelled nodes
    pred = full_graph_logits(model, indptr, indices, features).argmax(1)
    for split in ("val", "test"):
        nodes = splits[split][unlabelled[splits[split]] >= 0]
        assert accs[split] == pytest.approx(np.mean(pred[nodes] == labels[nodes]))
        assert accs[split] == layerwise_accuracy(model, graph, split)
    assert np.isnan(accs["none"]) and np.isnan(layerwise_accuracy(model, graph, "none"))
    with pytest.raises(ValueError, match="'splits' expected 'train'"):
        layerwise_accuracies(model, graph, ["val", "train"])

    # train(): the last epoch's val and test in one pass when its weights are the best, else test on its own
    ds = dataset
    full = LayerwiseGraph(ds.indptr, ds.indices, ds.features_path, ds.features.shape[1], ds.labels, ds.splits,
                          root)
    for min_delta, best_epoch, want_passes in ((0.0, 0, 1), (0.99, 0, 3)):
        passes.clear()
        epochs = 1 if min_delta == 0.0 else 2  # min_delta 0.99: in practice only the first evaluation is the best
        cfg = TrainConfig(hidden_dim=16, epochs=epochs, seed=7, eval_mode="layerwise", min_delta=min_delta)
        result = train(cfg, ds.samples, InMemoryFeatures(ds.features), ds.labels, layerwise=full)
        assert result.best_epoch == best_epoch and len(passes) == want_passes
        net = build_model(**result.model_args)
        net.load_state_dict(result.best_state_dict)
        assert result.test_acc == layerwise_accuracy(net, full, "test")


def test_layerwise_reads_the_frontier_once_per_layer(tmp_path):
    # two components: nodes 0..99 and 100..299; ask about three nodes of the first
    indptr_a, indices_a, features, labels = make_graph(100, 16, 3, seed=1)
    indptr_b, indices_b, _, _ = make_graph(200, 16, 3, seed=2)
    indptr = np.concatenate([indptr_a, indptr_b[1:] + indptr_a[-1]])
    indices = np.concatenate([indices_a, indices_b + 100])
    x = np.concatenate([features, np.random.default_rng(3).normal(size=(200, 16))]).astype(np.float32)
    path = tmp_path / "x.npy"
    save_array(path, x)
    torch.manual_seed(1)
    model = build_model("graphsage", in_dim=16, hidden_dim=8, out_dim=3, num_layers=2, dropout=0.0)
    asked = np.array([7, 3, 7, 50])  # repeats and any order
    want = full_graph_logits(model, indptr, indices, x)[asked]

    one_hop = np.unique(np.concatenate([asked] + [indices[indptr[v]:indptr[v + 1]] for v in asked]))
    two_hop = np.unique(np.concatenate([one_hop] + [indices[indptr[v]:indptr[v + 1]] for v in one_hop]))
    report: list[dict[str, int]] = []
    graph = LayerwiseGraph(indptr, indices, path, 16, np.zeros(300, np.int64), scratch_dir=tmp_path)
    np.testing.assert_allclose(layerwise_logits(model, graph, asked, report=report), want, rtol=0, atol=1e-5)
    assert [(r["sources"], r["targets"]) for r in report] == [(len(two_hop), len(one_hop)), (len(one_hop), 3)]
    assert [r["intervals"] for r in report] == [1, 1]
    assert two_hop.max() < 100  # the other component is never read
    blocks = {int(b) for v in two_hop for b in range((4096 + v * 64) // 4096, (4096 + v * 64 + 63) // 4096 + 1)}
    assert report[0]["bytes_read"] == 4096 * len(blocks)  # each needed block once
    assert report[1]["bytes_read"] == 0  # the hidden table stayed in RAM

    # a budget of a few rows: many intervals, the hidden table on disk, the answer unchanged
    report.clear()
    tight = LayerwiseGraph(indptr, indices, path, 16, np.zeros(300, np.int64), scratch_dir=tmp_path, chunk_nodes=4,
                           memory_bytes=0)
    np.testing.assert_allclose(layerwise_logits(model, tight, asked, report=report), want, rtol=0, atol=1e-5)
    assert report[0]["intervals"] > 1 and report[1]["bytes_read"] > 0


def test_layerwise_rejects_bad_input(graph_files):
    indptr, indices, features, labels, paths, root = graph_files
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root)
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    with pytest.raises(IndexError, match="'nodes' expected ids < 300 \\(got 300 at 1\\)"):
        layerwise_logits(model, graph, np.array([0, 300]))
    assert layerwise_logits(model, graph, np.array([], dtype=np.int64)).shape == (0, 4)

    class Other(torch.nn.Module):
        num_layers = 1
        layers = torch.nn.ModuleList([torch.nn.Linear(11, 4)])

    with pytest.raises(ValueError, match="layerwise expected layers of graphsage, gcn or gat \\(got Linear\\)"):
        layerwise_logits(Other(), graph, np.array([0]))
    with pytest.raises(ValueError, match="layerwise expected a model with per-layer modules .* \\(got Linear\\)"):
        layerwise_logits(torch.nn.Linear(11, 4), graph, np.array([0]))


def test_a_read_failing_on_the_reader_thread_surfaces_and_leaves_nothing_behind(graph_files, monkeypatch):
    import threading

    import trainer.layerwise as layerwise

    indptr, indices, features, labels, paths, root = graph_files
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=0)  # many windows: the failing read is one read ahead
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    real, calls = layerwise._Rows.read, []

    def failing(self, positions):
        calls.append(threading.current_thread().name)
        if len(calls) == 3:
            raise OSError("the disk went away")
        return real(self, positions)

    monkeypatch.setattr(layerwise._Rows, "read", failing)
    with pytest.raises(OSError, match="the disk went away"):
        layerwise_logits(model, graph, np.arange(300))
    assert all(name.startswith("strata-layerwise-read") for name in calls)  # read on the reader thread
    assert not [t for t in threading.enumerate() if t.name.startswith("strata-layerwise-read")]
    assert not list(root.glob("*layerwise*"))  # scratch tables removed


@pytest.mark.parametrize("model_name", ["graphsage", "gcn", "gat"])
def test_layerwise_without_packed_sort_keys_gives_the_same(graph_files, monkeypatch, model_name):
    # graphs of 2**31 nodes or more order their edges by an argsort instead of packed keys, and keys built a
    # few rows at a time (pieces of 7 in-edges, a hub alone) sort the same: same answer
    import trainer.layerwise_graph as layerwise_graph

    indptr, indices, features, labels, paths, root = graph_files
    torch.manual_seed(2)
    model = build_model(model_name, in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.0)
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=0)
    packed = layerwise_logits(model, graph, np.arange(300))
    monkeypatch.setattr(layerwise_graph, "EDGE_PIECE", 7)
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(300)), packed, rtol=0, atol=1e-5)
    monkeypatch.setattr(layerwise_graph, "packable", lambda graph, rows: False)
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(300)), packed, rtol=0, atol=1e-5)
    pos, dst = layerwise_graph.by_source(graph, np.arange(10, 40), True, np.arange(300))
    monkeypatch.undo()
    pos32, dst32 = layerwise_graph.by_source(graph, np.arange(10, 40), True, np.arange(300))
    assert pos32.dtype == dst32.dtype == np.int32  # half the bytes an edge at rest
    assert np.array_equal(pos32, pos)  # in source order, the same pairs (ties ordered differently)
    pairs = sorted(zip(pos.tolist(), dst.tolist(), strict=True))
    assert sorted(zip(pos32.tolist(), dst32.tolist(), strict=True)) == pairs


@pytest.mark.parametrize("model_name,cols", [("graphsage", 8), ("gcn", 4), ("gat", 32)])
@pytest.mark.parametrize("memory", [0, 1 << 30])
def test_hidden_tables_are_written_folded_into_the_next_layer(graph_files, monkeypatch, model_name, cols, memory):
    """A 32-wide hidden layer over 4 classes: layer 1 reads its table pre-projected (SAGE: neighbour and own
    projections, 8 columns; GCN: lin, 4), GAT not (32); the logits equal the unfolded ones, and a stream asked for
    the hidden rows reads them unfolded."""
    from trainer.layerwise import layerwise_stream

    indptr, indices, features, labels, paths, root = graph_files
    torch.manual_seed(3)
    model = build_model(model_name, in_dim=11, hidden_dim=32, out_dim=4, num_layers=2, dropout=0.0,
                        **({"heads": 2} if model_name == "gat" else {}))
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=memory)
    report: list[dict] = []
    folded = layerwise_logits(model, graph, np.arange(300), report=report)
    assert [r["input_cols"] for r in report] == [11, cols]
    assert [r["folded"] for r in report] == [0, int(model_name != "gat")]
    np.testing.assert_allclose(folded, full_graph_logits(model, indptr, indices, features), rtol=0, atol=1e-5)
    report = []
    list(layerwise_stream(model, graph, hidden=True, report=report))
    assert [r["input_cols"] for r in report] == [11, 32] and report[1]["folded"] == 0
    monkeypatch.setattr(trainer.layerwise, "fold", lambda form: None)
    np.testing.assert_allclose(layerwise_logits(model, graph, np.arange(300)), folded, rtol=0, atol=1e-5)
    assert not list(root.glob("*layerwise*"))


@pytest.mark.parametrize("model_name", ["graphsage", "gcn"])  # GAT's hidden layer concatenates heads
@pytest.mark.parametrize("memory", [0, 1 << 30])
def test_layerwise_stream_hands_out_every_node_in_intervals(graph_files, model_name, memory):
    """Every node, interval by interval in ascending id: the logits equal the full forward and the hidden rows
    the first layers' forward (ReLU'd), in many intervals (memory 0) or one."""
    from trainer.layerwise import layerwise_stream

    indptr, indices, features, labels, paths, root = graph_files
    torch.manual_seed(1)
    model = build_model(model_name, in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.5)
    lower = build_model(model_name, in_dim=11, hidden_dim=8, out_dim=8, num_layers=1, dropout=0.5)
    lower.layers[0].load_state_dict(model.layers[0].state_dict())  # the first layer alone: the last one's input
    want = full_graph_logits(model, indptr, indices, features)
    want_hidden = np.maximum(full_graph_logits(lower, indptr, indices, features), 0)
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=memory)
    report: list[dict[str, int]] = []
    parts = list(layerwise_stream(model, graph, hidden=True, report=report))
    nodes = np.concatenate([p.nodes for p in parts])
    np.testing.assert_array_equal(nodes, np.arange(300))
    np.testing.assert_allclose(np.concatenate([p.logits for p in parts]), want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(np.concatenate([p.hidden for p in parts]), want_hidden, rtol=0, atol=1e-5)
    assert (len(parts) > 1) == (memory == 0) and report[-1]["intervals"] == len(parts)
    assert [p.hidden for p in layerwise_stream(model, graph, np.array([5, 2]))] == [None]  # not asked: none
    assert not list(root.glob("*layerwise*"))


def test_layerwise_stream_closed_early_cleans_up(graph_files):
    from trainer.layerwise import layerwise_stream

    indptr, indices, features, labels, paths, root = graph_files
    model = build_model("graphsage", in_dim=11, hidden_dim=8, out_dim=4, num_layers=2, dropout=0.5).train()
    graph = LayerwiseGraph(indptr, indices, paths["float32"], 11, labels, scratch_dir=root, chunk_nodes=37,
                           memory_bytes=0)
    rows = layerwise_stream(model, graph)
    first = next(rows)
    assert len(first.nodes) < 300 and not model.training
    rows.close()
    assert model.training and not list(root.glob("*layerwise*"))


def test_interval_cuts_streamed_equal_the_cuts_of_the_whole_running_sum(monkeypatch):
    """The running sum is built a piece of targets at a time (pieces of 1..11 targets, hubs, ranges forced past a
    piece by ``min_rows``, budgets of 0): the same ranges as :func:`row_ranges` over the running sum of all."""
    import trainer.layerwise_graph as layerwise_graph
    from storage_kernels.arrays import row_ranges

    rng = np.random.default_rng(0)
    for trial in range(400):
        n = int(rng.integers(0, 60))
        degree = rng.integers(0, 20 if trial % 3 else 2000, n)
        graph = LayerwiseGraph(np.concatenate([[0], np.cumsum(degree)]).astype(np.int64), np.empty(0, np.int64),
                               None, 0, None)
        row_bytes, edge_cost, loops = int(rng.integers(1, 50)), int(rng.integers(1, 30)), bool(rng.integers(0, 2))
        budget, min_rows = int(rng.integers(0, 3000)), int(rng.integers(0, 9))
        monkeypatch.setattr(layerwise_graph, "EDGE_PIECE", int(rng.integers(1, 12)))
        bounds = row_ranges(np.concatenate([[0], np.cumsum(row_bytes + edge_cost * (degree + loops))]), budget,
                            min_rows)
        got = layerwise_graph.interval_cuts(graph, np.arange(n), row_bytes, edge_cost, loops, budget, min_rows)
        assert got == list(zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)), trial
