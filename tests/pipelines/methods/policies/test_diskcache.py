"""The segmented disk cache model (pipelines.methods.policies.diskgnn.search) against a plain reference: segments,
MinHash
order, exact read/store bytes, and the (m, s) search against a brute force over its grid."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from pipelines.methods.policies.diskgnn.search import (
    Trace,
    cache_layout,
    evaluate,
    m_grid,
    s_grid,
    search,
    segment_lookup,
    segment_pairs,
    segments,
)
from storage_kernels.packstore import cache_blocks, chunk_bytes
from tests.storage_kernels.reference import minhash_signatures_ref

ROW_BYTES = 512  # 8 rows per 4096-byte block


def _trace(num_batches: int = 12, num_nodes: int = 400, seed: int = 0) -> Trace:
    """Batches reading a skewed set of distinct nodes (popular nodes shared by many batches)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, num_nodes + 1) ** 0.6
    parts = [np.sort(rng.choice(num_nodes, int(rng.integers(40, 90)), replace=False, p=weights / weights.sum()))
             for _ in range(num_batches)]
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    epoch = np.arange(num_batches) // 4  # 4 batches per sampled epoch
    return Trace(np.arange(num_batches, dtype=np.int64) + 100, epoch.astype(np.int64), np.concatenate(parts), ptr,
                 num_nodes)


def _reference_caches(trace: Trace, m: int, s: int, k: int = 2) -> list[list[int]]:
    """Per segment, its cached nodes in row order: the s most read (count desc, node asc), sorted by their
    MinHash k-tuple over the segment's batches (hashed by training position), then node."""
    ptr, nodes = trace.ptr, trace.nodes
    out = []
    for lo in range(0, trace.num_batches, m):
        members = range(lo, min(lo + m, trace.num_batches))
        counts = Counter(int(v) for b in members for v in nodes[ptr[b] : ptr[b + 1]])
        top = sorted(counts, key=lambda v: (-counts[v], v))[:s]
        # only the segment's batches, as sets lo.. (empty sets 0..lo-1 keep the hashes of training positions)
        items = np.concatenate([nodes[ptr[b] : ptr[b + 1]] for b in members])
        seg_ptr = np.concatenate([np.zeros(lo, np.int64), [0], np.cumsum([ptr[b + 1] - ptr[b] for b in members])])
        sig = minhash_signatures_ref(items, seg_ptr, trace.num_nodes, k, 0)
        out.append(sorted(top, key=lambda v, sig=sig: (*sig[v].tolist(), v)))
    return out


def _reference_cost(trace: Trace, m: int, s: int) -> tuple[np.ndarray, int]:
    """(read bytes per batch, store bytes): per batch its cached rows' distinct blocks plus its aligned chunk."""
    caches = _reference_caches(trace, m, s)
    read = np.zeros(trace.num_batches, np.int64)
    packed_total = 0
    for b in range(trace.num_batches):
        row = {v: i for i, v in enumerate(caches[b // m])}
        batch = trace.nodes[trace.ptr[b] : trace.ptr[b + 1]]
        slots = np.array([row[v] for v in batch if v in row], np.int64)
        packed = sum(1 for v in batch if v not in row)
        read[b] = int(chunk_bytes(packed, ROW_BYTES)) + 4096 * len(cache_blocks(slots, ROW_BYTES, 0))
        packed_total += int(chunk_bytes(packed, ROW_BYTES))
    store = packed_total + sum(-(-len(c) * ROW_BYTES // 4096) * 4096 for c in caches)
    return read, store


@pytest.mark.parametrize(("m", "s"), [(1, 5), (3, 17), (4, 1000), (12, 64), (5, 0)])
def test_layout_and_costs_match_the_reference(m: int, s: int) -> None:
    trace = _trace()
    segs = segments(trace, m)
    caches = cache_layout(segs, s)
    expected = _reference_caches(trace, m, s)
    for g, nodes in enumerate(expected):
        disk_nodes, disk_slots = segment_lookup(segs, caches, g)
        assert caches.segment_rows[g] == len(nodes)
        order = np.empty(len(nodes), np.int64)
        order[disk_slots] = disk_nodes
        assert order.tolist() == nodes, f"segment {g}"
    cost = evaluate(trace, segs, caches, ROW_BYTES)
    read, store = _reference_cost(trace, m, s)
    np.testing.assert_array_equal(cost.read_bytes, read)
    assert cost.store_bytes == store


def test_minhash_order_places_rows_of_the_same_batches_together() -> None:
    trace = _trace(num_batches=8, seed=3)
    segs = segments(trace, 8)
    caches = cache_layout(segs, segs.max_pairs)  # one segment caching every row, MinHash-ordered
    by_id = cache_layout(segs, segs.max_pairs)
    by_id.pair_slot[:] = np.arange(len(segs.pair_node))  # the same rows by node id (pairs sorted by node)
    assert evaluate(trace, segs, caches, ROW_BYTES).total_read_bytes < evaluate(trace, segs, by_id,
                                                                                 ROW_BYTES).total_read_bytes


@pytest.mark.parametrize("budget_fraction", [None, 1.0, 0.9, 0.6, 0.5, 0.42])
def test_search_picks_the_brute_force_minimum(budget_fraction: float | None) -> None:
    trace = _trace()
    pure = int(chunk_bytes(trace.rows, ROW_BYTES).sum())
    budget = None if budget_fraction is None else int(budget_fraction * pure)
    choice = search(trace, ROW_BYTES, budget)
    got = (choice.read_bytes, choice.store_bytes, choice.segment_batches, choice.cache_rows)
    if budget is None or pure <= budget:  # pure packing fits: chosen without a search, nothing reads less
        assert got == (pure, pure, 12, 0) and not choice.grid
        return
    assert set(choice.grid) >= set(m_grid(trace.num_batches)) == {2, 4, 8, 12}
    brute = []
    for m, grid in choice.grid.items():
        assert set(s_grid(segments(trace, m).max_pairs)) <= set(grid)  # the grid, plus the budget's edge
        brute += [(*_reference_total(trace, m, s), m, s) for s in grid]
    best = min(c for c in brute if c[1] <= budget)
    assert got == best and choice.store_bytes <= budget < pure
    assert min(c[0] for c in brute) >= pure  # no layout reads less than pure packing
    assert choice.evaluated <= choice.feasible <= choice.candidates


def _fits(trace: Trace, m: int, budget: int) -> bool:
    """Whether segments of ``m`` batches have a layout within ``budget``: the smallest store, every row of a
    segment cached once (reference costs)."""
    return _reference_total(trace, m, segments(trace, m).max_pairs)[1] <= budget


@pytest.mark.parametrize("budget_fraction", [0.7, 0.5, 0.4])  # the smallest fitting m: 5, 12, 19
def test_search_refines_the_segment_size_between_powers_of_two(budget_fraction: float) -> None:
    trace = _trace(num_batches=40, num_nodes=600, seed=5)
    pure = int(chunk_bytes(trace.rows, ROW_BYTES).sum())
    budget = int(budget_fraction * pure)
    choice = search(trace, ROW_BYTES, budget)
    powers = m_grid(trace.num_batches)  # [2, 4, 8, 16, 32, 40]
    smallest_power = min(m for m in powers if _fits(trace, m, budget))
    assert smallest_power > 2, "the trace must leave a gap to refine"
    refined = sorted(set(choice.grid) - set(powers))
    assert refined and all(max(m for m in powers if m < smallest_power) < m < smallest_power for m in refined)
    boundary = min(m for m in [*refined, smallest_power] if _fits(trace, m, budget))
    assert not _fits(trace, boundary - 1, budget)  # the bisection's boundary: one batch shorter fits no layout
    grid_only = search(trace, ROW_BYTES, budget, segment_sizes=powers)  # the powers of two alone
    assert choice.read_bytes <= grid_only.read_bytes and choice.store_bytes <= budget


def _reference_total(trace: Trace, m: int, s: int) -> tuple[int, int]:
    read, store = _reference_cost(trace, m, s)
    return int(read.sum()), store


def test_search_refuses_a_budget_no_layout_meets() -> None:
    with pytest.raises(ValueError, match=r"'pack.disk_budget' expected a budget the store can meet: .* \(got a "
                                         r"budget of 4096\)"):
        search(_trace(), ROW_BYTES, 4096)


@pytest.mark.parametrize("m", [1, 3, 5, 12, 40])
def test_segment_pairs_equal_one_unique_over_the_whole_trace(m: int) -> None:
    # found a segment at a time (the trace's entries of a segment are contiguous): the pairs, counts and every
    # entry's pair of one np.unique over the keys segment * N + node
    trace = _trace(num_batches=13, seed=m)
    keys = (trace.position // m) * trace.num_nodes + trace.nodes
    uniq, inverse, count = np.unique(keys, return_inverse=True, return_counts=True)
    pair_segment, pair_node, pair_count, entry_pair, segment_ptr = segment_pairs(trace, m)
    np.testing.assert_array_equal(pair_segment, uniq // trace.num_nodes)
    np.testing.assert_array_equal(pair_node, uniq % trace.num_nodes)
    np.testing.assert_array_equal(pair_count, count)
    np.testing.assert_array_equal(entry_pair, inverse.reshape(-1))
    np.testing.assert_array_equal(segment_ptr, np.searchsorted(uniq // trace.num_nodes, np.arange(-(-13 // m) + 1)))
    assert {a.dtype for a in (pair_segment, pair_node, pair_count, entry_pair, segment_ptr)} == {np.dtype(np.int64)}
