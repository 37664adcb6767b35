"""Pure Python twins of the feature-cache kernels (``cache/belady.c``, ``cache/update.c``), the cache policies
Belady is compared with, and a brute-force optimum for tiny traces.

The cache model every function here shares: a trace is a list of batches (node id arrays); a cache holds at
most ``K`` nodes; batch ``i`` *hits* the distinct nodes of its batch that are in the cache before it, and
afterwards the cache may keep any ``K`` nodes of (cache before) | (batch ``i``) -- a batch's rows are read
anyway, so inserting them costs no I/O, and nothing else can enter. The initial cache is free to choose.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict, defaultdict

import numpy as np

INF = float("inf")


def _distinct(batch) -> list[int]:
    """The batch's distinct nodes in order of first appearance."""
    return list(dict.fromkeys(int(v) for v in batch))


def belady_changesets_ref(batches: list[np.ndarray], num_entries: int):
    """The kernel's rule, written plainly (see ``belady.c``): returns ``(init_ids, update_ptr, in_ids, out_ids,
    in_positions, hits, states)`` where ``states[i]`` is the cache (a set) before iteration ``i`` (and
    ``states[S]`` after the last)."""
    k = num_entries
    occurrences: dict[int, list[int]] = defaultdict(list)
    for i, batch in enumerate(batches):
        for v in _distinct(batch):
            occurrences[v].append(i)
    read = dict.fromkeys(occurrences, 0)  # occurrences consumed so far

    def next_access(v: int) -> float:
        occ = occurrences[v]
        return occ[read[v]] if read[v] < len(occ) else INF

    init: list[int] = []
    for batch in batches:
        for v in _distinct(batch):
            if len(init) < k and v not in init:
                init.append(v)
    slots = list(init)  # slot s holds slots[s]
    update_ptr, in_ids, out_ids, in_pos, hits, states = [0], [], [], [], [], [set(slots)]
    for batch in batches:
        distinct = _distinct(batch)
        first = {}
        for p, v in enumerate(int(x) for x in batch):
            first.setdefault(v, p)
        cached = set(slots)
        hits.append(sum(v in cached for v in distinct))
        for v in distinct:
            read[v] += 1
        new = [v for v in distinct if v not in cached]
        if new and k:
            assert len(slots) == k, "a non-full cache holds every node of the superbatch"
            keys = [(next_access(v), 0, v) for v in slots] + [(next_access(v), 1, v) for v in new]
            keep = {v for _, _, v in sorted(keys)[:k]}
            outs = [s for s, v in enumerate(slots) if v not in keep]  # ascending slots
            ins = [v for v in new if v in keep]  # batch order
            assert len(outs) == len(ins)
            for s, v in zip(outs, ins, strict=True):
                out_ids.append(slots[s])
                in_ids.append(v)
                in_pos.append(first[v])
                slots[s] = v
        update_ptr.append(len(in_ids))
        states.append(set(slots))
    as64 = lambda x: np.asarray(x, dtype=np.int64)  # noqa: E731
    return (as64(init), as64(update_ptr), as64(in_ids), as64(out_ids), as64(in_pos), as64(hits), states)


def cache_update_ref(cache: np.ndarray, table: np.ndarray, batch_rows: np.ndarray, in_ids, out_ids, in_positions
                     ) -> None:
    """``cache_update``'s effect, one entry at a time (inputs assumed valid)."""
    for v_in, v_out, p in zip(in_ids, out_ids, in_positions, strict=True):
        s = int(table[v_out])
        cache[s] = batch_rows[p]
        table[v_out] = -1
        table[v_in] = s


# ---- other policies of the same model (hits per batch) ---------------------------------------------------


def lru_hits(batches: list[np.ndarray], k: int) -> list[int]:
    """Least recently used, starting empty: after a batch its nodes become the most recent."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = []
    for batch in batches:
        distinct = _distinct(batch)
        hits.append(sum(v in cache for v in distinct))
        for v in distinct:
            cache.pop(v, None)
            cache[v] = None
        while len(cache) > k:
            cache.popitem(last=False)
    return hits


def fifo_hits(batches: list[np.ndarray], k: int) -> list[int]:
    """First in, first out, starting empty: a node enters once, when first read while not cached."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = []
    for batch in batches:
        distinct = _distinct(batch)
        hits.append(sum(v in cache for v in distinct))
        for v in distinct:
            if v not in cache:
                cache[v] = None
        while len(cache) > k:
            cache.popitem(last=False)
    return hits


def static_frequency_hits(batches: list[np.ndarray], k: int) -> list[int]:
    """A static cache of the ``k`` most frequently read nodes of the whole trace (PaGraph / DiskGNN)."""
    freq: dict[int, int] = defaultdict(int)
    for batch in batches:
        for v in _distinct(batch):
            freq[v] += 1
    cache = {v for v, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))[:k]}
    return [sum(v in cache for v in _distinct(batch)) for batch in batches]


def optimal_hits(batches: list[np.ndarray], k: int) -> int:
    """The best total over every policy of the model, by dynamic programming over cache states (tiny traces:
    states are subsets of the trace's nodes)."""
    sets = [frozenset(_distinct(b)) for b in batches]
    nodes = sorted(set().union(*sets)) if sets else []

    def subsets(pool: frozenset) -> list[frozenset]:
        items = sorted(pool)
        return [frozenset(c) for r in range(min(k, len(items)) + 1) for c in itertools.combinations(items, r)]

    # best[C] = most hits from iteration i on, holding C before iteration i
    best: dict[frozenset, int] = {}
    for i in reversed(range(len(sets))):
        nxt = best
        best = {}
        for c in subsets(frozenset(nodes)):
            gain = len(c & sets[i])
            follow = max((nxt.get(d, 0) for d in subsets(c | sets[i])), default=0) if i + 1 < len(sets) else 0
            best[c] = gain + follow
    return max(best.values(), default=0)
