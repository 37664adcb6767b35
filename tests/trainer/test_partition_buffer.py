"""MariusGNN's partition buffer: residency bounded by c, whole-partition direct reads, prefetch, exact rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.arrays import DATA_ALIGN, align_up
from trainer.features import partition_buffer as pb
from trainer.features.partition_buffer import PartitionBuffer
from trainer.partition_orders import beta_sets, comet_order


def _partitions(tmp_path: Path, n: int = 1000, dim: int = 7, p: int = 8, seed: int = 0
                ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray, np.ndarray, Path]:
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(n, dim)).astype(np.float32)
    part = rng.integers(0, p, n)
    members = [np.flatnonzero(part == q).astype(np.int64) for q in range(p)]
    path = tmp_path / "partitions.bin"
    offsets, rows = kernels.pack_batches(features, members, path, partition_rows=97, chunk_align=DATA_ALIGN)
    return features, members, np.asarray(offsets), np.asarray(rows), path


@pytest.mark.parametrize("prefetch", [False, True])
def test_buffer_never_holds_more_than_c_and_serves_exact_rows(tmp_path: Path, prefetch: bool) -> None:
    features, members, offsets, rows, path = _partitions(tmp_path)
    p, c, dim = len(members), 3, features.shape[1]
    buf = PartitionBuffer(path, offsets, rows, dim * 4, capacity=c, staging=1)
    sets = beta_sets(p, c)
    lengths = align_up(rows * dim * 4, DATA_ALIGN)
    expected_bytes = int(lengths[sets[0]].sum())
    for i, s in enumerate(sets):
        buf.activate(s)
        assert len(buf.resident) <= c and int(np.count_nonzero(buf.slot_of >= 0)) <= c
        if prefetch and i + 1 < len(sets):
            buf.prefetch(sets[i + 1])
        if i:
            expected_bytes += int(lengths[np.setdiff1d(s, sets[i - 1])].sum())
        nodes = np.concatenate([members[q] for q in s.tolist()])
        row_in_part = np.concatenate([np.arange(len(members[q])) for q in s.tolist()])
        part_of = np.concatenate([np.full(len(members[q]), q) for q in s.tolist()])
        out = np.empty((len(nodes), dim), dtype=np.float32)
        buf.gather(part_of, row_in_part, out)
        np.testing.assert_array_equal(out, features[nodes])
    buf.close()
    assert buf.max_resident <= c and buf.activations == len(sets)
    assert buf.bytes_read == expected_bytes  # every partition read whole, once per time it enters
    assert buf.loads == c + len(sets) - 1 and buf.read_requests == buf.loads  # one range per (small) partition
    assert (buf.prefetched > 0) == prefetch


def test_a_partition_not_resident_is_refused_and_too_big_a_set_too(tmp_path: Path) -> None:
    features, members, offsets, rows, path = _partitions(tmp_path)
    buf = PartitionBuffer(path, offsets, rows, features.shape[1] * 4, capacity=2, staging=0)
    buf.activate(np.array([0, 1]))
    with pytest.raises(ValueError, match="'partition buffer' expected partition 5 to be resident"):
        buf.gather(np.array([0, 5]), np.array([0, 0]), np.empty((2, features.shape[1]), np.float32))
    with pytest.raises(ValueError, match="expected at most 2 partitions"):
        buf.activate(np.array([0, 1, 2]))
    buf.prefetch(np.array([2, 3]))  # no free slot: nothing in flight, the activation reads synchronously
    buf.activate(np.array([2, 3]))
    assert buf.prefetched == 0 and buf.max_resident == 2
    buf.close()


def test_comet_swaps_read_a_logical_partition_in_large_ranges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    features, members, offsets, rows, path = _partitions(tmp_path, n=4000, dim=33)
    monkeypatch.setattr(pb, "READ_RANGE", 2 * DATA_ALIGN)  # force several ranges per partition
    order = comet_order(len(members), 4, np.random.default_rng(1))
    buf = PartitionBuffer(path, offsets, rows, 33 * 4, capacity=4, staging=2)
    for i, s in enumerate(order.sets):
        buf.activate(s)
        if i + 1 < len(order.sets):
            buf.prefetch(order.sets[i + 1])
    buf.close()
    lengths = align_up(rows * 33 * 4, DATA_ALIGN)
    assert buf.max_resident <= 4 and buf.loads == 4 + order.swaps
    assert buf.read_requests > buf.loads  # ranges of at most READ_RANGE bytes
    per_load = -(-lengths // (2 * DATA_ALIGN))  # requests each partition read takes
    assert buf.read_requests <= int(per_load.max()) * buf.loads
