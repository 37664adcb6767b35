"""The packed-store format: address rule, chunk sizes, the reader's validation and its address tables.

One hand-drawn store: 6 nodes with 2 features each (row v = [2v, 2v+1]); node 0 in the GPU cache, node 1 in
the CPU cache, nodes 2..5 on disk; batch 0 (training, packed) reads nodes [3, 0, 5, 1], batch 1
(evaluation, not packed) reads nodes [2, 1, 4].
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.arrays import save_array
from storage_kernels.packstore import (
    CHUNK_ALIGN,
    STORE_FILES,
    BatchAddresses,
    PackedStore,
    Tier,
    batch_addresses,
    chunk_bytes,
)

FEATURES = np.arange(12, dtype=np.float32).reshape(6, 2)
PLAN_TIER = np.array([0, 1, 2, 2, 2, 2], dtype=np.int8)
PLAN_SLOT = np.array([0, 0, -1, -1, -1, -1], dtype=np.int64)
BATCHES = [(np.array([3, 0, 5, 1]), True), (np.array([2, 1, 4]), False)]


class Ranges:
    """The two batches' ranges in the concatenated node list."""

    num_batches = 2

    def node_range(self, i: int) -> tuple[int, int]:
        return [(0, 4), (4, 7)][i]


def write_store(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tiers, slots, packed = [], [], []
    for nodes, is_train in BATCHES:
        tier, slot, ids = batch_addresses(nodes, PLAN_TIER, PLAN_SLOT, packed=is_train)
        tiers.append(tier)
        slots.append(slot)
        packed.append(ids)
    offsets, rows = kernels.pack_batches(FEATURES, packed, path / "packed.bin", partition_rows=4)
    save_array(path / "gpu_cache.npy", FEATURES[[0]])
    save_array(path / "cpu_cache.npy", FEATURES[[1]])
    save_array(path / "chunk_offset.npy", offsets.astype(np.int64))
    save_array(path / "chunk_rows.npy", rows.astype(np.int64))
    save_array(path / "addr_tier.npy", np.concatenate(tiers))
    save_array(path / "addr_slot.npy", np.concatenate(slots))
    return path


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    return write_store(tmp_path / "packed")


def test_batch_addresses_known_answer() -> None:
    tier, slot, ids = batch_addresses(BATCHES[0][0], PLAN_TIER, PLAN_SLOT, packed=True)
    assert tier.tolist() == [2, 0, 2, 1] and slot.tolist() == [0, 0, 1, 0] and ids.tolist() == [3, 5]
    tier, slot, ids = batch_addresses(BATCHES[1][0], PLAN_TIER, PLAN_SLOT, packed=False)
    assert tier.tolist() == [3, 1, 3] and slot.tolist() == [2, 0, 4] and ids.tolist() == []
    assert tier.dtype == np.int8 and slot.dtype == np.int64


def test_batch_addresses_rejects_untiered_nodes() -> None:
    plan = PLAN_TIER.copy()
    plan[5] = Tier.NONE
    with pytest.raises(ValueError, match=r"'tier.npy' expected a tier for node 5 \(got none"):
        batch_addresses(np.array([3, 5]), plan, PLAN_SLOT, packed=True)


def test_tier_labels_and_chunk_bytes() -> None:
    assert [t.label for t in Tier.readable()] == ["gpu", "cpu", "packed", "file", "disk_cache"]
    assert Tier.NONE.label == "none" and CHUNK_ALIGN == 4096
    assert chunk_bytes(np.array([0, 1, 512, 513]), 8).tolist() == [0, 4096, 4096, 8192]


def test_store_reads_the_address_tables(store_dir: Path) -> None:
    store = PackedStore(store_dir, Ranges())
    assert store.feature_dim == 2 and (store.gpu_rows, store.cpu_rows) == (1, 1)
    assert np.array_equal(store.cache(Tier.GPU), FEATURES[[0]]) and np.array_equal(store.cache(Tier.CPU), FEATURES[[1]])
    a = store.addresses(0, num_nodes=4)
    assert a.tier.tolist() == [2, 0, 2, 1] and a.slot.tolist() == [0, 0, 1, 0]
    assert (a.chunk_offset, a.chunk_rows, a.chunk_bytes) == (0, 2, CHUNK_ALIGN)
    assert a.positions(Tier.PACKED).tolist() == [0, 2]
    b = store.addresses(1)
    assert b.tier.tolist() == [3, 1, 3] and (b.chunk_rows, b.chunk_bytes) == (0, 0)
    chunk = np.fromfile(store.packed_path, dtype=np.float32, count=4).reshape(2, 2)
    assert np.array_equal(chunk, FEATURES[[3, 5]])  # batch 0's chunk: its packed nodes sorted by id
    assert store.max_chunk_bytes == CHUNK_ALIGN
    with pytest.raises(ValueError, match=r"'batch 0' expected 4 nodes from node_range \(got 3\)"):
        store.addresses(0, num_nodes=3)
    with pytest.raises(ValueError, match=r"'tier' expected GPU or CPU \(got PACKED\)"):
        store.cache(Tier.PACKED)


def test_store_rejects_missing_and_inconsistent_files(store_dir: Path, tmp_path: Path) -> None:
    for name in STORE_FILES:
        broken = tmp_path / f"no-{name}"
        shutil.copytree(store_dir, broken)
        (broken / name).unlink()
        with pytest.raises(FileNotFoundError, match=name):
            PackedStore(broken, Ranges())
    save_array(store_dir / "chunk_rows.npy", np.array([2, 0, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"'chunk_rows.npy' expected shape \(2,\) \(one per batch\)"):
        PackedStore(store_dir, Ranges())
    save_array(store_dir / "chunk_rows.npy", np.array([2, 0], dtype=np.int64))
    save_array(store_dir / "chunk_offset.npy", np.array([0, 100], dtype=np.int64))
    with pytest.raises(ValueError, match=r"'chunk_offset.npy' expected multiples of 4096 \(got 100 for batch 1\)"):
        PackedStore(store_dir, Ranges())
    save_array(store_dir / "chunk_offset.npy", np.array([4096, 0], dtype=np.int64))
    with pytest.raises(ValueError, match=r"'packed.bin' expected >= 8192 bytes"):
        PackedStore(store_dir, Ranges())


def test_single_tier_addresses_and_tier_check() -> None:
    a = BatchAddresses.single_tier(7, np.array([4, 2]), Tier.FILE)
    assert a.batch == 7 and a.tier.tolist() == [3, 3] and a.slot.tolist() == [4, 2] and a.chunk_rows == 0
    a.check_tiers()
    bad = BatchAddresses(3, np.array([0, 1, -1], np.int8), np.zeros(3, np.int64), 0, 0, 0)
    with pytest.raises(ValueError, match=r"^'addr_tier' of batch 3 expected 0, 1, 2, 3 or 4 \(got -1 at node 2\)$"):
        bad.check_tiers()
