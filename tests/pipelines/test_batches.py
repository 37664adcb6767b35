"""``pipelines.batches``: Strata's out-of-core batches in a training loop of the user's own, in PyG's
``NeighborLoader`` conventions (rows equal to the feature file's, ids of the source, hop-ordered edges)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from pipelines.batches import open_training_data
from pipelines.core.paths import StrataPaths
from tests.storage_kernels.test_locks import lock_state

FAST = ["sample.epochs=2", "train.device=cpu"]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("batches")


def _ingest_features(root: Path) -> np.ndarray:
    """The ingest artifact's features: rows in the source's node order."""
    (version,) = [p for p in (root / "tiny" / "ingest").iterdir() if p.is_dir()]
    return np.load(version / "features.npy")


@pytest.mark.parametrize("policy", ["diskgnn", "mariusgnn"])
def test_batches_hold_the_source_rows_under_the_source_ids(root: Path, policy: str) -> None:
    features = _ingest_features(root) if (root / "tiny").exists() else None
    with open_training_data("tiny", root=root, overrides=FAST, policy=policy) as data:
        features = _ingest_features(root) if features is None else features
        reorder = data.artifacts["reorder"]
        relabelled = np.asarray(reorder.array("features.npy"))
        assert (data.num_nodes, data.num_features, data.sample_epochs) == (2500, features.shape[1], 2)
        assert data.num_classes == int(np.asarray(reorder.array("labels.npy")).max()) + 1
        seen = 0
        for split, epoch in (("train", 0), ("train", 3), ("val", 0), ("test", 0)):
            ids = data.batch_ids(split, epoch)
            batches = list(data.batches(split, epoch))
            assert [b.batch_id for b in batches] == ids and ids
            for b in batches:
                assert b.x.dtype == torch.float32 and b.x.shape == (b.num_nodes, data.num_features)
                np.testing.assert_array_equal(b.x.numpy(), features[b.n_id.numpy()])  # the source's rows by id
                strata_ids = np.asarray(reorder.array("inverse.npy"))[b.n_id.numpy()]
                np.testing.assert_array_equal(b.x.numpy(), relabelled[strata_ids])
                np.testing.assert_array_equal(b.y.numpy(), data.labels[strata_ids[: b.batch_size]])
                seen += b.num_nodes
        if policy == "diskgnn":
            assert data.bytes_read > 0 and data.read_requests > 0  # packed chunks and file blocks, read from disk
        else:  # mariusgnn's training batches are its own per-set ones, its training rows all in its buffer
            assert data.batch_ids("train", 0) != data.samples.batch_ids("train", 0)
    assert seen > 0


@pytest.mark.parametrize("policy", ["diskgnn", "ginex", "hyperbatch"])
def test_any_order_and_early_exits_keep_the_rows_right(root: Path, policy: str) -> None:
    """The policies' schedules (the segment window, Ginex's changesets, the hotset's refreshes) follow the
    training order; a loop of one's own may go back, repeat an epoch or leave one early."""
    with open_training_data("tiny", root=root, overrides=[*FAST, "sample.batch_size=64"], policy=policy) as data:
        reorder = data.artifacts["reorder"]
        relabelled, inverse = np.asarray(reorder.array("features.npy")), np.asarray(reorder.array("inverse.npy"))
        seen = 0
        for split, epoch, stop in (("train", 1, None), ("val", 0, None), ("train", 0, 2), ("train", 0, None),
                                   ("test", 0, None), ("train", 1, 1)):
            for i, b in enumerate(data.batches(split, epoch)):
                np.testing.assert_array_equal(b.x.numpy(), relabelled[inverse[b.n_id.numpy()]])
                seen += 1
                if i == stop:
                    break
        assert seen > 10 and data.bytes_read > 0


def test_edges_follow_neighbor_loader_conventions(root: Path) -> None:
    """Each node's neighbours once, sampled at the hop after the one that reached it, the seeds' first; the
    repeat samples of Strata's layered blocks (earlier nodes are destinations of every hop) are left out."""
    with open_training_data("tiny", root=root, overrides=FAST) as data:
        for b in data.batches("train", 1):
            record = data.samples.batch(b.batch_id)
            reached = np.asarray(record.hop_counts)
            assert b.batch_size == reached[0] and b.num_sampled_nodes == np.diff(reached, prepend=0).tolist()
            assert sum(b.num_sampled_nodes) == b.num_nodes and sum(b.num_sampled_edges) == b.edge_index.shape[1]
            src, dst = b.edge_index.numpy()
            start = 0
            for hop, count in enumerate(b.num_sampled_edges):
                frontier = range(reached[hop - 1] if hop else 0, reached[hop])  # reached by the previous hop
                indptr, cols = record.indptrs[hop], record.cols[hop]
                for node in frontier:  # its edges: the ones this hop sampled for it, in order
                    deg = indptr[node + 1] - indptr[node]
                    np.testing.assert_array_equal(src[start : start + deg], cols[indptr[node] : indptr[node + 1]])
                    assert (dst[start : start + deg] == node).all()
                    start += deg
                assert count == indptr[frontier.stop] - indptr[frontier.start]
            assert start == len(src) and np.bincount(dst, minlength=b.num_nodes)[reached[-2]:].sum() == 0


class MeanSAGE(nn.Module):
    """A GraphSAGE written the PyG way, on ``edge_index`` alone (no Strata types): what a user brings."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(2 * in_dim, hidden), nn.Linear(2 * hidden, out_dim)])

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        src, dst = edge_index
        for i, layer in enumerate(self.layers):
            total = torch.zeros_like(x).index_add_(0, dst, x[src])
            degree = torch.zeros(x.shape[0]).index_add_(0, dst, torch.ones(dst.shape[0])).clamp(min=1)
            x = layer(torch.cat([x, total / degree[:, None]], dim=1))
            if i < len(self.layers) - 1:
                x = F.relu(x)
        return x


def test_a_model_of_ones_own_trains_on_them(root: Path) -> None:
    torch.manual_seed(0)
    with open_training_data("tiny", root=root, overrides=FAST) as data:
        model = MeanSAGE(data.num_features, 32, data.num_classes)
        optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
        losses = []
        for epoch in range(30):
            for batch in data.batches("train", epoch):
                out = model(batch.x, batch.edge_index)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                losses.append(float(loss.detach()))
        correct = total = 0
        with torch.no_grad():
            for batch in data.batches("test"):
                pred = model(batch.x, batch.edge_index)[: batch.batch_size].argmax(1)
                correct += int((pred == batch.y).sum())
                total += batch.batch_size
    assert losses[-1] < 0.5 * losses[0]
    assert correct / total > 0.8, correct / total  # 6 planted classes: chance is 1/6; 0.92 when written


def test_pyg_models_train_on_them_and_trim_to_layer_agrees(root: Path) -> None:
    """PyG's own GraphSAGE on Strata's batches: ``num_sampled_nodes`` / ``num_sampled_edges`` drive its
    ``trim_to_layer``, which must give the seeds the outputs of the untrimmed model (same edges, fewer rows)."""
    pyg = pytest.importorskip("torch_geometric.nn", reason="torch_geometric is not installed (pip install .[pyg])")
    torch.manual_seed(0)
    with open_training_data("tiny", root=root, overrides=FAST) as data:
        model = pyg.GraphSAGE(data.num_features, 32, num_layers=2, out_channels=data.num_classes)
        optimiser = torch.optim.Adam(model.parameters(), lr=0.01)
        for epoch in range(30):
            for batch in data.batches("train", epoch):
                out = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                            num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
                loss = F.cross_entropy(out, batch.y)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for batch in data.batches("test"):
                full = model(batch.x, batch.edge_index)[: batch.batch_size]
                trimmed = model(batch.x, batch.edge_index, num_sampled_nodes_per_hop=batch.num_sampled_nodes,
                                num_sampled_edges_per_hop=batch.num_sampled_edges)[: batch.batch_size]
                torch.testing.assert_close(trimmed, full, rtol=1e-4, atol=1e-5)
                correct += int((full.argmax(1) == batch.y).sum())
                total += batch.batch_size
    assert correct / total > 0.8, correct / total


def test_the_pyg_example_runs(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch_geometric", reason="torch_geometric is not installed (pip install .[pyg])")
    from examples.pyg_graphsage import main

    report = main(["--dataset", "tiny", "--root", str(root), "--epochs", "20", "--set", "sample.epochs=2",
                   "--set", "train.device=cpu", "--policy", "diskgnn"])
    assert report["policy"] == "diskgnn" and report["bytes_read"] > 0 and report["test_acc"] > 0.8, report
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == report


def test_policies_with_their_own_training_step_and_bad_splits_are_refused(root: Path) -> None:
    with pytest.raises(ValueError, match=r"'policy' expected one whose batches train any model \(got 'outre'"):
        open_training_data("tiny", root=root, policy="outre")
    with pytest.raises(ValueError, match=r"'train.task' expected node \(got 'link'"):
        open_training_data("tiny", root=root, overrides=["train.task=link"])
    cache = [*FAST, "plan.cpu_cache_bytes=300K"]
    open_training_data("tiny", root=root, overrides=cache, policy="diskgnn").close()  # a plan built without a budget
    with pytest.raises(ValueError, match=r"'memory_budget' expected to hold the policy's resident buffers"):
        open_training_data("tiny", root=root, overrides=[*cache, "memory_budget=100K"], policy="diskgnn")  # reused
    with open_training_data("tiny", root=root, overrides=FAST) as data:
        with pytest.raises(ValueError, match="'split' expected one of"):
            list(data.batches("holdout"))
    with pytest.raises(RuntimeError, match="expected to be open"):
        data.batch_ids("train")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (none visible)")
def test_batches_on_cuda_equal_the_cpu_ones(root: Path) -> None:
    with open_training_data("tiny", root=root, overrides=FAST) as cpu, \
            open_training_data("tiny", root=root, overrides=FAST, device="cuda") as gpu:
        for split, epoch in (("train", 0), ("test", 0)):
            for a, b in zip(cpu.batches(split, epoch), gpu.batches(split, epoch), strict=True):
                assert b.x.is_cuda and b.edge_index.is_cuda and b.n_id.is_cuda and b.y.is_cuda
                for name in ("x", "edge_index", "n_id", "y"):
                    torch.testing.assert_close(getattr(b, name).cpu(), getattr(a, name))
                assert (b.num_sampled_nodes, b.num_sampled_edges) == (a.num_sampled_nodes, a.num_sampled_edges)


def test_the_dataset_run_lock_is_held_while_open(root: Path) -> None:
    lock_root = StrataPaths.at(root).root
    with open_training_data("tiny", root=root, overrides=FAST):
        assert lock_state(lock_root, "tiny") == "held"  # strata run waits, strata gc skips the dataset
    assert lock_state(lock_root, "tiny") == "free"


def test_compute_threads_are_the_ones_the_plan_probed_unless_the_user_set_them(root: Path) -> None:
    cores = torch.get_num_threads()
    for policy in ("diskgnn", "in_memory"):  # packed chunks from disk; every row in RAM
        with open_training_data("tiny", root=root, overrides=FAST, policy=policy) as data:
            chosen = data.artifacts["plan"].stats["threads"]
            assert chosen["reads_disk"] is (policy == "diskgnn")
            assert data.compute_threads == chosen["train.num_threads"] in (cores, max(cores - 1, 1))
            assert torch.get_num_threads() == cores  # advice only: torch's setting is the user's
    with open_training_data("tiny", root=root, overrides=[*FAST, "train.num_threads=3"]) as data:
        assert data.compute_threads == 3


@pytest.mark.parametrize(("values", "dtype"), [([-1, 0, 5], np.int8), ([0, 126], np.int8), ([-1, 200], np.int16),
                                               ([0, 40_000], np.int32), ([-1, 2**40], np.int64)])
def test_narrow_labels_holds_the_values_in_the_narrowest_signed_type(values, dtype) -> None:
    from pipelines.core.graphio import narrow_labels

    labels = np.array(values * 5, dtype=np.int64)
    held = narrow_labels(labels, chunk=3)  # several chunks
    assert held.dtype == dtype
    np.testing.assert_array_equal(held, labels)
    assert narrow_labels(np.zeros(0, np.int64)).shape == (0,)
