"""OUTRE's offline analysis: pruning against a per-node reference, the staleness FSM, the Eq. 5 sweep against
brute force, subtree ownership."""

from __future__ import annotations

import numpy as np
import pytest

from pipelines.methods.policies.outre.trace import (
    StalenessFSM,
    alpha_sweep,
    exclusive_subtrees,
    prune_batch,
    prune_batch_numpy,
    top_ranked,
)
from storage_kernels import kernels
from tests.pipelines.stage_fixtures import random_symmetric_csr


def _batch(seed: int, fanouts: list[int], num_seeds: int = 12):
    indptr, indices = random_symmetric_csr(300, 6, seed)
    rng = np.random.default_rng(seed)
    seeds = rng.choice(300, num_seeds, replace=False).astype(np.int64)
    b = kernels.sample_blocks(indptr, indices, seeds, np.asarray(fanouts, dtype=np.int64), seed)
    return np.asarray(b.nodes), np.asarray(b.hop_counts), [np.asarray(x) for x in b.indptrs], \
        [np.asarray(x) for x in b.cols]


def _prune_reference(hop_counts, indptrs, cols, pulled):
    """Per-node loops: needed sets hop by hop, then kept nodes renumbered in order."""
    top = int(hop_counts[1])
    need = set(range(top)) - {int(p) for p in pulled}
    kept_edges = [[(d, int(c)) for d in range(int(hop_counts[0])) for c in cols[0][indptrs[0][d]:indptrs[0][d + 1]]]]
    for h in range(1, len(indptrs)):
        edges = []
        for d in range(int(hop_counts[h])):
            if d in need:
                edges += [(d, int(c)) for c in cols[h][indptrs[h][d]:indptrs[h][d + 1]]]
        kept_edges.append(edges)
        need |= {c for _, c in edges}
    kept = sorted(need | set(range(top)))
    new = {old: i for i, old in enumerate(kept)}
    counts = [sum(1 for k in kept if k < hc) for hc in hop_counts]
    out_indptrs, out_cols = [], []
    for h, edges in enumerate(kept_edges):
        indptr = [0] * (counts[h] + 1)
        for d, _ in edges:
            indptr[new[d] + 1] += 1
        out_indptrs.append(np.cumsum(indptr))
        out_cols.append(np.asarray([new[c] for _, c in edges], dtype=np.int64))
    skip = sorted(new[k] for k in kept if k not in need)
    return np.asarray(kept), np.asarray(counts), out_indptrs, out_cols, np.asarray(skip, dtype=np.int64)


@pytest.mark.parametrize("prune", [prune_batch, prune_batch_numpy], ids=["c", "numpy"])
@pytest.mark.parametrize(("seed", "fanouts", "fraction"), [(0, [4, 4], 0.3), (1, [3, 3, 3], 0.5), (2, [5, 2, 3], 1.0),
                                                           (3, [4, 4, 4], 0.1), (6, [2, 3, 2, 3], 0.4)])
def test_pruning_matches_the_per_node_reference(prune, seed: int, fanouts: list[int], fraction: float) -> None:
    nodes, hc, indptrs, cols = _batch(seed, fanouts)
    rng = np.random.default_rng(seed)
    top = int(hc[1])
    pulled = np.sort(rng.choice(top, int(top * fraction), replace=False))
    got = prune(hc, indptrs, cols, pulled)
    keep, counts, ref_indptrs, ref_cols, skip = _prune_reference(hc, indptrs, cols, pulled)
    assert np.array_equal(got.keep, keep) and np.array_equal(got.hop_counts, counts)
    assert len(got.indptrs) == len(got.cols) == len(indptrs)
    for h in range(len(indptrs)):
        assert np.array_equal(got.indptrs[h], ref_indptrs[h]), h
        assert np.array_equal(got.cols[h], ref_cols[h]), h
        assert got.cols[h].max(initial=-1) < got.hop_counts[h + 1]  # still a valid layered batch
    assert np.array_equal(got.skip, skip)
    assert np.array_equal(got.new_pos[keep], np.arange(len(keep)))
    assert set(got.skip.tolist()) <= set(got.new_pos[pulled].tolist())  # only pulled candidates are skipped
    if fraction > 0.2:
        assert len(keep) < len(nodes)  # something was pruned


def test_c_pruning_equals_numpy_on_many_random_batches() -> None:
    rng = np.random.default_rng(7)
    for seed in range(20):
        fanouts = rng.integers(1, 6, rng.integers(2, 5)).tolist()
        _, hc, indptrs, cols = _batch(100 + seed, fanouts, num_seeds=int(rng.integers(1, 30)))
        pulled = np.flatnonzero(rng.random(int(hc[1])) < rng.random())
        a, b = prune_batch(hc, indptrs, cols, pulled), prune_batch_numpy(hc, indptrs, cols, pulled)
        for field in ("keep", "hop_counts", "skip", "new_pos"):
            assert np.array_equal(getattr(a, field), getattr(b, field)), (seed, field)
        for x, y in zip(a.indptrs + a.cols, b.indptrs + b.cols, strict=True):
            assert np.array_equal(x, y), seed


@pytest.mark.parametrize("prune", [prune_batch, prune_batch_numpy], ids=["c", "numpy"])
def test_pruning_nothing_is_the_identity(prune) -> None:
    nodes, hc, indptrs, cols = _batch(4, [4, 4, 4])
    got = prune(hc, indptrs, cols, np.empty(0, np.int64))
    assert np.array_equal(got.keep, np.arange(len(nodes))) and np.array_equal(got.hop_counts, hc)
    assert all(np.array_equal(a, b) for a, b in zip(got.indptrs, indptrs, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(got.cols, cols, strict=True)) and len(got.skip) == 0


def test_pruning_rejects_malformed_input() -> None:
    _, hc, indptrs, cols = _batch(5, [4, 4])
    with pytest.raises(ValueError, match="'pulled' expected positions < hop_counts"):
        prune_batch_numpy(hc, indptrs, cols, np.asarray([int(hc[1])]))
    with pytest.raises(IndexError, match="prune_blocks: 'pulled' expected last-layer source positions"):
        prune_batch(hc, indptrs, cols, np.asarray([int(hc[1])]))
    bad_cols = [cols[0], cols[1].copy()]
    bad_cols[1][0] = int(hc[2])
    with pytest.raises(IndexError, match="'cols' of hop 1 expected positions in"):
        prune_batch(hc, indptrs, bad_cols, np.empty(0, np.int64))
    bad_indptr = [indptrs[0], indptrs[1].copy()]
    bad_indptr[1][1] = -1
    with pytest.raises(ValueError, match="'indptr' of hop 1 expected to start at 0, not decrease"):
        prune_batch(hc, bad_indptr, cols, np.empty(0, np.int64))
    with pytest.raises(ValueError, match="'indptr' expected length"):
        prune_batch(hc, [indptrs[0], indptrs[1][:-1]], cols, np.empty(0, np.int64))


def test_fsm_reuses_an_entry_for_staleness_iterations() -> None:
    fsm = StalenessFSM(2, staleness=3)
    pulls = [fsm.step(np.asarray([0])).tolist() for _ in range(7)]
    assert pulls == [[False], [True], [True], [False], [True], [True], [False]]
    assert fsm.step(np.asarray([1, 0])).tolist() == [False, True]  # slot 1 first seen: pushed
    never = StalenessFSM(1, staleness=1)
    assert not any(never.step(np.asarray([0]))[0] for _ in range(5))
    with pytest.raises(ValueError, match="'plan.staleness' expected >= 1"):
        StalenessFSM(1, 0)


def test_auto_staleness_is_the_papers_bound_but_at_most_an_epoch() -> None:
    from pipelines.methods.policies.outre.trace import PAPER_STALENESS, effective_staleness

    assert effective_staleness(0, 1) == 1  # one batch an epoch (Cora): recomputed every epoch, no reuse
    assert effective_staleness(0, 69) == 69 and effective_staleness(0, 1172) == PAPER_STALENESS == 100
    assert effective_staleness(0, 0) == 1
    assert effective_staleness(7, 1) == 7 and effective_staleness(1000, 5) == 1000  # a chosen bound as given
    with pytest.raises(ValueError, match="'plan.staleness' expected >= 0"):
        effective_staleness(-1, 10)


def test_alpha_sweep_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    feat = rng.integers(0, 50, 400).astype(np.float64)
    hist = rng.integers(0, 400, 400).astype(np.float64) * (rng.random(400) < 0.3)
    split = alpha_sweep(feat, hist, budget=20_000, feature_row_bytes=128, history_row_bytes=520, table_hist=64)
    best = (-1.0, -1)
    for a in range(101):
        kf = max((20_000 * (100 - a) // 100) // 128, 0)
        kh = max((20_000 * a // 100 - 64) // 520, 0)
        value = np.sort(feat)[::-1][:kf].sum() + np.sort(hist)[::-1][:kh].sum()
        assert split.benefits[a] == pytest.approx(value)
        best = max(best, (value, -a))
    assert split.alpha == -best[1] / 100
    assert split.saved_feat + split.saved_hist == pytest.approx(best[0])
    assert alpha_sweep(feat, np.zeros(400), 20_000, 128, 520).alpha == 0.0  # nothing to gain from history


def test_top_ranked_takes_positive_scores_by_rank() -> None:
    assert top_ranked(np.asarray([0.0, 5, 3, 5, 0, 1]), 2).tolist() == [1, 3]
    assert top_ranked(np.asarray([0.0, 2, 0]), 5).tolist() == [1]


@pytest.mark.parametrize("k", [0, 1, 7, 60, 199, 1000])
@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_top_ranked_matches_a_full_stable_sort(k, dtype) -> None:
    rng = np.random.default_rng(k)
    score = (rng.integers(-2, 6, 400) * rng.integers(0, 2, 400)).astype(dtype)  # many ties, zeros, negatives
    positive = np.flatnonzero(score > 0)
    want = np.sort(positive[np.argsort(-score[positive], kind="stable")][:k])
    got = top_ranked(score, k)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64


def test_exclusive_subtrees_counts_rows_only_one_source_reaches() -> None:
    # seeds {0}; hop 0: 0 <- 1, 2 (last-layer sources 0, 1, 2); hop 1: 1 <- 3, 4; 2 <- 4, 5; 0 <- 6
    hc = np.asarray([1, 3, 7])
    indptrs = [np.asarray([0, 2]), np.asarray([0, 1, 3, 5])]
    cols = [np.asarray([1, 2]), np.asarray([6, 3, 4, 4, 5])]
    rows, edges = exclusive_subtrees(hc, indptrs, cols)
    assert rows.tolist() == [1, 1, 1]  # node 4 is shared by 1 and 2
    assert edges.tolist() == [1, 2, 2]


def test_the_cpu_cache_written_in_blocks_is_the_whole_gather(tmp_path) -> None:
    from pipelines.methods.policies.cacheblocks import write_cache_rows
    from storage_kernels.store import ArtifactStore

    rng = np.random.default_rng(3)
    features = rng.standard_normal((500, 6)).astype(np.float32)
    cpu_nodes = np.sort(rng.choice(500, 123, replace=False)).astype(np.int64)
    store = ArtifactStore(tmp_path, catalog=False)
    files = []
    for memory_bytes in (24 * 5, 1 << 30):  # 5 rows a block; one block
        with store.builder("unit", "pack", f"m{memory_bytes}", {}, {}) as builder:
            assert write_cache_rows(builder, "cpu_cache.npy", features, cpu_nodes, memory_bytes) == 123 * 24
            artifact = builder.publish()
        files.append(artifact.file("cpu_cache.npy").read_bytes())
        np.testing.assert_array_equal(np.load(artifact.file("cpu_cache.npy")), features[cpu_nodes].astype(np.float32))
    assert files[0] == files[1]
