"""sample_dense (MariusGNN's DENSE): exact reference comparison, the prefix structure, first-hop fanouts,
agreement with sample_blocks where the two must agree, determinism and errors."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import TINY_INDICES, TINY_INDPTR, random_csr, sample_dense_ref
from tests.storage_kernels.test_native_sample import id_map  # noqa: F401  (fixture: both id-map layouts)


def assert_dense_same(out: kernels.SampledBlocks, ref) -> None:
    """The kernel's per-hop views against the reference's single CSR."""
    nodes, hop_counts, indptr, cols = ref
    np.testing.assert_array_equal(out.nodes, nodes)
    np.testing.assert_array_equal(out.hop_counts, hop_counts)
    assert len(out.indptrs) == len(hop_counts) - 1 == len(out.cols)
    for h in range(len(out.indptrs)):
        end = int(hop_counts[h]) + 1
        np.testing.assert_array_equal(out.indptrs[h], indptr[:end], err_msg=f"indptr of hop {h}")
        np.testing.assert_array_equal(out.cols[h], cols[: indptr[end - 1]], err_msg=f"cols of hop {h}")
        assert out.indptrs[h].dtype == np.int64 and out.cols[h].dtype == np.int64


def check_dense_invariants(indptr, indices, seeds, fanouts, out: kernels.SampledBlocks) -> None:
    """Blocks in the sample-set layout; each row holds min(fanout of its first hop, degree) distinct true
    neighbours in CSR order; hop h's block is a prefix of hop h+1's."""
    num_nodes = len(indptr) - 1
    nodes, hop_counts = out.nodes, out.hop_counts
    assert len(np.unique(nodes)) == len(nodes)
    np.testing.assert_array_equal(nodes[: len(seeds)], seeds)
    degree = np.diff(indptr)
    edge_set = set(zip(np.repeat(np.arange(num_nodes), degree).tolist(), indices.tolist(), strict=True))
    for h in range(len(fanouts)):
        ptr, col = out.indptrs[h], out.cols[h]
        assert len(ptr) == hop_counts[h] + 1 and ptr[0] == 0 and ptr[-1] == len(col)
        assert col.size == 0 or (col.min() >= 0 and col.max() < hop_counts[h + 1])
        if h + 1 < len(fanouts):
            np.testing.assert_array_equal(out.indptrs[h + 1][: len(ptr)], ptr)
            np.testing.assert_array_equal(out.cols[h + 1][: len(col)], col)
    if not fanouts:
        return
    ptr, col = out.indptrs[-1], out.cols[-1]
    first_hop = np.searchsorted(hop_counts, np.arange(len(ptr) - 1), side="right")  # hop that sampled row i
    fan = np.asarray(fanouts)[first_hop]
    deg = degree[nodes[: len(ptr) - 1]]
    np.testing.assert_array_equal(np.diff(ptr), np.where(fan < 0, deg, np.minimum(fan, deg)))
    for i in range(len(ptr) - 1):
        picked = nodes[col[ptr[i] : ptr[i + 1]]].tolist()
        assert all((int(nodes[i]), u) in edge_set for u in picked), "sampled a non-neighbour"
        row = indices[indptr[nodes[i]] : indptr[nodes[i] + 1]].tolist()
        assert [row.index(u) for u in picked] == sorted({row.index(u) for u in picked}), "not distinct, CSR order"


def test_tiny_full_neighbourhoods_equal_per_layer():
    # every neighbour at every hop: reuse changes nothing, the blocks equal sample_blocks'
    dense = kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [3], [-1, -1], seed=0)
    layered = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [3], [-1, -1], seed=0)
    np.testing.assert_array_equal(dense.nodes, [3, 2, 0, 1])
    for a, b in zip(dense.indptrs + dense.cols, layered.indptrs + layered.cols, strict=True):
        np.testing.assert_array_equal(a, b)


def test_seed_row_is_reused_not_resampled():
    # star: 0 - {1..20}; hop 0 picks 2 of 0's neighbours, hop 1 must keep exactly those for node 0
    src = np.concatenate([np.zeros(20, np.int64), np.arange(1, 21)])
    dst = np.concatenate([np.arange(1, 21), np.zeros(20, np.int64)])
    indptr, indices = kernels.build_csr(lambda: iter([(src, dst)]), 21)
    for seed in range(20):
        out = kernels.sample_dense(indptr, indices, [0], [2, 5], seed=seed)
        assert out.indptrs[1][1] == 2  # node 0 keeps its first-hop fanout, not 5
        np.testing.assert_array_equal(out.cols[1][:2], out.cols[0])
        assert out.hop_counts.tolist() == [1, 3, 3]  # leaves' only neighbour is 0: nothing new


def test_no_hops_and_no_seeds():
    out = kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [2, 3], [], seed=1)
    assert out.nodes.tolist() == [2, 3] and out.hop_counts.tolist() == [2] and out.indptrs == [] == out.cols
    out = kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [], [2, 2], seed=1)
    assert out.nodes.shape == (0,) and out.hop_counts.tolist() == [0, 0, 0]
    np.testing.assert_array_equal(out.indptrs[1], [0])


@pytest.mark.parametrize(
    "graph_seed,num_nodes,num_edges,num_seeds,fanouts",
    [
        (0, 30, 120, 4, [2, 3]),
        (1, 200, 1600, 16, [3, 5, 2]),
        (2, 500, 10_000, 8, [10, -1]),
        (3, 50, 40, 10, [1, 1, 1]),  # many isolated nodes
        (4, 300, 6000, 5, [0, 4]),
    ],
)
@pytest.mark.parametrize("seed", [0, 2**64 - 1])
def test_matches_reference(graph_seed, num_nodes, num_edges, num_seeds, fanouts, seed, id_map):  # noqa: F811
    rng = np.random.default_rng(graph_seed)
    indptr, indices = random_csr(num_nodes, num_edges, rng)
    seeds = rng.choice(num_nodes, num_seeds, replace=False)
    out = kernels.sample_dense(indptr, indices, seeds, fanouts, seed=seed, num_threads=2)
    assert_dense_same(out, sample_dense_ref(indptr, indices, seeds, fanouts, seed))
    check_dense_invariants(indptr, indices, seeds, fanouts, out)


@pytest.fixture(scope="module")
def medium_graph():
    rng = np.random.default_rng(11)
    indptr, indices = random_csr(20_000, 200_000, rng)
    return indptr, indices, rng.choice(20_000, 800, replace=False)


def test_identical_for_any_thread_count_and_first_hop_equals_uniform(medium_graph, id_map):  # noqa: F811
    indptr, indices, seeds = medium_graph
    fanouts = [10, 5, 3]
    outs = [kernels.sample_dense(indptr, indices, seeds, fanouts, seed=42, num_threads=t) for t in (1, 2, 4, 0)]
    assert outs[0].hop_counts[-1] > 4 * 512
    for other in outs[1:]:
        for a, b in zip([other.nodes, other.hop_counts, *other.indptrs, *other.cols],
                        [outs[0].nodes, outs[0].hop_counts, *outs[0].indptrs, *outs[0].cols], strict=True):
            np.testing.assert_array_equal(a, b)
    layered = kernels.sample_blocks(indptr, indices, seeds, fanouts, seed=42)
    np.testing.assert_array_equal(outs[0].nodes[: outs[0].hop_counts[1]], layered.nodes[: layered.hop_counts[1]])
    np.testing.assert_array_equal(outs[0].cols[0], layered.cols[0])
    # the saving: later hops sample only new nodes, so fewer edges and (here) fewer nodes than per-layer
    assert len(outs[0].cols[-1]) < sum(len(c) for c in layered.cols)
    assert outs[0].hop_counts[-1] <= layered.hop_counts[-1]


def test_hop_views_are_read_only():
    out = kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [0], [2, 2], seed=0)
    with pytest.raises(ValueError):
        out.cols[0][0] = 5
    assert np.shares_memory(out.cols[0], out.cols[1])


def test_errors_name_the_kernel():
    with pytest.raises(ValueError, match=r"sample_dense: 'seeds' expected unique ids"):
        kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [1, 1], [2], seed=0)
    with pytest.raises(IndexError, match="sample_dense"):
        kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [9], [2], seed=0)
    with pytest.raises(ValueError, match=r"sample_dense: 'fanouts' expected values >= -1"):
        kernels.sample_dense(TINY_INDPTR, TINY_INDICES, [1], [-2], seed=0)
    with pytest.raises(IndexError, match="sample_dense"):  # a neighbour id out of range, reached at hop 1
        kernels.sample_dense(TINY_INDPTR, np.array([1, 2, 0, 9, 0, 1, 3, 2]), [0], [-1, -1], seed=0)
