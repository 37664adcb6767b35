"""split_by_code (io/split.c): a batch's nodes grouped by tier code, against a NumPy reference on random
tables, a known answer, empty input and invalid codes."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from storage_kernels.packstore import BatchAddresses


def _reference(codes: np.ndarray, slots: np.ndarray, num_codes: int):
    """What the feature source computed per tier before the kernel: a mask, its positions, their slots."""
    order, ptr, lo, hi = [], [0], [], []
    for c in range(num_codes):
        pos = np.flatnonzero(codes == c)
        order.append(pos)
        ptr.append(ptr[-1] + len(pos))
        lo.append(int(slots[pos].min()) if len(pos) else 0)
        hi.append(int(slots[pos].max()) if len(pos) else -1)
    order = np.concatenate(order)
    return order, slots[order], np.asarray(ptr), np.asarray(lo), np.asarray(hi)


@pytest.mark.parametrize(("seed", "n", "num_codes"), [(0, 0, 5), (1, 1, 1), (2, 1000, 5), (3, 50_000, 5),
                                                     (4, 300, 127)])
def test_matches_the_reference(seed, n, num_codes):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, num_codes, n).astype(np.int8)
    codes[: n // 3] = 0  # a skewed table, as real batches are (most rows in one or two tiers)
    slots = rng.integers(-5, 10**9, n)  # slot bounds are the tiers' to check: any int64 passes through
    got = kernels.split_by_code(codes, slots, num_codes)
    for g, want in zip(got, _reference(codes, slots, num_codes), strict=True):
        assert g.dtype == np.int64
        np.testing.assert_array_equal(g, want)


def test_known_answer():
    got = kernels.split_by_code(np.array([2, 0, 2, 1], np.int8), [5, 6, 7, 8], 5)
    np.testing.assert_array_equal(got.order, [1, 3, 0, 2])
    np.testing.assert_array_equal(got.slots, [6, 8, 5, 7])
    np.testing.assert_array_equal(got.ptr, [0, 1, 2, 4, 4, 4])
    np.testing.assert_array_equal(got.lo, [6, 8, 5, 0, 0])
    np.testing.assert_array_equal(got.hi, [6, 8, 7, -1, -1])


def test_invalid_inputs():
    with pytest.raises(ValueError, match=r"split_by_code: 'codes' expected codes in \[0, 5\) \(got codes\[2\]=-1\)"):
        kernels.split_by_code(np.array([0, 4, -1, 9], np.int8), [0, 0, 0, 0], 5)
    with pytest.raises(ValueError, match=r"'codes' expected codes in \[0, 5\) \(got codes\[0\]=7\)"):
        kernels.split_by_code(np.array([7], np.int8), [0], 5)
    with pytest.raises(ValueError, match="'slots' expected length 2"):
        kernels.split_by_code(np.array([0, 1], np.int8), [0], 5)
    with pytest.raises(ValueError, match="'codes' expected a 1-D int8 array"):
        kernels.split_by_code(np.array([0, 1], np.int64), [0, 1], 5)
    with pytest.raises(ValueError, match="'num_codes' expected <= 127"):
        kernels.split_by_code(np.array([0], np.int8), [0], 200)


def test_a_batch_with_a_bad_tier_code_is_named_by_its_batch_and_node():
    addr = BatchAddresses(batch=7, tier=np.array([0, 2, 9], np.int8), slot=np.zeros(3, np.int64), chunk_offset=0,
                          chunk_rows=0, chunk_bytes=0)
    with pytest.raises(ValueError, match=r"'addr_tier' of batch 7 expected 0, 1, 2, 3 or 4 \(got 9 at node 2\)"):
        addr.groups()
