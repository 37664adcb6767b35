"""DiskGNN's segmented disk cache: segments, MinHash order (Alg. 1), the exact read/space model, the (m, s)
search under a disk budget (Alg. 2).

The training batches, in training order (sampled epoch by epoch, step by step), are cut into *segments* of
``m`` consecutive batches. Each segment gets a disk cache of the ``s`` rows its batches read most (among the
rows no GPU/CPU cache holds; ties by node id), stored once, ordered so that rows read by the same batches share
pages (``pack.disk_cache_order``): ``minhash`` (Alg. 1): every cached node gets the k-tuple of minima, over the
segment's batches that read it, of k hashes of the batch's position (``kernels.minhash_signatures``);
``uses`` (the default): the training positions of its first :data:`USES_K` reads; the cache is sorted by that
tuple (then node id). A batch reads its cached rows with page-merged aligned reads of its segment's cache
(each 4096-byte block once; with a segment window, :mod:`pipelines.methods.policies.diskgnn.window`, only the blocks
of rows
the window does not hold) and only its remaining uncached rows from its packed chunk.

Both costs are counted exactly from the trace, for any ``(m, s)``:

- read bytes of a batch: ``chunk_bytes(packed rows) + 4096 x distinct blocks of its cached rows``;
- store bytes: ``sum(align(segment rows x row bytes)) + sum(chunk_bytes(packed rows))`` (plus the fixed
  GPU/CPU cache blocks).

:func:`search` returns pure packing (``s = 0``) whenever it fits the budget: nothing reads fewer bytes (every row a
batch reads sits in its own contiguous chunk). Otherwise it returns the ``(m, s)`` of a grid (``m`` powers of two
from 2 and all batches, refined by bisection to the smallest ``m`` with a layout that fits between the two powers
that bracket it; ``s`` the largest segment's distinct rows divided by powers of sqrt(2), plus per ``m`` the
smallest ``s`` that fits) whose store fits with the fewest read bytes (ties: fewer store bytes, then smaller m,
then smaller s). Paper's Alg. 2 stops at the first segment
size that fits, with every row read twice in a segment cached; this search minimises the exact read bytes
instead, by branch and bound: the store size of every candidate and a lower bound of its read bytes (cached
rows packed perfectly into pages) come from one histogram per ``m``; exact evaluations go in bound order and
stop once the bound exceeds the best read bytes found. The disk cache is thus used only when the budget requires
it (as in the paper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.methods.policies.diskgnn.window import WindowPlan, schedule_windows, segment_block_offsets
from storage_kernels import kernels
from storage_kernels.packstore import CHUNK_ALIGN, Tier, chunk_bytes

__all__ = [
    "SEARCH_STAT",
    "Choice",
    "Cost",
    "SegmentCaches",
    "Segments",
    "Trace",
    "cache_layout",
    "evaluate",
    "segment_lookup",
    "s_grid",
    "m_grid",
    "recorded_choice",
    "search",
    "search_key",
    "search_record",
    "segments",
    "training_trace",
    "write_segment_caches",
]

MINHASH_SEED = 0  # fixed: the order is part of the layout, reproducible from the trace alone
USES_K = 8  # reads per row in the "uses" order's signature
ORDERS = ("uses", "minhash")  # the disk caches' row orders (pack.disk_cache_order)


@dataclass(frozen=True)
class Trace:
    """The uncached reads of the training batches in training order: batch ``batches[i]`` (sampled epoch
    ``epoch[i]``) reads ``nodes[ptr[i]:ptr[i + 1]]`` (distinct node ids no GPU/CPU cache holds)."""

    batches: np.ndarray  # (NT,) int64 batch ids
    epoch: np.ndarray  # (NT,) int64
    nodes: np.ndarray  # (T,) int64
    ptr: np.ndarray  # (NT + 1,) int64
    num_nodes: int
    position: np.ndarray = field(init=False, repr=False)  # (T,) the training position of every entry

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", np.repeat(np.arange(self.num_batches, dtype=np.int64), self.rows))

    @property
    def num_batches(self) -> int:
        return len(self.batches)

    @property
    def rows(self) -> np.ndarray:
        """(NT,) uncached rows per batch."""
        return np.diff(self.ptr)


def training_trace(samples: object, plan_tier: np.ndarray) -> Trace:
    """The :class:`Trace` of a sample set (``storage_kernels.sampleset.SampleSet``) under a plan's tiers."""
    plan_tier = np.asarray(plan_tier)
    batches = [b for e in range(samples.epochs) for b in samples.batch_ids("train", e)]  # type: ignore[attr-defined]
    epoch = [e for e in range(samples.epochs) for _ in samples.batch_ids("train", e)]  # type: ignore[attr-defined]
    parts = []
    for b in batches:
        start, stop = samples.node_range(b)  # type: ignore[attr-defined]
        nodes = np.asarray(samples.nodes[start:stop], dtype=np.int64)  # type: ignore[attr-defined]
        parts.append(nodes[plan_tier[nodes] >= Tier.PACKED])
    ptr = np.zeros(len(batches) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in parts], out=ptr[1:])
    nodes = np.concatenate(parts) if parts else np.empty(0, np.int64)
    return Trace(np.asarray(batches, np.int64), np.asarray(epoch, np.int64), nodes, ptr, len(plan_tier))


@dataclass(frozen=True)
class Segments:
    """The trace cut into segments of ``m`` batches: every distinct (segment, node) *pair*, sorted by
    (segment, node), its read count within the segment and its rank there (by count descending, then node id);
    ``entry_pair`` maps every trace entry to its pair; ``sig_order`` lists the pairs by (segment, MinHash
    signature, node): the disk-cache order."""

    m: int
    num_segments: int
    pair_segment: np.ndarray  # (P,)
    pair_node: np.ndarray  # (P,)
    pair_count: np.ndarray  # (P,)
    pair_rank: np.ndarray  # (P,)
    segment_ptr: np.ndarray  # (G + 1,) pairs of segment g: [segment_ptr[g], segment_ptr[g + 1])
    entry_pair: np.ndarray  # (T,)
    sig_order: np.ndarray = field(repr=False)  # (P,)
    ordered: bool = True  # False: ranks and cache order not computed (a layout caching no row, s = 0)

    @property
    def max_pairs(self) -> int:
        """Distinct rows of the largest segment (s at or beyond it caches every uncached row)."""
        return int(np.diff(self.segment_ptr).max(initial=0))


#: A ``uses`` signature's value past a pair's last read (after every training position).
UNUSED = np.iinfo(np.int32).max


def uses_signatures(entry_pair: np.ndarray, position: np.ndarray, num_pairs: int, k: int = USES_K) -> np.ndarray:
    """(P, k) int32 the training positions of every pair's first ``k`` reads (:data:`UNUSED` past its last
    read): entries are in trace order, so a stable sort by pair lists each pair's reads in order. Positions are
    batch indices (< 2**31); each column is contiguous (a transposed (k, P) array), so sorting by the columns
    copies none of them: at 100M nodes P is tens of millions."""
    order = np.argsort(entry_pair, kind="stable")
    pos = position[order]
    start = np.searchsorted(entry_pair[order], np.arange(num_pairs))  # (P,) first entry of every pair
    del order
    count = np.bincount(entry_pair, minlength=num_pairs)
    columns = np.full((k, num_pairs), UNUSED, np.int32)
    for j in range(k):
        has = count > j
        columns[j, has] = pos[start[has] + j]
    return columns.T


def _segment_entries(trace: Trace, m: int) -> list[tuple[int, int]]:
    """The trace entries ``[lo, hi)`` of each segment of ``m`` batches (segments are contiguous in the trace)."""
    ptr, nt = trace.ptr, trace.num_batches
    return [(int(ptr[g]), int(ptr[min(g + m, nt)])) for g in range(0, nt, m)]


def segment_pairs(trace: Trace, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every segment's distinct nodes: ``(pair_segment, pair_node, pair_count, entry_pair, segment_ptr)``, the
    pairs sorted by (segment, node): ``np.unique`` of the keys ``segment * N + node`` with its inverse and
    counts, found one segment at a time. A segment is a contiguous range of trace entries, so only its entries
    are sorted at once (the whole trace's keys, their sorted copy, order and inverse were ~4 int64 arrays of the
    trace: 95% of the pack's cgroup at 100M nodes)."""
    entries = _segment_entries(trace, m)
    num_segments = len(entries)
    entry_pair = np.empty(len(trace.nodes), dtype=np.int64)
    # pairs are at most entries: filled in place, then shrunk (realloc: no second copy of them)
    pair_node = np.empty(len(trace.nodes), dtype=np.int64)
    pair_count = np.empty(len(trace.nodes), dtype=np.int64)
    segment_ptr = np.zeros(num_segments + 1, dtype=np.int64)
    for g, (lo, hi) in enumerate(entries):
        node, inverse, count = np.unique(trace.nodes[lo:hi], return_inverse=True, return_counts=True)
        at = int(segment_ptr[g])
        np.add(inverse.reshape(-1), at, out=entry_pair[lo:hi])
        pair_node[at : at + len(node)] = node
        pair_count[at : at + len(node)] = count
        segment_ptr[g + 1] = at + len(node)
    num_pairs = int(segment_ptr[-1])
    pair_node.resize(num_pairs, refcheck=False)
    pair_count.resize(num_pairs, refcheck=False)
    pair_segment = np.repeat(np.arange(num_segments, dtype=np.int64), np.diff(segment_ptr))
    return pair_segment, pair_node, pair_count, entry_pair, segment_ptr


def segments(trace: Trace, m: int, k: int = 2, num_threads: int = 0, order: str = "minhash",
             ordered: bool = True) -> Segments:
    """Cut ``trace`` into segments of ``m`` batches; count, rank and order each segment's rows: by MinHash
    signature (``order="minhash"``, Alg. 1, ``k`` hashes) or by their first :data:`USES_K` reads (``"uses"``).
    ``ordered=False`` skips the ranks and the order, for a layout that caches no row: they are the largest
    arrays here (a signature of ``k`` or :data:`USES_K` values a pair), and pure packing needs neither."""
    if m < 1:
        raise ValueError(f"'segment_batches' expected >= 1 (got {m})")
    if order not in ORDERS:
        raise ValueError(f"'pack.disk_cache_order' expected one of {', '.join(ORDERS)} (got {order!r})")
    pair_segment, pair_node, count, entry_pair, segment_ptr = segment_pairs(trace, m)
    num_segments = len(segment_ptr) - 1
    if not ordered:  # no row is cached: every rank past any s, the order the pairs' own
        return Segments(m, num_segments, pair_segment, pair_node, count,
                        np.full(len(pair_node), np.iinfo(np.int64).max, np.int64), segment_ptr,
                        entry_pair, np.arange(len(pair_node)), ordered=False)
    # pairs are sorted by (segment, node): a stable sort on (segment, count descending) ties by node
    by_count = np.argsort(pair_segment * (int(count.max(initial=0)) + 1) - count, kind="stable")  # (P,)
    num_pairs = len(pair_node)
    rank = np.empty(num_pairs, np.int64)
    rank[by_count] = np.arange(num_pairs) - segment_ptr[pair_segment[by_count]]
    del by_count
    if order == "minhash":  # Alg. 1: pair (g, v) is read by the batches of segment g that read v (positions)
        sig = kernels.minhash_signatures(entry_pair, trace.ptr, num_pairs, k, MINHASH_SEED, num_threads)  # (P, k)
    else:  # rows read by the same batches, in the same order, side by side: what a segment window reads together
        sig = uses_signatures(entry_pair, trace.position, num_pairs)  # (P, USES_K)
    sig_order = np.lexsort((*[sig[:, j] for j in reversed(range(sig.shape[1]))], pair_segment))  # ties by node
    del sig
    return Segments(m, num_segments, pair_segment, pair_node, count, rank, segment_ptr, entry_pair, sig_order)


@dataclass(frozen=True)
class SegmentCaches:
    """The disk caches of ``s`` rows per segment: ``segment_rows`` (G,), ``pair_slot`` (P,) the row of every
    pair in its segment's cache (-1: not cached)."""

    m: int
    s: int
    segment_rows: np.ndarray
    pair_slot: np.ndarray


def cache_layout(segs: Segments, s: int) -> SegmentCaches:
    """Each segment caches its ``s`` most-read rows, in MinHash order (slots 0.. within the segment)."""
    if s > 0 and not segs.ordered:
        raise ValueError(f"'segs' expected ranked segments to cache {s} rows a segment (got ordered=False)")
    cached = segs.pair_rank < s  # (P,)
    in_order = cached[segs.sig_order]  # (P,) in cache order
    running = np.cumsum(in_order) - 1  # (P,) cached rows before, over all segments
    first = np.concatenate([[0], np.cumsum(np.bincount(segs.pair_segment[cached], minlength=segs.num_segments))])
    slot = np.full(len(cached), -1, np.int64)
    pairs = segs.sig_order[in_order]
    slot[pairs] = running[in_order] - first[segs.pair_segment[pairs]]
    rows = np.diff(first).astype(np.int64)
    return SegmentCaches(segs.m, int(s), rows, slot)


@dataclass(frozen=True)
class Cost:
    """Exact costs of a layout: per training position its packed chunk rows, disk-cache blocks read and read
    bytes; the store bytes (disk caches + packed chunks); with a segment window, its schedule."""

    chunk_rows: np.ndarray  # (NT,)
    cache_blocks: np.ndarray  # (NT,)
    read_bytes: np.ndarray  # (NT,)
    store_bytes: int
    window: WindowPlan | None = field(default=None, repr=False, compare=False)

    @property
    def total_read_bytes(self) -> int:
        return int(self.read_bytes.sum())


def evaluate(trace: Trace, segs: Segments, caches: SegmentCaches, row_bytes: int, num_threads: int = 0,
             buffer_rows: int = 0, gap_blocks: int = 0) -> Cost:
    """The exact read bytes of every training batch and the store bytes under ``caches``; with ``buffer_rows``
    > 0, disk-cache reads through a segment window of that many rows
    (:mod:`pipelines.methods.policies.diskgnn.window`), runs at
    most ``gap_blocks`` apart read as one."""
    entry_slot = caches.pair_slot[segs.entry_pair]  # (T,) row in the segment cache, -1 packed
    cached = np.concatenate([[0], np.cumsum(entry_slot >= 0)])  # (T + 1,)
    chunk_rows = trace.rows - (cached[trace.ptr[1:]] - cached[trace.ptr[:-1]])  # (NT,)
    window = None
    if buffer_rows > 0:  # each block read while the window does not hold the rows a batch needs from it
        window = schedule_windows(entry_slot, trace.ptr, segs.m, caches.segment_rows, row_bytes, buffer_rows,
                                  num_threads, gap_blocks)
        blocks = window.blocks
    else:  # the segment caches start at aligned offsets, so blocks of the cache region are blocks of the file
        blocks = kernels.count_blocks(entry_slot, trace.ptr, row_bytes, num_threads)  # (NT,)
    read = chunk_bytes(chunk_rows, row_bytes) + blocks * CHUNK_ALIGN
    store = int(chunk_bytes(caches.segment_rows, row_bytes).sum() + chunk_bytes(chunk_rows, row_bytes).sum())
    return Cost(chunk_rows.astype(np.int64), blocks, read.astype(np.int64), store, window)


def m_grid(num_batches: int) -> list[int]:
    """Segment sizes searched: powers of two from 2 below ``num_batches``, and ``num_batches`` (one segment).
    (Segments of one batch share nothing: a cache there saves no space and reads more.)"""
    grid, m = [], 2
    while m < num_batches:
        grid.append(m)
        m *= 2
    return [*grid, num_batches] if num_batches else []


def s_grid(max_pairs: int) -> list[int]:
    """Cache sizes searched for a segment size whose largest segment has ``max_pairs`` distinct rows:
    ``max_pairs`` divided by powers of sqrt(2) down to 1 (ascending, distinct), without 0 (pure packing,
    searched once)."""
    grid, j = set(), 0
    while (s := int(max_pairs / 2 ** (j / 2))) >= 1:
        grid.add(s)
        j += 1
    return sorted(grid)


@dataclass(frozen=True)
class Choice:
    """The searched ``(m, s)``: ``segment_batches`` and ``cache_rows`` (0: pure packing), its exact total read
    bytes over the trace and store bytes (disk caches + packed chunks), the search's counts, and the
    :class:`Segments` of ``m`` (to lay the choice out without recomputing them)."""

    segment_batches: int
    cache_rows: int
    read_bytes: int
    store_bytes: int
    candidates: int
    feasible: int
    evaluated: int
    segments: Segments = field(repr=False, compare=False)
    grid: dict[int, list[int]] = field(default_factory=dict, repr=False, compare=False)  # m -> s searched


#: The plan statistic in which ``policy=auto``'s prediction records the (m, s) it searched, for the pack.
SEARCH_STAT = "diskgnn_search"


def search_record(choice: Choice, key: dict[str, Any]) -> dict[str, Any]:
    """``choice`` as a plan records it (JSON), with the ``key`` of every input the search took besides the
    trace: a pack whose own key is equal lays it out without searching again (:func:`recorded_choice`)."""
    return {"key": key, "segment_batches": choice.segment_batches, "cache_rows": choice.cache_rows,
            "read_bytes": choice.read_bytes, "store_bytes": choice.store_bytes, "candidates": choice.candidates,
            "feasible": choice.feasible, "evaluated": choice.evaluated}


def search_key(budget_bytes: int | None, row_bytes: int, buffer_rows: int, k: int, order: str, gap_blocks: int,
               num_batches: int) -> dict[str, Any]:
    """What the (m, s) search's choice rests on besides the trace (the key of :func:`search_record`)."""
    return {"budget_bytes": budget_bytes, "row_bytes": row_bytes, "buffer_rows": buffer_rows, "k": k,
            "order": order, "gap_blocks": gap_blocks, "num_batches": num_batches}


def recorded_choice(record: dict[str, Any] | None, key: dict[str, Any], trace: Trace,
                    num_threads: int = 0) -> Choice | None:
    """The :class:`Choice` a plan recorded for this ``key`` over this ``trace`` (the search is deterministic,
    so it is what searching again would give), its segments recomputed; None when there is none or its key
    differs."""
    if not record or record.get("key") != key:
        return None
    m = int(record["segment_batches"])
    return Choice(segment_batches=m, cache_rows=int(record["cache_rows"]), read_bytes=int(record["read_bytes"]),
                  store_bytes=int(record["store_bytes"]), candidates=int(record["candidates"]),
                  feasible=int(record["feasible"]), evaluated=int(record["evaluated"]),
                  segments=segments(trace, m, key["k"], num_threads, key["order"],
                                    ordered=int(record["cache_rows"]) > 0))


def _bounds(trace: Trace, segs: Segments, grid: Sequence[int], row_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """(store bytes, read-byte lower bound) of every ``s`` in ``grid`` (ascending) for one segment size."""
    nt, n = trace.num_batches, len(grid)
    entry_rank = segs.pair_rank[segs.entry_pair]  # (T,)
    bins = np.searchsorted(np.asarray(grid), entry_rank, side="right")  # entry cached for grid index >= bins
    hist = np.bincount(trace.position * (n + 1) + bins, minlength=nt * (n + 1)).reshape(nt, n + 1)
    cached = np.cumsum(hist, axis=1)[:, :n]  # (NT, n) cached rows per batch for each s
    packed = trace.rows[:, None] - cached  # (NT, n)
    chunks = chunk_bytes(packed, row_bytes).sum(axis=0)  # (n,)
    lower = chunks + chunk_bytes(cached, row_bytes).sum(axis=0)  # cached rows packed perfectly
    sizes = np.diff(segs.segment_ptr)  # (G,)
    caches = np.array([int(chunk_bytes(np.minimum(sizes, s), row_bytes).sum()) for s in grid], np.int64)
    return caches + chunks, lower


def _boundary(trace: Trace, segs: Segments, grid: Sequence[int], store: np.ndarray, budget_bytes: int,
              row_bytes: int) -> int | None:
    """The smallest ``s`` that fits the budget between the largest grid point that does not and the next one
    that does (bisection on the exact store size, nearly monotone in ``s``): where the fewest cached rows, hence
    usually the fewest read bytes, fit. None when no such bracket exists."""
    fits = np.flatnonzero(store <= budget_bytes)
    if not len(fits) or fits[0] == 0:
        return None
    lo, hi = int(grid[fits[0] - 1]), int(grid[fits[0]])  # store(lo) > budget >= store(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if int(_bounds(trace, segs, [mid], row_bytes)[0][0]) <= budget_bytes:
            hi = mid
        else:
            lo = mid
    return hi


def search(trace: Trace, row_bytes: int, budget_bytes: int | None, *, k: int = 2,
           segment_sizes: Sequence[int] | None = None, num_threads: int = 0, buffer_rows: int = 0,
           order: str = "minhash", gap_blocks: int = 0) -> Choice:
    """The ``(m, s)`` with the fewest read bytes over ``trace`` whose store bytes (disk caches + packed
    chunks) are at most ``budget_bytes`` (None: unlimited), over the grid (``segment_sizes`` or
    :func:`m_grid`; :func:`s_grid` per size), read through a segment window of ``buffer_rows`` rows (0: none).
    ``ValueError`` when no candidate fits, naming the smallest.

    With a window, a batch may read fewer bytes than its cached rows (they come from the buffer): the bound is
    then the store itself (every cached row is read at least once).

    Under a budget, the grid's powers of two are refined by :func:`_refine_segment_size`: between the smallest
    size with a layout that fits and the grid point below it, the smallest size whose largest cache fits is
    searched too."""
    nt = trace.num_batches
    pure = chunk_bytes(trace.rows, row_bytes)
    pure_store = int(pure.sum())
    # pure packing fits: nothing reads less without a window, and with one it still reads in one request a batch
    if budget_bytes is None or pure_store <= budget_bytes:
        return Choice(segment_batches=max(nt, 1), cache_rows=0, read_bytes=pure_store, store_bytes=pure_store,
                      candidates=1, feasible=1, evaluated=1,
                      segments=segments(trace, max(nt, 1), k, num_threads, order, ordered=False))
    # candidates: (lower bound, m, s, store); pure packing (segments of every batch, no cache row) does not fit
    candidates: list[tuple[int, int, int, int]] = [(pure_store, max(nt, 1), 0, pure_store)]
    cache: dict[int, Segments] = {}  # the last segment size's segments only: each is about the trace's size
    searched: dict[int, list[int]] = {}

    def segments_of(m: int) -> Segments:
        if m not in cache:
            cache.clear()  # before computing the next: never two sizes' segments at once
            cache[m] = segments(trace, m, k, num_threads, order)
        return cache[m]

    def add(m: int) -> bool:
        """Add segment size ``m``'s candidates; whether one of them fits the budget."""
        segs = segments_of(m)
        grid = s_grid(segs.max_pairs)
        if not grid:
            return False
        store, lower = _bounds(trace, segs, grid, row_bytes)
        if budget_bytes is not None and (edge := _boundary(trace, segs, grid, store, budget_bytes, row_bytes)):
            grid = sorted({*grid, edge})
            store, lower = _bounds(trace, segs, grid, row_bytes)
        if buffer_rows > 0:
            lower = store
        searched[m] = grid
        candidates.extend((int(lo), m, s, int(st)) for s, st, lo in zip(grid, store, lower, strict=True))
        return budget_bytes is None or bool((store <= budget_bytes).any())

    sizes = list(segment_sizes) if segment_sizes is not None else m_grid(nt)
    fitting = [m for m in sizes if add(m)]
    if segment_sizes is None and budget_bytes is not None and fitting:
        limit = budget_bytes
        refined = _refine_segment_size(sizes, min(fitting), lambda m: _smallest_store(trace, m, row_bytes) <= limit)
        if refined is not None:
            add(refined)
    fits = [c for c in candidates if budget_bytes is None or c[3] <= budget_bytes]
    if not fits:
        smallest = min(candidates, key=lambda c: (c[3], c[1], c[2]))
        raise ValueError(f"'pack.disk_budget' expected a budget the store can meet: the smallest store searched "
                         f"(segments of {smallest[1]} batches, {smallest[2]} disk-cache rows) needs "
                         f"{smallest[3]} bytes of disk caches and packed chunks (got a budget of {budget_bytes})")
    fits.sort(key=lambda c: (c[0], c[1], c[2]))
    best: tuple[int, int, int, int] | None = None  # (read, store, m, s)
    evaluated = 0
    for lower, m, s, _ in fits:  # pure packing does not fit: every candidate has s > 0
        if best is not None and lower > best[0]:
            break  # every remaining candidate reads more than the best one
        segs = segments_of(m)
        cost = evaluate(trace, segs, cache_layout(segs, s), row_bytes, num_threads, buffer_rows, gap_blocks)
        read, store = cost.total_read_bytes, cost.store_bytes
        evaluated += 1
        if best is None or (read, store, m, s) < best:
            best = (read, store, m, s)
    assert best is not None
    m = best[2]
    segs = segments_of(m)
    return Choice(segment_batches=m, cache_rows=best[3], read_bytes=best[0], store_bytes=best[1],
                  candidates=len(candidates), feasible=len(fits), evaluated=evaluated, segments=segs, grid=searched)


def _smallest_store(trace: Trace, m: int, row_bytes: int) -> int:
    """Store bytes of segments of ``m`` batches at their largest cache (every row of a segment cached once, no
    packed chunk): about the least any ``s`` needs (only the 4 KiB padding of chunks and caches can differ), and
    the largest ``s`` of :func:`s_grid` is exactly this layout."""
    distinct = np.array([len(np.unique(trace.nodes[lo:hi])) for lo, hi in _segment_entries(trace, m)],
                        dtype=np.int64)
    return int(chunk_bytes(distinct, row_bytes).sum())


def _refine_segment_size(grid: Sequence[int], smallest_fitting: int, fits: Callable[[int], bool]) -> int | None:
    """The smallest segment size between ``smallest_fitting`` (a grid point with a layout within the budget) and
    the grid point below it (none fits) that ``fits`` too, by bisection; None when they are adjacent.

    Shorter segments share their caches among fewer batches, so they read less (each batch's rows sit closer
    together), and their caches hold more in all: the store shrinks as segments grow, nearly monotonically. The
    budget therefore cuts the sizes near one boundary, and the fewest read bytes are usually just above it,
    which a grid of powers of two can miss by up to 2x (``demo`` with the defaults: segments of 19 batches,
    not 32, read 25% fewer bytes in 60% fewer requests; BENCHMARKS.md). Each probe costs one sort of the
    trace (:func:`_smallest_store`); only the size found is then searched over ``s``."""
    below = [m for m in grid if m < smallest_fitting]
    if not below:
        return None
    lo, hi = max(below), smallest_fitting  # lo: no layout fits; hi: one does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi if hi != smallest_fitting else None


# ------------------------------------------------------------------------------------------------ writing
def segment_lookup(segs: Segments, caches: SegmentCaches, g: int) -> tuple[np.ndarray, np.ndarray]:
    """Segment ``g``'s cached nodes sorted by id and their rows in its cache (``batch_addresses``' lookup)."""
    lo, hi = int(segs.segment_ptr[g]), int(segs.segment_ptr[g + 1])
    slot = caches.pair_slot[lo:hi]
    keep = slot >= 0
    return segs.pair_node[lo:hi][keep], slot[keep]


def write_segment_caches(features: np.ndarray, segs: Segments, caches: SegmentCaches, path: Path,
                         memory_bytes: int, num_threads: int = 0) -> np.ndarray:
    """Write every segment's cache rows in slot (MinHash) order to ``path``, each segment at a multiple of
    ``CHUNK_ALIGN``, the file padded to one; rows gathered from ``features`` (a memmap) ``memory_bytes`` at a
    time. Returns the segment offsets (G,) int64."""
    row_bytes = int(features.shape[1]) * features.dtype.itemsize
    offsets = segment_block_offsets(caches.segment_rows, row_bytes) * CHUNK_ALIGN  # (G,) bytes
    ordered = segs.sig_order[caches.pair_slot[segs.sig_order] >= 0]  # cached pairs by (segment, slot)
    nodes = segs.pair_node[ordered]  # (sum of rows,) in file order
    starts = np.concatenate([[0], np.cumsum(caches.segment_rows)]).astype(np.int64)
    piece = max(1, memory_bytes // max(row_bytes, 1))
    with open(path, "r+b") as f:
        for g in range(len(caches.segment_rows)):
            for lo in range(int(starts[g]), int(starts[g + 1]), piece):
                hi = min(lo + piece, int(starts[g + 1]))
                rows = kernels.gather_rows(features, nodes[lo:hi], num_threads=num_threads)  # (hi - lo, F)
                f.seek(int(offsets[g]) + (lo - int(starts[g])) * row_bytes)
                f.write(rows.data)
        f.truncate(int(chunk_bytes(caches.segment_rows, row_bytes).sum()))
    return offsets
