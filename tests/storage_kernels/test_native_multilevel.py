"""cluster_pass / refine_pass / csr_aggregate: known answers, NumPy/Python reference, invariants, invalid inputs."""

from __future__ import annotations

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import (
    TINY_INDICES,
    TINY_INDPTR,
    cluster_pass_ref,
    csr_aggregate_ref,
    random_graph,
    refine_pass_ref,
)

# Entry order of the tiny graph (reference.py): row 0 = [1, 2], row 1 = [0, 2], row 2 = [0, 1, 3], row 3 = [2].
TINY_NODES = np.arange(4, dtype=np.int64)


def chunk_rows(indptr, indices, nodes, edge_weight=None):
    """The rows of `nodes` (any order) as a local CSR: (ptr, cols, ew) like a streamed chunk."""
    deg = indptr[nodes + 1] - indptr[nodes]
    ptr = np.zeros(len(nodes) + 1, dtype=np.int64)
    np.cumsum(deg, out=ptr[1:])
    pos = np.concatenate([np.arange(indptr[v], indptr[v + 1]) for v in nodes]).astype(np.int64)
    return ptr, indices[pos], None if edge_weight is None else edge_weight[pos]


def chunks(n: int, chunk: int, order: np.ndarray | None = None):
    order = np.arange(n, dtype=np.int64) if order is None else order
    for s in range(0, n, chunk):
        yield order[s : s + chunk]


# ---- cluster_pass ----------------------------------------------------------------------------------------


def tiny_clusters():
    return np.arange(4, dtype=np.int64), np.ones(4, dtype=np.int64)


def test_cluster_tiny_known_answer():
    cl, cw = tiny_clusters()
    moved = kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 2)
    # v0: clusters 1 and 2 both weigh 1 -> tie, smallest (1); 1 > own 0 -> joins 1 (cw[1] = 2, now full).
    # v1: own cluster 1 (via 0) weighs 1, cluster 2 weighs 1: not strictly better -> stays.
    # v2: cluster 1 (weight 2) has no room (2 + 1 > 2); cluster 3 (weight 1) fits -> joins 3.
    # v3: its only neighbour is in its own cluster 3 -> stays.
    assert cl.tolist() == [1, 1, 3, 3] and cw.tolist() == [0, 2, 0, 2] and moved == 2


def test_cluster_tiny_known_answer_larger_clusters():
    cl, cw = tiny_clusters()
    moved = kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 3)
    # v0 -> 1 as before; v1 stays; v2: cluster 1 (connection 2) now fits (2 + 1 <= 3) -> joins 1;
    # v3: its neighbour's cluster 1 is full (3 + 1 > 3), own connection 0 -> stays alone.
    assert cl.tolist() == [1, 1, 1, 3] and cw.tolist() == [0, 3, 0, 1] and moved == 2


def test_cluster_tiny_visit_order():
    cl, cw = tiny_clusters()
    moved = kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 2, visit=[3, 2, 1, 0])
    # v3 -> 2 (cw[2] = 2, full). v2: own (via 3) 1, clusters 0 and 1 give 1 each: not better -> stays.
    # v1: cluster 0 (1) fits, cluster 2 is full -> joins 0. v0: own (via 1) 1, cluster 2 full -> stays.
    assert cl.tolist() == [0, 0, 2, 2] and cw.tolist() == [2, 0, 2, 0] and moved == 2


def test_cluster_tiny_weighted_known_answer():
    ew = np.array([1, 3, 1, 1, 3, 1, 1, 1], dtype=np.int64)  # the edge 0-2 weighs 3 (entries 1 and 4)
    nw = np.array([1, 1, 1, 8], dtype=np.int64)
    cl, cw = np.arange(4, dtype=np.int64), nw.copy()
    moved = kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 10, node_weight=nw, edge_weight=ew)
    # v0: cluster 2 (3) beats cluster 1 (1) -> joins 2 (cw[2] = 2). v1: cluster 2 (0 and 2: 1 + 1) -> joins 2
    # (cw[2] = 3). v2: own connection 3 + 1 = 4 beats cluster 3 (1) -> stays. v3 (weight 8): cluster 2 would
    # weigh 3 + 8 = 11 > 10 -> stays.
    assert cl.tolist() == [2, 2, 2, 3] and cw.tolist() == [0, 0, 3, 8] and moved == 2
    cl, cw = np.arange(4, dtype=np.int64), np.ones(4, dtype=np.int64)
    moved = kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 10, edge_weight=ew)
    # unit node weights: v3 fits (3 + 1 <= 10) and joins 2 as well
    assert cl.tolist() == [2, 2, 2, 2] and cw.tolist() == [0, 0, 4, 0] and moved == 3


def test_cluster_self_loops_are_ignored():
    # node 0: a heavy self loop and one neighbour 1. Counting the loop as "own" (5 > 1) would keep 0 alone.
    indptr, indices = np.array([0, 2, 3]), np.array([0, 1, 0])
    cl, cw = np.arange(2, dtype=np.int64), np.ones(2, dtype=np.int64)
    moved = kernels.cluster_pass(indptr, indices, np.arange(2), cl, cw, 5, edge_weight=np.array([5, 1, 1]))
    assert cl.tolist() == [1, 1] and cw.tolist() == [0, 2] and moved == 1


def test_cluster_stays_on_tie_with_own_cluster():
    # tiny graph, clusters {0, 1}, {2}, {3}; stream node 1 alone: own cluster 0 via node 0 (1) equals cluster 2
    # via node 2 (1) -> not strictly better -> stays. With entry 1->2 weighing 2 it moves to cluster 2.
    ptr, cols, _ = chunk_rows(TINY_INDPTR, TINY_INDICES, np.array([1]))
    for ew, want in ((None, [0, 0, 2, 3]), (np.array([1, 2]), [0, 2, 2, 3])):
        cl = np.array([0, 0, 2, 3], dtype=np.int64)
        cw = np.bincount(cl, minlength=4).astype(np.int64)
        moved = kernels.cluster_pass(ptr, cols, np.array([1]), cl, cw, 10, edge_weight=ew)
        assert cl.tolist() == want and moved == int(ew is not None)
        assert cw.tolist() == np.bincount(cl, minlength=4).tolist()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("permuted", [False, True])
@pytest.mark.parametrize("chunk", [110, 400])
def test_cluster_matches_reference(weighted, permuted, chunk):
    n, max_weight = 300, 7
    indptr, indices = random_graph(n, 6, seed=11)
    rng = np.random.default_rng(12)
    ew = rng.integers(1, 6, len(indices)).astype(np.int64) if weighted else None
    nw = rng.integers(1, 4, n).astype(np.int64) if weighted else None
    order = rng.permutation(n).astype(np.int64) if permuted else None
    visits = [rng.permutation(len(nodes)) if permuted else None for nodes in chunks(n, chunk, order)]
    results = []
    for fn in (kernels.cluster_pass, cluster_pass_ref):
        cl = np.arange(n, dtype=np.int64)
        cw = np.ones(n, dtype=np.int64) if nw is None else nw.copy()
        moves = []
        for _ in range(3):  # three rounds: later rounds start from clustered state
            for nodes, visit in zip(chunks(n, chunk, order), visits, strict=True):
                ptr, cols, cew = chunk_rows(indptr, indices, nodes, ew)
                moves.append(fn(ptr, cols, nodes, cl, cw, max_weight, node_weight=None if nw is None else nw[nodes],
                                edge_weight=cew, visit=visit))
        results.append((cl, cw, moves))
    (cl, cw, moves), (rcl, rcw, rmoves) = results
    assert np.array_equal(cl, rcl) and np.array_equal(cw, rcw) and moves == rmoves
    assert moves[0] > 0 and len(np.unique(cl)) < n  # something was clustered
    total = np.ones(n, dtype=np.int64) if nw is None else nw
    assert np.array_equal(cw, np.bincount(cl, weights=total, minlength=n).astype(np.int64))
    assert cw.max() <= max_weight


def test_cluster_long_rows_match_reference():
    # rows of ~28 entries (the kernel sorts rows of more than 24 entries with qsort, shorter ones by insertion)
    n = 80
    indptr, indices = random_graph(n, 28, seed=14)
    assert np.diff(indptr).max() > 24 and np.diff(indptr).min() <= 24
    rng = np.random.default_rng(15)
    ew, nw = rng.integers(1, 4, len(indices)).astype(np.int64), rng.integers(1, 3, n).astype(np.int64)
    visit = rng.permutation(n)
    cl, cw = np.arange(n, dtype=np.int64), nw.copy()
    rcl, rcw = np.arange(n, dtype=np.int64), nw.copy()
    for _ in range(3):
        moved = kernels.cluster_pass(indptr, indices, np.arange(n), cl, cw, 9, node_weight=nw, edge_weight=ew,
                                     visit=visit)
        assert moved == cluster_pass_ref(indptr, indices, np.arange(n), rcl, rcw, 9, nw, ew, visit)
        assert np.array_equal(cl, rcl) and np.array_equal(cw, rcw)
    assert len(np.unique(cl)) < n


def test_visit_subsets_match_reference_and_leave_the_rest_alone():
    # degree-bucketed passes visit a subset of each chunk: unlisted nodes are only read as neighbours
    n = 240
    indptr, indices = random_graph(n, 6, seed=21)
    deg = np.diff(indptr)
    nodes = np.arange(n, dtype=np.int64)
    for bucket in (deg <= np.median(deg), deg > np.median(deg)):
        visit = np.flatnonzero(bucket)[::-1].copy()
        cl, cw = np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64)
        rcl, rcw = cl.copy(), cw.copy()
        moved = kernels.cluster_pass(indptr, indices, nodes, cl, cw, 6, visit=visit)
        assert moved == cluster_pass_ref(indptr, indices, nodes, rcl, rcw, 6, visit=visit) and moved > 0
        assert np.array_equal(cl, rcl) and np.all(cl[~bucket] == nodes[~bucket])
        parts = (nodes % 3).astype(np.int32)
        sizes = np.bincount(parts, minlength=3).astype(np.int64)
        rparts, rsizes = parts.copy(), sizes.copy()
        cap = np.full(3, 90, dtype=np.int64)
        moved = kernels.refine_pass(indptr, indices, nodes, parts, sizes, cap, visit=visit)
        assert moved == refine_pass_ref(indptr, indices, nodes, rparts, rsizes, cap, visit=visit) and moved > 0
        assert np.array_equal(parts, rparts) and np.all(parts[~bucket] == (nodes % 3)[~bucket])


def test_cluster_visit_order_changes_the_result():
    indptr, indices = random_graph(200, 6, seed=13)
    nodes = np.arange(200, dtype=np.int64)
    got = []
    for visit in (None, nodes[::-1]):
        cl, cw = np.arange(200, dtype=np.int64), np.ones(200, dtype=np.int64)
        kernels.cluster_pass(indptr, indices, nodes, cl, cw, 5, visit=visit)
        rcl, rcw = np.arange(200, dtype=np.int64), np.ones(200, dtype=np.int64)
        cluster_pass_ref(indptr, indices, nodes, rcl, rcw, 5, visit=visit)
        assert np.array_equal(cl, rcl) and np.array_equal(cw, rcw)
        got.append(cl)
    assert not np.array_equal(got[0], got[1])


def test_cluster_invalid_inputs():
    def call(**kw):
        args = dict(indptr=TINY_INDPTR, indices=TINY_INDICES, nodes=TINY_NODES, clusters=cl, cluster_weight=cw,
                    max_weight=3)
        args.update(kw)
        return kernels.cluster_pass(**args)

    cl, cw = tiny_clusters()
    with pytest.raises(ValueError, match=r"'indptr' expected len\(nodes\)\+1 = 5 entries \(got 4\)"):
        call(indptr=TINY_INDPTR[:-1])
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing offsets .*indptr\[2\]=1"):
        call(indptr=np.array([0, 2, 1, 7, 8]))
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing offsets .*indptr\[4\]=9"):
        call(indptr=np.array([0, 2, 4, 7, 9]))
    with pytest.raises(IndexError, match=r"'nodes' expected ids in \[0, 4\) \(got nodes\[3\]=4\)"):
        call(nodes=np.array([0, 1, 2, 4]))
    with pytest.raises(IndexError, match=r"'indices' expected node ids in \[0, 4\) \(got indices\[6\]=-1\)"):
        call(indices=np.array([1, 2, 0, 2, 0, 1, -1, 2]))
    with pytest.raises(ValueError, match=r"'visit' expected distinct positions in \[0, 4\) \(got visit\[2\]=1\)"):
        call(visit=[0, 1, 1, 3])
    with pytest.raises(ValueError, match=r"'visit' expected distinct positions in \[0, 4\) \(got visit\[3\]=4\)"):
        call(visit=[0, 1, 2, 4])
    with pytest.raises(ValueError, match=r"'visit' expected at most 4 positions \(got 5\)"):
        call(visit=[0, 1, 2, 3, 0])
    with pytest.raises(ValueError, match=r"'node_weight' expected weights >= 1 \(got \[1\]=0\)"):
        call(node_weight=[1, 0, 1, 1])
    with pytest.raises(ValueError, match=r"'edge_weight' expected weights >= 1 \(got \[5\]=-2\)"):
        call(edge_weight=[1, 1, 1, 1, 1, -2, 1, 1])
    with pytest.raises(ValueError, match=r"'edge_weight' expected 8 entries \(got 7\)"):
        call(edge_weight=np.ones(7, np.int64))
    with pytest.raises(ValueError, match=r"'node_weight' expected 4 entries \(got 5\)"):
        call(node_weight=np.ones(5, np.int64))
    with pytest.raises(ValueError, match=r"'max_weight' expected >= 1 \(got 0\)"):
        call(max_weight=0)
    with pytest.raises(ValueError, match=r"'cluster_weight' expected 4 entries \(got 3\)"):
        call(cluster_weight=cw[:3])
    with pytest.raises(ValueError, match=r"'clusters' expected a writable C-contiguous 1-D int64 array"):
        call(clusters=cl.astype(np.int32))
    with pytest.raises(ValueError, match=r"'cluster_weight' expected a writable C-contiguous 1-D int64 array"):
        call(cluster_weight=cw.astype(np.float64))
    with pytest.raises(ValueError, match=r"'indices' expected a 1-D int64 array"):
        call(indices=TINY_INDICES.astype(np.int32))
    assert cl.tolist() == [0, 1, 2, 3] and cw.tolist() == [1, 1, 1, 1]  # nothing changed by the refusals
    bad = np.array([0, 1, 7, 3], dtype=np.int64)  # node 2's cluster id is not a node id
    with pytest.raises(ValueError, match=r"expected the label of node 2 in \[0, 4\) \(got 7\)"):
        call(clusters=bad, nodes=np.array([2]), indptr=np.array([0, 3]), indices=np.array([0, 1, 3]))
    with pytest.raises(ValueError, match=r"expected the label of node 2 in \[0, 4\) \(got 7\)"):
        call(clusters=bad, nodes=np.array([3]), indptr=np.array([0, 1]), indices=np.array([2]))  # as a neighbour


def test_cluster_bad_label_leaves_state_unchanged():
    # Like fennel_pass ("nothing assigned on error"), a refused call should not have half-applied a pass.
    cl = np.array([0, 1, 2, -5], dtype=np.int64)
    cw = np.array([1, 1, 1, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="expected the label of node 3"):
        kernels.cluster_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, cl, cw, 3)
    assert cl.tolist() == [0, 1, 2, -5] and cw.tolist() == [1, 1, 1, 1]


# ---- refine_pass -----------------------------------------------------------------------------------------


def tiny_parts(labels=(0, 0, 1, 1)):
    parts = np.array(labels, dtype=np.int32)
    return parts, np.bincount(parts, minlength=2).astype(np.int64)


def test_refine_tiny_known_answer():
    parts, sizes = tiny_parts()
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 3])
    # v0, v1: one neighbour in each part -> no strict gain. v2: parts 0 (2) vs own 1 (1), part 0 has room
    # (2 + 1 <= 3) -> moves. v3: its neighbour is now in part 0, but part 0 is full (3 + 1 > 3) -> stays.
    assert parts.tolist() == [0, 0, 0, 1] and sizes.tolist() == [3, 1] and moved == 1
    parts, sizes = tiny_parts()
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [2, 3])
    # part 0 is already full: v2 cannot move
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 2] and moved == 0


def test_refine_tiny_weighted_known_answer():
    # node weights [1, 1, 2, 1]; the edge 2-3 weighs 3 (entries 6 and 7)
    ew = np.array([1, 1, 1, 1, 1, 1, 3, 3], dtype=np.int64)
    nw = np.array([1, 1, 2, 1], dtype=np.int64)
    parts = np.array([0, 0, 1, 0], dtype=np.int32)
    sizes = np.array([3, 2], dtype=np.int64)
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [5, 5], node_weight=nw,
                                edge_weight=ew)
    # v0: own 0 (via 1) 1, part 1 (via 2) 1 -> stays. v1: same. v2 (weight 2): own 1 -> 0 (none), part 0 via
    # 0, 1, 3 -> 1 + 1 + 3 = 5 > 0, room 3 + 2 <= 5 -> moves, sizes [5, 0]. v3: own part 0 via 2 (3) -> stays.
    assert parts.tolist() == [0, 0, 0, 0] and sizes.tolist() == [5, 0] and moved == 1
    parts = np.array([0, 0, 1, 0], dtype=np.int32)
    sizes = np.array([3, 2], dtype=np.int64)
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [4, 5], node_weight=nw,
                                edge_weight=ew)
    # capacity 4: v2 (weight 2) no longer fits into part 0 (3 + 2 > 4); v3 now gains 3 > 0 by joining v2
    # in part 1 (2 + 1 <= 5) -> moves.
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 3] and moved == 1


def test_refine_overloaded_part_moves_without_gain():
    parts, sizes = tiny_parts((0, 0, 0, 1))
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [2, 4])
    # part 0 holds 3 > capacity 2. v0, v1: no neighbour outside part 0 -> no candidate, stay. v2: own 0 (2)
    # beats part 1 (1), but part 0 is overloaded -> moves anyway; then part 0 (2) is no longer overloaded.
    # v3: own part 1 via 2 -> stays.
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 2] and moved == 1
    parts, sizes = tiny_parts((0, 0, 0, 1))
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 4])
    # not overloaded (3 <= 3): the loss keeps v2 in part 0
    assert parts.tolist() == [0, 0, 0, 1] and sizes.tolist() == [3, 1] and moved == 0
    parts, sizes = tiny_parts((0, 0, 0, 1))
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [2, 1])
    # overloaded, but part 1 has no room (1 + 1 > 1): nobody can leave
    assert parts.tolist() == [0, 0, 0, 1] and sizes.tolist() == [3, 1] and moved == 0


def test_refine_train_capacity():
    tw = np.array([0, 0, 1, 0], dtype=np.int64)  # only node 2 is a training node
    parts, sizes = tiny_parts()
    ts = np.array([0, 1], dtype=np.int64)
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 3], train_weight=tw,
                                train_sizes=ts, train_capacity=[0, 5])
    # v2 would gain by moving to part 0 (see the tiny known answer) but part 0 takes no training node
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 2] and ts.tolist() == [0, 1] and moved == 0
    parts, sizes = tiny_parts()
    ts = np.array([0, 1], dtype=np.int64)
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 3], train_weight=tw,
                                train_sizes=ts, train_capacity=[1, 5])
    assert parts.tolist() == [0, 0, 0, 1] and sizes.tolist() == [3, 1] and ts.tolist() == [1, 0] and moved == 1
    parts, sizes = tiny_parts()
    ts = np.array([0, 0], dtype=np.int64)
    moved = kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 3], train_weight=tw * 0,
                                train_sizes=ts, train_capacity=[0, 0])
    # t(v) = 0: the training capacity does not apply
    assert parts.tolist() == [0, 0, 0, 1] and ts.tolist() == [0, 0] and moved == 1


def test_refine_ignores_foreign_labels_and_self_loops():
    # streamed: 0, 1, 2 of the tiny graph; node 3 carries a label outside [0, 2) and is not streamed
    parts = np.array([0, 0, 1, 7], dtype=np.int32)
    sizes = np.array([2, 1], dtype=np.int64)
    ptr, cols, _ = chunk_rows(TINY_INDPTR, TINY_INDICES, np.arange(3))
    moved = kernels.refine_pass(ptr, cols, np.arange(3), parts, sizes, [3, 3])
    # v2: part 0 (2) vs own part 1 (0; node 3's label 7 ignored) -> moves
    assert parts.tolist() == [0, 0, 0, 7] and sizes.tolist() == [3, 0] and moved == 1
    # self loop: node 0 with a heavy loop (own part) and one neighbour in part 1 -> the loop does not count
    parts = np.array([0, 1], dtype=np.int32)
    sizes = np.array([1, 1], dtype=np.int64)
    moved = kernels.refine_pass(np.array([0, 2]), np.array([0, 1]), np.array([0]), parts, sizes, [2, 2],
                                edge_weight=np.array([9, 1]))
    assert parts.tolist() == [1, 1] and sizes.tolist() == [0, 2] and moved == 1


def test_refine_ties_go_to_the_smallest_part():
    # star: centre 0 with one neighbour in each of parts 3, 1, 2 (k = 4), centre alone in part 0 -> part 1
    indptr, indices = np.array([0, 3]), np.array([1, 2, 3])
    parts = np.array([0, 3, 1, 2], dtype=np.int32)
    sizes = np.array([1, 1, 1, 1], dtype=np.int64)
    moved = kernels.refine_pass(indptr, indices, np.array([0]), parts, sizes, [4, 4, 4, 4])
    assert parts[0] == 1 and sizes.tolist() == [0, 2, 1, 1] and moved == 1
    parts = np.array([0, 3, 1, 2], dtype=np.int32)
    sizes = np.array([1, 1, 1, 1], dtype=np.int64)
    moved = kernels.refine_pass(indptr, indices, np.array([0]), parts, sizes, [4, 4, 4, 4],
                                edge_weight=np.array([2, 1, 2]))  # parts 3 and 2 weigh 2: tie -> 2
    assert parts[0] == 2 and moved == 1


def _refine_state(n, k, seed, nw, overloaded):
    rng = np.random.default_rng(seed)
    parts = rng.integers(0, k, n).astype(np.int32)
    if overloaded:
        parts[: n // 3] = 0  # part 0 starts well over capacity
    w = np.ones(n, dtype=np.int64) if nw is None else nw
    sizes = np.bincount(parts, weights=w, minlength=k).astype(np.int64)
    cap = int(np.ceil(1.05 * w.sum() / k))
    if not overloaded:
        cap = max(cap, int(sizes.max()))  # nothing starts over capacity
    return parts, sizes, np.full(k, cap, dtype=np.int64)


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("overloaded", [False, True])
def test_refine_matches_reference(weighted, train, overloaded):
    n, k, chunk = 360, 4, 130
    indptr, indices = random_graph(n, 8, seed=21)
    rng = np.random.default_rng(22)
    ew = rng.integers(1, 6, len(indices)).astype(np.int64) if weighted else None
    nw = rng.integers(1, 4, n).astype(np.int64) if weighted else None
    tw = (rng.integers(0, 3, n) * (rng.random(n) < 0.4)).astype(np.int64) if train else None
    order = rng.permutation(n).astype(np.int64)
    visits = [rng.permutation(len(nodes)) for nodes in chunks(n, chunk, order)]
    parts0, sizes0, cap = _refine_state(n, k, 23, nw, overloaded)
    # a tight training bound (checked below to bind): the second largest starting training size
    tcap = np.full(k, int(np.sort(np.bincount(parts0, tw, k))[-2]), np.int64) if train else None
    results = []
    for fn in (kernels.refine_pass, refine_pass_ref):
        parts, sizes = parts0.copy(), sizes0.copy()
        ts = np.bincount(parts, weights=tw, minlength=k).astype(np.int64) if train else None
        ts0 = None if ts is None else ts.copy()
        moves, history = [], []
        for _ in range(3):
            for nodes, visit in zip(chunks(n, chunk, order), visits, strict=True):
                ptr, cols, cew = chunk_rows(indptr, indices, nodes, ew)
                moves.append(fn(ptr, cols, nodes, parts, sizes, cap, node_weight=None if nw is None else nw[nodes],
                                edge_weight=cew, train_weight=None if tw is None else tw[nodes], train_sizes=ts,
                                train_capacity=tcap, visit=visit))
                history.append((sizes.copy(), None if ts is None else ts.copy()))
        results.append((parts, sizes, ts, moves, history))
    (parts, sizes, ts, moves, history), (rparts, rsizes, rts, rmoves, _) = results
    assert np.array_equal(parts, rparts) and np.array_equal(sizes, rsizes) and moves == rmoves
    assert ts is None or np.array_equal(ts, rts)
    assert moves[0] > 0
    w = np.ones(n, dtype=np.int64) if nw is None else nw
    assert np.array_equal(sizes, np.bincount(parts, weights=w, minlength=k).astype(np.int64))
    if train:
        assert np.array_equal(ts, np.bincount(parts, weights=tw, minlength=k).astype(np.int64))
    prev, tprev = sizes0, ts0
    for s, t in history:
        # a part only grows within its capacity: nothing gets over it, an overloaded part only shrinks
        assert np.all((s <= cap) | (s <= prev))
        if not overloaded:
            assert np.all(s <= cap)
        if train:  # the same for training sizes
            assert np.all((t <= tcap) | (t <= tprev)) and np.all(t[ts0 <= tcap] <= tcap[ts0 <= tcap])
        prev, tprev = s, t
    if overloaded:
        assert sizes0[0] > cap[0] and sizes[0] < sizes0[0]
    assert np.any(sizes != sizes0)
    if train:  # the training bound changed the outcome
        free, free_sizes = parts0.copy(), sizes0.copy()
        for _ in range(3):
            for nodes, visit in zip(chunks(n, chunk, order), visits, strict=True):
                ptr, cols, cew = chunk_rows(indptr, indices, nodes, ew)
                refine_pass_ref(ptr, cols, nodes, free, free_sizes, cap, None if nw is None else nw[nodes], cew,
                                visit=visit)
        assert not np.array_equal(free, parts)


def test_refine_improves_the_cut():
    n, k = 400, 4
    indptr, indices = random_graph(n, 8, seed=31)
    rng = np.random.default_rng(32)
    parts = rng.integers(0, k, n).astype(np.int32)
    sizes = np.bincount(parts, minlength=k).astype(np.int64)
    cap = np.full(k, 110, dtype=np.int64)
    src = np.repeat(np.arange(n), np.diff(indptr))

    def cut():
        return int(np.count_nonzero(parts[src] != parts[indices]))

    before = cut()
    for _ in range(3):
        kernels.refine_pass(indptr, indices, np.arange(n), parts, sizes, cap)
    assert cut() < before and np.all(sizes <= cap)


def test_refine_invalid_inputs():
    parts, sizes = tiny_parts()

    def call(**kw):
        args = dict(indptr=TINY_INDPTR, indices=TINY_INDICES, nodes=TINY_NODES, parts=parts, sizes=sizes,
                    capacity=[3, 3])
        args.update(kw)
        return kernels.refine_pass(**args)

    with pytest.raises(ValueError, match=r"'parts' expected an int32 array"):
        call(parts=parts.astype(np.int64))
    with pytest.raises(ValueError, match=r"'sizes' expected a writable C-contiguous 1-D int64 array"):
        call(sizes=sizes.astype(np.int32))
    with pytest.raises(ValueError, match=r"'sizes' expected between 1 and \d+ parts \(got 0\)"):
        call(sizes=np.zeros(0, np.int64), capacity=[])
    with pytest.raises(ValueError, match=r"'capacity' expected 2 entries \(got 3\)"):
        call(capacity=[3, 3, 3])
    with pytest.raises(ValueError, match=r"'indptr' expected len\(nodes\)\+1 = 5 entries \(got 3\)"):
        call(indptr=TINY_INDPTR[:3])
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing offsets .*indptr\[0\]=-1"):
        call(indptr=np.array([-1, 2, 4, 7, 8]))
    with pytest.raises(IndexError, match=r"'nodes' expected ids in \[0, 4\) \(got nodes\[0\]=-1\)"):
        call(nodes=np.array([-1, 1, 2, 3]))
    with pytest.raises(IndexError, match=r"'indices' expected node ids in \[0, 4\) \(got indices\[0\]=4\)"):
        call(indices=np.array([4, 2, 0, 2, 0, 1, 3, 2]))
    with pytest.raises(ValueError, match=r"'visit' expected distinct positions in \[0, 4\)"):
        call(visit=[3, 3, 1, 0])
    with pytest.raises(ValueError, match=r"'node_weight' expected weights >= 1 \(got \[3\]=0\)"):
        call(node_weight=[1, 1, 1, 0])
    with pytest.raises(ValueError, match=r"'edge_weight' expected weights >= 1 \(got \[0\]=0\)"):
        call(edge_weight=np.zeros(8, np.int64))
    ts = np.zeros(2, np.int64)
    with pytest.raises(ValueError, match=r"'train_weight' expected weights >= 0 \(got \[1\]=-1\)"):
        call(train_weight=[0, -1, 0, 0], train_sizes=ts, train_capacity=[2, 2])
    with pytest.raises(ValueError, match="'train_weight', 'train_sizes' and 'train_capacity' expected all or none"):
        call(train_weight=[0, 1, 0, 0], train_sizes=ts)
    with pytest.raises(ValueError, match="expected all or none"):
        call(train_sizes=ts, train_capacity=[2, 2])
    with pytest.raises(ValueError, match="expected all or none"):
        call(train_weight=[0, 1, 0, 0], train_capacity=[2, 2])
    with pytest.raises(ValueError, match=r"'train_sizes' expected 2 entries \(got 3\)"):
        call(train_weight=[0, 1, 0, 0], train_sizes=np.zeros(3, np.int64), train_capacity=[2, 2])
    with pytest.raises(ValueError, match=r"'train_sizes' expected a writable C-contiguous 1-D int64 array"):
        call(train_weight=[0, 1, 0, 0], train_sizes=np.zeros(2, np.int32), train_capacity=[2, 2])
    with pytest.raises(ValueError, match=r"'train_weight' expected 4 entries \(got 2\)"):
        call(train_weight=[0, 1], train_sizes=ts, train_capacity=[2, 2])
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 2] and ts.tolist() == [0, 0]
    bad = np.array([0, 0, 1, 2], dtype=np.int32)  # streamed node 3 outside [0, k)
    with pytest.raises(ValueError, match=r"expected the label of node 3 in \[0, 2\) \(got 2\)"):
        call(parts=bad)
    bad = np.array([-1, 0, 1, 1], dtype=np.int32)
    with pytest.raises(ValueError, match=r"expected the label of node 0 in \[0, 2\) \(got -1\)"):
        call(parts=bad)


def test_refine_bad_label_leaves_state_unchanged():
    # Like fennel_pass ("nothing assigned on error"), a refused call should not have half-applied a pass:
    # here v2 moves to part 0 (see the tiny known answer) before node 3's label is found outside [0, 2).
    parts = np.array([0, 0, 1, 5], dtype=np.int32)
    sizes = np.array([2, 1], dtype=np.int64)
    with pytest.raises(ValueError, match="expected the label of node 3"):
        kernels.refine_pass(TINY_INDPTR, TINY_INDICES, TINY_NODES, parts, sizes, [3, 3])
    assert parts.tolist() == [0, 0, 1, 5] and sizes.tolist() == [2, 1]


def test_empty_chunks_change_nothing():
    empty = np.zeros(0, dtype=np.int64)
    cl, cw = tiny_clusters()
    assert kernels.cluster_pass([0], empty, empty, cl, cw, 1, node_weight=empty, edge_weight=empty, visit=empty) == 0
    assert cl.tolist() == [0, 1, 2, 3] and cw.tolist() == [1, 1, 1, 1]
    parts, sizes = tiny_parts()
    assert kernels.refine_pass([0], empty, empty, parts, sizes, [1, 1], visit=empty) == 0  # both parts overloaded
    assert parts.tolist() == [0, 0, 1, 1] and sizes.tolist() == [2, 2]


# ---- csr_aggregate ---------------------------------------------------------------------------------------


def test_csr_aggregate_known_answer():
    indptr = np.array([0, 4, 4, 7], dtype=np.int64)
    indices = np.array([3, 1, 3, 0, 2, 2, 2], dtype=np.int64)
    weights = np.array([1, 2, 3, 4, 5, 6, 7], dtype=np.int64)
    new_indptr, nnz = kernels.csr_aggregate(indptr, indices, weights)
    # row 0: columns 3 (1 + 3), 1 (2), 0 (4) -> sorted 0, 1, 3; row 1 empty; row 2: column 2 three times (18)
    assert new_indptr.dtype == np.int64 and new_indptr.tolist() == [0, 3, 3, 4] and nnz == 4
    assert indices[:nnz].tolist() == [0, 1, 3, 2] and weights[:nnz].tolist() == [4, 2, 4, 18]
    assert indptr.tolist() == [0, 4, 4, 7]  # the input indptr is left alone


def test_csr_aggregate_empty():
    new_indptr, nnz = kernels.csr_aggregate(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert new_indptr.tolist() == [0] and nnz == 0
    new_indptr, nnz = kernels.csr_aggregate(np.zeros(4, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert new_indptr.tolist() == [0, 0, 0, 0] and nnz == 0


@pytest.mark.parametrize("seed", range(4))
def test_csr_aggregate_matches_reference(seed):
    rng = np.random.default_rng(seed)
    n = 150
    deg = rng.integers(0, 12, n)
    deg[rng.integers(0, n, 5)] = rng.integers(25, 200, 5)  # long rows take the qsort path (> 24 entries)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(deg, out=indptr[1:])
    indices = rng.integers(-3, 40 if seed % 2 else 2_000, int(indptr[-1])).astype(np.int64)  # many / few dups
    weights = rng.integers(-5, 1_000, len(indices)).astype(np.int64)
    want = csr_aggregate_ref(indptr, indices, weights)
    ind, w = indices.copy(), weights.copy()
    new_indptr, nnz = kernels.csr_aggregate(indptr, ind, w)
    assert np.array_equal(new_indptr, want[0]) and nnz == len(want[1]) == new_indptr[-1]
    assert np.array_equal(ind[:nnz], want[1]) and np.array_equal(w[:nnz], want[2])
    assert int(w[:nnz].sum()) == int(weights.sum())
    if seed % 2:
        assert nnz < len(indices)  # duplicates were merged


def test_csr_aggregate_is_idempotent():
    indptr, indices = random_graph(100, 6, seed=41)
    weights = np.ones(len(indices), dtype=np.int64)
    p1, n1 = kernels.csr_aggregate(indptr, indices, weights)
    ind1, w1 = indices[:n1].copy(), weights[:n1].copy()
    p2, n2 = kernels.csr_aggregate(p1, ind1, w1)
    assert np.array_equal(p1, p2) and n1 == n2 and np.array_equal(ind1, indices[:n1])
    assert np.array_equal(w1, weights[:n1]) and w1.max() > 1  # the multigraph had duplicate entries


def test_csr_aggregate_invalid_inputs():
    indptr = np.array([0, 2, 3], dtype=np.int64)
    indices = np.array([1, 1, 0], dtype=np.int64)
    weights = np.array([1, 2, 3], dtype=np.int64)
    with pytest.raises(ValueError, match=r"'indptr' expected at least 1 entry \(got 0\)"):
        kernels.csr_aggregate(np.zeros(0, np.int64), indices, weights)
    with pytest.raises(ValueError, match=r"'indptr' expected to start at 0 and end at len\(indices\)=3 "
                                         r"\(got 1 and 3\)"):
        kernels.csr_aggregate(np.array([1, 2, 3]), indices, weights)
    with pytest.raises(ValueError, match=r"'indptr' expected to start at 0 and end at len\(indices\)=3 "
                                         r"\(got 0 and 2\)"):
        kernels.csr_aggregate(np.array([0, 1, 2]), indices, weights)
    with pytest.raises(ValueError, match=r"'indptr' expected non-decreasing offsets \(got indptr\[2\]=1\)"):
        kernels.csr_aggregate(np.array([0, 2, 1, 3]), indices, weights)
    with pytest.raises(ValueError, match=r"'weights' expected 3 entries like 'indices' \(got 2\)"):
        kernels.csr_aggregate(indptr, indices, weights[:2])
    with pytest.raises(ValueError, match=r"'indices' expected a writable C-contiguous 1-D int64 array"):
        kernels.csr_aggregate(indptr, indices.astype(np.int32), weights)
    ro = weights.copy()
    ro.flags.writeable = False
    with pytest.raises(ValueError, match=r"'weights' expected a writable .*\(got read-only"):
        kernels.csr_aggregate(indptr, indices, ro)
    with pytest.raises(ValueError, match=r"'indptr' expected a 1-D int64 array"):
        kernels.csr_aggregate(indptr.astype(np.int32), indices, weights)
    assert indices.tolist() == [1, 1, 0] and weights.tolist() == [1, 2, 3]  # untouched by the refusals
