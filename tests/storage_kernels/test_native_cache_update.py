"""cache_update: known answer, the reference over a replayed Belady trace (the cache holds each resident node's
row after every iteration), threads, and invalid inputs leaving cache and table untouched."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference_cache import cache_update_ref


def _cache(features: np.ndarray, nodes: np.ndarray, k: int, width: type = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """A cache of ``k`` slots holding ``nodes`` in slots 0.. and its address table (``width`` entries)."""
    cache = np.zeros((k, features.shape[1]), dtype=features.dtype)
    cache[: len(nodes)] = features[nodes]
    table = np.full(len(features), -1, dtype=width)
    table[nodes] = np.arange(len(nodes))
    return cache, table


@pytest.mark.parametrize("width", [np.int64, np.int32])
def test_known_answer(width):
    features = np.arange(12, dtype=np.float32).reshape(6, 2)
    cache, table = _cache(features, np.array([4, 1]), 2, width)
    batch = features[[5, 2, 1]]  # the batch's rows, in its node order
    assert kernels.cache_update(cache, table, batch, [2, 5], [1, 4], [1, 0]) is None
    np.testing.assert_array_equal(cache, features[[5, 2]])  # 2 took 1's slot (1), 5 took 4's slot (0)
    np.testing.assert_array_equal(table, [-1, -1, 1, -1, -1, 0])


@pytest.mark.parametrize("seed,dtype,threads,width", [(0, np.float32, 1, np.int64), (1, np.float32, 3, np.int32),
                                                      (2, np.float64, 0, np.int64), (3, np.int16, 2, np.int32)])
def test_replayed_belady_trace_matches_reference_and_features(seed, dtype, threads, width):
    rng = np.random.default_rng(seed)
    n, dim, k = 300, 7, 40
    features = (rng.standard_normal((n, dim)) * 100).astype(dtype)
    batches = [rng.choice(n, int(rng.integers(1, 60)), replace=False) for _ in range(30)]
    ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batches], out=ptr[1:])
    cs = kernels.belady_changesets(ptr, np.concatenate(batches), num_nodes=n, num_entries=k)
    cache, table = _cache(features, cs.init_ids, k, width)
    ref_cache, ref_table = cache.copy(), table.copy()
    for i, batch in enumerate(batches):
        rows = features[batch]
        lo, hi = cs.update_ptr[i], cs.update_ptr[i + 1]
        args = (cs.in_ids[lo:hi], cs.out_ids[lo:hi], cs.in_positions[lo:hi])
        kernels.cache_update(cache, table, rows, *args, num_threads=threads)
        cache_update_ref(ref_cache, ref_table, rows, *args)
        np.testing.assert_array_equal(cache, ref_cache)
        np.testing.assert_array_equal(table, ref_table)
        resident = np.flatnonzero(table >= 0)
        np.testing.assert_array_equal(cache[table[resident]], features[resident])  # every slot holds its row
    assert cs.update_ptr[-1] > 0  # the trace did change the cache


@pytest.mark.parametrize("width", [np.int64, np.int32])
def test_invalid_inputs_change_nothing(width):
    features = np.arange(12, dtype=np.float32).reshape(6, 2)
    cache, table = _cache(features, np.array([4, 1]), 3, width)
    batch = features[[5, 2, 3]]
    before = (cache.copy(), table.copy())
    cases = [
        (([2], [1], [3]), IndexError, r"'in_positions' expected batch rows in \[0, 3\) \(got in_positions\[0\]=3\)"),
        (([6], [1], [0]), IndexError, r"'in_ids' expected node ids in \[0, 6\)"),
        (([2], [-1], [0]), IndexError, r"'out_ids' expected node ids"),
        (([2], [3], [0]), ValueError, r"'out_ids\[0\]' expected a cached node .* \(got node 3 at slot -1\)"),
        (([4], [1], [0]), ValueError, r"'in_ids\[0\]' expected an uncached node \(got node 4, cached at slot 0\)"),
        (([2, 5], [1, 1], [1, 0]), ValueError, r"'out_ids\[1\]' expected distinct ids \(got node 1 twice\)"),
        (([2, 2], [1, 4], [1, 1]), ValueError, r"'in_ids\[1\]' expected distinct ids \(got node 2 twice\)"),
        (([2], [1, 4], [1]), ValueError, r"'out_ids' expected length 1"),
    ]
    for args, error, message in cases:
        with pytest.raises(error, match=message):
            kernels.cache_update(cache, table, batch, *args)
        np.testing.assert_array_equal(cache, before[0])
        np.testing.assert_array_equal(table, before[1])
    with pytest.raises(ValueError, match=r"'batch_rows' expected 2 columns like cache \(got 3\)"):
        kernels.cache_update(cache, table, np.zeros((3, 3), np.float32), [2], [1], [0])
    with pytest.raises(ValueError, match=r"batch_rows"):
        kernels.cache_update(cache, table, batch.astype(np.float64), [2], [1], [0])
    table[1] = 7  # a slot outside the cache
    with pytest.raises(ValueError, match=r"expected a cached node \(a slot in \[0, 3\)\) \(got node 1 at slot 7\)"):
        kernels.cache_update(cache, table, batch, [2], [1], [0])

    for bad in (table.astype(np.int16), table.astype(np.uint32), table.astype(np.float64)):
        with pytest.raises(ValueError, match=r"'address_table' expected an int64 or int32 array"):
            kernels.cache_update(cache, bad, batch, [2], [1], [0])


def test_int32_tables_refuse_caches_past_2_31_slots():
    # zero-width rows: a cache of 2**31 slots in no memory; an int32 table cannot name its last slots
    cache = np.zeros(((1 << 31) + 8, 0), dtype=np.float32)
    table = np.full(6, -1, dtype=np.int32)
    with pytest.raises(ValueError, match=r"expected int64 entries for a cache of 2147483656 rows \(got int32"):
        kernels.cache_update(cache, table, np.zeros((1, 0), np.float32), [2], [1], [0])
    wide = np.full(6, -1, dtype=np.int64)
    wide[1] = (1 << 31) + 5  # a slot past 2**31, freed for node 2
    kernels.cache_update(cache, wide, np.zeros((1, 0), np.float32), [2], [1], [0])
    assert wide[2] == (1 << 31) + 5 and wide[1] == -1
