"""permute.c (relabel_ids, bucket_rows, place_rows): known answers, NumPy references, threads, invalid inputs;
and the external permutation of the reorder stage built on them, against the in-memory permutation."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.stages.reorder import (
    external_permute_csr,
    external_permute_rows,
    inverse_of,
    permuted_indptr,
    permuted_labels,
)
from storage_kernels import _native, kernels
from tests.storage_kernels.reference import (
    bucket_rows_ref,
    permute_csr_ref,
    random_csr,
    relabel_ids_ref,
)

# ---- relabel_ids ------------------------------------------------------------------------------------------


def test_relabel_known_answer():
    inverse = np.array([2, 0, 1], dtype=np.int64)
    np.testing.assert_array_equal(kernels.relabel_ids([0, 2, 2, 1], inverse), [2, 1, 1, 0])
    out = np.zeros(2, dtype=np.int64)
    assert _native.relabel_ids(np.array([1, 0]), inverse, out) is None
    np.testing.assert_array_equal(out, [0, 2])


@pytest.mark.parametrize("threads", [1, 3, 0])
def test_relabel_matches_reference(threads):
    rng = np.random.default_rng(0)
    inverse = rng.permutation(5000).astype(np.int64)
    ids = rng.integers(0, 5000, 300_000)
    np.testing.assert_array_equal(kernels.relabel_ids(ids, inverse, num_threads=threads), relabel_ids_ref(ids, inverse))


def test_relabel_invalid_inputs():
    inverse = np.arange(4, dtype=np.int64)
    with pytest.raises(IndexError, match=r"ids\[1\]=4"):
        kernels.relabel_ids([0, 4], inverse)
    with pytest.raises(IndexError, match=r"ids\[0\]=-1"):
        kernels.relabel_ids([-1], inverse)
    with pytest.raises(ValueError, match="'out' expected length 2"):
        _native.relabel_ids(np.array([0, 1]), inverse, np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="'inverse' expected"):
        _native.relabel_ids(np.array([0]), inverse.astype(np.int32), np.zeros(1, dtype=np.int64))
    with pytest.raises(ValueError, match="num_threads|threads"):
        _native.relabel_ids(np.array([0]), inverse, np.zeros(1, dtype=np.int64), -1)


# ---- bucket_rows ------------------------------------------------------------------------------------------


def test_bucket_known_answer():
    rows = np.arange(12, dtype=np.float32).reshape(6, 2)
    keys = np.array([5, 0, 3, 1, 4, 2])
    out_rows, out_keys, ptr = kernels.bucket_rows(rows, keys, [0, 2, 4, 6])
    np.testing.assert_array_equal(ptr, [0, 2, 4, 6])
    np.testing.assert_array_equal(out_keys, [0, 1, 3, 2, 5, 4])
    np.testing.assert_array_equal(out_rows[:, 0], [2, 6, 4, 10, 0, 8])


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.float64])
@pytest.mark.parametrize("threads", [1, 4])
def test_bucket_matches_reference(dtype, threads):
    rng = np.random.default_rng(1)
    n = 200_000 if threads > 1 else 2000
    rows = (rng.standard_normal((n, 3)) * 50).astype(dtype)
    keys = rng.integers(10, 10 + 3 * n, n)
    bounds = np.array([10, 11, 500, 500, 4000, 10 + 3 * n])  # an empty bucket too
    got = kernels.bucket_rows(rows, keys, bounds, num_threads=threads)
    for g, r in zip(got, bucket_rows_ref(rows, keys, bounds), strict=True):
        np.testing.assert_array_equal(g, r)


def test_bucket_invalid_inputs():
    rows = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(IndexError, match=r"keys\[2\]=9"):
        kernels.bucket_rows(rows, [0, 1, 9], [0, 5])
    with pytest.raises(ValueError, match="ascending"):
        kernels.bucket_rows(rows, [0, 1, 2], [0, 5, 3])
    with pytest.raises(ValueError, match="at least 2"):
        kernels.bucket_rows(rows, [0, 1, 2], [0])
    with pytest.raises(ValueError, match="'keys' expected length 3"):
        kernels.bucket_rows(rows, [0, 1], [0, 5])
    with pytest.raises(ValueError, match="'out_rows' expected the element type"):
        _native.bucket_rows(rows, np.arange(3), np.array([0, 5]), np.zeros((3, 2), np.float64),
                            np.zeros(3, np.int64), np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="'counts' expected length 1"):
        _native.bucket_rows(rows, np.arange(3), np.array([0, 5]), np.zeros((3, 2), np.float32),
                            np.zeros(3, np.int64), np.zeros(2, np.int64))


# ---- place_rows -------------------------------------------------------------------------------------------


def test_place_known_answer_and_reference():
    rows = np.arange(8, dtype=np.int64).reshape(4, 2)
    out = np.zeros((4, 2), dtype=np.int64)
    kernels.place_rows(rows, [2, 0, 3, 1], out)
    np.testing.assert_array_equal(out, [[2, 3], [6, 7], [0, 1], [4, 5]])
    rng = np.random.default_rng(2)
    big = rng.standard_normal((50_000, 16)).astype(np.float32)
    pos = rng.permutation(50_000)
    for threads in (1, 4):
        got = kernels.place_rows(big, pos, np.empty_like(big), num_threads=threads)
        expected = np.empty_like(big)
        expected[pos] = big
        np.testing.assert_array_equal(got, expected)


def test_place_invalid_inputs_leave_out_untouched():
    rows = np.ones((3, 2), dtype=np.float32)
    out = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(ValueError, match=r"distinct positions \(got pos\[2\]=0 twice"):
        kernels.place_rows(rows, [0, 1, 0], out)
    with pytest.raises(IndexError, match=r"pos\[1\]=3"):
        kernels.place_rows(rows, [0, 3, 1], out)
    assert not out.any()
    with pytest.raises(ValueError, match="'pos' expected length 3"):
        kernels.place_rows(rows, [0, 1], out)
    with pytest.raises(ValueError, match="columns"):
        kernels.place_rows(rows, [0, 1, 2], np.zeros((3, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="'out' expected a writable"):
        kernels.place_rows(rows, [0, 1, 2], np.frombuffer(bytes(24), dtype=np.float32).reshape(3, 2))


# ---- external permutation (reorder stage) -----------------------------------------------------------------


@pytest.mark.parametrize("bucket_rows,chunk_rows", [(7, 5), (1, 3), (1000, 1000), (13, 64)])
def test_external_rows_equal_in_memory_permutation(tmp_path, bucket_rows, chunk_rows):
    rng = np.random.default_rng(3)
    features = rng.standard_normal((103, 6)).astype(np.float32)
    perm = rng.permutation(103).astype(np.int64)
    chunks: list[np.ndarray] = []
    scratch = tmp_path / "scratch"
    buckets = external_permute_rows(features, inverse_of(perm), chunks.append, bucket_rows, chunk_rows, scratch)
    assert buckets == -(-103 // bucket_rows)
    np.testing.assert_array_equal(np.concatenate(chunks), features[perm])
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("bucket_edges,chunk_edges", [(13, 11), (1, 1), (10**6, 10**6), (40, 7)])
def test_external_csr_equals_in_memory_permutation(tmp_path, bucket_edges, chunk_edges):
    rng = np.random.default_rng(4)
    indptr, indices = random_csr(120, 900, rng)
    perm = rng.permutation(120).astype(np.int64)
    chunks: list[np.ndarray] = []
    new_indptr, buckets = external_permute_csr(indptr, indices, perm, inverse_of(perm), chunks.append,
                                               bucket_edges, chunk_edges, tmp_path / "s")
    ref_indptr, ref_indices = permute_csr_ref(indptr, indices, perm)
    np.testing.assert_array_equal(new_indptr, ref_indptr)
    np.testing.assert_array_equal(np.concatenate(chunks), ref_indices)
    assert buckets >= 1 and list((tmp_path / "s").iterdir()) == []


def test_external_permutation_rejects_a_non_permutation(tmp_path):
    with pytest.raises(ValueError, match="'perm' expected a permutation"):
        inverse_of(np.array([0, 0, 2]))
    features = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(ValueError, match="not a permutation|distinct"):
        external_permute_rows(features, np.array([0, 0, 2]), lambda c: None, 2, 2, tmp_path / "s")


@pytest.mark.parametrize("n", [0, 1, 7, 5000])
def test_degree_order_equals_a_stable_argsort(n):
    rng = np.random.default_rng(n)
    degrees = rng.integers(0, 40, n)
    degrees[rng.random(n) < 0.2] = 0  # many ties, isolated nodes among them
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    np.testing.assert_array_equal(kernels.degree_order(indptr), np.argsort(-degrees, kind="stable"))


def test_degree_order_rejects_decreasing_offsets():
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing offsets \(got indptr\[2\]=1 after 3\)"):
        kernels.degree_order(np.array([0, 3, 1, 4], dtype=np.int64))


@pytest.mark.parametrize("chunk", [1, 3, 64, 1 << 22])
def test_streamed_inverse_offsets_and_labels_equal_in_memory(tmp_path, chunk):
    rng = np.random.default_rng(5)
    indptr, _ = random_csr(50, 300, rng)
    perm = rng.permutation(50).astype(np.int64)
    np.save(tmp_path / "perm.npy", perm)
    mapped = np.load(tmp_path / "perm.npy", mmap_mode="r")  # the stage streams perm.npy back from its file
    reference = np.empty(50, dtype=np.int64)
    reference[perm] = np.arange(50)
    np.testing.assert_array_equal(inverse_of(mapped, chunk), reference)
    parts: list[np.ndarray] = []
    permuted_indptr(indptr, mapped, parts.append, chunk)
    np.testing.assert_array_equal(np.concatenate(parts), np.concatenate([[0], np.cumsum(np.diff(indptr)[perm])]))
    for labels in (rng.integers(-1, 16, 50), rng.integers(0, 2**40, 50), rng.random(50)):
        parts = []
        permuted_labels(labels, mapped, parts.append, chunk)
        out = np.concatenate(parts)
        assert out.dtype == labels.dtype
        np.testing.assert_array_equal(out, labels[perm])
    with pytest.raises(ValueError, match=r"'perm' expected ids in \[0, 3\)"):
        inverse_of(np.array([0, 3, 1]), chunk)
