"""The block-aligned layout (addressing rule, writer), the hyperbatch grouping and tables, the hotset rule."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels.alignedstore import (
    BlockLayout,
    HyperbatchTable,
    group_hyperbatches,
    select_hotset,
    write_aligned,
)

ROW_SIZES = [4, 100, 128, 400, 1000, 2052, 4096, 4100, 6000, 12288]  # bytes; some divide 4096, some do not


@pytest.mark.parametrize("row_bytes", ROW_SIZES)
def test_offsets_never_straddle_a_block(row_bytes: int) -> None:
    n = 1000
    layout = BlockLayout(n, row_bytes)
    nodes = np.arange(n)
    off = layout.aligned_feature_offset(nodes)
    assert off.dtype == np.int64 and layout.aligned_feature_offset(7) == int(off[7])
    first, last = off // 4096, (off + row_bytes - 1) // 4096
    if row_bytes <= 4096:
        assert np.all(first == last)  # the whole row inside one block
        per_block = 4096 // row_bytes  # computed here, not taken from the layout
        assert np.array_equal(off, nodes // per_block * 4096 + nodes % per_block * row_bytes)
        assert layout.file_bytes == -(-n // per_block) * 4096
    else:
        assert np.all(off % 4096 == 0)  # a big row starts a block and owns whole blocks
        assert np.array_equal(off, nodes * (-(-row_bytes // 4096) * 4096))
    assert np.all(np.diff(off) >= row_bytes) and int(off[-1]) + row_bytes <= layout.file_bytes  # no overlap
    assert layout.disk_blowup == pytest.approx(layout.file_bytes / (n * row_bytes))
    # blocks_of: exactly the blocks the rows' bytes touch
    rng = np.random.default_rng(row_bytes)
    some = rng.integers(0, n, 50)
    touched = {int(b) for v in some for b in range(int(off[v]) // 4096, (int(off[v]) + row_bytes - 1) // 4096 + 1)}
    assert layout.blocks_of(some).tolist() == sorted(touched)


def test_layout_refuses_bad_rows_and_finds_missing_blocks() -> None:
    with pytest.raises(ValueError, match="'row_bytes' expected a positive multiple of 4"):
        BlockLayout(10, 6)
    layout = BlockLayout(100, 1024)  # 4 rows per block
    blocks = np.array([0, 2])
    np.testing.assert_array_equal(layout.buffer_offsets(blocks, np.array([9, 1])), [4096 + 1024, 1024])
    with pytest.raises(KeyError, match="block 1 of node 5"):
        layout.buffer_offsets(blocks, np.array([0, 5]))


@pytest.mark.parametrize("dim", [25, 32, 1500])  # 100-byte rows (padded blocks), 128 (exact), 6000 (2 blocks)
def test_write_aligned_round_trips_every_row(tmp_path, dim: int) -> None:
    rng = np.random.default_rng(dim)
    n = 777
    features = rng.standard_normal((n, dim)).astype(np.float32)
    np.save(tmp_path / "f.npy", features)
    mm = np.load(tmp_path / "f.npy", mmap_mode="r")
    calls: list[tuple[int, int]] = []
    layout = write_aligned(mm, tmp_path / "a.bin", partition_rows=37, progress=lambda d, t: calls.append((d, t)))
    raw = np.fromfile(tmp_path / "a.bin", dtype=np.uint8)
    assert len(raw) == layout.file_bytes and calls[-1] == (n, n) and len(calls) > 1  # several partitions
    row_bytes = dim * 4
    used = np.zeros(len(raw), dtype=bool)
    for v in range(n):
        o = int(layout.aligned_feature_offset(v))
        assert raw[o : o + row_bytes].view(np.float32).tolist() == features[v].tolist()
        used[o : o + row_bytes] = True
    assert not raw[~used].any()  # padding is zeros
    # the bytes do not depend on the partition size or the thread count
    write_aligned(mm, tmp_path / "b.bin", partition_rows=10_000, num_threads=2)
    assert np.array_equal(np.fromfile(tmp_path / "b.bin", dtype=np.uint8), raw)


def _brute_union(layout: BlockLayout, nodes: np.ndarray, ranges: list[tuple[int, int]], batch_ids) -> int:
    parts = [nodes[slice(*ranges[b])] for b in batch_ids]
    return len(np.unique(np.concatenate(parts) // layout.group_rows)) if parts else 0


def test_group_hyperbatches_respects_the_budget_and_is_maximal() -> None:
    rng = np.random.default_rng(0)
    layout = BlockLayout(5000, 400)  # 10 rows per block, 500 blocks
    sizes = rng.integers(20, 120, 30)
    nodes = np.concatenate([np.sort(rng.integers(0, 5000, s) // 7 + 300 * (i % 10)) for i, s in enumerate(sizes)])
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    ranges = [(int(bounds[i]), int(bounds[i + 1])) for i in range(30)]
    epochs = [list(range(0, 12)), list(range(12, 30))[::-1]]  # training order need not be id order
    budget_blocks = 90
    batches, ptr, epoch_ptr, hb_blocks = group_hyperbatches(nodes, epochs, lambda b: ranges[b], layout,
                                                            budget_blocks * 4096 + 100)
    assert batches.tolist() == epochs[0] + epochs[1]  # every batch once, in training order
    assert len(epoch_ptr) == 3 and ptr[epoch_ptr[1]] == 12  # no hyperbatch spans the two epochs
    assert 2 < len(ptr) - 1 < 30  # several hyperbatches, some with several batches
    for h in range(len(ptr) - 1):
        members = batches[ptr[h] : ptr[h + 1]].tolist()
        union = _brute_union(layout, nodes, ranges, members)
        assert hb_blocks[h] == union
        assert union <= budget_blocks or len(members) == 1
        if ptr[h + 1] < len(batches) and ptr[h + 1] not in ptr[epoch_ptr]:  # the next batch is in the same epoch
            assert _brute_union(layout, nodes, ranges, [*members, int(batches[ptr[h + 1]])]) > budget_blocks


def test_a_batch_over_budget_is_a_hyperbatch_alone(tmp_path) -> None:
    layout = BlockLayout(1000, 4096)  # one row per block
    nodes = np.concatenate([np.arange(10), np.arange(100, 400), np.arange(10, 20)])
    ranges = [(0, 10), (10, 310), (310, 320)]
    batches, ptr, epoch_ptr, hb_blocks = group_hyperbatches(nodes, [[0, 1, 2]], lambda b: ranges[b], layout,
                                                            50 * 4096)
    assert ptr.tolist() == [0, 1, 2, 3] and hb_blocks.tolist() == [10, 300, 10]
    for name, arr in (("hb_batches.npy", batches), ("hb_ptr.npy", ptr), ("hb_epoch_ptr.npy", epoch_ptr)):
        np.save(tmp_path / name, arr)
    table = HyperbatchTable(tmp_path, num_batches=4)
    assert table.hb_of_batch.tolist() == [0, 1, 2, -1]  # batch 3: not a training batch
    assert [table.is_epoch_start(b) for b in range(4)] == [True, False, False, False]
    assert table.next_of(1, cross_epochs=False) == 2
    assert table.next_of(2, cross_epochs=False) is None and table.next_of(2, cross_epochs=True) == 0
    np.save(tmp_path / "hb_batches.npy", np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="'hb_batches.npy' expected each batch once"):
        HyperbatchTable(tmp_path, num_batches=4)


def test_select_hotset_is_greedy_within_the_budget_and_deterministic() -> None:
    score = np.array([5, 0, 9, 5, 1, 5, 0, 9])
    assert select_hotset(score, 3).tolist() == [0, 2, 7]  # 9, 9, then the first 5 by id (node 0)
    assert select_hotset(score, 4).tolist() == [0, 2, 3, 7]
    assert select_hotset(score, 100).tolist() == [0, 2, 3, 4, 5, 7]  # never a zero score
    assert select_hotset(score, 0).tolist() == []
