"""sample_blocks: known answers on the tiny graph, exact reference comparison, invariants, determinism."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from storage_kernels import kernels
from tests.storage_kernels.reference import TINY_INDICES, TINY_INDPTR, random_csr, sample_blocks_ref

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["dense", "hashed"])
def id_map(request):
    """Run under both id-map layouts of the kernel (direct-address for small graphs, hashed for large)."""
    from storage_kernels import _native

    previous = _native._set_dense_map_limit(2**62 if request.param == "dense" else -1)
    yield request.param
    _native._set_dense_map_limit(previous)


def assert_same(out, ref):
    nodes, hop_counts, indptrs, cols = out
    np.testing.assert_array_equal(nodes, ref[0])
    np.testing.assert_array_equal(hop_counts, ref[1])
    assert len(indptrs) == len(ref[2]) and len(cols) == len(ref[3])
    for h in range(len(indptrs)):
        np.testing.assert_array_equal(indptrs[h], ref[2][h], err_msg=f"indptr of hop {h}")
        np.testing.assert_array_equal(cols[h], ref[3][h], err_msg=f"cols of hop {h}")
        assert indptrs[h].dtype == np.int64 and cols[h].dtype == np.int64


def check_invariants(indptr, indices, seeds, fanouts, out):
    """Sampled neighbours are true neighbours, without duplicates, min(fanout, degree) of them, in CSR order.

    Vectorised over edges: an edge v -> u is identified by its key v * N + u in the CSR's sorted key list
    (rows of these graphs are sorted and duplicate-free, so the key's rank is its CSR position).
    """
    num_nodes = len(indptr) - 1
    nodes, hop_counts, indptrs, cols = out
    assert len(np.unique(nodes)) == len(nodes)
    np.testing.assert_array_equal(nodes[: len(seeds)], seeds)
    assert hop_counts[0] == len(seeds) and hop_counts[-1] == len(nodes)
    assert np.all(np.diff(hop_counts) >= 0)
    rows = np.repeat(np.arange(num_nodes), np.diff(indptr))
    assert np.all(np.diff(rows * num_nodes + indices) > 0), "test graphs have sorted duplicate-free rows"
    csr_keys = rows * num_nodes + indices
    degree = np.diff(indptr)
    for h, fanout in enumerate(fanouts):
        ptr, col = indptrs[h], cols[h]
        num_dst = hop_counts[h]
        assert len(ptr) == num_dst + 1 and ptr[0] == 0 and ptr[-1] == len(col)
        assert col.size == 0 or (col.min() >= 0 and col.max() < hop_counts[h + 1])
        want = degree[nodes[:num_dst]] if fanout < 0 else np.minimum(fanout, degree[nodes[:num_dst]])
        np.testing.assert_array_equal(np.diff(ptr), want)
        dst_pos = np.repeat(np.arange(num_dst), np.diff(ptr))
        keys = nodes[dst_pos] * num_nodes + nodes[col]
        rank = np.searchsorted(csr_keys, keys)
        assert np.all(csr_keys[np.minimum(rank, len(csr_keys) - 1)] == keys), "sampled a non-neighbour"
        same_row = dst_pos[1:] == dst_pos[:-1]
        assert np.all(np.diff(rank)[same_row] > 0), "duplicate pick or picks out of CSR order"


# ---- known answers on the tiny graph ---------------------------------------------------------------------


def test_tiny_full_neighbourhoods():
    # hop 0 from 3: {2}; hop 1 over [3, 2]: 3 -> 2, 2 -> 0, 1, 3 (0 and 1 are new, in that order)
    out = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [3], [-1, -1], seed=0)
    np.testing.assert_array_equal(out.nodes, [3, 2, 0, 1])
    np.testing.assert_array_equal(out.hop_counts, [1, 2, 4])
    np.testing.assert_array_equal(out.indptrs[0], [0, 1])
    np.testing.assert_array_equal(out.cols[0], [1])
    np.testing.assert_array_equal(out.indptrs[1], [0, 1, 4])
    np.testing.assert_array_equal(out.cols[1], [1, 2, 3, 0])


def test_tiny_fanout_at_least_degree_and_zero():
    out = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [1, 0], [3, 0], seed=123)
    # 1 -> [0, 2], 0 -> [1, 2]: every fanout >= degree, CSR order; fanout 0 then samples nothing
    np.testing.assert_array_equal(out.nodes, [1, 0, 2])
    np.testing.assert_array_equal(out.hop_counts, [2, 3, 3])
    np.testing.assert_array_equal(out.cols[0], [1, 2, 0, 2])
    np.testing.assert_array_equal(out.indptrs[1], [0, 0, 0, 0])
    assert out.cols[1].shape == (0,)


def test_tiny_one_of_three():
    # node 2 has three neighbours; with fanout 1 each seed picks exactly one, as the reference says
    for seed in range(20):
        out = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [2], [1], seed=seed)
        assert_same(out, sample_blocks_ref(TINY_INDPTR, TINY_INDICES, [2], [1], seed))
        assert out.nodes[1] in (0, 1, 3) and out.hop_counts.tolist() == [1, 2]


def test_no_hops_and_no_seeds():
    out = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [2, 3], [], seed=1)
    np.testing.assert_array_equal(out.nodes, [2, 3])
    assert out.hop_counts.tolist() == [2] and out.indptrs == [] and out.cols == []
    out = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [], [2, 2], seed=1)
    assert out.nodes.shape == (0,) and out.hop_counts.tolist() == [0, 0, 0]
    np.testing.assert_array_equal(out.indptrs[1], [0])


# ---- exact reference comparison --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "graph_seed,num_nodes,num_edges,num_seeds,fanouts",
    [
        (0, 30, 120, 4, [2, 3]),
        (1, 200, 1600, 16, [3, 5, 2]),
        (2, 500, 10_000, 8, [10, -1]),
        (3, 50, 40, 10, [1, 1, 1]),  # many isolated nodes
        (4, 300, 6000, 5, [0, 4]),
    ],
)
@pytest.mark.parametrize("seed", [0, 7, 2**64 - 1])
def test_matches_reference(graph_seed, num_nodes, num_edges, num_seeds, fanouts, seed, id_map):
    rng = np.random.default_rng(graph_seed)
    indptr, indices = random_csr(num_nodes, num_edges, rng)
    seeds = rng.choice(num_nodes, num_seeds, replace=False)
    out = kernels.sample_blocks(indptr, indices, seeds, fanouts, seed=seed, num_threads=2)
    assert_same(out, sample_blocks_ref(indptr, indices, seeds, fanouts, seed))
    check_invariants(indptr, indices, seeds, fanouts, out)


@pytest.mark.parametrize(
    "hub_degree,fanout",
    [(300, 100), (5000, 30), (5000, 100)],  # the kernel's three selection paths: stack bitmap (degree <= 4096),
)  # sorted scratch (longer rows, fanout <= 64), heap bitmap (longer rows, larger fanout)
def test_selection_paths_match_reference(hub_degree, fanout, id_map):
    spokes = np.arange(1, hub_degree + 1)
    src = np.concatenate([np.zeros(hub_degree, np.int64), spokes])
    dst = np.concatenate([spokes, np.zeros(hub_degree, np.int64)])
    indptr, indices = kernels.build_csr(lambda: iter([(src, dst)]), hub_degree + 1)
    fanouts = [fanout, 70]
    for seed in (0, 1, 99):
        out = kernels.sample_blocks(indptr, indices, [0, 5], fanouts, seed=seed)
        assert_same(out, sample_blocks_ref(indptr, indices, [0, 5], fanouts, seed))
        check_invariants(indptr, indices, np.array([0, 5]), fanouts, out)


def test_negative_python_seed_wraps_mod_2_64():
    a = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [2], [1, 1], seed=-1)
    b = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [2], [1, 1], seed=2**64 - 1)
    assert_same(a, b)


# ---- determinism and invariants on a bigger graph --------------------------------------------------------


@pytest.fixture(scope="module")
def medium_graph():
    rng = np.random.default_rng(11)
    indptr, indices = random_csr(20_000, 200_000, rng)
    seeds = rng.choice(20_000, 800, replace=False)
    return indptr, indices, seeds


def test_identical_for_any_thread_count(medium_graph, id_map):
    indptr, indices, seeds = medium_graph
    fanouts = [10, 5, 3]
    outs = [kernels.sample_blocks(indptr, indices, seeds, fanouts, seed=42, num_threads=t) for t in (1, 2, 4, 0)]
    assert outs[0].hop_counts[-1] > 4 * 512  # enough destinations that 4 threads really split the work
    for other in outs[1:]:
        assert_same(other, outs[0])
    check_invariants(indptr, indices, seeds, fanouts, outs[0])


def test_seed_changes_sample(medium_graph):
    indptr, indices, seeds = medium_graph
    a = kernels.sample_blocks(indptr, indices, seeds, [5], seed=1)
    b = kernels.sample_blocks(indptr, indices, seeds, [5], seed=2)
    assert not np.array_equal(a.cols[0], b.cols[0])
    assert_same(a, kernels.sample_blocks(indptr, indices, seeds, [5], seed=1))


def test_picks_are_uniform():
    # node 0 with 10 neighbours, fanout 3: every neighbour is picked with probability 0.3
    indptr = np.array([0] + [10] * 11, dtype=np.int64)
    indices = np.arange(1, 11, dtype=np.int64)
    counts = np.zeros(11)
    trials = 3000
    for seed in range(trials):
        out = kernels.sample_blocks(indptr, indices, [0], [3], seed=seed)
        counts[out.nodes[1:]] += 1
    freq = counts[1:] / trials
    assert np.all(np.abs(freq - 0.3) < 0.04), freq


# ---- invalid inputs --------------------------------------------------------------------------------------


def test_duplicate_seeds_value_error():
    with pytest.raises(ValueError, match=r"unique ids \(got seeds\[2\]=1, already at seeds\[0\]\)"):
        kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [1, 2, 1], [1], seed=0)


def test_out_of_range_ids_index_error():
    with pytest.raises(IndexError, match=r"seeds\[1\]=4"):
        kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [0, 4], [1], seed=0)
    with pytest.raises(IndexError, match=r"seeds\[0\]=-3"):
        kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [-3], [1], seed=0)
    bad = TINY_INDICES.copy()
    bad[6] = 9  # 2 -> 9 does not exist
    with pytest.raises(IndexError, match=r"'indices' expected node ids in \[0, 4\) \(got indices\[6\]=9\)"):
        kernels.sample_blocks(TINY_INDPTR, bad, [2], [-1], seed=0)


def test_malformed_inputs_value_error():
    with pytest.raises(ValueError, match=r"fanouts\[1\]=-2"):
        kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [0], [1, -2], seed=0)
    bad = np.array([0, 2, 1, 7, 8])  # row 1 ends before it starts
    with pytest.raises(ValueError, match=r"indptr\[1\]=2, indptr\[2\]=1"):
        kernels.sample_blocks(bad, TINY_INDICES, [1], [1], seed=0)
    with pytest.raises(ValueError, match="len\\(indices\\)=8"):
        kernels.sample_blocks(np.array([0, 2, 4, 7, 99]), TINY_INDICES, [3], [1], seed=0)
    with pytest.raises(ValueError, match="'indptr' expected a 1-D int64 array"):
        kernels.sample_blocks(TINY_INDPTR.astype(np.int32), TINY_INDICES, [0], [1], seed=0)
    with pytest.raises(ValueError, match="'indptr' expected num_nodes"):
        kernels.sample_blocks(np.zeros(0, np.int64), TINY_INDICES, [0], [1], seed=0)
    with pytest.raises(ValueError, match="'num_threads' expected >= 0"):
        kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [0], [1], seed=0, num_threads=-1)


def test_seed_type_error():
    from storage_kernels import _native

    with pytest.raises(TypeError, match="'seed' expected an int"):
        _native.sample_blocks(TINY_INDPTR, TINY_INDICES, np.array([0]), np.array([1]), 1.5)


def test_corrupt_csr_never_crashes_the_interpreter():
    # crash-prone inputs run in a subprocess: a segfault fails this test instead of killing the runner
    script = textwrap.dedent(
        """
        import numpy as np
        from storage_kernels import _native, kernels
        rng = np.random.default_rng(0)
        for trial in range(300):
            _native._set_dense_map_limit(-1 if trial % 2 else 2**62)  # both id-map layouts
            n = int(rng.integers(1, 20))
            indptr = rng.integers(-5, 40, n + 1)
            indices = rng.integers(-3, n + 3, int(rng.integers(0, 30)))
            seeds = rng.choice(n, int(rng.integers(1, n + 1)), replace=False)
            try:
                kernels.sample_blocks(indptr, indices, seeds, [3, -1], seed=trial, num_threads=2)
            except (IndexError, ValueError):
                pass
        print("ok")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


def test_concurrent_callers_share_nothing(medium_graph, id_map):
    # the GIL is released for the whole call and id-map tables are pooled: concurrent calls from Python
    # threads must not see each other's state
    from concurrent.futures import ThreadPoolExecutor

    indptr, indices, seeds = medium_graph
    jobs = [(seeds[i * 100 : (i + 1) * 100], [8, 4], i) for i in range(8)]
    serial = [kernels.sample_blocks(indptr, indices, s, f, seed=r, num_threads=1) for s, f, r in jobs]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda job: kernels.sample_blocks(indptr, indices, *job[:2], seed=job[2]), jobs))
    for a, b in zip(serial, threaded, strict=True):
        assert_same(b, a)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_sampling_in_a_forked_child():
    # the id-map pool's lock is held across fork, so a child (e.g. a DataLoader worker) can sample
    want = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [0], [2, 2], seed=1)
    pid = os.fork()
    if pid == 0:
        got = kernels.sample_blocks(TINY_INDPTR, TINY_INDICES, [0], [2, 2], seed=1)
        os._exit(0 if np.array_equal(got.nodes, want.nodes) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
