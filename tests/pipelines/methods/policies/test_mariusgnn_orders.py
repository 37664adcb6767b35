"""MariusGNN's partition orders (BETA, COMET, random, Alg. 7) and auto-tuning rules (thesis ch. 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipelines.methods.policies.mariusgnn.tuning import autotune, buffer_capacity, resolve
from trainer.partition_orders import (
    alg7_sets,
    assign_buckets,
    beta_sets,
    beta_swaps,
    comet_order,
    edge_permutation_bias,
    epoch_order,
    random_sets,
    static_order,
    swap_count,
    swap_lower_bound,
)


def _pairs_covered(sets: list[np.ndarray], p: int) -> bool:
    seen = np.zeros((p, p), dtype=bool)
    for s in sets:
        seen[np.ix_(s, s)] = True
    return bool(seen.all())


@pytest.mark.parametrize("p", [2, 3, 5, 8, 13, 16, 24, 33])
def test_beta_swaps_equal_eq_5_2_and_cover_every_pair(p: int) -> None:
    for c in range(2, p + 1):
        sets = beta_sets(p, c)
        assert swap_count(sets) == len(sets) - 1 == beta_swaps(p, c), (p, c)  # one partition per swap
        assert max(len(s) for s in sets) == min(c, p)
        assert _pairs_covered(sets, p)
        assert swap_count(sets) >= swap_lower_bound(p, c)


def test_eq_5_2_by_hand_and_the_digest_figures() -> None:
    # p = 6, c = 3 (the thesis's Figure 5.2): x = floor(3 / 2) = 1, 3 + 2 * (3 - 1) = 7; bound ceil(12 / 2) = 6
    assert (beta_swaps(6, 3), swap_lower_bound(6, 3)) == (7, 6)
    assert [s.tolist() for s in beta_sets(6, 3)] == [[0, 1, 2], [0, 1, 3], [0, 1, 4], [0, 1, 5], [1, 2, 5],
                                                     [2, 3, 5], [2, 3, 4], [3, 4, 5]]
    assert (beta_swaps(16, 4), swap_lower_bound(16, 4)) == (42, 38)
    assert (beta_swaps(64, 16), swap_lower_bound(64, 16)) == (150, 127)
    assert beta_swaps(8, 8) == swap_lower_bound(8, 8) == 0


def test_beta_beats_a_random_ordering() -> None:
    rng = np.random.default_rng(0)
    for p, c in ((8, 2), (16, 4), (32, 8)):
        randoms = [swap_count(random_sets(p, c, rng)) for _ in range(5)]
        assert all(_pairs_covered(random_sets(p, c, rng), p) for _ in range(2))
        assert beta_swaps(p, c) < min(randoms), (p, c, randoms)


@pytest.mark.parametrize(("p", "c", "seed"), [(16, 4, 0), (16, 5, 1), (30, 6, 2), (9, 9, 3), (12, 2, 4)])
def test_comet_assigns_every_bucket_pair_exactly_once_to_a_set_holding_it(p: int, c: int, seed: int) -> None:
    order = comet_order(p, c, np.random.default_rng(seed))
    assert order.max_resident <= c and len(order.sets) >= 1
    b = order.bucket_set
    assert b.shape == (p, p) and np.array_equal(b, b.T) and b.min() >= 0  # one set per pair, (i, j) = (j, i)
    for i in range(p):
        for j in range(i, p):
            assert i in order.sets[b[i, j]] and j in order.sets[b[i, j]]
    # exactly once: each pair of i <= j is counted in one set's bucket list and nowhere else
    counts = np.zeros((p, p), dtype=np.int64)
    for k in range(len(order.sets)):
        counts += b == k
    assert (counts == 1).all()


def test_comet_redraws_logical_partitions_each_epoch() -> None:
    rng = np.random.default_rng(7)
    a, b = comet_order(16, 4, rng), comet_order(16, 4, rng)
    assert a.logical == b.logical == 8  # l = ceil(p / floor(c / 2)) = 2p / c
    assert [s.tolist() for s in a.sets] != [s.tolist() for s in b.sets]
    # logical partitions of two physical ones swap in and out together: every swap reads c / 2 partitions
    assert swap_count(a.sets) == 2 * beta_swaps(8, 2)


def test_greedy_assignment_is_the_first_co_resident_set() -> None:
    sets = beta_sets(6, 3)
    b = assign_buckets(sets, 6, None)
    assert b[0, 1] == 0 and b[4, 5] == len(sets) - 1 and b[2, 3] == 5


def test_alg7_reads_every_partition_once_and_static_needs_k_below_c() -> None:
    sets = alg7_sets(10, 3, np.random.default_rng(0))
    assert swap_count(sets) == 7 and len(np.unique(np.concatenate(sets))) == 10
    assert max(len(s) for s in sets) == 3
    order = static_order(10, 4, 2, np.random.default_rng(0))
    assert len(order.sets) == 1 and order.swaps == 0 and order.sets[0][:2].tolist() == [0, 1]
    with pytest.raises(ValueError, match="'plan.buffer_partitions' expected more than the 4 training"):
        static_order(10, 4, 4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="'plan.partition_order' expected one of"):
        epoch_order("hilbert", 4, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="'plan.buffer_partitions' expected >= 2"):
        beta_sets(4, 1)


def test_autotune_follows_the_thesis_rules() -> None:
    block = 4096
    node_bytes, edge_bytes, cpu = 100 * block, 64 * block, 50 * block
    p, c, ell = autotune(node_bytes, edge_bytes, cpu)
    assert p == min(100, int(math.sqrt(64))) == 8  # p = min(NO / D, sqrt(EO / D))
    po, ebo = node_bytes / p, edge_bytes / p**2
    assert c * po + 2 * c**2 * ebo < cpu <= (c + 1) * po + 2 * (c + 1) ** 2 * ebo  # the largest c that fits
    assert ell == 2 * p // c  # l = 2p / c
    # node-bound: tiny features, many edges
    assert autotune(10 * block, 10_000 * block, 10**9)[0] == 10
    assert buffer_capacity(1000, 0, 10, 10**6) == 10 and buffer_capacity(1000, 0, 10, 100) == 0


def test_resolve_config_wins_and_a_small_budget_raises_p() -> None:
    n, row, e = 2708, 1433 * 4, 10556  # Cora's shape
    t = resolve(n, row, e, 10**9, num_partitions=12, buffer_partitions=5)
    assert (t.p, t.c, t.p_from, t.c_from) == (12, 5, "config", "config")
    t = resolve(n, row, e, int(0.25 * n * row))
    assert t.p_from == t.c_from == "auto" and t.c >= 2 and t.budget_ok
    assert t.c * n * row / t.p < 0.25 * n * row
    zero = resolve(n, row, e, 0)  # no budget at all: two partitions anyway, flagged
    assert zero.c == 2 and not zero.budget_ok


def test_static_fill_connected_prefers_partitions_linked_to_the_training_ones() -> None:
    weights = np.zeros(10)
    weights[7] = 1e9  # partition 7 holds nearly every edge to the training partitions 0, 1
    rng = np.random.default_rng(0)
    picked = [static_order(10, 3, 2, rng, weights).sets[0].tolist() for _ in range(20)]
    assert all(s[:2] == [0, 1] and len(s) == 3 for s in picked)
    assert sum(s[2] == 7 for s in picked) >= 19
    uniform = [static_order(10, 3, 2, rng).sets[0][2] for _ in range(40)]
    assert len(set(uniform)) > 3  # the thesis's rule: any other partition


def test_comet_lowers_the_edge_permutation_bias_of_beta() -> None:
    rng = np.random.default_rng(3)
    for p, c in ((16, 4), (32, 8)):
        beta = [edge_permutation_bias(epoch_order("beta", p, c, rng)) for _ in range(3)]
        comet = [edge_permutation_bias(epoch_order("comet", p, c, rng)) for _ in range(3)]
        assert max(comet) < min(beta) <= 1.0
    one = epoch_order("beta", 4, 4, rng)  # everything resident at once: every tally moves together
    assert edge_permutation_bias(one) == 0.0


def test_random_bucket_assignment_is_uniform_over_the_co_resident_sets() -> None:
    sets = [np.array([0, 1]), np.array([0, 1, 2]), np.array([0, 1]), np.array([0, 1, 3])]
    rng = np.random.default_rng(0)
    draws = np.bincount([assign_buckets(sets, 4, rng)[0, 1] for _ in range(2000)], minlength=4)
    assert draws.min() > 400 and draws.max() < 600  # 500 each expected (sd ~19)
    assert assign_buckets(sets, 4, None)[0, 1] == 0 and assign_buckets(sets, 4, None)[2, 3] == -1
