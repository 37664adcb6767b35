"""belady_changesets: known answer, the Python reference on random traces, replay of the changesets, and the
properties of an optimal policy (never below LRU, FIFO or a static frequency cache; equal to a brute-force
optimum on tiny traces); invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference_cache import (
    belady_changesets_ref,
    fifo_hits,
    lru_hits,
    optimal_hits,
    static_frequency_hits,
)


def _trace(batches: list[list[int]] | list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in batches], out=ptr[1:])
    ids = np.concatenate([np.asarray(b, dtype=np.int64) for b in batches]) if batches else np.empty(0, np.int64)
    return ptr, ids


def _random_batches(rng: np.random.Generator, num_nodes: int, steps: int, size: int, skew: float
                    ) -> list[np.ndarray]:
    """Batches of distinct nodes drawn with a Zipf-like popularity (skew 0: uniform)."""
    weights = 1.0 / np.arange(1, num_nodes + 1) ** skew
    weights /= weights.sum()
    perm = rng.permutation(num_nodes)  # popular nodes spread over the id space
    out = []
    for _ in range(steps):
        n = int(rng.integers(0, min(size, num_nodes) + 1))
        out.append(perm[rng.choice(num_nodes, n, replace=False, p=weights)])
    return out


def test_known_answer():
    # K = 2; trace: [0 1] [2 0] [1 2] [0]
    got = kernels.belady_changesets(*_trace([[0, 1], [2, 0], [1, 2], [0]]), num_nodes=3, num_entries=2)
    np.testing.assert_array_equal(got.init_ids, [0, 1])  # the first two distinct nodes
    # after [2 0]: next accesses 0 -> 3, 1 -> 2, 2 -> 2: keep 1 and (new) 2, evict 0 (slot 0)
    np.testing.assert_array_equal(got.hits, [2, 1, 2, 0])
    np.testing.assert_array_equal(got.update_ptr, [0, 0, 1, 1, 1])  # 0 cannot come back: [1 2] does not read it
    np.testing.assert_array_equal(got.in_ids, [2])
    np.testing.assert_array_equal(got.out_ids, [0])
    np.testing.assert_array_equal(got.in_positions, [0])


@pytest.mark.parametrize("seed,num_nodes,steps,size,k,skew", [
    (0, 40, 30, 12, 8, 1.0), (1, 200, 60, 50, 40, 0.8), (2, 30, 20, 30, 30, 0.0), (3, 15, 25, 6, 1, 1.2),
    (4, 50, 10, 10, 0, 1.0), (5, 60, 40, 20, 100, 1.0), (6, 500, 80, 100, 64, 1.1),
])
def test_matches_reference(seed, num_nodes, steps, size, k, skew):
    rng = np.random.default_rng(seed)
    batches = _random_batches(rng, num_nodes, steps, size, skew)
    got = kernels.belady_changesets(*_trace(batches), num_nodes=num_nodes + 3, num_entries=k)
    want = belady_changesets_ref(batches, k)
    for name, g, w in zip(got._fields, got, want[:6], strict=True):
        np.testing.assert_array_equal(g, w, err_msg=name)
        assert g.dtype == np.int64


def test_duplicates_within_a_batch_count_once():
    batches = [np.array([3, 3, 1]), np.array([2, 1, 2, 4]), np.array([4, 3, 3])]
    got = kernels.belady_changesets(*_trace(batches), num_nodes=5, num_entries=2)
    want = belady_changesets_ref(batches, 2)
    for g, w in zip(got, want[:6], strict=True):
        np.testing.assert_array_equal(g, w)
    assert got.in_positions.tolist() == want[4].tolist()  # first positions


@pytest.mark.parametrize("seed", range(6))
def test_replaying_the_changesets_reproduces_every_state(seed):
    rng = np.random.default_rng(100 + seed)
    batches = _random_batches(rng, 80, 40, 25, 1.0)
    k = int(rng.integers(1, 40))
    got = kernels.belady_changesets(*_trace(batches), num_nodes=80, num_entries=k)
    states = belady_changesets_ref(batches, k)[6]
    cache = set(got.init_ids.tolist())
    assert len(cache) == len(got.init_ids) <= k
    for i, batch in enumerate(batches):
        assert cache == states[i], f"state before iteration {i}"
        assert got.hits[i] == len(cache & set(batch.tolist()))
        lo, hi = got.update_ptr[i], got.update_ptr[i + 1]
        ins, outs, pos = got.in_ids[lo:hi], got.out_ids[lo:hi], got.in_positions[lo:hi]
        np.testing.assert_array_equal(batch[pos], ins)  # rows come from the batch
        assert not (set(ins.tolist()) & cache) and set(outs.tolist()) <= cache
        cache = (cache - set(outs.tolist())) | set(ins.tolist())
        assert len(cache) <= k
    assert cache == states[len(batches)]


@pytest.mark.parametrize("seed", range(12))
def test_never_below_lru_fifo_or_static_frequency(seed):
    rng = np.random.default_rng(200 + seed)
    num_nodes = int(rng.integers(20, 300))
    batches = _random_batches(rng, num_nodes, int(rng.integers(5, 60)), int(rng.integers(1, 40)),
                              float(rng.uniform(0, 1.5)))
    k = int(rng.integers(1, num_nodes))
    belady = int(kernels.belady_changesets(*_trace(batches), num_nodes=num_nodes, num_entries=k).hits.sum())
    for policy in (lru_hits, fifo_hits, static_frequency_hits):
        assert belady >= sum(policy(batches, k)), policy.__name__


def test_strictly_better_than_lru_on_a_cyclic_trace():
    # the classic LRU worst case: a loop one larger than the cache misses every time under LRU
    batches = [np.array([v]) for v in list(range(5)) * 4]
    belady = kernels.belady_changesets(*_trace(batches), num_nodes=5, num_entries=4).hits.sum()
    assert sum(lru_hits(batches, 4)) == 0 and belady > 0


@pytest.mark.parametrize("seed", range(25))
def test_equals_the_brute_force_optimum(seed):
    rng = np.random.default_rng(300 + seed)
    num_nodes = int(rng.integers(2, 7))
    batches = [rng.choice(num_nodes, int(rng.integers(0, num_nodes + 1)), replace=False)
               for _ in range(int(rng.integers(1, 6)))]
    k = int(rng.integers(0, 4))
    got = kernels.belady_changesets(*_trace(batches), num_nodes=num_nodes, num_entries=k)
    assert int(got.hits.sum()) == optimal_hits(batches, k)


def test_empty_inputs():
    got = kernels.belady_changesets(np.zeros(1, np.int64), np.empty(0, np.int64), num_nodes=0, num_entries=5)
    assert [len(a) for a in got] == [0, 1, 0, 0, 0, 0]
    got = kernels.belady_changesets(*_trace([[], [1], []]), num_nodes=2, num_entries=0)
    np.testing.assert_array_equal(got.hits, [0, 0, 0])
    np.testing.assert_array_equal(got.update_ptr, [0, 0, 0, 0])


def test_invalid_inputs():
    ptr, ids = _trace([[0, 1], [2]])
    with pytest.raises(IndexError, match=r"'ids' expected node ids in \[0, 2\) \(got ids\[2\]=2\)"):
        kernels.belady_changesets(ptr, ids, num_nodes=2, num_entries=1)
    with pytest.raises(ValueError, match=r"'batch_ptr' expected non-decreasing offsets from 0 to len\(ids\) = 3 "
                                         r"\(got batch_ptr\[1\]=4\)"):
        kernels.belady_changesets([0, 4, 3], ids, num_nodes=3, num_entries=1)
    with pytest.raises(ValueError, match=r"batch_ptr\[2\]=2"):
        kernels.belady_changesets([0, 1, 2], ids, num_nodes=3, num_entries=1)
    with pytest.raises(ValueError, match=r"'num_entries' expected >= 0"):
        kernels.belady_changesets(ptr, ids, num_nodes=3, num_entries=-1)
    with pytest.raises(ValueError, match=r"'batch_ptr' expected at least 1 entry"):
        kernels.belady_changesets(np.empty(0, np.int64), ids, num_nodes=3, num_entries=1)
