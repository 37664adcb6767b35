"""Out-of-core learned embeddings (trainer/link/outofcore.py): the partitioned node file round-trips, the edge
buckets group every edge once, and training in BETA/COMET/random order out of core (c < p), with loads synchronous
or prefetched by the reader thread, gives the same embeddings and MRR as the same order over an in-memory table,
with every written-back partition read back identical, even when it re-enters while its write is in flight."""

from __future__ import annotations

import time

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


def _train(cfg, graph, store, order: str, p: int, c: int, activate: bool):
    bounds = partition_bounds(graph.num_nodes, p)
    grouped, ptr = group_buckets(graph.split.train, bounds)
    encoder = EmbeddingEncoder(store, cfg.embedding_lr)
    decoder = build_decoder(cfg.decoder, cfg.embedding_dim)
    on_set = store.activate if activate else (lambda s: None)
    on_next = store.prefetch if activate else None
    result = train_link(cfg, graph, encoder, decoder, NegativeSampler("uniform", graph.num_nodes),
                        epoch_batches=lambda e: bucket_batches(grouped, ptr, bounds, cfg, order, c, e, on_set, on_next),
                        keep_best=False)
    return result


def _slow_writes(store: PartitionedEmbeddings, seconds: float) -> None:
    """Delay every write-back of ``store`` (the real write, later): a partition leaving the buffer is still
    being written when the order brings it back, so a load that does not wait for it reads it stale."""
    write = store._write

    def slow(q: int, slot: int) -> None:
        time.sleep(seconds)
        write(q, slot)

    store._write = slow


@pytest.mark.parametrize(("order", "p", "c"), [("beta", 4, 2), ("comet", 4, 2), ("random", 4, 2), ("beta", 5, 3),
                                               ("comet", 5, 4)])  # comet 5/4: sets of 3 and 4
def test_out_of_core_equals_in_memory(tmp_path, order: str, p: int, c: int) -> None:
    """The same order over the in-memory table and out of core, synchronous and with 1 or 2 partitions
    prefetched, with write-backs slowed down so that partitions re-enter while still being written."""
    import torch

    cfg = PipelineConfig.load(overrides=["train.task=link", "train.link_encoder=embedding", "train.epochs=3",
                                         "train.embedding_dim=8", "train.link_batch_size=64", "train.negatives=16",
                                         "train.negative_chunk=16", "train.eval_negatives=50"]).train
    indptr, indices = ring_csr(240, (1, 2, 3))
    graph = LinkGraph.build(split_edges(indptr, indices, 0.1, 0.1, 0), indptr, indices)
    torch.manual_seed(0)
    mem = InMemoryEmbeddings(graph.num_nodes, 8, cfg.seed)
    want = _train(cfg, graph, mem, order, p, c, activate=False)
    traffic, waits = set(), 0
    for depth in (0, 1, 2):
        torch.manual_seed(0)
        disk = PartitionedEmbeddings(tmp_path / f"emb{depth}.bin", graph.num_nodes, 8, p=p, capacity=c,
                                     seed=cfg.seed, prefetch=depth)
        _slow_writes(disk, 0.01)
        try:
            got = _train(cfg, graph, disk, order, p, c, activate=True)
            assert disk.max_resident == c and disk.loads > p and disk.writebacks > 0  # really out of core
            assert disk.max_slots_used <= c + depth and disk.pool.nbytes == (c + depth) * disk.stride
            assert (disk.prefetched > 0) == (depth > 0) and disk.prefetched <= disk.loads
            waits += disk.write_waits if depth else 0
            traffic.add((disk.loads, disk.bytes_read, disk.read_requests, disk.bytes_written))
            table = disk.write_table(np.empty((graph.num_nodes, 8), np.float32))
            np.testing.assert_array_equal(table, mem.table)  # the same embeddings ...
            for q in range(p):  # ... and Adagrad state, as written back
                np.testing.assert_array_equal(disk.read_partition(q)[:, 8:],
                                              mem.state[disk.bounds[q]: disk.bounds[q + 1]])
        finally:
            disk.close()
        assert got.losses == want.losses
        assert got.metrics["mrr"] == want.metrics["mrr"] and got.metrics["sampled_mrr"] > 2 * got.metrics["random_mrr"]
    assert len(traffic) == 1  # prefetching reads the same partitions, no more
    assert waits > 0  # a partition was prefetched while its write-back was in flight (and waited for it)


@pytest.mark.parametrize("prefetch", [0, 1])
def test_partition_reentering_during_its_write_back_is_read_fresh(tmp_path, prefetch: int) -> None:
    """Partition 0 leaves dirty, and the next set brings it back while its (slowed) write is in flight, into a
    free slot that has nothing pending: the load must wait for the write, synchronous or prefetched."""
    store = PartitionedEmbeddings(tmp_path / "emb.bin", 90, 4, p=3, capacity=3, seed=1, prefetch=prefetch)
    try:
        _slow_writes(store, 0.3)
        nodes = np.arange(store.bounds[0], store.bounds[1])
        store.activate(np.array([0]))
        store.update(nodes, np.ones((len(nodes), 4), np.float32), lr=0.25)
        after = store.read(nodes).copy()
        store.activate(np.array([1]))  # 0 evicted: its write-back starts, slowly
        store.prefetch(np.array([0, 1]))
        store.activate(np.array([0, 1]))
        assert store.write_waits == 1 and store.prefetched == prefetch
        np.testing.assert_array_equal(store.read(nodes), after)
        assert store.max_resident == 2 and store.max_slots_used <= 2
    finally:
        store.close()


def test_prefetch_is_bounded_and_adopted_or_dropped(tmp_path) -> None:
    """At most ``prefetch`` partitions read ahead, one prefetch in flight; a partition prefetched for a set that
    is not the one activated frees its slot, counted as traffic but not as a load."""
    store = PartitionedEmbeddings(tmp_path / "emb.bin", 100, 4, p=5, capacity=2, seed=2, prefetch=1)
    try:
        store.activate(np.array([0, 1]))
        assert store.loads == 2 and store.prefetched == 0
        store.prefetch(np.array([2, 3]))  # one of the two incoming, into the spare slot
        store.prefetch(np.array([4]))  # one in flight already: ignored
        store.activate(np.array([1, 2]))
        assert store.loads == 3 and store.prefetched == 1
        np.testing.assert_array_equal(store.read_partition(2)[:, :4], store.read(np.arange(40, 60)))
        store.prefetch(np.array([3, 4]))  # 3 read ahead ...
        store.activate(np.array([0, 4]))  # ... but the set is another: 3's slot freed, 0 and 4 read now
        assert store.loads == 5 and store.prefetched == 1 and store.max_slots_used == 3 and store.max_resident == 2
        assert store.bytes_read == 6 * int(store.lengths[0])  # six partition reads, five of them loads
        with pytest.raises(ValueError, match="at most 2"):
            store.activate(np.array([0, 1, 2]))
        with pytest.raises(ValueError, match="prefetch_partitions"):
            PartitionedEmbeddings(tmp_path / "bad.bin", 10, 4, p=2, capacity=2, seed=0, prefetch=-1)
    finally:
        store.close()


@pytest.mark.parametrize("round_bytes", [1, 64 << 20])  # 1: a round per row's blocks; 64 MiB: one round
def test_read_any_reads_only_the_blocks_of_its_rows(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                                    round_bytes: int) -> None:
    import trainer.link.outofcore as ooc

    monkeypatch.setattr(ooc, "READ_ANY_BYTES", round_bytes)
    store = PartitionedEmbeddings(tmp_path / "emb.bin", 5000, 24, p=4, capacity=2, seed=5)  # 192-byte rows
    try:
        nodes = np.random.default_rng(0).choice(np.arange(2, 4999), 40, replace=False)  # any order, every part
        nodes[[5, 17]] = [4999, 1]
        want = np.concatenate([store.read_partition(q)[:, :24] for q in range(4)])[nodes]
        store.activate(np.array([0, 3]))
        store.update(np.array([1, 4999]), np.ones((2, 24), np.float32), lr=0.5)  # dirty: written back first
        want[np.isin(nodes, [1, 4999])] -= 0.5
        before = store.bytes_read

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("evaluation allocated a read buffer: it reads into the released pool")

        monkeypatch.setattr(ooc.kernels, "aligned_empty", refuse)
        np.testing.assert_array_equal(store.read_any(nodes), want)
        assert not len(store.current) and (store.slot_of < 0).all()  # released: the pool was the buffer
        read = store.bytes_read - before
        assert 0 < read <= 2 * 40 * 4096 and read < int(store.lengths.sum()) // 2  # blocks, not partitions
        assert store.read_any(np.empty(0, np.int64)).shape == (0, 24)
    finally:
        store.close()
