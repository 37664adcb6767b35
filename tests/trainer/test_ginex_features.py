"""GinexFeatures: every batch's rows equal the in-memory rows (in order, out of order, evaluation batches in
between, repeated epochs), the measured hit rate is the simulation's, the disk counters, and training through
it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage_kernels.changesets import ChangesetStore, write_changesets
from storage_kernels.store import ArtifactStore
from tests.trainer.conftest import requires_cuda
from tests.trainer.synth import Dataset
from trainer.features import GinexFeatures, InMemoryFeatures


def _changes(root: Path, dataset: Dataset, rows: int, superbatch_size: int) -> tuple[Path, dict]:
    store = ArtifactStore(root, catalog=False)
    version = f"r{rows}s{superbatch_size}"
    if (found := store.find("unit", "pack", version)) is not None:
        return found.path, found.stats
    with store.builder("unit", "pack", version, {}, {}) as builder:
        builder.stats.update(write_changesets(builder, dataset.samples, len(dataset.features), rows,
                                              superbatch_size, num_threads=1))
        artifact = builder.publish()
    return artifact.path, artifact.stats


@pytest.fixture(scope="module")
def changes_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ginex-changes")


def _train_ids(dataset: Dataset) -> list[int]:
    return [b for e in range(dataset.samples.epochs) for b in dataset.samples.batch_ids("train", e)]


@pytest.mark.parametrize("rows,superbatch_size", [(40, 3), (40, 0), (0, 2), (240, 4), (1, 5)])
def test_rows_equal_in_memory_and_hits_equal_the_simulation(dataset: Dataset, changes_root: Path, rows: int,
                                                            superbatch_size: int) -> None:
    path, stats = _changes(changes_root, dataset, rows, superbatch_size)
    reference = InMemoryFeatures(dataset.features)
    eval_ids = dataset.samples.batch_ids("val") + dataset.samples.batch_ids("test")
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        for _ in range(2):  # training epochs beyond the sampled ones replay the trace
            source.reset_counters()
            for e in range(dataset.samples.epochs):
                for b in dataset.samples.batch_ids("train", e):
                    batch = dataset.samples.batch(b)
                    np.testing.assert_array_equal(source.load(batch).numpy(), reference.load(batch).numpy())
                table = source.address_table.copy()
                for b in eval_ids[:2]:  # evaluation in between leaves the cache as it is
                    batch = dataset.samples.batch(b)
                    np.testing.assert_array_equal(source.load(batch).numpy(), reference.load(batch).numpy())
                np.testing.assert_array_equal(source.address_table, table)
            train_rows = sum(len(dataset.samples.batch(b).nodes) for b in _train_ids(dataset))
            assert source.switches == stats["superbatches"] and source.resyncs == 0
            assert source.changes_applied == stats["changes"]
            assert source.bytes_read > 0 and source.read_requests > 0
            assert source.stats()["bytes_read"] == source.bytes_read
    # the measured hit rate of the training batches alone is the predicted one, exactly
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        for b in _train_ids(dataset):
            source.load(dataset.samples.batch(b))
        assert sum(source.rows_by_tier.values()) == train_rows
        assert source.rows_by_tier["cpu"] == stats["predicted_hits"]
        assert source.hit_rate == pytest.approx(stats["predicted_hit_rate"], abs=0)
        # a switch reads the initial rows not cached already (all of them the first time)
        first = min(rows, len(np.unique(dataset.samples.batch(_train_ids(dataset)[0]).nodes)))
        assert first <= source.prefetch_rows <= stats["prefetch_rows"]
        assert source.prefetch_bytes >= source.prefetch_rows * dataset.features.shape[1] * 4


def test_out_of_order_batches_resync_and_stay_exact(dataset: Dataset, changes_root: Path) -> None:
    path, _ = _changes(changes_root, dataset, 40, 4)
    reference = InMemoryFeatures(dataset.features)
    ids = _train_ids(dataset)
    order = np.random.default_rng(0).permutation(len(ids))
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        for i in order:
            batch = dataset.samples.batch(ids[i])
            np.testing.assert_array_equal(source.load(batch).numpy(), reference.load(batch).numpy())
        assert source.resyncs > 0
        # the cache is consistent: every cached slot holds its node's row
        cached = np.flatnonzero(source.address_table >= 0)
        np.testing.assert_array_equal(source.cache.rows[source.address_table[cached]], dataset.features[cached])
        assert np.array_equal(np.sort(source.slot_node[source.slot_node >= 0]), cached)


def test_switch_keeps_rows_already_cached(dataset: Dataset, changes_root: Path) -> None:
    path, _ = _changes(changes_root, dataset, 40, 0)  # one superbatch per sampled epoch
    store = ChangesetStore(path, dataset.samples.num_batches)
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        for b in _train_ids(dataset):
            source.load(dataset.samples.batch(b))
        resident = set(np.flatnonzero(source.address_table >= 0).tolist())
        before = source.prefetch_rows
        source.load(dataset.samples.batch(int(store.trace[0])))  # epoch 0 again: a switch
        fresh = set(store.init(0).tolist()) - resident
        assert source.prefetch_rows - before == len(fresh) < len(store.init(0))  # the overlap is not read again
        cached = np.flatnonzero(source.address_table >= 0)
        ins, outs, _ = store.update(0)  # the batch's own update followed the switch
        assert set(cached.tolist()) == (set(store.init(0).tolist()) - set(outs.tolist())) | set(ins.tolist())
        np.testing.assert_array_equal(source.cache.rows[source.address_table[cached]], dataset.features[cached])


def test_switch_reads_into_the_cache_in_small_rounds(dataset: Dataset, changes_root: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The switch's only transient memory is the file's read buffer, bounded by its round (a budget's
    calibration runs without a cache, so it never sees a switch)."""
    import trainer.features.ginex as ginex

    path, _ = _changes(changes_root, dataset, 240, 0)  # the whole graph cached: the switch reads every row
    monkeypatch.setattr(ginex, "_SWITCH_ROUND_BYTES", 2 * 4096)
    store = ChangesetStore(path, dataset.samples.num_batches)
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        batch = dataset.samples.batch(int(store.trace[0]))
        source.load(batch)
        assert source.prefetch_rows == len(store.init(0)) and source.switches == 1
        assert source.file.file._buffer.nbytes <= max(2 * 4096, source.file.file.slot_bytes)
        cached = np.flatnonzero(source.address_table >= 0)
        np.testing.assert_array_equal(source.cache.rows[source.address_table[cached]], dataset.features[cached])


def test_rejects_a_feature_file_of_another_graph(dataset: Dataset, changes_root: Path, tmp_path: Path) -> None:
    from storage_kernels.arrays import save_array

    path, _ = _changes(changes_root, dataset, 40, 3)
    save_array(tmp_path / "f.npy", dataset.features[:-1])
    with pytest.raises(ValueError, match=r"f.npy' expected 240 rows, the nodes of the changesets"):
        GinexFeatures(path, dataset.samples, tmp_path / "f.npy")


def test_trains_through_the_loader(dataset: Dataset, changes_root: Path) -> None:
    from trainer.config import TrainConfig
    from trainer.train import train

    path, stats = _changes(changes_root, dataset, 40, 3)
    cfg = TrainConfig(epochs=dataset.samples.epochs, hidden_dim=16, eval_every=1, device="cpu")
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        result = train(cfg, dataset.samples, source, dataset.labels)
    assert result.cache_hit_rate == pytest.approx(stats["predicted_hit_rate"], abs=1e-12)
    assert result.test_acc > 1.0 / dataset.num_classes


@pytest.mark.gpu
@requires_cuda
def test_cuda_target_equals_in_memory(dataset: Dataset, changes_root: Path) -> None:
    path, stats = _changes(changes_root, dataset, 40, 3)
    reference = InMemoryFeatures(dataset.features)
    with GinexFeatures(path, dataset.samples, dataset.features_path, device="cuda") as source:
        assert source.cache.tensor.is_pinned()
        for b in _train_ids(dataset):
            batch = dataset.samples.batch(b)
            np.testing.assert_array_equal(source.load(batch).cpu().numpy(), reference.load(batch).numpy())
        assert source.rows_by_tier["cpu"] == stats["predicted_hits"]


def test_batches_read_ahead_of_their_assembly_stay_exact(dataset: Dataset, changes_root: Path) -> None:
    # a pipelined loader may read several batches before assembling the first: the cache changes between
    path, stats = _changes(changes_root, dataset, 40, 3)
    reference = InMemoryFeatures(dataset.features)
    ids = _train_ids(dataset)
    with GinexFeatures(path, dataset.samples, dataset.features_path) as source:
        assert source.max_reads_ahead == 0  # any number
        reads = [source.read(dataset.samples.batch(b)) for b in ids]
        for b, read in zip(ids, reads, strict=True):
            np.testing.assert_array_equal(source.assemble(read).numpy(),
                                          reference.load(dataset.samples.batch(b)).numpy())
        assert source.rows_by_tier["cpu"] == stats["predicted_hits"] and source.changes_applied == stats["changes"]


def test_resident_set_counts_only_the_listed_ids() -> None:
    """A resync's resident set from the listed ids equals the count over arrays of every node it replaced."""
    from trainer.features.ginex import _resident

    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        init, ins, outs = (rng.choice(n, int(rng.integers(0, n)), replace=False) for _ in range(3))
        want = np.flatnonzero(np.bincount(init, minlength=n) + np.bincount(ins, minlength=n)
                              - np.bincount(outs, minlength=n) > 0)
        np.testing.assert_array_equal(_resident(init, ins, outs), want)
    assert _resident(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64)).size == 0
