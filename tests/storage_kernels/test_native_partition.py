"""fennel_pass / grem_pass: known answers, NumPy/Python reference, invalid inputs, thread independence."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import (
    TINY_INDICES,
    TINY_INDPTR,
    fennel_pass_ref,
    grem_pass_ref,
    random_graph,
)


def fennel_state(n: int, p: int, train_every: int = 3):
    labels = np.full(n, -1, dtype=np.int32)
    sizes = np.zeros(p, dtype=np.int64)
    tsizes = np.zeros(p, dtype=np.int64)
    is_train = (np.arange(n) % train_every == 0).astype(np.uint8)
    cap = np.full(p, int(np.ceil(1.1 * n / p)), dtype=np.int64)
    weight = np.ones(p)
    return labels, sizes, tsizes, is_train, cap, weight


def run_fennel(indptr, indices, n, p, *, bloom_bits=None, block=16, threads=0, chunk=None, ref=False, passes=1):
    return run_weighted_fennel(indptr, indices, n, p, (None, None, None), bloom_bits=bloom_bits, block=block,
                               threads=threads, chunk=chunk, ref=ref, passes=passes)


# ---- FENNEL ----------------------------------------------------------------------------------------------


def test_fennel_tiny_known_answer():
    labels, sizes, tsizes, is_train, cap, weight = fennel_state(4, 2)
    cap[:] = 2
    nodes = np.arange(4, dtype=np.int64)
    kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, np.zeros(4, np.uint8), cap,
                        weight, 0, alpha=0.1)
    # node 0 -> part 0 (tie, lowest k); 1 joins its neighbour 0; 2 has both neighbours in 0 but 0 is full
    assert labels.tolist() == [0, 0, 1, 1]
    assert sizes.tolist() == [2, 2]


@pytest.mark.parametrize("block", [1, 7, 64, 4096])
@pytest.mark.parametrize("chunk", [None, 50])
def test_fennel_exact_matches_reference(block, chunk):
    indptr, indices = random_graph(300, 6, seed=1)
    got = run_fennel(indptr, indices, 300, 5, block=block, chunk=chunk)
    want = run_fennel(indptr, indices, 300, 5, block=block, chunk=chunk, ref=True)
    assert np.array_equal(got[0], want[0])
    assert np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])


@pytest.mark.parametrize("block", [1, 9, 4096])
def test_fennel_restream_matches_reference(block):
    indptr, indices = random_graph(250, 6, seed=8)
    got = run_fennel(indptr, indices, 250, 4, block=block, chunk=60, passes=3)
    want = run_fennel(indptr, indices, 250, 4, block=block, chunk=60, passes=3, ref=True)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    assert got[1].sum() == 250 and np.array_equal(got[1], np.bincount(got[0], minlength=4))


def test_fennel_exact_does_not_depend_on_block_size():
    indptr, indices = random_graph(400, 8, seed=2)
    a = run_fennel(indptr, indices, 400, 6, block=1)[0]
    b = run_fennel(indptr, indices, 400, 6, block=97)[0]
    assert np.array_equal(a, b)


@pytest.mark.parametrize("block", [1, 16])
def test_fennel_bloom_matches_reference(block):
    indptr, indices = random_graph(200, 6, seed=3)
    labels, sizes, _, bloom = run_fennel(indptr, indices, 200, 4, bloom_bits=256, block=block, chunk=70)
    rlabels, rsizes, _, rbloom = run_fennel(indptr, indices, 200, 4, bloom_bits=256, block=block, chunk=70, ref=True)
    assert np.array_equal(labels, rlabels)
    assert np.array_equal(sizes, rsizes)
    bits = np.unpackbits(bloom, bitorder="little").reshape(4, 256).astype(bool)
    assert np.array_equal(bits, rbloom)


@pytest.mark.parametrize("bloom_bits", [None, 512])
def test_fennel_threads_do_not_change_the_result(bloom_bits):
    indptr, indices = random_graph(5000, 10, seed=4)
    passes = 1 if bloom_bits else 2
    one = run_fennel(indptr, indices, 5000, 8, bloom_bits=bloom_bits, block=256, threads=1, passes=passes)[0]
    many = run_fennel(indptr, indices, 5000, 8, bloom_bits=bloom_bits, block=256, threads=4, passes=passes)[0]
    assert np.array_equal(one, many)
    assert np.all((one >= 0) & (one < 8))


def test_fennel_respects_capacity_and_label_base():
    indptr, indices = random_graph(200, 6, seed=5)
    labels = np.full(200, 3, dtype=np.int32)  # another group's label: ignored as neighbours
    sizes, tsizes = np.zeros(4, np.int64), np.zeros(4, np.int64)
    cap = np.array([10, 100, 100, 100], dtype=np.int64)
    kernels.fennel_pass(indptr, indices, np.arange(200), labels, sizes, tsizes, np.zeros(200, np.uint8), cap,
                        np.ones(4), 10, alpha=0.0)
    assert sizes.tolist() == np.bincount(labels - 10, minlength=4).tolist()
    assert sizes[0] <= 10 and labels.min() >= 10 and labels.max() < 14


def test_fennel_invalid_inputs():
    labels, sizes, tsizes, is_train, cap, weight = fennel_state(4, 2)
    nodes = np.arange(4, dtype=np.int64)
    args = dict(label_base=0, alpha=0.1)
    with pytest.raises(ValueError, match="'labels' expected a int32"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels.astype(np.int64), sizes, tsizes, is_train[:4],
                            cap, weight, **args)
    with pytest.raises(IndexError, match="'indices' expected node ids"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES + 10, nodes, labels, sizes, tsizes, is_train[:4], cap,
                            weight, **args)
    with pytest.raises(IndexError, match="'nodes' expected strictly ascending"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes[::-1], labels, sizes, tsizes, is_train[:4], cap,
                            weight, **args)
    with pytest.raises(ValueError, match="'indptr' expected len"):
        kernels.fennel_pass(TINY_INDPTR[:-1], TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap,
                            weight, **args)
    with pytest.raises(ValueError, match="'bloom' expected"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap, weight,
                            bloom=np.zeros(12, np.uint8), **args)
    with pytest.raises(ValueError, match="'restream' expected exact counting"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap, weight,
                            bloom=np.zeros(16, np.uint8), restream=True, **args)
    with pytest.raises(ValueError, match="restreamed nodes assigned"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap, weight,
                            restream=True, **args)
    labels[2] = 1
    with pytest.raises(ValueError, match="unassigned"):
        kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap, weight,
                            **args)
    assert sizes.tolist() == [0, 0]  # nothing assigned on error


# ---- GREM ------------------------------------------------------------------------------------------------


def test_grem_tiny_known_answer():
    labels = np.array([5, 6, -1, -1], dtype=np.int32)
    pref = np.array([-1, 1, 0, 0], dtype=np.float32)
    sizes = np.array([1, 1], dtype=np.int64)
    moved = kernels.grem_pass(TINY_INDPTR[2:], TINY_INDICES, np.array([2, 3]), labels, pref, sizes,
                              np.array([3, 3]), 5, 6)
    # node 2 sees one neighbour on each side -> unassigned tie -> side with more room (a, tie); 3 follows 2
    assert labels.tolist() == [5, 6, 5, 5] and sizes.tolist() == [3, 1] and moved == 0
    moved = kernels.grem_pass(TINY_INDPTR, TINY_INDICES, np.arange(4), labels, pref, sizes, np.array([3, 3]), 5, 6)
    assert sizes.sum() == 4 and moved >= 0


@pytest.mark.parametrize("chunk", [37, 1000])
def test_grem_matches_reference(chunk):
    n = 600
    indptr, indices = random_graph(n, 8, seed=6)
    results = []
    for fn in (kernels.grem_pass, grem_pass_ref):
        labels = np.full(n, 9, dtype=np.int32)
        pref = np.zeros(n, dtype=np.float32)
        sizes = np.zeros(2, dtype=np.int64)
        cap = np.array([320, 320], dtype=np.int64)
        moved = []
        for _ in range(2):  # two streaming passes: the second re-evaluates everything
            for s in range(0, n, chunk):
                e = min(n, s + chunk)
                moved.append(fn(indptr[s : e + 1] - indptr[s], indices[indptr[s] : indptr[e]],
                                np.arange(s, e, dtype=np.int64), labels, pref, sizes, cap, 0, 1))
        results.append((labels, pref, sizes, moved))
    (la, pa, sa, ma), (lb, pb, sb, mb) = results
    assert np.array_equal(la, lb) and np.array_equal(pa, pb) and np.array_equal(sa, sb) and ma == mb
    assert sa.sum() == n and np.all(sa <= 320)


def test_grem_invalid_inputs():
    labels = np.full(4, -1, dtype=np.int32)
    pref = np.zeros(4, dtype=np.float32)
    sizes = np.zeros(2, dtype=np.int64)
    nodes = np.arange(4)
    with pytest.raises(ValueError, match="'pref' expected"):
        kernels.grem_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, pref[:3], sizes, [2, 2], 0, 1)
    with pytest.raises(ValueError, match="'pref' expected a 1-D float32|float32"):
        kernels.grem_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, pref.astype(np.float64), sizes, [2, 2], 0, 1)
    with pytest.raises(ValueError, match="distinct"):
        kernels.grem_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, pref, sizes, [2, 2], 1, 1)
    with pytest.raises(IndexError, match="'indices' expected node ids"):
        kernels.grem_pass(TINY_INDPTR, TINY_INDICES - 5, nodes, labels, pref, sizes, [2, 2], 0, 1)
    with pytest.raises(ValueError, match="'sizes' and 'capacity'"):
        kernels.grem_pass(TINY_INDPTR, TINY_INDICES, nodes, labels, pref, sizes, [2, 2, 2], 0, 1)


# ---- weighted FENNEL / GREM (coarse graphs of the multilevel scheme) ------------------------------------


def weighted_inputs(n: int, num_entries: int, seed: int):
    """Random node weights (1..4), entry weights (1..5) and training weights (0..3, mostly 0)."""
    rng = np.random.default_rng(seed)
    nw = rng.integers(1, 5, n).astype(np.int64)
    ew = rng.integers(1, 6, num_entries).astype(np.int64)
    tw = (rng.integers(1, 4, n) * (rng.random(n) < 0.4)).astype(np.int64)
    return nw, ew, tw


def run_weighted_fennel(indptr, indices, n, p, weights, *, bloom_bits=None, block=16, threads=0, chunk=None,
                        ref=False, passes=1, penalty=2.0):
    """run_fennel with per-node / per-entry weights (each None = unweighted); capacity from the total weight."""
    nw, ew, tw = weights
    labels, sizes, tsizes, is_train, _, weight = fennel_state(n, p)
    total = n if nw is None else int(nw.sum())
    cap = np.full(p, int(np.ceil(1.1 * total / p)), dtype=np.int64)
    alpha = np.sqrt(p) * (len(indices) / 2) / n**1.5
    bloom = None
    if bloom_bits is not None:
        bloom = np.zeros((p, bloom_bits), dtype=bool) if ref else np.zeros(p * bloom_bits // 8, dtype=np.uint8)
    train_total = is_train.sum() if tw is None else tw.sum()
    chunk = chunk or n
    for rs in range(passes):
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            lo, hi = indptr[s], indptr[e]
            args = (indptr[s : e + 1] - lo, indices[lo:hi], np.arange(s, e, dtype=np.int64), labels, sizes, tsizes,
                    is_train[s:e], cap, weight, 0, alpha, 1.5, penalty, max(1.0, train_total / p))
            kw = dict(bloom=bloom, bloom_seed=7, block_nodes=block, restream=rs > 0,
                      node_weight=None if nw is None else nw[s:e], edge_weight=None if ew is None else ew[lo:hi],
                      train_weight=None if tw is None else tw[s:e])
            if ref:
                fennel_pass_ref(*args, **kw)
            else:
                kernels.fennel_pass(*args, **kw, num_threads=threads)
    return labels, sizes, tsizes, bloom


def test_fennel_weighted_tiny_known_answer():
    # node weights: v0 weighs 2; capacity 3 per part, alpha = 0 (scores are the neighbour counts)
    labels, sizes, tsizes, _, _, weight = fennel_state(4, 2)
    kernels.fennel_pass(TINY_INDPTR, TINY_INDICES, np.arange(4), labels, sizes, tsizes, np.zeros(4, np.uint8),
                        np.array([3, 3]), weight, 0, alpha=0.0, node_weight=np.array([2, 1, 1, 1]))
    # v0 -> 0 (tie), sizes [2, 0]; v1 joins 0 (2 + 1 <= 3); v2: part 0 full (3 + 1 > 3) -> 1; v3 follows 2.
    # (Unweighted, v2 would still fit into part 0 and v3 alone go to part 1.)
    assert labels.tolist() == [0, 0, 1, 1] and sizes.tolist() == [3, 2]


@pytest.mark.parametrize("block", [1, 4096])
def test_fennel_edge_weighted_tiny_known_answer(block):
    # nodes 0 (part 0) and 3 (part 1) are placed; stream 1 and 2 (rows [0, 2] and [0, 1, 3]) with alpha = 0
    ptr, cols = np.array([0, 2, 5]), np.array([0, 2, 0, 1, 3])
    for ew, want in (([1, 1, 1, 1, 5], [0, 0, 1, 1]),  # v2: part 0 via 0 and 1 (1 + 1) < part 1 via 3 (5)
                     ([1, 1, 1, 5, 3], [0, 0, 0, 1]),  # v2: part 0 via 0 and the block node 1 (1 + 5) > 3
                     (None, [0, 0, 0, 1])):            # unweighted: 2 > 1
        labels = np.array([0, -1, -1, 1], dtype=np.int32)
        sizes, tsizes = np.array([1, 1], dtype=np.int64), np.zeros(2, dtype=np.int64)
        kernels.fennel_pass(ptr, cols, np.array([1, 2]), labels, sizes, tsizes, np.zeros(2, np.uint8),
                            np.array([10, 10]), np.ones(2), 0, alpha=0.0, block_nodes=block,
                            edge_weight=None if ew is None else np.array(ew))
        assert labels.tolist() == want and sizes.sum() == 4


def test_fennel_train_weight_known_answer():
    # four nodes without edges, alpha = 0, train_penalty = 1, train_norm = 1: score_k = -t * train_sizes[k]
    ptr, cols, nodes = np.zeros(5, np.int64), np.zeros(0, np.int64), np.arange(4)
    labels, sizes, tsizes, _, _, weight = fennel_state(4, 2)
    kernels.fennel_pass(ptr, cols, nodes, labels, sizes, tsizes, np.ones(4, np.uint8), np.array([4, 4]), weight, 0,
                        alpha=0.0, train_penalty=1.0, train_norm=1.0, train_weight=np.array([3, 1, 0, 2]))
    # t=3 -> 0 (tie), T [3, 0]; t=1 -> 1 (-3 < 0), T [3, 1]; t=0 -> no penalty, tie -> 0 (train_weight
    # overrides is_train = 1); t=2 -> 1 (-6 < -2), T [3, 3]
    assert labels.tolist() == [0, 1, 0, 1] and tsizes.tolist() == [3, 3] and sizes.tolist() == [2, 2]
    labels, sizes, tsizes, _, _, weight = fennel_state(4, 2)
    kernels.fennel_pass(ptr, cols, nodes, labels, sizes, tsizes, np.array([1, 1, 0, 1], np.uint8), np.array([4, 4]),
                        weight, 0, alpha=0.0, train_penalty=1.0, train_norm=1.0)
    # the 0/1 flags instead: 0 -> 0, 1 -> 1, 2 (no penalty) -> 0, 3: -1 vs -1 -> 0
    assert labels.tolist() == [0, 1, 0, 0] and tsizes.tolist() == [2, 1]


@pytest.mark.parametrize("block", [1, 7, 4096])
@pytest.mark.parametrize("chunk", [None, 70])
@pytest.mark.parametrize("threads", [1, 4])
def test_fennel_weighted_matches_reference(block, chunk, threads):
    indptr, indices = random_graph(300, 6, seed=51)
    weights = weighted_inputs(300, len(indices), seed=52)
    got = run_weighted_fennel(indptr, indices, 300, 5, weights, block=block, chunk=chunk, threads=threads)
    want = run_weighted_fennel(indptr, indices, 300, 5, weights, block=block, chunk=chunk, ref=True)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    nw, _, tw = weights
    assert np.array_equal(got[1], np.bincount(got[0], weights=nw, minlength=5).astype(np.int64))
    assert np.array_equal(got[2], np.bincount(got[0], weights=tw, minlength=5).astype(np.int64))
    assert np.all(got[1] <= np.ceil(1.1 * nw.sum() / 5))
    unweighted = run_weighted_fennel(indptr, indices, 300, 5, (None, None, None), block=block, chunk=chunk)[0]
    assert not np.array_equal(got[0], unweighted)  # the weights matter


@pytest.mark.parametrize("which", ["node", "edge", "train"])
def test_fennel_each_weight_matches_reference(which):
    indptr, indices = random_graph(250, 6, seed=53)
    nw, ew, tw = weighted_inputs(250, len(indices), seed=54)
    weights = (nw if which == "node" else None, ew if which == "edge" else None, tw if which == "train" else None)
    got = run_weighted_fennel(indptr, indices, 250, 4, weights, block=9, chunk=80)
    want = run_weighted_fennel(indptr, indices, 250, 4, weights, block=9, chunk=80, ref=True)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])


@pytest.mark.parametrize("block", [1, 9, 4096])
def test_fennel_weighted_restream_matches_reference(block):
    indptr, indices = random_graph(250, 6, seed=55)
    weights = weighted_inputs(250, len(indices), seed=56)
    got = run_weighted_fennel(indptr, indices, 250, 4, weights, block=block, chunk=60, passes=3)
    want = run_weighted_fennel(indptr, indices, 250, 4, weights, block=block, chunk=60, passes=3, ref=True)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and np.array_equal(got[2], want[2])
    nw, _, tw = weights
    assert np.array_equal(got[1], np.bincount(got[0], weights=nw, minlength=4).astype(np.int64))
    assert np.array_equal(got[2], np.bincount(got[0], weights=tw, minlength=4).astype(np.int64))


@pytest.mark.parametrize("block", [1, 16])
def test_fennel_weighted_bloom_matches_reference(block):
    indptr, indices = random_graph(200, 6, seed=57)
    weights = weighted_inputs(200, len(indices), seed=58)
    labels, sizes, tsizes, bloom = run_weighted_fennel(indptr, indices, 200, 4, weights, bloom_bits=256, block=block,
                                                       chunk=70)
    want = run_weighted_fennel(indptr, indices, 200, 4, weights, bloom_bits=256, block=block, chunk=70, ref=True)
    assert np.array_equal(labels, want[0]) and np.array_equal(sizes, want[1]) and np.array_equal(tsizes, want[2])
    assert np.array_equal(np.unpackbits(bloom, bitorder="little").reshape(4, 256).astype(bool), want[3])


def test_fennel_weighted_threads_do_not_change_the_result():
    indptr, indices = random_graph(4000, 10, seed=59)
    weights = weighted_inputs(4000, len(indices), seed=60)
    one = run_weighted_fennel(indptr, indices, 4000, 8, weights, block=256, threads=1, passes=2)
    many = run_weighted_fennel(indptr, indices, 4000, 8, weights, block=256, threads=4, passes=2)
    assert all(np.array_equal(a, b) for a, b in zip(one[:3], many[:3], strict=True))


@pytest.mark.parametrize("bloom_bits", [None, 256])
def test_fennel_unit_weights_equal_unweighted(bloom_bits):
    indptr, indices = random_graph(300, 6, seed=61)
    _, _, _, is_train, _, _ = fennel_state(300, 5)
    ones = (np.ones(300, np.int64), np.ones(len(indices), np.int64), is_train.astype(np.int64))
    passes = 1 if bloom_bits else 2
    plain = run_weighted_fennel(indptr, indices, 300, 5, (None, None, None), bloom_bits=bloom_bits, block=7,
                                chunk=90, passes=passes)
    unit = run_weighted_fennel(indptr, indices, 300, 5, ones, bloom_bits=bloom_bits, block=7, chunk=90,
                               passes=passes)
    for a, b in zip(plain, unit, strict=True):
        assert (a is None and b is None) or np.array_equal(a, b)
    # and the unweighted path is unchanged: the original harness gives the same labels
    if bloom_bits is None:
        assert np.array_equal(plain[0], run_fennel(indptr, indices, 300, 5, block=7, chunk=90, passes=2)[0])


def test_fennel_weight_invalid_inputs():
    labels, sizes, tsizes, is_train, cap, weight = fennel_state(4, 2)
    nodes = np.arange(4, dtype=np.int64)
    args = (TINY_INDPTR, TINY_INDICES, nodes, labels, sizes, tsizes, is_train[:4], cap, weight, 0, 0.1)
    with pytest.raises(ValueError, match=r"'node_weight' expected weights >= 1 \(got \[2\]=0\)"):
        kernels.fennel_pass(*args, node_weight=[1, 1, 0, 1])
    with pytest.raises(ValueError, match=r"'node_weight' expected 4 entries \(got 3\)"):
        kernels.fennel_pass(*args, node_weight=[1, 1, 1])
    with pytest.raises(ValueError, match=r"'edge_weight' expected weights >= 1 \(got \[7\]=0\)"):
        kernels.fennel_pass(*args, edge_weight=[1, 1, 1, 1, 1, 1, 1, 0])
    with pytest.raises(ValueError, match=r"'edge_weight' expected 8 entries \(got 9\)"):
        kernels.fennel_pass(*args, edge_weight=np.ones(9, np.int64))
    with pytest.raises(ValueError, match=r"'train_weight' expected weights >= 0 \(got \[0\]=-1\)"):
        kernels.fennel_pass(*args, train_weight=[-1, 0, 0, 0])
    with pytest.raises(ValueError, match=r"'node_weight' expected an integer array"):
        kernels.fennel_pass(*args, node_weight=np.ones(4))
    assert labels.tolist() == [-1] * 4 and sizes.tolist() == [0, 0] and tsizes.tolist() == [0, 0]
    kernels.fennel_pass(*args, train_weight=[0, 0, 0, 0])  # zero training weights are allowed
    assert sizes.sum() == 4 and tsizes.tolist() == [0, 0]


def test_grem_weighted_tiny_known_answer():
    # nodes 0, 1 on side a (label 5), 3 on side b (6); stream node 2 (neighbours 0, 1, 3)
    ptr, cols, node = np.array([0, 3]), np.array([0, 1, 3]), np.array([2])

    def stream(cap, **kw):
        labels = np.array([5, 5, -1, 6], dtype=np.int32)
        pref, sizes = np.zeros(4, dtype=np.float32), np.array([2, 1], dtype=np.int64)
        moved = kernels.grem_pass(ptr, cols, node, labels, pref, sizes, np.array(cap), 5, 6, **kw)
        return labels[2], sizes.tolist(), moved, pref[2]

    # unweighted: cur = 1*(1 - 1/10) - 2*(1 - 2/10) = 0.9 - 1.6 < 0 -> side a
    assert stream([10, 10])[:3] == (5, [3, 1], 0)
    # the entry to 3 weighs 5: cur = 5*0.9 - 2*0.8 = 2.9 > 0 -> side b
    label, sizes, moved, est = stream([10, 10], edge_weight=np.array([1, 1, 5]))
    assert (label, sizes, moved) == (6, [2, 2], 0) and est == np.float32(2.9)
    # node weight 3 goes to side b (1 + 3 <= 4) ...
    assert stream([10, 4], node_weight=np.array([3]), edge_weight=np.array([1, 1, 5]))[:3] == (6, [2, 4], 0)
    # ... but does not fit there with capacity 3 (1 + 3 > 3): unassigned, it takes side a
    assert stream([10, 3], node_weight=np.array([3]), edge_weight=np.array([1, 1, 5]))[:3] == (5, [5, 1], 0)


@pytest.mark.parametrize("chunk", [37, 1000])
@pytest.mark.parametrize("which", ["both", "node", "edge"])
def test_grem_weighted_matches_reference(chunk, which):
    n = 600
    indptr, indices = random_graph(n, 8, seed=62)
    nw, ew, _ = weighted_inputs(n, len(indices), seed=63)
    nw = nw if which != "edge" else None
    ew = ew if which != "node" else None
    total = n if nw is None else int(nw.sum())
    cap = np.array([total * 35 // 100, total * 70 // 100], dtype=np.int64)  # side a fills up: room binds
    results = []
    for fn in (kernels.grem_pass, grem_pass_ref):
        labels = np.full(n, 9, dtype=np.int32)
        pref = np.zeros(n, dtype=np.float32)
        sizes = np.zeros(2, dtype=np.int64)
        moved = []
        for _ in range(2):
            for s in range(0, n, chunk):
                e = min(n, s + chunk)
                lo, hi = indptr[s], indptr[e]
                moved.append(fn(indptr[s : e + 1] - lo, indices[lo:hi], np.arange(s, e, dtype=np.int64), labels,
                                pref, sizes, cap, 0, 1, node_weight=None if nw is None else nw[s:e],
                                edge_weight=None if ew is None else ew[lo:hi]))
        results.append((labels, pref, sizes, moved))
    (la, pa, sa, ma), (lb, pb, sb, mb) = results
    assert np.array_equal(la, lb) and np.array_equal(pa, pb) and np.array_equal(sa, sb) and ma == mb
    w = np.ones(n, dtype=np.int64) if nw is None else nw
    assert sa.sum() == total and np.array_equal(sa, np.bincount(la, weights=w, minlength=2).astype(np.int64))
    assert sum(ma[len(ma) // 2 :]) > 0  # the second pass moved nodes
    assert sa[0] <= cap[0]  # side a never goes past its capacity (side b is never full)


def test_grem_unit_weights_equal_unweighted():
    n = 400
    indptr, indices = random_graph(n, 8, seed=64)
    results = []
    for kw in ({}, dict(node_weight=np.ones(n, np.int64), edge_weight=np.ones(len(indices), np.int64))):
        labels = np.full(n, -1, dtype=np.int32)
        pref = np.zeros(n, dtype=np.float32)
        sizes = np.zeros(2, dtype=np.int64)
        moved = [kernels.grem_pass(indptr, indices, np.arange(n), labels, pref, sizes, [210, 210], 0, 1, **kw)
                 for _ in range(3)]
        results.append((labels, pref, sizes, moved))
    (la, pa, sa, ma), (lb, pb, sb, mb) = results
    assert np.array_equal(la, lb) and np.array_equal(pa, pb) and np.array_equal(sa, sb) and ma == mb


def test_grem_weight_invalid_inputs():
    labels = np.full(4, -1, dtype=np.int32)
    pref = np.zeros(4, dtype=np.float32)
    sizes = np.zeros(2, dtype=np.int64)
    args = (TINY_INDPTR, TINY_INDICES, np.arange(4), labels, pref, sizes, [2, 2], 0, 1)
    with pytest.raises(ValueError, match=r"'node_weight' expected weights >= 1 \(got \[3\]=0\)"):
        kernels.grem_pass(*args, node_weight=[1, 1, 1, 0])
    with pytest.raises(ValueError, match=r"'edge_weight' expected 8 entries \(got 4\)"):
        kernels.grem_pass(*args, edge_weight=[1, 1, 1, 1])
    with pytest.raises(ValueError, match=r"'edge_weight' expected weights >= 1 \(got \[1\]=-3\)"):
        kernels.grem_pass(*args, edge_weight=[1, -3, 1, 1, 1, 1, 1, 1])
    assert labels.tolist() == [-1] * 4 and sizes.tolist() == [0, 0]


def test_fennel_any_nonzero_is_train_counts_as_one_training_node():
    indptr, indices = random_graph(200, 6, seed=11)
    out = []
    for flag in (1, 7):
        labels, sizes, tsizes, is_train, cap, weight = fennel_state(200, 4)
        kernels.fennel_pass(indptr, indices, np.arange(200, dtype=np.int64), labels, sizes, tsizes,
                            is_train * flag, cap, weight, 0, alpha=0.05, train_penalty=3.0, train_norm=10.0)
        out.append((labels.copy(), tsizes.copy()))
    assert np.array_equal(out[0][0], out[1][0]) and np.array_equal(out[0][1], out[1][1])
