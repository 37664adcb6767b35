"""community.c (label_propagation): known answer, exact NumPy reference, thread independence, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from tests.storage_kernels.reference import (
    G0,
    TINY_INDICES,
    TINY_INDPTR,
    build_csr_ref,
    label_propagation_ref,
    mix64,
    random_csr,
    symmetrise,
)


def _cliques(sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
    edges, start = [], 0
    for s in sizes:
        edges += [(start + i, start + j) for i in range(s) for j in range(s) if i != j]
        start += s
    e = np.array(edges, dtype=np.int64)
    order = np.lexsort((e[:, 1], e[:, 0]))
    e = e[order]
    indptr = np.zeros(start + 1, dtype=np.int64)
    np.cumsum(np.bincount(e[:, 0], minlength=start), out=indptr[1:])
    return indptr, e[:, 1].copy()


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_known_answer_disjoint_cliques(seed):
    # Each clique converges to the member label with the smallest seeded hash; isolated node 9 keeps its id.
    indptr, indices = _cliques([4, 5])
    indptr = np.append(indptr, indptr[-1])  # node 9: no neighbours
    labels, rounds = kernels.label_propagation(indptr, indices, 10, seed)
    key = mix64(seed + G0)
    for members in (range(0, 4), range(4, 9)):
        winner = min(members, key=lambda v: mix64(v ^ key))
        assert labels[list(members)].tolist() == [winner] * len(members)
    assert labels[9] == 9
    assert rounds == 2


def test_zero_iterations_and_empty_graph():
    labels, rounds = kernels.label_propagation(TINY_INDPTR, TINY_INDICES, 0, 0)
    np.testing.assert_array_equal(labels, np.arange(4))
    assert rounds == 0
    labels, rounds = kernels.label_propagation(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64), 5)
    assert labels.shape == (0,) and rounds == 0


@pytest.mark.parametrize("graph_seed", range(6))
@pytest.mark.parametrize("iterations", [1, 3, 10])
def test_matches_reference_exactly(graph_seed, iterations):
    rng = np.random.default_rng(graph_seed)
    n = int(rng.integers(5, 80))
    if graph_seed % 2:
        indptr, indices = build_csr_ref(*symmetrise(rng.integers(0, n, (2 * n, 2))), n)  # undirected, multi-edges
    else:
        indptr, indices = random_csr(n, 2 * n, rng)
    for lp_seed in (0, graph_seed + 11):
        expected = label_propagation_ref(indptr, indices, iterations, lp_seed)
        got = kernels.label_propagation(indptr, indices, iterations, lp_seed, num_threads=1)
        np.testing.assert_array_equal(got[0], expected[0])
        assert got[1] == expected[1]


def test_independent_of_thread_count():
    rng = np.random.default_rng(9)
    indptr, indices = random_csr(60_000, 400_000, rng)
    results = [kernels.label_propagation(indptr, indices, 5, 3, num_threads=t) for t in (1, 2, 5, 0)]
    for labels, rounds in results[1:]:
        np.testing.assert_array_equal(labels, results[0][0])
        assert rounds == results[0][1]


def test_invalid_inputs():
    with pytest.raises(IndexError, match=r"indices\[1\]=4"):
        kernels.label_propagation(np.array([0, 2, 2, 2, 2]), np.array([1, 4]), 1)
    with pytest.raises(ValueError, match="non-decreasing"):
        kernels.label_propagation(np.array([0, 2, 1, 2]), np.array([1, 0]), 1)
    with pytest.raises(ValueError, match="end at len"):
        kernels.label_propagation(np.array([0, 1, 3]), np.array([1, 0]), 1)
    with pytest.raises(ValueError, match="'iterations' expected >= 0"):
        kernels.label_propagation(TINY_INDPTR, TINY_INDICES, -1)
    with pytest.raises(ValueError, match="'indptr' expected"):
        _native.label_propagation(TINY_INDPTR.astype(np.int32), TINY_INDICES, 1, 0)
    with pytest.raises(ValueError, match="'indices' expected"):
        kernels.label_propagation(TINY_INDPTR, TINY_INDICES.astype(np.float64), 1)
