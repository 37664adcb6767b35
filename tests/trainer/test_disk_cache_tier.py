"""The disk-cache level of a packed store: batch_addresses with a segment cache, PackedStore's validation of
the disk-cache files, and DiskCacheTier's page-merged reads (rows spanning blocks included)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.packstore import (
    BATCH_SEGMENT,
    DISK_CACHE_BIN,
    SEGMENT_OFFSET,
    SEGMENT_ROWS,
    PackedStore,
    Tier,
    batch_addresses,
    cache_blocks,
)
from trainer.features import DiskCacheTier, InMemoryFeatures, tiered_source

FEATURES = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows: some span two blocks
PLAN_TIER = np.full(300, Tier.PACKED, np.int8)
PLAN_TIER[:5] = Tier.CPU
PLAN_SLOT = np.where(PLAN_TIER == Tier.CPU, np.arange(300), -1).astype(np.int64)
# two training batches in one segment, one evaluation batch; the segment caches nodes 200..299 in reverse
BATCHES = [(np.array([0, 250, 7, 299, 40, 260, 1]), True), (np.array([280, 3, 41, 200, 259, 201]), True),
           (np.array([10, 2, 299]), False)]
SEGMENT_NODES = np.arange(299, 199, -1)  # slot order: 299 at row 0 ... 200 at row 99


class Batch:
    def __init__(self, b: int) -> None:
        self.batch, self.nodes = b, BATCHES[b][0]


class Ranges:
    num_batches = 3

    def node_range(self, i: int) -> tuple[int, int]:
        ends = np.cumsum([0] + [len(n) for n, _ in BATCHES])
        return int(ends[i]), int(ends[i + 1])


def write_store(path: Path, offset: int = 4096) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    by_id = np.argsort(SEGMENT_NODES)
    disk_nodes, disk_slots = SEGMENT_NODES[by_id], by_id.astype(np.int64)
    tiers, slots, packed = [], [], []
    for nodes, train in BATCHES:
        t, s, ids = batch_addresses(nodes, PLAN_TIER, PLAN_SLOT, train, *(disk_nodes, disk_slots) if train else ())
        tiers.append(t)
        slots.append(s)
        packed.append(ids)
    offsets, rows = kernels.pack_batches(FEATURES, packed, path / "packed.bin", partition_rows=64)
    save_array(path / "gpu_cache.npy", np.zeros((0, 25), np.float32))
    save_array(path / "cpu_cache.npy", FEATURES[:5])
    save_array(path / "chunk_offset.npy", offsets.astype(np.int64))
    save_array(path / "chunk_rows.npy", rows.astype(np.int64))
    save_array(path / "addr_tier.npy", np.concatenate(tiers))
    save_array(path / "addr_slot.npy", np.concatenate(slots))
    # segment 0 = an empty segment at 0; segment 1 at ``offset``: the batches' cache
    data = np.zeros(offset + -(-FEATURES[SEGMENT_NODES].nbytes // 4096) * 4096, np.uint8)
    data[offset : offset + FEATURES[SEGMENT_NODES].nbytes] = FEATURES[SEGMENT_NODES].view(np.uint8).reshape(-1)
    data.tofile(path / DISK_CACHE_BIN)
    save_array(path / SEGMENT_OFFSET, np.array([0, offset], np.int64))
    save_array(path / SEGMENT_ROWS, np.array([0, len(SEGMENT_NODES)], np.int64))
    save_array(path / BATCH_SEGMENT, np.array([1, 1, -1], np.int64))
    return path


def test_batch_addresses_with_a_segment_cache() -> None:
    disk_nodes = np.sort(SEGMENT_NODES)
    disk_slots = 299 - disk_nodes
    tier, slot, ids = batch_addresses(BATCHES[0][0], PLAN_TIER, PLAN_SLOT, True, disk_nodes, disk_slots)
    assert tier.tolist() == [1, 4, 2, 4, 2, 4, 1] and slot.tolist() == [0, 49, 0, 0, 1, 39, 1]
    assert ids.tolist() == [7, 40]  # only the rows outside the cache are packed


def test_tier_reads_each_block_once_and_assembles_exact_rows(tmp_path: Path) -> None:
    store = PackedStore(write_store(tmp_path / "s"), Ranges())
    assert store.has_disk_cache and store.max_cache_bytes == 12288  # 100 rows x 100 B in 3 blocks
    reference = InMemoryFeatures(FEATURES)
    with tiered_source(store, None) as source:  # CPU cache -> disk cache -> packed chunk (no feature file)
        disk = source.tier(Tier.DISK_CACHE)
        assert isinstance(disk, DiskCacheTier)
        expected = 0
        for b in (0, 1):
            before = disk.bytes_read
            assert torch.equal(source.load(Batch(b)), reference.load(Batch(b)))
            addr = store.addresses(b)
            blocks = cache_blocks(addr.slot[addr.tier == Tier.DISK_CACHE], 100, addr.cache_offset)
            assert disk.bytes_read - before == 4096 * len(blocks)  # each block once, whatever the rows
            expected += 4096 * len(blocks)
        # file blocks (cache at block 1): batch 0 rows 49, 0, 39 -> blocks 2, 1, 1; batch 1 rows 19, 99, 40, 98
        # -> blocks 1, 3, 1 and 2 (row 40 spans bytes 4000..4099 of the cache), 3
        assert disk.bytes_read == expected == 5 * 4096
        assert disk.read_requests == 2  # one run of consecutive blocks per batch
        assert source.rows_by_tier["disk_cache"] == 7
        with pytest.raises(ValueError, match="expected features_path to read the 2 tier-3"):
            source.load(Batch(2))


def test_store_validates_the_disk_cache_files(tmp_path: Path) -> None:
    path = write_store(tmp_path / "s")
    (path / BATCH_SEGMENT).unlink()
    with pytest.raises(FileNotFoundError, match=r"expected the disk-cache files .* missing \['batch_segment.npy'\]"):
        PackedStore(path, Ranges())
    save_array(path / BATCH_SEGMENT, np.array([1, 2, -1], np.int64))
    with pytest.raises(ValueError, match=r"'batch_segment.npy' expected -1 or a segment in \[0, 2\) \(got 2 for "
                                         r"batch 1\)"):
        PackedStore(path, Ranges())
    save_array(path / BATCH_SEGMENT, np.array([1, 1, -1], np.int64))
    save_array(path / SEGMENT_OFFSET, np.array([0, 100], np.int64))
    with pytest.raises(ValueError, match="multiples of 4096"):
        PackedStore(path, Ranges())
    save_array(path / SEGMENT_OFFSET, np.array([0, 8192], np.int64))
    with pytest.raises(ValueError, match=r"'disk_cache.bin' expected >= 20480 bytes \(segment 1's cache"):
        PackedStore(path, Ranges())
    for name in (DISK_CACHE_BIN, SEGMENT_OFFSET, SEGMENT_ROWS, BATCH_SEGMENT):
        (path / name).unlink()
    store = PackedStore(path, Ranges())  # no disk-cache level: the rows addressed to it find no tier
    assert not store.has_disk_cache and store.addresses(0).cache_rows == 0
    with tiered_source(store, None) as source, pytest.raises(ValueError, match="expected a disk_cache tier"):
        source.load(Batch(0))
