"""Feature sources: the packed store and the per-row baseline assemble exactly the in-memory features."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from storage_kernels.arrays import save_array
from tests.trainer.conftest import requires_cuda
from trainer.features import (
    BLOCK_BYTES,
    FeatureSource,
    FileRows,
    InMemoryFeatures,
    NaiveDiskFeatures,
    PackedFeatures,
)


def _all_batches(samples):
    return [samples.batch(b) for b in range(samples.num_batches)]


def test_in_memory_gathers_rows_in_node_order(dataset) -> None:
    source = InMemoryFeatures(dataset.features)
    batch = dataset.samples.batch(3)
    assert np.array_equal(source.load(batch).numpy(), dataset.features[batch.nodes])
    assert source.rows_by_tier["cpu"] == len(batch.nodes) and source.hit_rate == 1.0
    assert source.bytes_read == 0
    assert isinstance(source, FeatureSource)


def test_packed_equals_in_memory_for_every_batch(dataset, packed_dir: Path, packed_source) -> None:
    reference = InMemoryFeatures(dataset.features)
    samples, packed = dataset.samples, packed_source
    chunk_rows = np.load(packed_dir / "chunk_rows.npy")
    row_bytes = dataset.features.shape[1] * 4
    train_ids = [b for b in range(samples.num_batches) if samples.batch(b).split == "train"]
    for b in train_ids:
        batch = samples.batch(b)
        assert torch.equal(packed.load(batch), reference.load(batch)), f"batch {b}"
    rows = dict(packed.rows_by_tier)
    assert min(rows["gpu"], rows["cpu"], rows["packed"]) > 0 and rows["file"] == 0  # three tiers exercised
    train_nodes = sum(len(samples.batch(b).nodes) for b in train_ids)
    assert sum(rows.values()) == train_nodes
    assert packed.hit_rate == pytest.approx((rows["gpu"] + rows["cpu"]) / train_nodes)
    aligned = -(-chunk_rows * row_bytes // BLOCK_BYTES) * BLOCK_BYTES
    assert packed.bytes_read == int(aligned[train_ids].sum())  # one aligned read per training batch
    assert packed.direct_io == (packed.fallback_reason == "")
    stats = packed.stats()
    assert stats["rows_packed"] == rows["packed"] and stats["cache_hit_rate"] == packed.hit_rate

    # evaluation batches: not packed; their uncached rows come from the feature file, block-merged
    eval_ids = samples.batch_ids("val") + samples.batch_ids("test")
    assert np.all(chunk_rows[eval_ids] == 0)
    before = packed.bytes_read
    for b in eval_ids:
        batch = samples.batch(b)
        assert torch.equal(packed.load(batch), reference.load(batch)), f"batch {b}"
    file_rows = packed.rows_by_tier["file"]
    assert file_rows > 0 and packed.rows_by_tier["packed"] == rows["packed"]
    assert 0 < packed.bytes_read - before <= len(eval_ids) * dataset.features_path.stat().st_size


def test_packed_without_feature_file_refuses_evaluation_batches(dataset, packed_dir: Path) -> None:
    with PackedFeatures(packed_dir, dataset.samples) as packed:
        packed.load(dataset.samples.batch(dataset.samples.batch_ids("train", 0)[0]))
        with pytest.raises(ValueError, match="expected features_path to read the .* tier-3"):
            packed.load(dataset.samples.batch(dataset.samples.batch_ids("val")[0]))


def test_file_rows_merged_reads_each_block_once(tmp_path: Path) -> None:
    features = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows: ~41 per block
    save_array(tmp_path / "f.npy", features)  # data at byte 4096, 30,000 bytes: blocks 1..8
    ids = np.array([40, 0, 299, 40, 163, 81, 1, 2], dtype=np.int64)
    with_rounds = FileRows(tmp_path / "f.npy", max_buffer_bytes=2 * BLOCK_BYTES)  # 2 rows / 2 blocks a round
    rows = FileRows(tmp_path / "f.npy")
    for reader in (rows, with_rounds):
        out_each, out_merged = np.empty((8, 25), np.float32), np.empty((8, 25), np.float32)
        each = reader.read(ids, out_each, merge=False)
        merged = reader.read(ids, out_merged, merge=True)
        assert np.array_equal(out_each, features[ids]) and np.array_equal(out_merged, features[ids])
        assert merged < each
    whole = np.empty((300, 25), np.float32)
    assert rows.read(np.arange(300)[::-1], whole, merge=True) == 8 * BLOCK_BYTES  # every block exactly once
    assert np.array_equal(whole, features[::-1])
    assert with_rounds.read(np.arange(300)[::-1], whole, merge=True) <= (8 + 7) * BLOCK_BYTES  # + boundaries
    assert np.array_equal(whole, features[::-1])
    with pytest.raises(IndexError, match="expected row ids < 300 \\(got 300 at 1\\)"):
        rows.read(np.array([0, 300]), np.empty((2, 25), np.float32), merge=True)
    rows.close()
    with_rounds.close()


def test_file_rows_rounds_bound_the_read_buffer(tmp_path: Path) -> None:
    features = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows: ~41 per block
    save_array(tmp_path / "f.npy", features)
    rows = FileRows(tmp_path / "f.npy")
    ids, pos = np.arange(300)[::-1].copy(), np.arange(300)[::-1] * 2  # every other row of out, in reverse
    out = np.zeros((600, 25), np.float32)
    rows.read(ids, out, merge=True, pos=pos, max_round_bytes=2 * BLOCK_BYTES)
    assert np.array_equal(out[pos], features[ids]) and not out[1::2].any()
    assert rows._buffer.nbytes <= 2 * BLOCK_BYTES  # never the 8 blocks of the whole file at once
    rows.read(ids, out, merge=True, pos=pos, max_round_bytes=1)  # at least one row's blocks a round
    assert np.array_equal(out[pos], features[ids])
    rows.read(ids, out, merge=True, pos=pos)  # default: max_buffer_bytes, one round here
    assert rows._buffer.nbytes == 8 * BLOCK_BYTES
    rows.close()


def test_naive_reads_whole_blocks_per_row(dataset) -> None:
    reference = InMemoryFeatures(dataset.features)
    with NaiveDiskFeatures(dataset.features_path, max_buffer_bytes=3 * BLOCK_BYTES) as naive:  # several rounds
        total = 0
        for batch in _all_batches(dataset.samples)[:5]:
            assert torch.equal(naive.load(batch), reference.load(batch))
            total += len(batch.nodes)
        assert naive.rows_by_tier["file"] == total and naive.hit_rate == 0.0
        assert total * BLOCK_BYTES <= naive.bytes_read <= total * 2 * BLOCK_BYTES  # 1-2 blocks per row


def test_naive_handles_rows_straddling_blocks(tmp_path: Path) -> None:
    features = np.arange(300 * 25, dtype=np.float32).reshape(300, 25)  # 100-byte rows cross 4096 boundaries
    save_array(tmp_path / "f.npy", features)

    class B:
        batch = 0
        nodes = np.array([40, 0, 299, 40, 163, 81], dtype=np.int64)  # repeats are read again

    with NaiveDiskFeatures(tmp_path / "f.npy") as naive:
        assert np.array_equal(naive.load(B).numpy(), features[B.nodes])
        # data starts at byte 4096 and rows are 100 bytes: rows 40 (8096..8196, read twice), 81 (12196..12296)
        # and 163 (20396..20496) straddle a block boundary; rows 0 and 299 do not
        assert naive.bytes_read == (2 * 2 + 2 + 2 + 1 + 1) * BLOCK_BYTES


def test_packed_rejects_missing_and_malformed_files(dataset, packed_dir: Path, tmp_path: Path) -> None:
    broken = tmp_path / "packed"
    shutil.copytree(packed_dir, broken)
    (broken / "addr_slot.npy").unlink()
    with pytest.raises(FileNotFoundError, match="addr_slot.npy"):
        PackedFeatures(broken, dataset.samples)
    shutil.copy(packed_dir / "addr_slot.npy", broken / "addr_slot.npy")
    offsets = np.load(packed_dir / "chunk_offset.npy")
    save_array(broken / "chunk_offset.npy", offsets + np.where(np.arange(len(offsets)) == 1, 8, 0))
    with pytest.raises(ValueError, match=r"'chunk_offset.npy' expected multiples of 4096 \(got \d+ for batch 1\)"):
        PackedFeatures(broken, dataset.samples)
    shutil.copy(packed_dir / "chunk_offset.npy", broken / "chunk_offset.npy")
    tiers = np.load(packed_dir / "addr_tier.npy").copy()
    tiers[3] = 7
    save_array(broken / "addr_tier.npy", tiers)
    with PackedFeatures(broken, dataset.samples) as packed, pytest.raises(ValueError, match="'addr_tier' of batch 0"):
        packed.load(dataset.samples.batch(0))


def test_naive_rejects_bad_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file"):
        NaiveDiskFeatures(tmp_path / "missing.npy")
    save_array(tmp_path / "ints.npy", np.zeros((4, 4), np.int64))
    with pytest.raises(ValueError, match="expected a 2-D C-order float32 array"):
        NaiveDiskFeatures(tmp_path / "ints.npy")


@pytest.mark.gpu
@requires_cuda
def test_packed_on_cuda_equals_cpu(dataset, packed_dir: Path) -> None:
    path = dataset.features_path
    with PackedFeatures(packed_dir, dataset.samples, features_path=path) as cpu, \
            PackedFeatures(packed_dir, dataset.samples, device="cuda", features_path=path) as gpu:
        assert gpu.gpu_cache.is_cuda and gpu.cpu_cache.is_pinned()
        for batch in _all_batches(dataset.samples):
            x = gpu.load(batch)
            assert x.is_cuda and torch.equal(x.cpu(), cpu.load(batch))


def test_a_chain_with_two_tiers_of_one_code_is_refused():
    from storage_kernels.packstore import Tier
    from trainer.features.cache import MemoryTier
    from trainer.features.source import TieredSource

    rows = np.zeros((4, 3), np.float32)
    inner = MemoryTier(rows, tier=Tier.CPU, name="inner")
    outer = MemoryTier(rows, inner, tier=Tier.CPU, name="outer")
    with pytest.raises(ValueError, match=r"expected tiers of distinct codes \(got \['outer: cpu', 'inner: cpu'\]\)"):
        TieredSource(outer, "cpu", store=SimpleNamespace(feature_dim=3))  # type: ignore[arg-type]
