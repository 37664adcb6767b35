"""csr_count / csr_place / build_csr / csr_dedupe: known answers, NumPy reference, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import (
    TINY_EDGES,
    TINY_INDICES,
    TINY_INDPTR,
    build_csr_ref,
    csr_count_ref,
    csr_dedupe_ref,
    symmetrise,
)


def chunked(src, dst, size):
    def factory():
        for i in range(0, max(len(src), 1), size):
            yield src[i : i + size], dst[i : i + size]

    return factory


# ---- known answers ---------------------------------------------------------------------------------------


def test_tiny_graph_from_sorted_edges():
    src, dst = symmetrise(TINY_EDGES)
    order = np.lexsort((dst, src))  # rows in ascending neighbour order, as drawn
    indptr, indices = kernels.build_csr(chunked(src[order], dst[order], 3), 4)
    np.testing.assert_array_equal(indptr, TINY_INDPTR)
    np.testing.assert_array_equal(indices, TINY_INDICES)


def test_count_and_place_by_hand():
    counts = np.zeros(4, dtype=np.int64)
    kernels.csr_count([2, 0, 2], counts)
    kernels.csr_count(np.array([3], dtype=np.int32), counts)  # any integer dtype is normalised
    np.testing.assert_array_equal(counts, [1, 0, 2, 1])
    cursor = np.array([0, 1, 1, 3])
    indices = np.full(4, -1, dtype=np.int64)
    kernels.csr_place([2, 0, 2, 3], [7, 8, 9, 5], cursor, indices)
    np.testing.assert_array_equal(indices, [8, 7, 9, 5])
    np.testing.assert_array_equal(cursor, [1, 1, 3, 4])


def test_empty_inputs():
    indptr, indices = kernels.build_csr(lambda: iter([]), 3)
    np.testing.assert_array_equal(indptr, [0, 0, 0, 0])
    assert indices.shape == (0,)
    indptr, indices = kernels.build_csr(lambda: iter([]), 0)
    np.testing.assert_array_equal(indptr, [0])


# ---- reference comparison --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "seed,num_nodes,num_edges,chunk", [(0, 1, 5, 2), (1, 50, 500, 64), (2, 1000, 20_000, 3000), (3, 7, 0, 4)]
)
def test_build_csr_matches_reference(seed, num_nodes, num_edges, chunk):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, num_nodes, num_edges)
    dst = rng.integers(0, 10 * num_nodes, num_edges)  # dst ids are opaque payload: any int64
    indptr, indices = kernels.build_csr(chunked(src, dst, chunk), num_nodes)
    ref_indptr, ref_indices = build_csr_ref(src, dst, num_nodes)
    np.testing.assert_array_equal(indptr, ref_indptr)
    np.testing.assert_array_equal(indices, ref_indices)
    counts = np.zeros(num_nodes, dtype=np.int64)
    kernels.csr_count(src, counts)
    np.testing.assert_array_equal(counts, csr_count_ref(src, num_nodes))


def test_build_csr_into_memmap(tmp_path):
    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 100, 3000), rng.integers(0, 100, 3000)
    out = np.lib.format.open_memmap(tmp_path / "indices.npy", mode="w+", dtype=np.int64, shape=(3000,))
    indptr, indices = kernels.build_csr(chunked(src, dst, 256), 100, indices_out=out)
    assert indices is out
    del out, indices
    ref_indptr, ref_indices = build_csr_ref(src, dst, 100)
    np.testing.assert_array_equal(np.load(tmp_path / "indices.npy"), ref_indices)
    np.testing.assert_array_equal(indptr, ref_indptr)


def test_build_csr_with_allocator(tmp_path):
    src, dst = symmetrise(TINY_EDGES)
    seen = []

    def allocate(num_edges):
        seen.append(num_edges)
        return np.memmap(tmp_path / "indices.bin", dtype=np.int64, mode="w+", shape=(num_edges,))

    _, indices = kernels.build_csr(chunked(src, dst, 5), 4, indices_out=allocate)
    assert seen == [8] and isinstance(indices, np.memmap)
    np.testing.assert_array_equal(np.sort(indices), np.sort(TINY_INDICES))


# ---- invalid inputs --------------------------------------------------------------------------------------


def test_count_out_of_range_is_index_error_and_leaves_counts():
    counts = np.zeros(4, dtype=np.int64)
    with pytest.raises(IndexError, match=r"src\[2\]=4"):
        kernels.csr_count([0, 1, 4, 1], counts)
    with pytest.raises(IndexError, match=r"src\[0\]=-1"):
        kernels.csr_count([-1], counts)
    np.testing.assert_array_equal(counts, 0)


def test_place_errors_restore_cursor():
    cursor = np.array([0, 1, 2], dtype=np.int64)
    indices = np.zeros(3, dtype=np.int64)
    with pytest.raises(IndexError, match=r"src\[1\]=3"):
        kernels.csr_place([0, 3], [1, 1], cursor, indices)
    np.testing.assert_array_equal(cursor, [0, 1, 2])
    with pytest.raises(IndexError, match=r"cursor\[2\]=3 at edge 1"):  # node 2 gets more edges than counted
        kernels.csr_place([2, 2], [0, 0], cursor, indices)
    np.testing.assert_array_equal(cursor, [0, 1, 2])


def test_value_errors():
    counts = np.zeros(4, dtype=np.int64)
    with pytest.raises(ValueError, match="'counts' expected a writable C-contiguous 1-D int64"):
        kernels.csr_count([0], counts.astype(np.int32))
    with pytest.raises(ValueError, match="non-contiguous"):
        kernels.csr_count([0], np.zeros(8, dtype=np.int64)[::2])
    readonly = counts.copy()
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        kernels.csr_count([0], readonly)
    with pytest.raises(ValueError, match="'src' expected an integer array"):
        kernels.csr_count([0.5], counts)
    with pytest.raises(ValueError, match=r"'dst' expected the length of 'src' \(2\) \(got 1\)"):
        kernels.csr_place([0, 1], [0], counts.copy(), counts.copy())
    with pytest.raises(ValueError, match="'counts' expected"):
        kernels.csr_count([0], [0, 0])  # a list is not a writable int64 buffer


def test_build_csr_rejects_changing_edges():
    calls = []

    def factory():
        calls.append(1)
        n = 3 if len(calls) == 1 else 2
        return iter([(np.zeros(n, np.int64), np.ones(n, np.int64))])

    with pytest.raises(ValueError, match="same edges on both passes"):
        kernels.build_csr(factory, 2)
    with pytest.raises(ValueError, match=r"'indices_out' expected a writable int64 array of shape \(4,\)"):
        kernels.build_csr(lambda: iter([(np.zeros(4, np.int64), np.ones(4, np.int64))]), 2, np.zeros(3, np.int64))


def test_input_kinds():
    # the C functions take any C-contiguous buffer with an int64 format, not only ndarrays
    import array

    from storage_kernels import _native

    counts = np.zeros(3, dtype=np.int64)
    src = np.array([0, 2, 2])
    for kind in (src, memoryview(src), array.array("q", [0, 2, 2]), src.view(np.longlong)):
        _native.csr_count(kind, counts)
    np.testing.assert_array_equal(counts, [4, 0, 8])
    with pytest.raises(ValueError, match=r"'src' expected a C-contiguous 1-D int64 array \(got bytes\)"):
        _native.csr_count(b"\x00" * 8, counts)


# ---- csr_dedupe -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("max_degree", [0, 1, 6, 24, 25, 400])  # 24: the insertion-sort limit; 25: qsort
@pytest.mark.parametrize("threads", [1, 2, 5])
def test_csr_dedupe_equals_the_numpy_reference(max_degree, threads):
    rng = np.random.default_rng(max_degree * 10 + threads)
    degrees = rng.integers(0, max_degree + 1, 9000)
    indptr = np.zeros(len(degrees) + 1, np.int64)
    np.cumsum(degrees, out=indptr[1:])
    indptr += 1_000  # a slice of a larger CSR: offsets from indptr[0]
    indices = rng.integers(-3, max(max_degree, 1) * 2, int(degrees.sum()) + 5)  # repeats; tail past the rows
    want_ptr, want_cols = csr_dedupe_ref(indptr, indices)
    got_ptr, got_cols = kernels.csr_dedupe(indptr, indices.copy(), num_threads=threads)
    np.testing.assert_array_equal(got_ptr, want_ptr)
    np.testing.assert_array_equal(got_cols, want_cols)


def test_csr_dedupe_works_in_place_and_refuses_bad_offsets():
    indptr = np.array([5, 8, 8, 11])
    indices = np.array([3, 1, 3, 2, 2, 0], dtype=np.int64)
    ptr, cols = kernels.csr_dedupe(indptr, indices)
    np.testing.assert_array_equal(ptr, [0, 2, 2, 4])
    np.testing.assert_array_equal(cols, [1, 3, 0, 2])
    assert np.shares_memory(cols, indices)
    with pytest.raises(ValueError, match=r"'indptr' expected ascending offsets .* \(got indptr\[2\]=7 after 8\)"):
        kernels.csr_dedupe(np.array([5, 8, 7]), indices.copy())
    with pytest.raises(ValueError, match=r"within len\(indices\)=6"):
        kernels.csr_dedupe(np.array([0, 4, 9]), indices.copy())
    with pytest.raises(ValueError, match="writable"):
        kernels.csr_dedupe(np.array([0, 6]), np.frombuffer(indices.tobytes(), dtype=np.int64))
