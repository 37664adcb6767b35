"""Out-of-core learned embeddings (trainer/link/outofcore.py): the partitioned node file round-trips, the edge
buckets group every edge once, and training in BETA/COMET order out of core (c < p) gives the same embeddings
and MRR as the same order over an in-memory table, with every written-back partition read back identical."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.config import PipelineConfig
from tests.trainer.test_link import ring_csr
from trainer.link.decoders import build_decoder
from trainer.link.embeddings import InMemoryEmbeddings, initial_rows
from trainer.link.encoders import EmbeddingEncoder
from trainer.link.negatives import NegativeSampler
from trainer.link.outofcore import PartitionedEmbeddings, bucket_batches, group_buckets, partition_bounds
from trainer.link.split import split_edges
from trainer.link.train import LinkGraph, train_link


def test_partition_file_round_trip(tmp_path) -> None:
    store = PartitionedEmbeddings(tmp_path / "emb.bin", 103, 6, p=5, capacity=2, seed=3)
    try:
        for q in range(5):  # the file starts as the deterministic initial rows, state zero
            lo, hi = store.bounds[q], store.bounds[q + 1]
            rows = store.read_partition(q)
            np.testing.assert_array_equal(rows[:, :6], initial_rows(3, 6, lo, hi))
            assert not rows[:, 6:].any()
        store.activate(np.array([1, 3]))
        nodes = np.array([store.bounds[1], store.bounds[3] + 2])
        before = store.read(nodes).copy()
        store.update(nodes, np.ones((2, 6), np.float32), lr=0.5)
        after = store.read(nodes).copy()
        np.testing.assert_allclose(after, before - 0.5, rtol=1e-6)  # Adagrad's first step: lr * sign(g)
        with pytest.raises(ValueError, match="resident"):
            store.update(np.array([0]), np.ones((1, 6), np.float32), lr=0.5)
        store.activate(np.array([0, 2]))  # 1 and 3 evicted, dirty: written back by the writer thread
        store.flush()
        assert store.written[[1, 3]].tolist() == [1, 1] and store.written[[0, 2, 4]].sum() == 0
        np.testing.assert_array_equal(store.read_any(nodes), after)
        store.activate(np.array([3]))  # read back: identical to what was written
        np.testing.assert_array_equal(store.read(nodes[1:]), after[1:])
        assert store.max_resident <= 2
        assert store.bytes_read > 0 and store.bytes_written == int(store.lengths[1] + store.lengths[3])
        with pytest.raises(ValueError, match="at most 2"):
            store.activate(np.array([0, 1, 2]))
    finally:
        store.close()


def test_buckets_hold_every_edge_once() -> None:
    edges = np.array([[0, 5], [1, 2], [7, 3], [6, 8], [2, 9]])
    bounds = partition_bounds(10, 3)  # [0, 3, 6, 10]
    grouped, ptr = group_buckets(edges, bounds)
    assert ptr[-1] == 5 and sorted(map(tuple, grouped.tolist())) == sorted(map(tuple, edges.tolist()))
    part = np.searchsorted(bounds, grouped, side="right") - 1
    for k in range(9):
        i, j = divmod(k, 3)
        seg = part[ptr[k]: ptr[k + 1]]
        assert all(sorted(e) == [i, j] for e in seg.tolist())


def _train(cfg, graph, store, order: str, c: int, activate: bool):
    bounds = partition_bounds(graph.num_nodes, 4)
    grouped, ptr = group_buckets(graph.split.train, bounds)
    encoder = EmbeddingEncoder(store, cfg.embedding_lr)
    decoder = build_decoder(cfg.decoder, cfg.embedding_dim)
    on_set = store.activate if activate else (lambda s: None)
    result = train_link(cfg, graph, encoder, decoder, NegativeSampler("uniform", graph.num_nodes),
                        epoch_batches=lambda e: bucket_batches(grouped, ptr, bounds, cfg, order, c, e, on_set),
                        keep_best=False)
    return result


@pytest.mark.parametrize("order", ["beta", "comet"])
def test_out_of_core_equals_in_memory(tmp_path, order: str) -> None:
    import torch

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.link_encoder=embedding", "train.epochs=3",
                                         "train.embedding_dim=8", "train.link_batch_size=64", "train.negatives=16",
                                         "train.negative_chunk=16", "train.eval_negatives=50"]).train
    indptr, indices = ring_csr(240, (1, 2, 3))
    graph = LinkGraph.build(split_edges(indptr, indices, 0.1, 0.1, 0), indptr, indices)
    torch.manual_seed(0)
    mem = InMemoryEmbeddings(graph.num_nodes, 8, cfg.seed)
    want = _train(cfg, graph, mem, order, 2, activate=False)
    torch.manual_seed(0)
    disk = PartitionedEmbeddings(tmp_path / "emb.bin", graph.num_nodes, 8, p=4, capacity=2, seed=cfg.seed)
    try:
        got = _train(cfg, graph, disk, order, 2, activate=True)
        assert disk.max_resident == 2 and disk.loads > 4 and disk.writebacks > 0  # really out of core
        table = disk.write_table(np.empty((graph.num_nodes, 8), np.float32))
        np.testing.assert_array_equal(table, mem.table)  # the same embeddings ...
        for q in range(4):  # ... and Adagrad state, as written back
            np.testing.assert_array_equal(disk.read_partition(q)[:, 8:], mem.state[disk.bounds[q]: disk.bounds[q + 1]])
    finally:
        disk.close()
    assert got.losses == want.losses
    assert got.metrics["mrr"] == want.metrics["mrr"] and got.metrics["sampled_mrr"] > 2 * got.metrics["random_mrr"]


@pytest.mark.parametrize("round_bytes", [1, 64 << 20])  # 1: a round per row's blocks; 64 MiB: one round
def test_read_any_reads_only_the_blocks_of_its_rows(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                    round_bytes: int) -> None:
    import trainer.link.outofcore as ooc

    monkeypatch.setattr(ooc, "READ_ANY_BYTES", round_bytes)
    store = PartitionedEmbeddings(tmp_path / "emb.bin", 5000, 24, p=4, capacity=2, seed=5)  # 192-byte rows
    try:
        nodes = np.random.default_rng(0).choice(5000, 40, replace=False)  # any order, every partition
        want = np.concatenate([store.read_partition(q)[:, :24] for q in range(4)])[nodes]
        before = store.bytes_read
        np.testing.assert_array_equal(store.read_any(nodes), want)
        read = store.bytes_read - before
        assert 0 < read <= 2 * 40 * 4096 and read < int(store.lengths.sum()) // 2  # blocks, not partitions
        assert store.read_any(np.empty(0, np.int64)).shape == (0, 24)
    finally:
        store.close()
