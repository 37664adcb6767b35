"""The invariants of the graph artifacts: ``ingest``'s CSR and features (``csr_valid``, ``features_finite``) and
``reorder``'s permutation and relabelled CSR (``permutation_bijective``, ``same_graph``)."""

from __future__ import annotations

import numpy as np

from pipelines.checks.base import _CHUNK, CheckInputs, Finding, StageCheck, _check_range, _chunks, _first
from storage_kernels.arrays import random_access, segment_ranges

__all__ = ["CSR_VALID", "FEATURES_FINITE", "PERMUTATION_BIJECTIVE", "SAME_GRAPH", "check_csr",
           "check_features_finite", "check_permutation", "check_same_graph"]


def check_features_finite(features: np.ndarray, name: str = "features.npy") -> Finding:
    """Every feature value finite: a NaN or inf would surface only as a diverged model after a whole training
    run. Streamed in row chunks; the first offender is named by row and column."""
    f = Finding()
    rows = max(1, _CHUNK // max(int(features.shape[1]) if features.ndim == 2 else 1, 1))
    bad, first = 0, None
    for start, stop in _chunks(len(features), rows):
        block = np.asarray(features[start:stop])
        finite = np.isfinite(block)
        if not finite.all():
            if first is None:
                where = np.argwhere(~finite)[0]
                first = (start + int(where[0]), *(int(w) for w in where[1:]), float(block[tuple(where)]))
            bad += int(finite.size - np.count_nonzero(finite))
    f.facts["non_finite_values"] = bad
    if first is not None:
        at = f"row {first[0]}" + (f", column {first[1]}" if len(first) > 2 else "")
        f.fail(f"'{name}' expected finite values (got {bad} NaN/inf; the first at {at}: {first[-1]})")
    return f


def check_csr(indptr: np.ndarray, indices: np.ndarray, num_nodes: int | None = None) -> Finding:
    """CSR valid: indptr starts at 0, never decreases, ends at len(indices); indices in [0, N)."""
    f = Finding()
    n = len(indptr) - 1
    f.facts.update({"num_nodes": n, "num_edges": len(indices)})
    if n < 0:
        f.fail("'indptr.npy' expected at least one entry (got 0)")
        return f
    if num_nodes is not None and n != num_nodes:
        f.fail(f"'indptr.npy' expected {num_nodes + 1} entries for {num_nodes} nodes (got {len(indptr)})")
    if int(indptr[0]) != 0:
        f.fail(f"'indptr[0]' expected 0 (got {int(indptr[0])})")
    if int(indptr[-1]) != len(indices):
        f.fail(f"'indptr[-1]' expected len(indices) = {len(indices)} (got {int(indptr[-1])})")
    max_degree = 0
    for start, stop in _chunks(n):
        degrees = np.diff(np.asarray(indptr[start : stop + 1]))
        if (degrees < 0).any():
            i = start + _first(degrees < 0)
            f.fail(f"'indptr' expected non-decreasing values (got indptr[{i + 1}] < indptr[{i}])")
            break
        if len(degrees):
            max_degree = max(max_degree, int(degrees.max()))
    f.facts["max_degree"] = max_degree
    _check_range(f, "indices", indices, 0, n)
    return f


def check_permutation(perm: np.ndarray, inverse: np.ndarray) -> Finding:
    """``perm`` (new -> old) is a bijection on [0, N) and ``inverse`` (old -> new) is its inverse."""
    f = Finding()
    n = len(perm)
    f.facts["num_nodes"] = n
    if len(inverse) != n:
        f.fail(f"'inverse.npy' expected {n} entries like perm.npy (got {len(inverse)})")
        return f
    _check_range(f, "perm", perm, 0, n)
    _check_range(f, "inverse", inverse, 0, n)
    if not f.passed:
        return f
    # inverse[perm[i]] == i for every i makes perm injective, hence a bijection of the finite set [0, N).
    for start, stop in _chunks(n):
        back = np.asarray(inverse)[np.asarray(perm[start:stop])]
        bad = back != np.arange(start, stop)
        if bad.any():
            i = start + _first(bad)
            f.fail(f"'inverse[perm[{i}]]' expected {i} (got {int(back[i - start])})")
            break
    return f


def check_same_graph(old_indptr: np.ndarray, old_indices: np.ndarray, new_indptr: np.ndarray,
                     new_indices: np.ndarray, perm: np.ndarray, max_sample_edges: int = 4_000_000) -> Finding:
    """The rewritten CSR is the old graph relabelled: every degree matches, and on a deterministic sample of
    rows (up to ``max_sample_edges`` edges) the neighbour sets mapped back through ``perm`` are equal."""
    f = Finding()
    n = len(perm)
    if len(new_indptr) != n + 1 or len(old_indptr) != n + 1:
        f.fail(f"'indptr.npy' expected {n + 1} entries in both CSRs (got {len(old_indptr)}, {len(new_indptr)})")
        return f
    old_ptr, new_ptr = np.asarray(old_indptr), np.asarray(new_indptr)
    for start, stop in _chunks(n):
        old_deg = old_ptr[np.asarray(perm[start:stop]) + 1] - old_ptr[np.asarray(perm[start:stop])]
        bad = np.diff(new_ptr[start : stop + 1]) != old_deg
        if bad.any():
            i = start + _first(bad)
            f.fail(f"'degree of new node {i}' expected {int(old_deg[i - start])}, the degree of old node "
                   f"{int(perm[i])} (got {int(new_ptr[i + 1] - new_ptr[i])})")
            return f
    e = int(new_ptr[-1])
    rows = _sample_rows(n, e, max_sample_edges)
    f.facts.update({"rows_compared": len(rows), "degrees_compared": n})
    perm_arr = np.asarray(perm)
    # the old rows of a sample are scattered: a fault reads its page, not 128 KiB around it (at 1.2B entries
    # read-around turned a 4M-edge sample into tens of GB of reads)
    with random_access(old_indices, new_indices, perm):
        return _compare_neighbours(f, rows, old_ptr, old_indices, new_ptr, new_indices, perm_arr)


def _sample_rows(n: int, num_edges: int, max_sample_edges: int, run: int = 64) -> np.ndarray:
    """Rows to compare: runs of ``run`` consecutive rows spread evenly over ``[0, n)``, about
    ``max_sample_edges`` edges in all (consecutive new rows are one forward read of the new CSR)."""
    step = max(1, -(-num_edges // max_sample_edges))  # one row in step: about max_sample_edges edges
    if step == 1:
        return np.arange(n, dtype=np.int64)
    starts = np.arange(0, n, step * run, dtype=np.int64)
    rows = (starts[:, None] + np.arange(run, dtype=np.int64)).ravel()
    return rows[rows < n]


def _compare_neighbours(f: Finding, rows: np.ndarray, old_ptr: np.ndarray, old_indices: np.ndarray,
                        new_ptr: np.ndarray, new_indices: np.ndarray, perm_arr: np.ndarray) -> Finding:
    for part in np.array_split(rows, max(1, len(rows) // 65536)):
        if not len(part):
            continue
        new_nbrs, new_owner = _gather_rows(new_ptr, new_indices, part)
        old_nbrs, old_owner = _gather_rows(old_ptr, old_indices, perm_arr[part])
        mapped = perm_arr[new_nbrs]  # back to old ids
        a = np.lexsort((mapped, new_owner))
        b = np.lexsort((old_nbrs, old_owner))
        bad = mapped[a] != np.asarray(old_nbrs)[b]
        if bad.any():
            k = _first(bad)
            row = int(part[new_owner[a][k]])
            f.fail(f"'neighbours of new node {row}' expected the neighbours of old node {int(perm_arr[row])} "
                   f"relabelled (got old id {int(mapped[a][k])} where {int(old_nbrs[b][k])} was expected)")
            return f
    return f


def _gather_rows(indptr: np.ndarray, indices: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated neighbour lists of ``rows`` and, for each entry, the position of its row in ``rows``."""
    begins, ends = indptr[rows], indptr[rows + 1]
    lengths = ends - begins
    owner = np.repeat(np.arange(len(rows)), lengths)
    flat = np.repeat(begins, lengths) + segment_ranges(lengths)
    return np.asarray(indices[flat]), owner


def _csr_valid(c: CheckInputs) -> Finding:
    art = c.artifact
    return check_csr(art.array("indptr.npy"), art.array("indices.npy"), len(art.array("labels.npy")))


def _features_finite(c: CheckInputs) -> Finding:
    return check_features_finite(c.artifact.array("features.npy"), f"{c.artifact.path}/features.npy")


def _permutation_bijective(c: CheckInputs) -> Finding:
    return check_permutation(c.artifact.array("perm.npy"), c.artifact.array("inverse.npy"))


def _same_graph(c: CheckInputs) -> Finding:
    art, old = c.artifact, c.upstream("ingest")
    return check_same_graph(old.array("indptr.npy"), old.array("indices.npy"), art.array("indptr.npy"),
                            art.array("indices.npy"), art.array("perm.npy"))


CSR_VALID = StageCheck("csr_valid", "CSR valid: indptr from 0, non-decreasing, ending at len(indices); every "
                       "index in [0, N).", _csr_valid)
FEATURES_FINITE = StageCheck("features_finite", "Every feature value finite (no NaN or inf).", _features_finite)
PERMUTATION_BIJECTIVE = StageCheck("permutation_bijective", "perm is a bijection on [0, N) and inverse is its "
                                   "inverse.", _permutation_bijective)
SAME_GRAPH = StageCheck("same_graph", "The rewritten CSR is the same graph: degrees match through perm, and "
                        "sampled rows' neighbour sets map back exactly.", _same_graph)
