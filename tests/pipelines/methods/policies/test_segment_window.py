"""diskgnn's segment window end to end: stages -> PackedFeatures. With a buffer the pack writes the window's
schedule and the reader reads exactly the predicted bytes and buffer hits; without one (buffer 0) the old
unbuffered reader runs; both assemble the in-memory rows, in the schedule's order and out of it. Rows of 96 bytes
straddle blocks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pipelines.config import PipelineConfig
from pipelines.core.graphio import load_graph
from pipelines.methods.policies.diskgnn.search import UNUSED, uses_signatures
from pipelines.methods.policies.diskgnn.window import fill_gaps
from pipelines.stages import pack, partition, plan, reorder, sample
from storage_kernels.packstore import PackedStore, Tier
from storage_kernels.sampleset import SampleSet
from storage_kernels.store import ArtifactStore
from storage_kernels.windowstore import WINDOW_FILES, WINDOW_META, SegmentWindow
from tests.pipelines.stage_fixtures import make_graph_artifact
from trainer.features import DiskCacheTier, InMemoryFeatures, PackedFeatures, WindowedDiskCacheTier

ROW_BYTES = 24 * 4


def _cfg(buffer_rows: int, order: str = "uses", gap: int = 0) -> PipelineConfig:
    sets = ["policy=diskgnn", "sample.fanouts=[4,3]", "sample.batch_size=64", "sample.epochs=2",
            "sample.eval_batch_size=100",
            "partition.num_parts=4", "plan.cpu_cache_fraction=0.1", "plan.gpu_cache_fraction=0.05",
            "pack.disk_budget=2.0", "pack.memory_mb=1", f"plan.disk_cache_buffer_bytes={buffer_rows * ROW_BYTES}",
            f"pack.disk_cache_order={order}", f"pack.read_gap_blocks={gap}"]
    return PipelineConfig.load(overrides=sets, dataset="unit")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> ArtifactStore:
    return ArtifactStore(tmp_path_factory.mktemp("segment-window"))


@pytest.fixture(scope="module")
def built(store: ArtifactStore):
    """The shared stages once, then a pack per buffer size."""
    graph = make_graph_artifact(store, n=800, dim=24)
    cfg = _cfg(0)
    ordering = reorder.run(store, cfg, ingest=graph).artifact
    parting = partition.run(store, cfg, reorder=ordering).artifact
    samples = sample.run(store, cfg, reorder=ordering, partition=parting).artifact
    packs = {}
    # "minhash": the unbuffered reader over Alg. 1's order; "gap": 20 rows, runs 3 blocks apart read as one
    for rows in (0, 20, 10_000, "minhash", "gap"):
        c = {"minhash": _cfg(0, "minhash"), "gap": _cfg(20, gap=3)}.get(rows) or _cfg(rows)  # type: ignore[arg-type]
        planned = plan.run(store, c, reorder=ordering, sample=samples).artifact
        packs[rows] = pack.run(store, c, reorder=ordering, sample=samples, plan=planned).artifact
        packs[rows].stats["predicted_hit_rate"] = planned.stats["predicted_hit_rate"]
    return ordering, SampleSet(samples.path), packs


def _check_epochs(source: PackedFeatures, samples: SampleSet, reference: InMemoryFeatures, order=None) -> None:
    for epoch in range(samples.epochs):
        ids = samples.batch_ids("train", epoch)
        for b in (ids if order is None else order(ids)):
            batch = samples.batch(b)
            assert torch.equal(source.load(batch), reference.load(batch)), f"batch {b}"


@pytest.mark.parametrize("key", [0, 20, 10_000, "minhash", "gap"])
def test_reads_and_buffer_hits_are_the_predicted_ones(built, key: int | str) -> None:
    ordering, samples, packs = built
    packed, stats = packs[key], packs[key].stats
    rows = {"minhash": 0, "gap": 20}.get(key, key)  # type: ignore[call-overload]
    assert stats["segment_cache_rows"] > 0  # this budget needs segment disk caches
    assert stats["window_rows"] == min(rows, int(np.load(packed.path / "segment_rows.npy").max()))
    assert SegmentWindow.present(packed.path) == (rows > 0)
    reference = InMemoryFeatures(np.asarray(load_graph(ordering).features))
    with PackedFeatures(packed.path, samples, features_path=ordering.file("features.npy")) as source:
        disk = source.tier(Tier.DISK_CACHE)
        assert type(disk) is (WindowedDiskCacheTier if rows else DiskCacheTier)
        ids = samples.batch_ids("train", 0)
        for b in ids:
            batch = samples.batch(b)
            assert torch.equal(source.load(batch), reference.load(batch)), f"batch {b}"
        # sampled epoch 0 in the schedule's order: exactly the predicted bytes and buffer hits
        assert source.bytes_read == stats["epoch_read_bytes"]
        assert disk.bytes_read == stats["epoch_read_bytes_disk_cache"]
        assert getattr(disk, "window_hits", 0) == stats["epoch_window_hits"]
        assert disk.rows_served == stats["epoch_disk_cache_rows"]
        if rows:
            assert disk.buffer_bytes == stats["window_bytes"] == stats["window_rows"] * ROW_BYTES
        for epoch in range(1, samples.epochs):
            for b in samples.batch_ids("train", epoch):
                batch = samples.batch(b)
                assert torch.equal(source.load(batch), reference.load(batch)), f"batch {b}"
        assert source.bytes_read == pytest.approx(stats["mean_epoch_read_bytes"] * samples.epochs)
        # GPU/CPU cache hits: the plan's, the window serves disk-cache rows only
        assert source.hit_rate == pytest.approx(stats["predicted_hit_rate"])


def test_the_window_reads_fewer_bytes_and_the_plan_is_unchanged(built) -> None:
    _, _, packs = built
    read = {rows: p.stats["mean_epoch_read_bytes"] for rows, p in packs.items()}
    assert read["minhash"] != read[0]  # another layout
    assert read[10_000] <= read[20] < read[0]  # a larger buffer never reads more (here)
    assert packs[10_000].stats["epoch_read_bytes_disk_cache"] < packs[0].stats["epoch_read_bytes_disk_cache"]
    # fewer bytes than the rows the batches take from the disk caches: only reuse across batches gives that
    big = packs[10_000].stats
    assert big["epoch_read_bytes_disk_cache"] < big["epoch_disk_cache_rows"] * ROW_BYTES
    cpu = {rows: np.load(p.path / "cpu_cache.npy").shape for rows, p in packs.items()}
    assert len(set(cpu.values())) == 1  # the window takes nothing from the CPU cache


def test_joining_runs_reads_more_bytes_in_fewer_requests(built) -> None:
    ordering, samples, packs = built
    requests, disk_bytes = {}, {}
    for key in (20, "gap"):
        with PackedFeatures(packs[key].path, samples, features_path=ordering.file("features.npy")) as source:
            for b in samples.batch_ids("train", 0):
                source.load(samples.batch(b))
            disk = source.tier(Tier.DISK_CACHE)
            requests[key], disk_bytes[key] = disk.read_requests, disk.bytes_read
    assert requests["gap"] < requests[20] and disk_bytes["gap"] > disk_bytes[20]
    assert packs["gap"].version != packs[20].version  # the setting is part of the pack's identity


def test_fill_gaps_matches_a_loop() -> None:
    rng = np.random.default_rng(4)
    lists = [np.unique(rng.integers(0, 60, rng.integers(0, 12))) for _ in range(40)]
    ptr = np.concatenate([[0], np.cumsum([len(x) for x in lists])])
    blocks = np.concatenate(lists).astype(np.int64)
    for gap in (0, 1, 3, 100):
        got_ptr, got = fill_gaps(ptr, blocks, gap)
        want = []
        for x in lists:
            filled = list(x[:1])
            for a, b in zip(x[:-1], x[1:], strict=True):
                filled += list(range(a + 1, b)) if b - a - 1 <= gap else []
                filled.append(b)
            want.append(np.array(filled, np.int64))
        assert np.array_equal(got_ptr, np.concatenate([[0], np.cumsum([len(w) for w in want])]))
        assert np.array_equal(got, np.concatenate(want))


def test_out_of_schedule_order_stays_correct(built) -> None:
    ordering, samples, packs = built
    packed = packs[20]
    reference = InMemoryFeatures(np.asarray(load_graph(ordering).features))
    with PackedFeatures(packed.path, samples, features_path=ordering.file("features.npy")) as source:
        _check_epochs(source, samples, reference, order=lambda ids: ids[::-1])  # reversed: every plan broken
        _check_epochs(source, samples, reference, order=lambda ids: ids[::2] + ids[1::2])
        _check_epochs(source, samples, reference)  # and back in order
    with PackedFeatures(packed.path, samples, features_path=ordering.file("features.npy")) as source:
        ids = samples.batch_ids("train", 0)
        for b in ids[1:]:  # skipping the first batch of the segment: more reads than planned, same rows
            batch = samples.batch(b)
            assert torch.equal(source.load(batch), reference.load(batch)), f"batch {b}"


def test_window_files_are_validated(built, tmp_path) -> None:
    _, samples, packs = built
    src = packs[20].path
    for name in WINDOW_FILES:
        (tmp_path / name).write_bytes((src / name).read_bytes())
    window = SegmentWindow(tmp_path, samples.num_batches)
    assert window.buffer_rows == 20 and window.row_bytes == ROW_BYTES
    with pytest.raises(ValueError, match=r"window_read_ptr.npy' expected 3 non-decreasing offsets"):
        SegmentWindow(tmp_path, 2)
    with PackedStoreCopy(src, tmp_path, samples) as store:  # a schedule that reads past disk_cache.bin
        np.save(store.path / "window_read_blocks.npy", np.load(src / "window_read_blocks.npy") + 10**6)
        with pytest.raises(ValueError, match=r"window_read_blocks.npy' expected values in \[0, "):
            WindowedDiskCacheTier(store.open())
    (tmp_path / WINDOW_META).write_text('{"format": 99, "buffer_rows": 20, "row_bytes": 96}')
    with pytest.raises(ValueError, match="expected format 1 .got 99.; rebuild the pack artifact"):
        SegmentWindow(tmp_path, samples.num_batches)
    (tmp_path / "window_hits.npy").unlink()
    with pytest.raises(FileNotFoundError, match=r"missing \['window_hits.npy'\]"):
        SegmentWindow(tmp_path, samples.num_batches)


class PackedStoreCopy:
    """A copy of a packed store directory (to corrupt one file of it)."""

    def __init__(self, src, parent, samples) -> None:
        import shutil

        self.path = parent / "store"
        shutil.copytree(src, self.path)
        self.samples = samples

    def open(self) -> PackedStore:
        return PackedStore(self.path, self.samples)

    def __enter__(self) -> PackedStoreCopy:
        return self

    def __exit__(self, *exc: object) -> None:
        import shutil

        shutil.rmtree(self.path)


def test_uses_signatures_list_each_rows_first_reads() -> None:
    # entries in trace order: pair 0 read at positions 0, 2, 5; pair 1 at 1; pair 2 never
    sig = uses_signatures(np.array([0, 1, 0, 0]), np.array([0, 1, 2, 5]), 3, k=2)
    np.testing.assert_array_equal(sig, [[0, 2], [1, UNUSED], [UNUSED, UNUSED]])
    assert sig.dtype == np.int32 and all(sig[:, j].flags.c_contiguous for j in range(2))


@pytest.mark.parametrize("order", ["uses", "minhash"])
def test_unordered_segments_cost_what_ordered_ones_do_when_nothing_is_cached(order) -> None:
    from pipelines.methods.policies.diskgnn.search import Trace, cache_layout, evaluate, segments

    rng = np.random.default_rng(4)
    parts = [np.unique(rng.integers(0, 500, 80)) for _ in range(12)]
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    trace = Trace(np.arange(12, dtype=np.int64), np.zeros(12, np.int64), np.concatenate(parts).astype(np.int64),
                  ptr, 500)
    ordered, unordered = segments(trace, 12, order=order), segments(trace, 12, order=order, ordered=False)
    for field in ("pair_segment", "pair_node", "pair_count", "segment_ptr", "entry_pair"):
        np.testing.assert_array_equal(getattr(ordered, field), getattr(unordered, field))
    a = evaluate(trace, ordered, cache_layout(ordered, 0), 64)
    b = evaluate(trace, unordered, cache_layout(unordered, 0), 64)
    np.testing.assert_array_equal(a.read_bytes, b.read_bytes)
    assert a.store_bytes == b.store_bytes
    with pytest.raises(ValueError, match="'segs' expected ranked segments to cache 3 rows a segment"):
        cache_layout(unordered, 3)
