"""64-bit CSR offsets, counts and node ids: the graph kernels past 2**31 and 2**32 entries or nodes.

A papers100M-scale CSR has more than 2**32 entries (a symmetrised 1.6B-edge graph) and 111M nodes; here
``indices`` (or ``indptr``) is a map of a sparse file of that length (``tests/storage_kernels/wide.py``) with a
small graph written at its end, and the kernel's result must equal the same call on the small graph itself
(or the reference on the big map, which reads only the rows it needs). Kernels that check every entry of the
CSR first (label_propagation, rabbit_order's aggregation, csr_aggregate, filtered_ranks) would read the whole
hole; rabbit_order's documented limit (below 2**32 nodes and entries) is checked before any read.
"""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import (
    bucket_rows_ref,
    cluster_pass_ref,
    fennel_pass_ref,
    grem_pass_ref,
    random_graph,
    refine_pass_ref,
    sample_blocks_ref,
)
from tests.storage_kernels.wide import PAST_INT32, PAST_UINT32, sparse_maker

BASE = PAST_UINT32  # where the small graph's entries start in the big `indices`
N_SMALL = 64


@pytest.fixture
def sparse(tmp_path):
    yield from sparse_maker(tmp_path)


@pytest.fixture
def shifted(sparse):
    """A small random graph (indptr, indices) and its twin whose rows sit at entries past 2**32 of a 32 GiB
    ``indices`` map: ``(indptr + BASE, big_indices)``."""
    indptr, indices = random_graph(N_SMALL, 6, seed=11)
    big = sparse("indices.bin", np.int64, BASE + len(indices))
    big[BASE:] = indices
    return (indptr, indices), (indptr + BASE, big)


def assert_blocks_equal(got, want) -> None:
    """Two SampledBlocks (or their tuples) equal field by field."""
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    for a, b in zip(got[2], want[2], strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(got[3], want[3], strict=True):
        np.testing.assert_array_equal(a, b)


# ---- CSR construction ------------------------------------------------------------------------------------


def test_csr_count_and_place_past_4_gib(sparse):
    counts = np.array([(1 << 32) - 1, (1 << 31) - 1, 0], dtype=np.int64)
    kernels.csr_count([0, 1, 1, 0], counts)
    np.testing.assert_array_equal(counts, [(1 << 32) + 1, (1 << 31) + 1, 0])
    # the place pass into a 32 GiB indices map: cursors past 2**31 and 2**32
    indices = sparse("indices.bin", np.int64, BASE + 16)
    cursor = np.array([PAST_INT32, (1 << 32) - 1, BASE + 10], dtype=np.int64)
    start = cursor.copy()
    kernels.csr_place([1, 0, 1, 2, 0], [7, 8, 9, 10, 11], cursor, indices)
    np.testing.assert_array_equal(cursor, start + [2, 2, 1])
    np.testing.assert_array_equal(indices[[PAST_INT32, PAST_INT32 + 1]], [8, 11])
    np.testing.assert_array_equal(indices[[(1 << 32) - 1, 1 << 32, BASE + 10]], [7, 9, 10])
    full = np.array([0, 0, BASE + 16], dtype=np.int64)
    with pytest.raises(IndexError, match=rf"\(got cursor\[2\]={BASE + 16} at edge 0;"):
        kernels.csr_place([2], [1], full, indices)
    assert full[2] == BASE + 16  # restored


# ---- sampling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", [kernels.sample_blocks, kernels.sample_dense])
@pytest.mark.parametrize("fanouts", [[3, 2], [-1, 4], [2, 2, 2]])
def test_sampling_with_edge_offsets_past_4_gib(shifted, sampler, fanouts):
    """Rows at CSR entries past 2**32 sample exactly as the same rows at entry 0 (streams are keyed by node)."""
    (indptr, indices), (big_indptr, big_indices) = shifted
    seeds = np.array([5, 0, 63, 17])
    for threads in (1, 2):
        want = sampler(indptr, indices, seeds, fanouts, seed=3, num_threads=threads)
        assert_blocks_equal(sampler(big_indptr, big_indices, seeds, fanouts, seed=3, num_threads=threads), want)


@pytest.mark.parametrize("fanouts", [[-1, -1], [3, 2]])
def test_sampling_node_ids_past_2_31(sparse, fanouts):
    """A graph of 2**31 + 24,640 nodes (a 16 GiB indptr map) whose last nodes hold a small graph: ids past
    2**31 go through the hashed id map and come out whole; all-neighbour hops equal the small graph's, shifted."""
    indptr, indices = random_graph(N_SMALL, 6, seed=12)
    shift = PAST_INT32
    big_indptr = sparse("indptr.bin", np.int64, shift + N_SMALL + 1)
    big_indptr[shift:] = indptr  # every node below `shift` has no neighbour (indptr 0, 0)
    big_indices = indices + shift
    seeds = np.array([3, 40, 0])
    got = kernels.sample_blocks(big_indptr, big_indices, seeds + shift, fanouts, seed=5, num_threads=2)
    assert_blocks_equal(got, sample_blocks_ref(big_indptr, big_indices, seeds + shift, fanouts, seed=5))
    if fanouts[0] < 0:  # no random choice: the small graph's blocks, ids shifted
        small = kernels.sample_blocks(indptr, indices, seeds, fanouts, seed=5)
        assert_blocks_equal(got, (small.nodes + shift, small.hop_counts, small.indptrs, small.cols))
    assert got.nodes.min() >= shift


@pytest.mark.parametrize("sampler", [kernels.sample_blocks, kernels.sample_dense])
def test_sampling_refuses_2_31_seeds_before_reading(sparse, sampler):
    """A batch's positions are int32 in the id map: 2**31 seeds (a 16 GiB map) are refused up front."""
    seeds = sparse("seeds.bin", np.int64, 1 << 31)
    with pytest.raises(ValueError, match=r"'seeds' expected at most 2\*\*31 - 1 ids \(got 2147483648\)"):
        sampler(np.array([0, 0]), np.empty(0, np.int64), seeds, [1], seed=0)


# ---- partitioning passes over a streamed chunk ------------------------------------------------------------


def _fennel(fn, indptr, indices, labels, sizes, tsizes):
    n = len(labels)
    fn(indptr, indices, np.arange(n), labels, sizes, tsizes, (np.arange(n) % 3 == 0).astype(np.uint8),
       np.full(4, 20, np.int64), np.ones(4), 0, alpha=0.3, gamma=1.5, train_penalty=0.5, train_norm=10.0,
       block_nodes=16)


def test_fennel_and_grem_with_offsets_past_4_gib(shifted):
    (indptr, indices), (big_indptr, big_indices) = shifted
    state = lambda: (np.full(N_SMALL, -1, np.int32), np.zeros(4, np.int64), np.zeros(4, np.int64))  # noqa: E731
    want, got = state(), state()
    _fennel(fennel_pass_ref, indptr, indices, *want)
    _fennel(kernels.fennel_pass, big_indptr, big_indices, *got)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)

    def grem(fn, ptr, cols):
        labels, pref, sizes = np.full(N_SMALL, -1, np.int32), np.zeros(N_SMALL, np.float32), np.zeros(2, np.int64)
        moved = [fn(ptr, cols, np.arange(N_SMALL), labels, pref, sizes, np.array([40, 40]), 5, 6) for _ in range(2)]
        return moved, labels, pref, sizes

    (m1, *s1), (m2, *s2) = grem(grem_pass_ref, indptr, indices), grem(kernels.grem_pass, big_indptr, big_indices)
    assert m1 == m2
    for a, b in zip(s1, s2, strict=True):
        np.testing.assert_array_equal(a, b)


def test_multilevel_passes_with_offsets_past_4_gib(shifted):
    (indptr, indices), (big_indptr, big_indices) = shifted
    nodes = np.random.default_rng(13).permutation(N_SMALL)  # any order: the chunk's rows follow it
    ptr = np.concatenate([[0], np.cumsum(np.diff(indptr)[nodes])])
    cols = np.concatenate([indices[indptr[v] : indptr[v + 1]] for v in nodes])
    big_cols = big_indices  # the chunk's rows, in nodes order, rewritten at the big map's end
    big_cols[BASE : BASE + len(cols)] = cols

    def cluster(fn, p, c):
        clusters, weight = np.arange(N_SMALL, dtype=np.int64), np.ones(N_SMALL, np.int64)
        return fn(p, c, nodes, clusters, weight, 4), clusters, weight

    def refine(fn, p, c):
        parts, sizes = (np.arange(N_SMALL) % 3).astype(np.int32), np.bincount(np.arange(N_SMALL) % 3).astype(np.int64)
        return fn(p, c, nodes, parts, sizes, np.full(3, 24, np.int64)), parts, sizes

    for run in (cluster, refine):
        ref_fn = cluster_pass_ref if run is cluster else refine_pass_ref
        kernel = kernels.cluster_pass if run is cluster else kernels.refine_pass
        (m1, *s1), (m2, *s2) = run(ref_fn, ptr, cols), run(kernel, ptr + BASE, big_cols)
        assert m1 == m2, run.__name__
        for a, b in zip(s1, s2, strict=True):
            np.testing.assert_array_equal(a, b)


# ---- reordering: ids past 2**31 and 2**32, rabbit_order's limit -------------------------------------------


@pytest.mark.parametrize("width", ["list", "uint32", "int64", "uint64"])
def test_relabel_ids_past_4_gib(sparse, width):
    """``inverse`` of 2**32 + 40,968 ids (a 32 GiB map): ids past 2**31 and 2**32, given in any integer width
    that holds them, map to new ids past 2**32."""
    inverse = sparse("inverse.bin", np.int64, BASE + 8)
    ids = np.array([BASE + 7, PAST_INT32, (1 << 32) - 1, 5, BASE]) if width != "uint32" else (
        np.array([(1 << 32) - 1, PAST_INT32, 5]))
    inverse[ids] = np.arange(len(ids)) + (1 << 33)
    given = ids.tolist() if width == "list" else ids.astype(width)
    np.testing.assert_array_equal(kernels.relabel_ids(given, inverse, num_threads=2), np.asarray(inverse[ids]))
    with pytest.raises(IndexError, match=rf"\(got ids\[1\]={BASE + 8}\)"):
        kernels.relabel_ids([0, BASE + 8], inverse)


def test_bucket_rows_and_split_by_code_keys_past_4_gib():
    rng = np.random.default_rng(14)
    keys = rng.choice(np.array([3, PAST_INT32, PAST_UINT32, 1 << 40, (1 << 32) - 1]), 50)
    rows = rng.standard_normal((50, 3)).astype(np.float32)
    bounds = np.array([0, 1 << 31, 1 << 32, (1 << 40) + 1])
    for got, want in zip(kernels.bucket_rows(rows, keys, bounds, num_threads=2), bucket_rows_ref(rows, keys, bounds),
                         strict=True):
        np.testing.assert_array_equal(got, want)
    codes = rng.integers(0, 3, 50).astype(np.int8)
    groups = kernels.split_by_code(codes, keys, 3)
    for c in range(3):
        mine = keys[codes == c]
        np.testing.assert_array_equal(groups.slots[groups.ptr[c] : groups.ptr[c + 1]], mine)
        assert (groups.lo[c], groups.hi[c]) == ((mine.min(), mine.max()) if len(mine) else (0, -1))


def test_rabbit_order_refuses_2_32_entries_before_reading(sparse):
    """The documented limit (fewer than 2**32 nodes and entries: 32-bit counts inside) is a clear error raised
    before a single entry of the 32 GiB ``indices`` map is read."""
    indices = sparse("indices.bin", np.int64, 1 << 32)
    with pytest.raises(ValueError, match=r"fewer than 2\*\*32 nodes and CSR entries \(got 1 nodes, 4294967296 "):
        kernels.rabbit_order(np.array([0, 1 << 32]), indices)
