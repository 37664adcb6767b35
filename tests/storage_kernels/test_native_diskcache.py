"""minhash_signatures / count_blocks (DiskGNN segment disk caches): NumPy references, known answers, errors."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import count_blocks_ref, minhash_signatures_ref

UINT64_MAX = np.iinfo(np.uint64).max


def _random_sets(rng: np.random.Generator, num_sets: int, num_items: int) -> tuple[np.ndarray, np.ndarray]:
    sizes = rng.integers(0, num_items // 2, num_sets)
    items = [rng.choice(num_items, size, replace=False) for size in sizes]
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return (np.concatenate(items) if items else np.empty(0)).astype(np.int64), ptr


@pytest.mark.parametrize(("k", "seed"), [(1, 0), (2, 0), (3, 12345), (2, 2**64 - 1)])
def test_minhash_matches_reference(k: int, seed: int) -> None:
    rng = np.random.default_rng(k)
    items, ptr = _random_sets(rng, 17, 40)
    got = kernels.minhash_signatures(items, ptr, 45, k=k, seed=seed)  # items 40..44 in no set
    assert got.dtype == np.uint64 and got.shape == (45, k)
    np.testing.assert_array_equal(got, minhash_signatures_ref(items, ptr, 45, k, seed))
    assert np.all(got[40:] == UINT64_MAX)
    threaded = kernels.minhash_signatures(items, ptr, 45, k=k, seed=seed, num_threads=3)
    np.testing.assert_array_equal(threaded, got)  # independent of the thread count


def test_minhash_groups_items_of_the_same_sets() -> None:
    # items 0 and 2 are in exactly the same sets: equal signatures; item 1 in another set
    items = np.array([0, 2, 1, 0, 2])
    ptr = np.array([0, 2, 3, 5])
    sig = kernels.minhash_signatures(items, ptr, 3, k=2)
    assert np.array_equal(sig[0], sig[2]) and not np.array_equal(sig[0], sig[1])


def test_minhash_errors() -> None:
    with pytest.raises(IndexError, match=r"minhash_signatures: 'items' expected item ids in \[0, 2\)"):
        kernels.minhash_signatures(np.array([0, 2]), np.array([0, 2]), 2)
    with pytest.raises(ValueError, match=r"'set_ptr' expected 0 = set_ptr\[0\] <= .* \(got set_ptr\[1\]=3\)"):
        kernels.minhash_signatures(np.array([0, 1]), np.array([0, 3]), 2)
    with pytest.raises(ValueError, match="expected a 2-D uint64 array"):
        from storage_kernels import _native

        _native.minhash_signatures(items=np.zeros(1, np.int64), set_ptr=np.array([0, 1]),
                                   out=np.zeros((1, 2), np.int64), seed=0)


@pytest.mark.parametrize("row_bytes", [512, 100, 5000, 4096])
def test_count_blocks_matches_reference(row_bytes: int) -> None:
    rng = np.random.default_rng(row_bytes)
    ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 30, 20))]).astype(np.int64)
    slots = rng.integers(-1, 200, int(ptr[-1])).astype(np.int64)  # -1: served elsewhere
    got = kernels.count_blocks(slots, ptr, row_bytes)
    np.testing.assert_array_equal(got, count_blocks_ref(slots, ptr, row_bytes))
    np.testing.assert_array_equal(kernels.count_blocks(slots, ptr, row_bytes, num_threads=1), got)


def test_count_blocks_known_answer_and_errors() -> None:
    # 512-byte rows: 8 per block. Set 0 reads rows 0, 7 (block 0) and 8 (block 1); set 1 row 3 and row 100
    got = kernels.count_blocks(np.array([0, 7, 8, -1, 3, 100]), np.array([0, 3, 6]), 512)
    assert got.tolist() == [2, 2]
    assert kernels.count_blocks(np.empty(0, np.int64), np.array([0]), 512).tolist() == []
    with pytest.raises(ValueError, match=r"count_blocks: 'set_ptr' expected 0 = set_ptr\[0\]"):
        kernels.count_blocks(np.array([1, 2]), np.array([1, 2]), 512)
    with pytest.raises(ValueError, match="'row_bytes' expected >= 1"):
        kernels.count_blocks(np.array([1]), np.array([0, 1]), 0)
