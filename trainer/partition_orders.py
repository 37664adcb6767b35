"""MariusGNN's partition replacement policies (thesis ch. 5): the sequence of in-memory partition sets.

An *order* of one epoch is the sequence ``S_1, S_2, ...`` of partition sets the CPU buffer holds (each at most
``c`` partitions) and, for every pair of partitions ``(i, j)`` (``i <= j``, the edge bucket ``(i, j)`` and its
mirror), the one set its edges are assigned to. Swaps count partitions read after the first set.

``beta``
    Algorithm 6 (exchange semantics): keep ``c - 1`` partitions fixed and swap the last slot through every
    on-disk partition, then replace the fixed ones with the next on-disk ones. Every pair is co-resident at
    least once; the swap count is Eq. 5.2 (:func:`beta_swaps`), near the lower bound Eq. 5.1
    (:func:`swap_lower_bound`). A bucket goes to the first set holding both partitions (greedy). Randomised
    per epoch by relabelling the partitions with a random permutation (the thesis's "shuffle which partitions
    start in the buffer").
``comet``
    The physical partitions are grouped at random into ``l`` logical partitions every epoch; BETA runs over the
    logical partitions with ``c_l = 2`` of them in the buffer (``l = ceil(p / floor(c / 2))``, the auto-tuning
    rule ``l = 2p/c`` with whole logical partitions); each bucket is assigned uniformly at random to one of the
    sets that hold both of its partitions (deferred processing).
``random``
    The baseline: from a random first buffer, swap a random resident partition for a random on-disk one until
    every pair has been co-resident; buckets to a random co-resident set.
``alg7``
    Algorithm 7, node classification's replacement policy: a random first buffer, then a random resident
    partition replaced by a random unread one until every partition has been read, each exactly once
    (``p - c`` swaps, the fewest that bring every training node into memory); training nodes to a random set
    holding their partition. Pairs are not all co-resident (node classification does not need them).
``static``
    The node-classification policy (section 5.3.2): one set per epoch, the ``k`` partitions holding the
    training nodes plus ``c - k`` random others (needs ``k < c``): zero swaps within the epoch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ORDERS",
    "EpochOrder",
    "alg7_sets",
    "assign_buckets",
    "beta_sets",
    "beta_swaps",
    "comet_order",
    "edge_permutation_bias",
    "epoch_order",
    "random_sets",
    "static_order",
    "swap_count",
    "swap_lower_bound",
]

#: The orders ``plan.partition_order`` selects between (``static`` is chosen by the layout, not by name).
ORDERS = ("beta", "comet", "random", "alg7")


@dataclass(frozen=True)
class EpochOrder:
    """One epoch's partition sets (each sorted int64) and the set every bucket pair is assigned to:
    ``bucket_set[i, j]`` (symmetric, (p, p) int32) is the index into ``sets`` of the set training the edges
    between partitions ``i`` and ``j`` (-1 where no set holds both: only under ``static``)."""

    name: str
    sets: list[np.ndarray]
    bucket_set: np.ndarray
    logical: int = 0  # comet: logical partitions this epoch (0 otherwise)

    @property
    def swaps(self) -> int:
        """Physical partitions read after the first set (:func:`swap_count`)."""
        return swap_count(self.sets)

    @property
    def max_resident(self) -> int:
        """The most partitions any set holds."""
        return max((len(s) for s in self.sets), default=0)


def swap_lower_bound(p: int, c: int) -> int:
    """Eq. 5.1: ``ceil((p(p-1)/2 - c(c-1)/2) / (c-1))`` swaps at least, for every pair to be co-resident."""
    _check_pc(p, c)
    if c >= p:
        return 0
    return -(-(p * (p - 1) // 2 - c * (c - 1) // 2) // (c - 1))


def beta_swaps(p: int, c: int) -> int:
    """Eq. 5.2: BETA's swaps, ``(p - c) + (x + 1) [(p - c) - x (c - 1) / 2]`` with ``x = floor((p-c)/(c-1))``."""
    _check_pc(p, c)
    if c >= p:
        return 0
    x = (p - c) // (c - 1)
    return (p - c) + (x + 1) * (2 * (p - c) - x * (c - 1)) // 2


def swap_count(sets: list[np.ndarray]) -> int:
    """Partitions entering the buffer between consecutive sets (the first set's load is not a swap)."""
    return sum(len(np.setdiff1d(b, a)) for a, b in zip(sets[:-1], sets[1:], strict=True))


def _check_pc(p: int, c: int) -> None:
    if p < 1:
        raise ValueError(f"'plan.num_partitions' expected >= 1 (got {p})")
    if c < 2 and p > 1:
        raise ValueError(f"'plan.buffer_partitions' expected >= 2 to pair partitions (got {c})")


def beta_sets(p: int, c: int) -> list[np.ndarray]:
    """Algorithm 6 over partitions ``0..p-1`` with a buffer of ``c`` (each set sorted)."""
    _check_pc(p, c)
    if c >= p:
        return [np.arange(p, dtype=np.int64)]
    in_memory = list(range(c))
    on_disk = list(range(c, p))
    sets = [list(in_memory)]
    while on_disk:
        for i in range(len(on_disk)):  # the fixed c - 1 meet every on-disk partition in the last slot
            in_memory[-1], on_disk[i] = on_disk[i], in_memory[-1]
            sets.append(list(in_memory))
        n = 0
        for i in range(c - 1):  # the fixed ones are done: replace them with unfinished ones
            if i >= len(on_disk):
                break
            n += 1
            in_memory[i] = on_disk[i]
            sets.append(list(in_memory))
        on_disk = on_disk[n:]
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in sets]


def random_sets(p: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The random baseline: random exchanges until every pair of partitions has been co-resident."""
    _check_pc(p, c)
    if c >= p:
        return [np.arange(p, dtype=np.int64)]
    perm = rng.permutation(p)
    in_memory, on_disk = list(perm[:c]), list(perm[c:])
    seen = np.zeros((p, p), dtype=bool)

    def cover(members: list[int]) -> None:
        idx = np.asarray(members)
        seen[np.ix_(idx, idx)] = True

    cover(in_memory)
    sets = [list(in_memory)]
    while not seen.all():
        a, b = int(rng.integers(c)), int(rng.integers(p - c))
        in_memory[a], on_disk[b] = on_disk[b], in_memory[a]
        cover(in_memory)
        sets.append(list(in_memory))
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in sets]


def assign_buckets(sets: list[np.ndarray], p: int, rng: np.random.Generator | None) -> np.ndarray:
    """``(p, p)`` int32: per pair, the first set holding both partitions (``rng`` None: greedy, BETA) or a
    uniformly random one of them (COMET's deferred assignment, by reservoir sampling over the sets); -1 where
    none does. Memory O(p^2), time O(sum |S_k|^2)."""
    out = np.full((p, p), -1, dtype=np.int32)
    seen = np.zeros((p, p), dtype=np.int64)  # sets holding each pair so far (reservoir sampling)
    for k, members in enumerate(sets):
        ix = np.ix_(members, members)
        if rng is None:
            block = out[ix]
            block[block < 0] = k
            out[ix] = block
            continue
        seen[ix] += 1
        r = rng.random((len(members), len(members)))
        r = np.triu(r) + np.triu(r, 1).T  # one draw per unordered pair: the assignment stays symmetric
        block = out[ix]
        block[r * seen[ix] < 1.0] = k  # replace with probability 1 / (sets holding the pair so far)
        out[ix] = block
    return out


def comet_order(p: int, c: int, rng: np.random.Generator) -> EpochOrder:
    """COMET: random logical partitions of at most ``floor(c / 2)`` physical ones, BETA over them with two in
    the buffer, each bucket assigned to a random co-resident set."""
    _check_pc(p, c)
    per = max(c // 2, 1)
    groups = [g for g in np.array_split(rng.permutation(p), math.ceil(p / per)) if len(g)]
    lg = len(groups)
    logical = [np.asarray(s) for s in beta_sets(lg, 2)] if lg > 1 else [np.zeros(1, dtype=np.int64)]
    shuffle = rng.permutation(lg)  # which logical partitions start in the buffer
    sets = [np.sort(np.concatenate([groups[shuffle[g]] for g in s])).astype(np.int64) for s in logical]
    return EpochOrder("comet", sets, assign_buckets(sets, p, rng), logical=lg)


def static_order(p: int, c: int, k: int, rng: np.random.Generator, weights: np.ndarray | None = None
                 ) -> EpochOrder:
    """One set: partitions ``0..k-1`` (the training nodes') and ``c - k`` others drawn without replacement,
    uniformly (the thesis) or with probability proportional to ``weights`` ((p,) >= 0; e.g. the edges between
    each partition and the training ones, so the buffer holds more of the training nodes' neighbourhoods)."""
    if not 0 < k < c or c > p:
        raise ValueError(f"'plan.buffer_partitions' expected more than the {k} training partitions and at most "
                         f"{p} (got {c})")
    prob = None
    if weights is not None:
        w = np.asarray(weights, dtype=np.float64)[k:] + 1.0  # +1: every partition stays possible
        prob = w / w.sum()
    others = np.sort(rng.choice(np.arange(k, p), size=c - k, replace=False, p=prob))
    sets = [np.concatenate([np.arange(k, dtype=np.int64), others.astype(np.int64)])]
    return EpochOrder("static", sets, assign_buckets(sets, p, None))


def alg7_sets(p: int, c: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Algorithm 7: every partition read exactly once, one random replacement at a time."""
    _check_pc(p, c)
    perm = rng.permutation(p)
    in_memory, on_disk = list(perm[: min(c, p)]), list(perm[min(c, p) :])
    sets = [list(in_memory)]
    while on_disk:
        in_memory[int(rng.integers(len(in_memory)))] = on_disk.pop(int(rng.integers(len(on_disk))))
        sets.append(list(in_memory))
    return [np.sort(np.asarray(s, dtype=np.int64)) for s in sets]


def epoch_order(name: str, p: int, c: int, rng: np.random.Generator) -> EpochOrder:
    """One epoch of ``name`` (``beta``, ``comet``, ``random`` or ``alg7``) over ``p`` partitions, buffer ``c``."""
    if name == "beta":
        relabel = rng.permutation(p)
        sets = [np.sort(relabel[s]) for s in beta_sets(p, c)]
        return EpochOrder("beta", sets, assign_buckets(sets, p, None))
    if name == "comet":
        return comet_order(p, c, rng)
    if name == "random":
        sets = random_sets(p, c, rng)
        return EpochOrder("random", sets, assign_buckets(sets, p, rng))
    if name == "alg7":
        sets = alg7_sets(p, c, rng)
        return EpochOrder("alg7", sets, assign_buckets(sets, p, rng))
    raise ValueError(f"'plan.partition_order' expected one of {', '.join(ORDERS)} (got {name!r})")


def edge_permutation_bias(order: EpochOrder, bucket_counts: np.ndarray | None = None) -> float:
    """The thesis's edge permutation bias ``B`` (section 5.4) of one epoch's bucket assignment.

    Per partition (nodes of a partition are alike under the thesis's uniform-degree assumption), the fraction of
    its edges trained after each set: ``t_i[q]`` = edges of buckets ``(q, *)`` assigned to sets ``<= i`` over all
    of ``q``'s; ``B = max_i (max_q t_i[q] - min_q t_i[q])`` in [0, 1]. ``bucket_counts`` (p, p) weighs the
    buckets (default: all equal)."""
    b = order.bucket_set
    p = b.shape[0]
    w = np.ones((p, p)) if bucket_counts is None else np.asarray(bucket_counts, dtype=np.float64).reshape(p, p)
    w = w + w.T  # a bucket's edges count for both of its partitions, in either direction
    per_set = np.zeros((len(order.sets), p))
    for k in range(len(order.sets)):
        per_set[k] = np.where(b == k, w, 0.0).sum(axis=1)
    total = per_set.sum(axis=0)
    t = np.cumsum(per_set, axis=0) / np.where(total > 0, total, 1.0)  # (|S|, p)
    return float((t.max(axis=1) - t.min(axis=1)).max()) if len(order.sets) else 0.0
