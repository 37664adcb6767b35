"""count_hits (cache/hotset.c): the hyperbatch hotset's hits and access counts over a chunk of a trace, against
its NumPy reference on random traces (repeated ids, float counters carried across chunks), a known answer, ids
past 2**32 over sparse maps, and invalid inputs leaving the counters untouched."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.wide import PAST_UINT32, allocated_bytes, sparse_maker


def count_hits_ref(ids: np.ndarray, hot: np.ndarray, counts: np.ndarray) -> int:
    """NumPy reference: ``counts[ids[k]] += 1`` for every k (repeats add up); the number of hot ``ids[k]``."""
    np.add.at(counts, ids, 1.0)
    return int(np.count_nonzero(hot[ids]))


@pytest.fixture
def sparse(tmp_path):
    yield from sparse_maker(tmp_path)


def test_known_answer():
    hot = np.array([False, True, False, True])
    counts = np.array([0.0, 0.5, 2.25, 0.0])
    assert kernels.count_hits([1, 2, 1, 3, 0, 1], hot, counts) == 4  # 1 three times, 3 once
    np.testing.assert_array_equal(counts, [1.0, 3.5, 3.25, 1.0])
    assert kernels.count_hits(np.empty(0, np.int64), hot, counts) == 0


@pytest.mark.parametrize("seed", range(5))
def test_random_traces_match_the_reference(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    hot = rng.random(n) < rng.random()
    counts = rng.random(n) * 3
    expected = counts.copy()
    for _ in range(4):  # chunks of one trace, the counters carried over (decayed in between, as the plan does)
        ids = rng.integers(0, n, int(rng.integers(0, 2000)))
        assert kernels.count_hits(ids, hot, counts) == count_hits_ref(ids, hot, expected)
        np.testing.assert_array_equal(counts, expected)
        counts *= 0.3
        expected *= 0.3


def test_ids_past_2_32(sparse):
    n = PAST_UINT32 + 8
    hot, counts = sparse("hot.bin", np.bool_, n), sparse("counts.bin", np.float64, n)
    hot[PAST_UINT32 + 3] = True
    ids = np.array([PAST_UINT32 + 3, (1 << 32) - 1, PAST_UINT32 + 3, 1 << 32, 5], dtype=np.int64)
    assert kernels.count_hits(ids, hot, counts) == 2
    np.testing.assert_array_equal(counts[[PAST_UINT32 + 3, (1 << 32) - 1, 1 << 32, 5, 6]], [2, 1, 1, 1, 0])
    counts.flush()
    assert allocated_bytes(counts.filename) < 1 << 20  # only the touched pages


def test_invalid_inputs_leave_the_counters_untouched():
    hot, counts = np.zeros(5, bool), np.arange(5, dtype=np.float64)
    with pytest.raises(IndexError, match=r"count_hits: 'ids' expected node ids in \[0, 5\) \(got ids\[2\]=5\)"):
        kernels.count_hits([0, 1, 5, 2], hot, counts)
    with pytest.raises(IndexError, match=r"got ids\[0\]=-1"):
        kernels.count_hits([-1], hot, counts)
    np.testing.assert_array_equal(counts, np.arange(5))
    with pytest.raises(ValueError, match="'counts'"):
        kernels.count_hits([0], hot, np.zeros(4))  # not one counter per node
    with pytest.raises(ValueError, match="'counts'"):
        kernels.count_hits([0], hot, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="'hot'"):
        kernels.count_hits([0], hot.astype(np.uint8), counts)
    frozen = np.zeros(5)
    frozen.setflags(write=False)
    with pytest.raises(ValueError, match="'counts'"):
        kernels.count_hits([0], hot, frozen)
