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
)


def random_graph(n: int, deg: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = n * deg // 2
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    s, d = np.concatenate([src, dst]), np.concatenate([dst, src])
    order = np.lexsort((d, s))
    s, d = s[order], d[order]
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(s, minlength=n), out=indptr[1:])
    return indptr, d.astype(np.int64)


def fennel_state(n: int, p: int, train_every: int = 3):
    labels = np.full(n, -1, dtype=np.int32)
    sizes = np.zeros(p, dtype=np.int64)
    tsizes = np.zeros(p, dtype=np.int64)
    is_train = (np.arange(n) % train_every == 0).astype(np.uint8)
    cap = np.full(p, int(np.ceil(1.1 * n / p)), dtype=np.int64)
    weight = np.ones(p)
    return labels, sizes, tsizes, is_train, cap, weight


def run_fennel(indptr, indices, n, p, *, bloom_bits=None, block=16, threads=0, chunk=None, ref=False, passes=1):
    labels, sizes, tsizes, is_train, cap, weight = fennel_state(n, p)
    alpha = np.sqrt(p) * (len(indices) / 2) / n**1.5
    bloom = None
    if bloom_bits is not None:
        bloom = np.zeros((p, bloom_bits), dtype=bool) if ref else np.zeros(p * bloom_bits // 8, dtype=np.uint8)
    chunk = chunk or n
    for rs in range(passes):
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            ptr = indptr[s : e + 1] - indptr[s]
            cols = indices[indptr[s] : indptr[e]]
            nodes = np.arange(s, e, dtype=np.int64)
            args = (ptr, cols, nodes, labels, sizes, tsizes, is_train[s:e], cap, weight, 0, alpha, 1.5, 2.0,
                    max(1.0, is_train.sum() / p))
            kw = dict(bloom=bloom, bloom_seed=7, block_nodes=block, restream=rs > 0)
            if ref:
                fennel_pass_ref(*args, **kw)
            else:
                kernels.fennel_pass(*args, **kw, num_threads=threads)
    return labels, sizes, tsizes, bloom


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
