"""feistel_walk: the synthetic generator's keyed bijection, bit-identical to its NumPy twin (the generator's
graphs must not change with the implementation), a bijection both ways, independent of the thread count."""

from __future__ import annotations

import math

import numpy as np
import pytest

from storage_kernels import kernels


def _mix64(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x ^= x >> 30
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> 27
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> 31
    return x


def feistel_ref(x: np.ndarray, keys: np.ndarray, n: int, inverse: bool = False) -> np.ndarray:
    """The NumPy version the generator used before the kernel (strata-synthetic-2)."""
    half = max(1, math.ceil(math.ceil(math.log2(max(n, 2))) / 2))
    mask, h = np.uint64((1 << half) - 1), np.uint64(half)

    def step(v: np.ndarray) -> np.ndarray:
        left, right = v >> h, v & mask
        for key in (reversed(list(keys)) if inverse else list(keys)):
            if inverse:
                left, right = right ^ (_mix64(left ^ np.uint64(key)) & mask), left
            else:
                left, right = right, left ^ (_mix64(right ^ np.uint64(key)) & mask)
        return (left << h) | right

    y = step(np.asarray(x, dtype=np.uint64))
    outside = np.flatnonzero(y >= n)
    while outside.size:
        y[outside] = step(y[outside])
        outside = outside[y[outside] >= n]
    return y.astype(np.int64)


def _half(n: int) -> int:
    return max(1, math.ceil(math.ceil(math.log2(max(n, 2))) / 2))


@pytest.mark.parametrize("n", [1, 2, 3, 1000, 12_345, 111_059_956, 2**40 + 7])
@pytest.mark.parametrize("threads", [1, 3])
def test_feistel_walk_equals_the_numpy_version_both_ways(n, threads):
    rng = np.random.default_rng(n % 1000)
    keys = rng.integers(0, 2**63, size=4, dtype=np.uint64)
    x = rng.integers(0, n, 50_000)
    fwd = kernels.feistel_walk(x, keys, _half(n), n, num_threads=threads)
    np.testing.assert_array_equal(fwd, feistel_ref(x, keys, n))
    back = kernels.feistel_walk(fwd, keys, _half(n), n, inverse=True, num_threads=threads)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(kernels.feistel_walk(x, keys, _half(n), n, inverse=True),
                                  feistel_ref(x, keys, n, inverse=True))


def test_feistel_walk_is_a_permutation_and_refuses_bad_input():
    n = 5_000
    keys = np.array([5, 6, 7, 8], dtype=np.uint64)
    assert sorted(kernels.feistel_walk(np.arange(n), keys, _half(n), n).tolist()) == list(range(n))
    with pytest.raises(IndexError, match="'x'"):
        kernels.feistel_walk(np.array([0, n]), keys, _half(n), n)
    with pytest.raises(ValueError, match="'half' expected 1..31 bits"):
        kernels.feistel_walk(np.array([0]), keys, 2, 100)  # 2**4 < 100
