"""Feature tiers one by one and composed: known answers, invalid inputs, every tier against the in-memory
reference, and chains in other orders and subsets than PackedFeatures'."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from storage_kernels.arrays import save_array
from storage_kernels.packstore import CHUNK_ALIGN, PackedStore, Tier
from tests.trainer.synth import hot_nodes, write_packed
from trainer.features import (
    BLOCK_BYTES,
    CPUCacheTier,
    FeatureSource,
    FileTier,
    GPUCacheTier,
    InMemoryFeatures,
    MemoryTier,
    PackedChunkTier,
    PackedFeatures,
    TieredSource,
    tiered_source,
)

ROWS = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows: some straddle 4096 blocks


class B:
    """A batch as a feature source sees it."""

    def __init__(self, batch: int, nodes: list[int]) -> None:
        self.batch, self.nodes = batch, np.array(nodes, dtype=np.int64)


def _batches(samples, split: str | None = None):
    return [samples.batch(b) for b in range(samples.num_batches) if split is None or samples.batch(b).split == split]


@pytest.fixture(scope="module")
def store_without_cpu_cache(dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    gpu, _ = hot_nodes(dataset.samples, num_gpu=30, num_cpu=0)
    return write_packed(tmp_path_factory.mktemp("gpu-only"), dataset.samples, dataset.features, gpu,
                        np.empty(0, np.int64))


@pytest.fixture(scope="module")
def store_without_caches(dataset, tmp_path_factory: pytest.TempPathFactory) -> Path:
    none = np.empty(0, np.int64)
    return write_packed(tmp_path_factory.mktemp("no-cache"), dataset.samples, dataset.features, none, none)


# ------------------------------------------------------------------------------------------------ one tier
def test_memory_tier_known_answer() -> None:
    with TieredSource(MemoryTier(ROWS)) as source:
        x = source.load(B(0, [5, 0, 299, 5]))
        assert torch.equal(x, torch.from_numpy(ROWS[[5, 0, 299, 5]]))
        assert source.rows_by_tier == {"gpu": 0, "cpu": 4, "packed": 0, "file": 0, "disk_cache": 0}
        assert source.bytes_read == 0 and not source.direct_io and source.fallback_reason == ""
        assert source.tiers[0].stats() == {"rows_served": 4.0, "bytes_read": 0.0}
        assert isinstance(source, FeatureSource)


def test_memory_tier_rejects_bad_arrays_and_slots() -> None:
    with pytest.raises(ValueError, match=r"'features' expected a 2-D float32 array \(got int64"):
        MemoryTier(np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match="'cpu cache' expected C-contiguous rows"):
        CPUCacheTier(ROWS[:, ::2])
    with TieredSource(MemoryTier(ROWS)) as source, pytest.raises(
            IndexError, match=r"'addr_slot' of batch 4 expected slots in \[0, 300\) for tier 1 \(cpu\) \(got 0..300\)"):
        source.load(B(4, [0, 300]))


def test_file_tier_known_answer_merged_and_per_row(tmp_path: Path) -> None:
    save_array(tmp_path / "f.npy", ROWS)  # data at byte 4096: row r at 4096 + 100 r
    nodes = [40, 0, 299, 40, 163, 81]  # 40, 81 and 163 straddle a block boundary
    # merged: blocks 1-5 and 8 in two runs; per row: one request per row, repeats included
    for merge, blocks, requests in ((False, 2 * 2 + 1 + 1 + 2 + 2, 6), (True, 6, 2)):
        with TieredSource(FileTier(tmp_path / "f.npy", merge=merge)) as source:
            assert torch.equal(source.load(B(0, nodes)), torch.from_numpy(ROWS[nodes]))
            assert source.bytes_read == blocks * BLOCK_BYTES, merge
            assert source.read_requests == requests and source.stats()["read_requests"] == requests, merge
            assert source.rows_by_tier["file"] == 6 and source.hit_rate == 0.0
            assert source.direct_io == (source.fallback_reason == "")
            assert source.stats()["bytes_read_file"] == blocks * BLOCK_BYTES


def test_file_tier_rejects_bad_files_and_mismatched_chains(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        FileTier(tmp_path / "missing.npy")
    save_array(tmp_path / "f.npy", ROWS)
    with pytest.raises(ValueError, match=r"expected 4 columns like features \(got 25\)"):
        MemoryTier(np.zeros((2, 4), np.float32), FileTier(tmp_path / "f.npy"))


def test_gpu_cache_tier_known_answer_and_invalid_input() -> None:
    with TieredSource(GPUCacheTier(ROWS[:10], "cpu")) as source:  # device rows on the CPU: same code path
        x = source.load(B(0, [9, 1, 1]))
        assert torch.equal(x, torch.from_numpy(ROWS[[9, 1, 1]])) and source.hit_rate == 1.0
        assert source.rows_by_tier["gpu"] == 3
    with pytest.raises(ValueError, match="'gpu cache' expected a 2-D float32 array"):
        GPUCacheTier(np.zeros(4, np.float32), "cpu")


@pytest.mark.parametrize("tier", ["memory", "gpu"])
def test_a_subset_read_into_rows_of_a_larger_block(tier: str) -> None:
    """``_read_into``: a batch's nodes land at given rows of a larger block (host tiers write there, device
    tiers scatter there), every other row zeros -- also in a reused block that held other rows before."""
    top = MemoryTier(ROWS) if tier == "memory" else GPUCacheTier(ROWS[:10], "cpu")
    with TieredSource(top) as source:
        full = source.read(B(0, [1] * 6))
        source.assemble(full)
        source.release(full)  # leaves a block full of rows for the pool to reuse
        x = source.assemble(source._read_into(B(1, [5, 7]), 4, np.array([1, 3])))
        want = np.zeros((4, 25), np.float32)
        want[[1, 3]] = ROWS[[5, 7]]
        assert torch.equal(x, torch.from_numpy(want))
        with pytest.raises(ValueError, match=r"'rows' expected one row per node of batch 2, 2 \(got 1\)"):
            source._read_into(B(2, [5, 7]), 4, np.array([1]))


def test_packed_chunk_tier_alone_equals_in_memory(dataset, store_without_caches: Path) -> None:
    store = PackedStore(store_without_caches, dataset.samples)
    reference = InMemoryFeatures(dataset.features)
    chunk_bytes = store.chunk_bytes
    with TieredSource(PackedChunkTier(store, FileTier(dataset.features_path)), store=store) as source:
        train = _batches(dataset.samples, "train")
        for batch in train:
            assert torch.equal(source.load(batch), reference.load(batch)), batch.batch
        assert source.rows_by_tier["packed"] == sum(len(b.nodes) for b in train)  # no cache: every row packed
        assert source.bytes_read == int(chunk_bytes[[b.batch for b in train]].sum())
        assert source.read_requests == len(train)  # one read of each batch's chunk
        assert source.tier(Tier.PACKED).bytes_read == source.bytes_read and source.hit_rate == 0.0
        assert source.stats()["bytes_read_packed"] == source.bytes_read


def test_packed_chunk_tier_rejects_slots_beyond_the_chunk(dataset, store_without_caches: Path, tmp_path: Path
                                                          ) -> None:
    broken = tmp_path / "packed"
    shutil.copytree(store_without_caches, broken)
    slots = np.load(broken / "addr_slot.npy").copy()
    slots[1] = 10_000
    save_array(broken / "addr_slot.npy", slots)
    store = PackedStore(broken, dataset.samples)
    with TieredSource(PackedChunkTier(store), store=store) as source, pytest.raises(
            IndexError, match=r"'addr_slot' of batch 0 expected slots in \[0, \d+\) for tier 2 \(packed\)"):
        source.load(dataset.samples.batch(0))


# ------------------------------------------------------------------------------------------------ composed
def test_read_and_assemble_are_separate_stages(dataset, packed_dir: Path) -> None:
    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as source:
        batch = dataset.samples.batch(dataset.samples.batch_ids("train", 0)[0])
        read = source.read(batch)  # I/O only
        assert [p.tier.tier for p in read.parts] == [Tier.GPU, Tier.CPU, Tier.PACKED, Tier.FILE]
        assert sorted(np.concatenate([p.pos for p in read.parts]).tolist()) == list(range(len(batch.nodes)))
        row_bytes = dataset.features.shape[1] * 4
        assert source.bytes_read == read.addresses.chunk_bytes  # one aligned read of the chunk
        assert read.addresses.chunk_bytes == -(-read.addresses.chunk_rows * row_bytes // CHUNK_ALIGN) * CHUNK_ALIGN
        x = source.assemble(read)  # no I/O
        assert source.bytes_read == read.addresses.chunk_bytes
        assert torch.equal(x, torch.from_numpy(dataset.features[batch.nodes]))
        assert source.read_s > 0.0 and source.assemble_s > 0.0  # each stage times itself
        source.reset_counters()
        assert source.bytes_read == 0 and sum(source.rows_by_tier.values()) == 0


def test_host_tiers_fill_one_node_order_block_that_is_the_cpu_output(dataset, packed_dir: Path) -> None:
    """Every host tier writes its rows at their node positions of one (n, F) staging block: on CPU the
    assembled batch is that block itself (no reordering copy), the GPU-cache rows written into it in place."""
    with PackedFeatures(packed_dir, dataset.samples, features_path=dataset.features_path) as source:
        batch = dataset.samples.batch(dataset.samples.batch_ids("train", 0)[0])
        read = source.read(batch)
        n, dim = len(batch.nodes), dataset.features.shape[1]
        assert tuple(read.staging.shape) == (n, dim) and read.staging.dtype == torch.float32
        host = [p for p in read.parts if len(p.pos) and not p.tier.on_device]
        assert {p.tier.tier for p in host} >= {Tier.CPU, Tier.PACKED}
        assert all(np.shares_memory(p.staging, read.staging.numpy()) for p in host)
        assert any(len(p.pos) and p.tier.on_device for p in read.parts)  # GPU-cache rows: written by assemble
        x = source.assemble(read)
        assert x.data_ptr() == read.staging.data_ptr()  # the block is the output
        assert torch.equal(x, torch.from_numpy(dataset.features[batch.nodes]))


def test_tiers_in_another_order_equal_packed_features(dataset, packed_dir: Path) -> None:
    store = PackedStore(packed_dir, dataset.samples)
    path = dataset.features_path
    with PackedFeatures(packed_dir, dataset.samples, features_path=path) as packed, \
            tiered_source(store, path, caches=("cpu", "gpu")) as swapped:
        assert [t.tier for t in swapped.tiers] == [Tier.CPU, Tier.GPU, Tier.PACKED, Tier.FILE]
        for batch in _batches(dataset.samples):
            assert torch.equal(swapped.load(batch), packed.load(batch)), batch.batch
        assert swapped.rows_by_tier == packed.rows_by_tier and swapped.bytes_read == packed.bytes_read


def test_a_subset_chain_serves_evaluation_batches_only(dataset, packed_dir: Path) -> None:
    """CPU cache over GPU cache over the file, no packed tier: enough for unpacked evaluation batches."""
    store = PackedStore(packed_dir, dataset.samples)
    reference = InMemoryFeatures(dataset.features)
    top = CPUCacheTier(store.cache(Tier.CPU), GPUCacheTier(store.cache(Tier.GPU), "cpu",
                                                           FileTier(dataset.features_path)))
    with TieredSource(top, store=store) as source:
        for batch in _batches(dataset.samples, "val") + _batches(dataset.samples, "test"):
            assert torch.equal(source.load(batch), reference.load(batch)), batch.batch
        assert source.rows_by_tier["packed"] == 0 and source.rows_by_tier["file"] > 0
        with pytest.raises(ValueError, match=r"expected a packed tier for the \d+ tier-2 \(packed\) rows of batch"):
            source.load(dataset.samples.batch(dataset.samples.batch_ids("train", 0)[0]))


def test_factory_without_a_cpu_cache(dataset, store_without_cpu_cache: Path) -> None:
    store = PackedStore(store_without_cpu_cache, dataset.samples)
    reference = InMemoryFeatures(dataset.features)
    with tiered_source(store, dataset.features_path, caches=("gpu",)) as source:
        for batch in _batches(dataset.samples):
            assert torch.equal(source.load(batch), reference.load(batch)), batch.batch
        rows = source.rows_by_tier
        assert rows["cpu"] == 0 and min(rows["gpu"], rows["packed"], rows["file"]) > 0
    with tiered_source(None, dataset.features_path, merge=False) as naive:  # the naive baseline, composed
        batch = dataset.samples.batch(0)
        assert torch.equal(naive.load(batch), reference.load(batch))


def test_factory_rejects_impossible_compositions(dataset, packed_dir: Path) -> None:
    store = PackedStore(packed_dir, dataset.samples)
    with pytest.raises(ValueError, match=r"'caches' expected a packed store to address the cache rows"):
        tiered_source(None, dataset.features_path, caches=("gpu",))
    with pytest.raises(ValueError, match=r"'caches' expected distinct tiers from gpu, cpu \(got \['gpu', 'disk'\]\)"):
        tiered_source(store, dataset.features_path, caches=("gpu", "disk"))
    with pytest.raises(ValueError, match="expected at least one tier"):
        tiered_source(store, None, caches=(), packed=False)
    with pytest.raises(ValueError, match=r"expected a packed store to address 2 tiers \(cpu, file\) "
                                         r"\(got store=None\)"):
        TieredSource(MemoryTier(dataset.features, FileTier(dataset.features_path)))


def test_packed_chunk_buffers_rotate_for_reads_ahead(dataset, store_without_caches: Path) -> None:
    """With two buffers, batch i's chunk survives the read of batch i+1 (a read stage one batch ahead)."""
    store = PackedStore(store_without_caches, dataset.samples)
    reference = InMemoryFeatures(dataset.features)
    train = _batches(dataset.samples, "train")[:3]
    with TieredSource(PackedChunkTier(store, num_buffers=2), store=store) as source:
        reads = [source.read(train[0])]
        for i, batch in enumerate(train):
            if i + 1 < len(train):
                reads.append(source.read(train[i + 1]))  # read ahead before assembling batch i
            assert torch.equal(source.assemble(reads[i]), reference.load(batch)), batch.batch
    with pytest.raises(ValueError, match=r"'num_buffers' expected >= 1 \(got 0\)"):
        PackedChunkTier(store, num_buffers=0)
