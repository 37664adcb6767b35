"""rabbit.c (rabbit_order): known answer, exact Python reference, permutation, locality, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import _native, kernels
from tests.storage_kernels.reference import (
    TINY_INDICES,
    TINY_INDPTR,
    build_csr_ref,
    rabbit_order_ref,
    random_csr,
    symmetrise,
)


def _undirected(edges: list[tuple[int, int]], n: int) -> tuple[np.ndarray, np.ndarray]:
    return build_csr_ref(*symmetrise(np.array(edges, dtype=np.int64)), n)


def test_known_answer_two_triangles_joined_by_a_bridge():
    # Triangles {0,1,2} and {3,4,5}, bridge 2-3. Degrees: 2,2,3,3,2,2 (E = 14).
    # Visit 0: neighbours 1 (w 1, strength 2) and 2 (strength 3): scores 14-4 > 14-6, merge 0 -> 1.
    # Visit 1: own row {0: internal, 2: 1} plus 0's list {1: internal, 2: 1} -> w(1,2)=2, 28-4*3 > 0: 1 -> 2.
    # Likewise 4 -> 5 (-> strength 4), then 5 -> 3. Visit 2 (strength 7): w(2,3)=1, 14-7*7 < 0: stays a root;
    # so does 3. Roots by strength (7, 7; ties by id): 2 then 3; pre-order walks: 2,1,0 and 3,5,4.
    indptr, indices = _undirected([(0, 1), (0, 2), (1, 2), (2, 3), (3, 4), (3, 5), (4, 5)], 6)
    perm, communities = kernels.rabbit_order(indptr, indices)
    assert perm.tolist() == [2, 1, 0, 3, 5, 4]
    assert communities == 2
    ref_perm, ref_communities = rabbit_order_ref(indptr, indices)
    assert ref_perm.tolist() == perm.tolist() and ref_communities == communities


def test_empty_graph_and_isolated_nodes():
    perm, communities = kernels.rabbit_order(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert perm.shape == (0,) and communities == 0
    perm, communities = kernels.rabbit_order(np.zeros(4, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert perm.tolist() == [0, 1, 2] and communities == 3


@pytest.mark.parametrize("graph_seed", range(10))
def test_matches_reference_exactly(graph_seed):
    rng = np.random.default_rng(graph_seed)
    n = int(rng.integers(5, 120))
    if graph_seed % 2:
        indptr, indices = build_csr_ref(*symmetrise(rng.integers(0, n, (2 * n, 2))), n)  # undirected, multi-edges
    else:
        indptr, indices = random_csr(n, 3 * n, rng)  # directed rows, self loops possible
    perm, communities = kernels.rabbit_order(indptr, indices)
    ref_perm, ref_communities = rabbit_order_ref(indptr, indices)
    np.testing.assert_array_equal(perm, ref_perm)
    assert communities == ref_communities
    assert np.array_equal(np.sort(perm), np.arange(n))


def test_planted_cliques_land_close_together():
    # 30 cliques of 8 nodes with scrambled ids, chained by one edge each. Each community is a contiguous
    # range, but a root vertex is walked before the sub-communities merged into it, so a clique absorbed by
    # its neighbour may be split around it: still, every clique spans under 3 clique widths of the new order.
    rng = np.random.default_rng(3)
    k, size = 30, 8
    n = k * size
    scramble = rng.permutation(n)
    edges = [(scramble[c * size + i], scramble[c * size + j]) for c in range(k) for i in range(size)
             for j in range(i + 1, size)]
    edges += [(scramble[c * size], scramble[(c + 1) * size + 1]) for c in range(k - 1)]
    indptr, indices = _undirected(edges, n)
    perm, _ = kernels.rabbit_order(indptr, indices)
    position = np.empty(n, dtype=np.int64)
    position[perm] = np.arange(n)
    spans = position[scramble].reshape(k, size)
    spans = spans.max(axis=1) - spans.min(axis=1)
    assert spans.max() < 3 * size
    assert np.mean(spans == size - 1) > 0.5  # most cliques are exactly contiguous
    scrambled_spans = scramble.reshape(k, size).max(axis=1) - scramble.reshape(k, size).min(axis=1)
    assert scrambled_spans.mean() > 10 * size


def test_invalid_inputs():
    with pytest.raises(IndexError, match=r"indices\[1\]=4"):
        kernels.rabbit_order(np.array([0, 2, 2, 2, 2]), np.array([1, 4]))
    with pytest.raises(ValueError, match="non-decreasing"):
        kernels.rabbit_order(np.array([0, 2, 1, 2]), np.array([1, 0]))
    with pytest.raises(ValueError, match="end at len"):
        kernels.rabbit_order(np.array([0, 1, 3]), np.array([1, 0]))
    with pytest.raises(ValueError, match="'indptr' expected"):
        _native.rabbit_order(TINY_INDPTR.astype(np.int32), TINY_INDICES)
    with pytest.raises(ValueError, match="'indices' expected"):
        kernels.rabbit_order(TINY_INDPTR, TINY_INDICES.astype(np.float64))
