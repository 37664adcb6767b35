"""rank.c (filtered_ranks): known answers, a NumPy reference over random inputs with ties and duplicate edges,
thread independence, and invalid inputs rejected before anything is written."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels


def filtered_ranks_ref(scores: np.ndarray, targets: np.ndarray, sources: np.ndarray, indptr: np.ndarray,
                       indices: np.ndarray) -> np.ndarray:
    """NumPy reference: per query, mask the source and its neighbours (except the target), then rank."""
    out = np.empty(len(targets))
    for q, (t, s) in enumerate(zip(targets, sources, strict=True)):
        row = scores[q].astype(np.float64).copy()
        known = indices[indptr[s]: indptr[s + 1]]
        mask = np.zeros(len(row), dtype=bool)
        mask[known] = True
        mask[s] = True
        mask[t] = False
        cand = row[~mask]
        out[q] = 1 + np.sum(cand > row[t]) + 0.5 * (np.sum(cand == row[t]) - 1)
    return out


def random_csr(n: int, e: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    src = rng.integers(0, n, e)
    dst = rng.integers(0, n, e)  # duplicates and self loops on purpose
    order = np.argsort(src, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=n), out=indptr[1:])
    return indptr, dst[order].astype(np.int64)


def test_known_answer() -> None:
    # query (0, ?) with target 2; node 1 is a known edge of 0 (filtered), node 0 is the source (filtered)
    scores = np.array([[0.9, 0.9, 0.5, 0.7, 0.5]], dtype=np.float32)
    indptr = np.array([0, 1, 1, 1, 1, 1])
    ranks = kernels.filtered_ranks(scores, [2], [0], indptr, np.array([1]))
    assert ranks.tolist() == [2.5]  # node 3 above, node 4 tied (half)
    assert scores[0, 0] == -np.inf and scores[0, 1] == -np.inf and scores[0, 3] == np.float32(0.7)


def test_target_that_is_a_known_edge_stays() -> None:
    scores = np.array([[0.1, 0.8, 0.9]], dtype=np.float32)
    ranks = kernels.filtered_ranks(scores, [1], [0], np.array([0, 2, 2, 2]), np.array([1, 2]))
    assert ranks.tolist() == [1.0]  # 2 is filtered, 1 (the target) is not


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_numpy_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, q = 60, 40
    indptr, indices = random_csr(n, 300, rng)
    scores = rng.integers(0, 8, size=(q, n)).astype(np.float32)  # many ties
    targets, sources = rng.integers(0, n, q), rng.integers(0, n, q)
    want = filtered_ranks_ref(scores, targets, sources, indptr, indices)
    for threads in (1, 3):
        got = kernels.filtered_ranks(scores.copy(), targets, sources, indptr, indices, num_threads=threads)
        np.testing.assert_array_equal(got, want)


def test_empty_queries() -> None:
    out = kernels.filtered_ranks(np.zeros((0, 4), np.float32), [], [], np.zeros(5, np.int64), np.zeros(0, np.int64))
    assert out.shape == (0,)


def test_invalid_inputs_leave_scores_untouched() -> None:
    scores = np.ones((1, 3), dtype=np.float32)
    indptr = np.array([0, 1, 1, 1])
    with pytest.raises(IndexError, match="targets"):
        kernels.filtered_ranks(scores, [3], [0], indptr, np.array([1]))
    with pytest.raises(IndexError, match="sources"):
        kernels.filtered_ranks(scores, [0], [-1], indptr, np.array([1]))
    with pytest.raises((ValueError, IndexError)):
        kernels.filtered_ranks(scores, [0], [0], indptr, np.array([7]))  # neighbour id out of range
    with pytest.raises(ValueError, match="indptr"):
        kernels.filtered_ranks(scores, [0], [0], np.array([0, 1]), np.array([1]))
    with pytest.raises(ValueError, match="scores"):
        kernels.filtered_ranks(np.ones((1, 3), np.float64), [0], [0], indptr, np.array([1]))
    assert (scores == 1).all()
